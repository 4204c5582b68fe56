// One endpoint change with kube-proxy's rule writers (issue 6 item 4, the
// baselines): the same change as the Sluice row (one Service's EndpointSlice
// goes from 10 to 9 endpoints, both of its ports), written the way kube-proxy
// writes it, into the namespaces where the data-path half has S Services
// loaded (bench/modes.ts), timed from the writer's start to its exit:
//
// * iptables full: iptables-restore of the complete filter + nat tables (no
//   --noflush; kube-proxy's full sync uses --noflush, which iptables-nft makes
//   quadratic, so this is the faster form of a full write).
// * iptables partial: kube-proxy's partial sync (pkg/proxy/iptables,
//   syncProxyRules when !doFullSync): `iptables-restore --noflush` of its
//   top-level chains in full (filter: KUBE-*; nat: KUBE-SERVICES with every
//   Service's rule, KUBE-NODEPORTS, KUBE-POSTROUTING, KUBE-MARK-MASQ) plus the
//   changed Service's KUBE-SVC-* and KUBE-SEP-* chains only. Stale chains stay
//   (kube-proxy's large-cluster mode, > 1000 endpoints, deletes them once per
//   sync period).
// * nftables: the transaction kube-proxy's nftables mode sends for it (flush
//   and rewrite the service chains, flush the stale endpoint chain), `nft -f`.
//   kube-proxy also runs `nft list chains` and `nft list sets` each sync;
//   that is timed separately (listChainsMs), not in the transaction.
//
// Every writer runs inside the mode's namespace (nsenter --net), bounded by
// time and count.
import { run } from './exec';
import { iptablesRestoreInput, sepChain, svcChain } from './kube-iptables';
import { endpointChain, NFT_TABLE, serviceChain } from './kube-nftables';
import { CLUSTER_CIDR, ServicePort } from './services';
import { percentiles, type Percentiles } from './controlplane';

export interface RuleUpdateSeries {
  id: string;
  label: string;
  samplesMs: number[];
  stats: Percentiles;
  /** Why there are fewer samples than asked (budget, timeout). */
  note?: string;
}

export interface RuleUpdateResult {
  services: number;
  servicePorts: number;
  series: RuleUpdateSeries[];
  /** `nft -j list chains` + `nft -j list sets` in the nftables namespace, ms (kube-proxy runs both every sync). */
  nftListMs?: number;
}

export interface RuleUpdateOptions {
  ports: ServicePort[];
  /** Namespaces of the loaded baselines (absent: not loaded at this scale). */
  netns: { legacy?: string; nft?: string; nftables?: string };
  /** Changes per partial/incremental series, and per full series (0: use initialLoadMs instead). */
  changes: number;
  fullChanges: number;
  /** The data-path half's load of the complete tables (a full write into empty tables), ms, by mode id. */
  initialLoadMs?: Partial<Record<'iptables-legacy' | 'iptables-nft' | 'nftables', number>>;
  /** Per single write, and for the whole measurement. */
  writeTimeoutMs: number;
  budgetMs: number;
  log: (msg: string) => void;
}

const KUBE_TOP_LEVEL = /^KUBE-(?!SVC-|SEP-|EXT-|SVL-|FW-)/;

/**
 * kube-proxy's partial restore input, cut from the complete one: KUBE-*
 * chains and rules only (never the built-in chains), and of the per-Service
 * chains only those of the changed service ports.
 */
export function partialRestoreInput(full: string, changed: Set<string>): string {
  const keep = (chain: string) => KUBE_TOP_LEVEL.test(chain) || changed.has(chain);
  const out: string[] = [];
  for (const line of full.split('\n')) {
    if (line.startsWith('*') || line === 'COMMIT') out.push(line);
    else if (line.startsWith(':')) {
      if (keep(line.slice(1).split(' ')[0]!)) out.push(line);
    } else if (line.startsWith('-A ')) {
      if (keep(line.split(' ')[1]!)) out.push(line);
    }
  }
  return out.join('\n') + '\n';
}

/** The chains kube-proxy rewrites for these service ports (SVC + SEP of their current endpoints). */
function changedChains(ports: ServicePort[]): Set<string> {
  const set = new Set<string>();
  for (const sp of ports) {
    set.add(svcChain(sp));
    for (const ep of sp.endpoints) set.add(sepChain(sp, `${ep.address}:${ep.port}`));
  }
  return set;
}

/** kube-proxy nftables mode's transaction for service ports whose endpoints changed. */
export function nftIncrementalTransaction(changed: ServicePort[], removed: Array<{ sp: ServicePort; address: string; port: number }>): string {
  const T = `ip ${NFT_TABLE}`;
  const lines: string[] = [];
  for (const sp of changed) {
    const svc = serviceChain(sp);
    lines.push(`add chain ${T} ${svc}`, `flush chain ${T} ${svc}`);
    lines.push(`add rule ${T} ${svc} ip daddr ${sp.vip} ip saddr != ${CLUSTER_CIDR} jump mark-for-masquerade`);
    const vmap = sp.endpoints.map((ep, i) => `${i} : goto ${endpointChain(sp, ep.address, ep.port)}`).join(' , ');
    lines.push(`add rule ${T} ${svc} numgen random mod ${sp.endpoints.length} vmap { ${vmap} }`);
  }
  // Stale endpoint chains are flushed now and deleted a sync later (kube-proxy: kernels < 6.2).
  for (const r of removed) lines.push(`flush chain ${T} ${endpointChain(r.sp, r.address, r.port)}`);
  return lines.join('\n') + '\n';
}

async function timed(netns: string, argv: string[], input: string, timeoutMs: number): Promise<number | 'timeout'> {
  const r = await run(['nsenter', `--net=/run/netns/${netns}`, ...argv], { timeoutMs, input, allowFailure: true });
  if (r.timedOut) return 'timeout';
  if (r.code !== 0) throw new Error(`${argv[0]} in ${netns}: exit ${r.code}: ${r.stderr.trim().split('\n').slice(-2).join(' | ')}`);
  return r.ms;
}

export async function measureRuleUpdates(o: RuleUpdateOptions): Promise<RuleUpdateResult> {
  const deadline = Date.now() + o.budgetMs;
  const services = new Set(o.ports.map((p) => p.service)).size;
  const res: RuleUpdateResult = { services, servicePorts: o.ports.length, series: [] };
  // The k-th change of a series: Service index spread over the cluster, both
  // of its ports lose their last endpoint. Each series changes different
  // Services (offset), so every change is a real one in every mode.
  const byService = new Map<string, ServicePort[]>();
  for (const sp of o.ports) byService.set(sp.service, [...(byService.get(sp.service) ?? []), sp]);
  const names = [...byService.keys()];
  let offset = 0;
  const pick = (k: number, n: number) => names[(Math.floor(((k + 0.5) * names.length) / n) + offset) % names.length]!;
  // Current endpoints per service port (cumulative: a full write carries every earlier change).
  const state = new Map<ServicePort, ServicePort>(o.ports.map((sp) => [sp, sp]));
  const change = (service: string) => {
    const removed: Array<{ sp: ServicePort; address: string; port: number }> = [];
    const changed: ServicePort[] = [];
    for (const sp of byService.get(service)!) {
      const cur = state.get(sp)!;
      const last = cur.endpoints[cur.endpoints.length - 1]!;
      const next = { ...cur, endpoints: cur.endpoints.slice(0, -1) };
      state.set(sp, next);
      changed.push(next);
      removed.push({ sp: next, address: last.address, port: last.port });
    }
    return { changed, removed };
  };
  const current = () => o.ports.map((sp) => state.get(sp)!);

  const series = async (id: string, label: string, netns: string | undefined, n: number,
    write: (k: number) => { argv: string[]; input: string }) => {
    if (!netns) return;
    const s: RuleUpdateSeries = { id, label, samplesMs: [], stats: percentiles([]) };
    res.series.push(s);
    for (let k = 0; k < n; k++) {
      const left = deadline - Date.now();
      if (left < 2000) {
        s.note = `stopped after ${k} of ${n} writes: the budget ran out`;
        break;
      }
      const { argv, input } = write(k);
      const t = await timed(netns, argv, input, Math.min(o.writeTimeoutMs, left));
      if (t === 'timeout') {
        s.note = `a write did not finish within ${Math.round(Math.min(o.writeTimeoutMs, left) / 1000)} s (killed; nothing committed) after ${k} completed`;
        break;
      }
      s.samplesMs.push(t);
    }
    s.stats = percentiles(s.samplesMs);
    offset += 7919; // the next series changes other Services
    o.log(`rule updates at ${services} Services: ${label}: ${s.stats.n ? `p50 ${s.stats.p50.toFixed(1)} ms, max ${s.stats.max.toFixed(1)} ms over ${s.stats.n}` : 'none'}${s.note ? ` (${s.note})` : ''}`);
  };

  // A full write is as long as the initial load: at 10 000 Services 35-75 s
  // each, so the full run reports the data-path half's load instead of
  // writing everything again.
  const fromInitialLoad = (mode: 'iptables-legacy' | 'iptables-nft' | 'nftables', label: string) => {
    const t = o.initialLoadMs?.[mode];
    if (o.fullChanges > 0 || t === undefined) return;
    res.series.push({ id: `${mode}-full`, label, samplesMs: [t], stats: percentiles([t]), note: 'the data-path half\'s load of the complete rules into empty tables, not repeated' });
  };
  // Cheapest first, so a short budget still gets every kind of writer.
  fromInitialLoad('nftables', 'kube-proxy nftables full write: the whole ruleset (nft -f, transactions of 1 000 service ports)');
  await series('nftables-incremental', 'kube-proxy nftables: one transaction (nft -f)', o.netns.nftables, o.changes, (k) => {
    const { changed, removed } = change(pick(k, o.changes));
    return { argv: ['nft', '-f', '-'], input: nftIncrementalTransaction(changed, removed) };
  });
  for (const [flavor, netns] of [['legacy', o.netns.legacy], ['nft', o.netns.nft]] as const) {
    const restore = flavor === 'legacy' ? 'iptables-legacy-restore' : 'iptables-nft-restore';
    await series(`iptables-${flavor}-partial`, `kube-proxy iptables (${flavor}) partial sync: ${restore} --noflush`, netns, o.changes, (k) => {
      const { changed } = change(pick(k, o.changes));
      return { argv: [restore, '-w', '5', '--noflush'], input: partialRestoreInput(iptablesRestoreInput(current()), changedChains(changed)) };
    });
    if (o.fullChanges > 0) {
      await series(`iptables-${flavor}-full`, `kube-proxy iptables (${flavor}) full write: ${restore} (all rules)`, netns, o.fullChanges, (k) => {
        change(pick(k, o.fullChanges));
        return { argv: [restore, '-w', '5'], input: iptablesRestoreInput(current()) };
      });
    }
    fromInitialLoad(`iptables-${flavor}`, `kube-proxy iptables (${flavor}) full write: ${restore} of the complete tables`);
  }
  if (o.netns.nftables && deadline - Date.now() > 5000) {
    // knftables' List("chain"/"sets"): `nft --json list chains ip` (nft 1.0.6 takes a family, not a table).
    const t0 = Date.now();
    const a = await run(['nsenter', `--net=/run/netns/${o.netns.nftables}`, 'nft', '--json', 'list', 'chains', 'ip'], { timeoutMs: 60000, allowFailure: true });
    const b = await run(['nsenter', `--net=/run/netns/${o.netns.nftables}`, 'nft', '--json', 'list', 'sets', 'ip'], { timeoutMs: 60000, allowFailure: true });
    if (a.code === 0 && b.code === 0) res.nftListMs = Date.now() - t0;
    else o.log(`rule updates: nft list failed: ${(a.stderr + b.stderr).trim().slice(0, 200)}`);
  }
  return res;
}
