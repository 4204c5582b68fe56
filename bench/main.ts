// `make bench` (full, <= 15 min on 2 cores) and `make bench QUICK=1` (<= 2 min):
// new-connection latency and rate to a ClusterIP, random Service per
// connection, for Sluice and kube-proxy's iptables (legacy and nft) and
// nftables layouts, each against direct connections with no rules; the tax on
// non-Service traffic; host CPU per 1000 connections; BPF map memory.
// A report, not a test: it prints a markdown table, writes JSON and an SVG
// chart to bench/results/, marks each target PASS/FAIL and always exits 0
// unless the harness itself broke.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { killRunning } from './exec';
import { Harness } from './harness';
import { describeMachine, measuredCommit } from './machine';
import { backendTargets, DirectMode, LoadOutcome, makeBaselineModes, Mode, serviceTargets, Target } from './modes';
import { loadKey, writeReport, BenchReport, ScaleResult, SeriesResult } from './report';
import { SluiceSockMode, SluiceTcMode } from './sluice';
import { RoundResult, summarize } from './stats';
import { runRound } from './rounds';
import { Family, FAMILIES, makeServicePorts, Proto, ServicePort, targetLines } from './services';
import { measureControlPlane } from './controlplane';
import { measureNodePort } from './nodeport';
import { measureDsrCost } from './dsrcost';
import { measureRuleUpdates } from './ruleupdates';
import { measureUpstream } from './upstream';
import { measureAlgorithmConnect, measureMaglevBuild, type AlgorithmBenchResult } from './algorithms';
import { ProgStats, type ProgRef } from './progstats';

interface Plan {
  quick: boolean;
  scales: number[];
  rounds: number;
  perRound: number;
  warmup: number;
  roundMaxMs: number;
  taxScale: number;
  cpuScale: number;
  /** Wall-clock budget of the whole run, and of one baseline load. */
  totalBudgetMs: number;
  loadBudgetMs: number;
  /** Time kept free for the rounds of each scale not yet measured. */
  reservePerScaleMs: number;
  /** The control-plane half and NodePort throughput (their own budgets, after the data-path half). */
  cp: { services: number; changes: number; settleMs: number; budgetMs: number };
  rules: { changes: number; fullChanges: number; writeTimeoutMs: number; budgetMs: number };
  nodePort: { services: number; rounds: number; roundMs: number; budgetMs: number };
  /** Upstream kube-proxy and the Sluice agent on one real API server (bench/upstream.ts). */
  upstream: { services: number; changes: number; coldBudgetS?: number; createBudgetS?: number };
}

const ROOT = path.resolve(__dirname, '..', '..');

function plan(quick: boolean): Plan {
  return quick
    ? { quick, scales: [1, 1000], rounds: 7, perRound: 3000, warmup: 100, roundMaxMs: 4000, taxScale: 1000, cpuScale: 1000, totalBudgetMs: 300_000, loadBudgetMs: 30_000, reservePerScaleMs: 25_000,
      cp: { services: 1000, changes: 30, settleMs: 1000, budgetMs: 20_000 }, rules: { changes: 5, fullChanges: 0, writeTimeoutMs: 10_000, budgetMs: 20_000 },
      nodePort: { services: 1000, rounds: 2, roundMs: 1500, budgetMs: 170_000 }, upstream: { services: 0, changes: 0 } }
    // Full: 1 260 s for the ClusterIP half. With the IPv6 rows 900 s ran out at 10 000
    // Services (the run of 7ccdeec never reached 100 000).
    : { quick, scales: [1, 1000, 10000, 100000], rounds: 9, perRound: 5000, warmup: 200, roundMaxMs: 6000, taxScale: 10000, cpuScale: 10000, totalBudgetMs: 1_320_000, loadBudgetMs: 150_000, reservePerScaleMs: 60_000,
      cp: { services: 10000, changes: 100, settleMs: 3000, budgetMs: 60_000 }, rules: { changes: 8, fullChanges: 0, writeTimeoutMs: 30_000, budgetMs: 120_000 },
      // NodePort: 6 series per mode and round since the in-kernel generator rows (issue 17), 480 s;
      // + 30 s for the DSR mode (2 series per round, two more agents to program).
      nodePort: { services: 10000, rounds: 5, roundMs: 2000, budgetMs: 510_000 },
      // 3 000 Services keeps the full run near 20 min on 2 CPUs (object creation alone
      // took 10 min for 8 500 Services on a loaded machine); `make bench-kubeproxy` runs 10 000.
      upstream: { services: 3000, changes: 20, coldBudgetS: 120, createBudgetS: 300 } };
}

const PROTOS: Proto[] = ['tcp', 'udp'];

function log(msg: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

/** One series = one mode sending one kind of traffic (Service VIPs or not) of one address family. */
interface Series {
  mode: Mode;
  kind: 'service' | 'non-service';
  family: Family;
  targetFile: Record<Proto, string>;
  rounds: Record<Proto, RoundResult[]>;
  /** The direct round run right next to each round (docs/bench.md). */
  baseline: Record<Proto, RoundResult[]>;
}

function writeTargets(dir: string, name: string, targets: Target[]): string {
  const file = path.join(dir, `${name}.txt`);
  fs.writeFileSync(file, targetLines(targets));
  return file;
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const p = plan(quick);
  const started = Date.now();
  const deadline = started + p.totalBudgetMs;
  const machine = describeMachine();
  log(`${quick ? 'QUICK' : 'full'} run: scales ${p.scales.join(', ')}; ${p.rounds} interleaved rounds x ${p.perRound} connections per mode`);
  for (const bin of ['connbench', 'benchserver', 'sluiceload']) {
    if (!fs.existsSync(path.join(ROOT, 'build', bin))) throw new Error(`build/${bin} missing: run make bench (it builds the bench binaries)`);
  }

  const h = new Harness(ROOT);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bench-'));
  // Ctrl-C: kill the running children (their failure unwinds main() into
  // its finally, which removes everything) and exit once cleanup is done.
  const onSignal = () => {
    log('interrupted: cleaning up');
    interrupted = true;
    killRunning();
    void h.destroy().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const report: BenchReport = {
    quick, machine, plan: { ...p }, scales: [], targets: [], notes: [], startedAt: new Date(started).toISOString(), durationS: 0, commit: measuredCommit(),
  };
  // Program time per run (kernel.bpf_stats_enabled=1 for this run only; bench/progstats.ts).
  const progStats = new ProgStats();
  try {
    await h.setup();
    // DSR's program cost first: BPF_PROG_TEST_RUN's durations without bpf_stats' clock reads (bench/dsrcost.ts).
    try {
      report.dsrCost = p.quick ? measureDsrCost(7, 1000) : measureDsrCost();
      log(`DSR program cost: ingress DSR/SNAT ${report.dsrCost.ratios.ingressDsrOverSnat}x, backend DSR-received/Local ${report.dsrCost.ratios.backendDsrRxOverLocal}x`);
    } catch (e) {
      report.notes.push(`DSR program cost not measured: ${(e as Error).message}`);
    }
    progStats.enable();
    const direct = new DirectMode(await h.addClient('direct'));
    const [legacy, nftBackend, nftables] = makeBaselineModes({
      legacy: await h.addClient('ipt-legacy'), nft: await h.addClient('ipt-nft'), nftables: await h.addClient('nft'),
    }) as [Mode, Mode, Mode];
    const sock = new SluiceSockMode(await h.addClient('sl-sock'), (t) => h.makeCgroup(t), (t) => h.makeBpffsDir(t), ROOT);
    const tc = new SluiceTcMode(await h.addClient('sl-tc'), h.backendNs, (t) => h.makeCgroup(t), (t) => h.makeBpffsDir(t), ROOT);
    const modes: Mode[] = [direct, sock, tc, legacy, nftBackend, nftables];
    for (const m of modes) if (m.unavailable) report.notes.push(`${m.label}: not available: ${m.unavailable}`);
    if (!sock.unavailable) {
      try {
        await sock.ensureCapacity(1);
      } catch (e) {
        sock.unavailable = `attach failed: ${(e as Error).message}`;
        report.notes.push(`${sock.label}: not available: ${sock.unavailable}`);
      }
    }
    // Per family (issue 14): the same cluster over IPv4 and over IPv6 (bench/services.ts).
    const byFamily = <T>(f: (family: Family) => T) => ({ 4: f(4), 6: f(6) }) as Record<Family, T>;
    const directTargets = byFamily((f) => ({
      tcp: writeTargets(tmp, `backends${f}-tcp`, backendTargets(f)), udp: writeTargets(tmp, `backends${f}-udp`, backendTargets(f)),
    }));
    const loadRate = new Map<string, number>(); // ms per service port, from the last successful load

    for (const scale of p.scales) {
      const portsOf = byFamily((f) => makeServicePorts(scale, PROTOS, f));
      const ports = portsOf[4];
      const sr: ScaleResult = { services: scale, servicePorts: ports.length, loads: {}, series: [], facts: {} };
      report.scales.push(sr);
      const vipTargets = byFamily((f) => ({
        tcp: writeTargets(tmp, `vips${f}-${scale}-tcp`, serviceTargets(portsOf[f], 'tcp')),
        udp: writeTargets(tmp, `vips${f}-${scale}-udp`, serviceTargets(portsOf[f], 'udp')),
      }));
      // Load every mode, each within its budget, IPv4 then IPv6.
      const loaded: Mode[] = [direct];
      const loadedOf = byFamily<Mode[]>(() => [direct]);
      for (const [m, family] of FAMILIES.flatMap((f) => modes.filter((x) => x !== direct && x.families.includes(f)).map((x) => [x, f] as [Mode, Family]))) {
        const key = loadKey(m.id, family);
        const fports: ServicePort[] = portsOf[family];
        let outcome: LoadOutcome;
        const remaining = deadline - Date.now() - p.reservePerScaleMs * (p.scales.length - p.scales.indexOf(scale));
        const budget = Math.min(p.loadBudgetMs, Math.max(0, remaining));
        const rate = loadRate.get(key);
        if (m.unavailable) {
          outcome = { loaded: false, ms: 0, reason: `not available: ${m.unavailable}` };
        } else if (rate !== undefined && rate * fports.length > budget && m.id !== sock.id) {
          outcome = {
            loaded: false, ms: 0,
            reason: `not loadable within the budget (${Math.round(budget / 1000)} s): the last scale loaded at ${rate.toFixed(2)} ms per service port, ${fports.length} ports need >= ${Math.round((rate * fports.length) / 1000)} s`,
          };
        } else if (budget < 5000) {
          outcome = { loaded: false, ms: 0, reason: `skipped: the run's ${Math.round(p.totalBudgetMs / 1000)} s budget is spent` };
        } else {
          log(`scale ${scale}: loading ${m.label}, IPv${family} (${fports.length} service ports, budget ${Math.round(budget / 1000)} s)`);
          try {
            outcome = await m.load(fports, budget);
          } catch (e) {
            outcome = { loaded: false, ms: 0, reason: `load failed: ${(e as Error).message}` };
          }
          log(`scale ${scale}: ${m.label}, IPv${family}: ${outcome.loaded ? `loaded in ${(outcome.ms / 1000).toFixed(1)} s` : outcome.reason}`);
        }
        if (outcome.loaded && fports.length >= 100) loadRate.set(key, outcome.ms / fports.length);
        sr.loads[key] = outcome;
        if (outcome.loaded) {
          loadedOf[family].push(m);
          if (!loaded.includes(m)) loaded.push(m);
        }
      }
      if (sock.facts && loaded.includes(sock)) sr.facts[sock.id] = await sock.facts();

      // The series of this scale, then interleaved rounds A B C ... C B A ...
      const series: Series[] = FAMILIES.flatMap((f) => loadedOf[f].map((m): Series => ({
        mode: m, kind: 'service', family: f, targetFile: m.usesVips ? vipTargets[f] : directTargets[f], rounds: { tcp: [], udp: [] }, baseline: { tcp: [], udp: [] },
      })));
      if (scale === p.taxScale) {
        for (const m of loadedOf[4]) {
          if (m !== direct) series.push({ mode: m, kind: 'non-service', family: 4, targetFile: directTargets[4], rounds: { tcp: [], udp: [] }, baseline: { tcp: [], udp: [] } });
        }
      }
      log(`scale ${scale}: ${p.rounds} rounds over ${series.length} series x ${PROTOS.length} protocols`);
      // The Sluice programs of this scale (a larger scale may have attached new ones).
      const progs = new Map<Mode, ProgRef[]>();
      if (loaded.includes(sock) && sock.cgroup) progs.set(sock, await ProgStats.cgroupPrograms(sock.cgroup));
      if (loaded.includes(tc) && tc.bpffs) progs.set(tc, ProgStats.linkPrograms(tc.bpffs, /^pod-/));
      const progSeries = (s: Series, proto: Proto) =>
        `${s.kind === 'non-service' ? 'non-Service traffic, ' : ''}${s.mode === sock ? 'socket LB' : 'per-packet (pod veth)'}${s.family === 6 ? ' (IPv6)' : ''}, ${scale} Services, ${proto.toUpperCase()}`;
      for (let r = 0; r < p.rounds; r++) {
        if (Date.now() > deadline - 30_000) {
          report.notes.push(`scale ${scale}: stopped after ${r} rounds: the run's time budget is spent`);
          break;
        }
        // Each series' round runs right next to a direct round that its
        // ratio is paired with: two series share one direct round between
        // them (s1 D s2, s3 D s4, ...; the order reversed every other
        // round). The machine's state (other load, CPU placement, caches)
        // changes within seconds on a shared machine, and a direct round
        // several series away measured another state (docs/bench.md).
        const seed = 1000 * scale + 17 * r + 1;
        for (const proto of PROTOS) {
          // Per family: each family's series are paired with that family's direct rounds.
          for (const f of FAMILIES) {
            const directSeries = series.find((s) => s.mode === direct && s.family === f);
            if (!directSeries) continue;
            const others = series.filter((s) => s.mode !== direct && s.family === f);
            const order = r % 2 === 0 ? others : [...others].reverse();
            const directRound = async () => {
              const d = await runRound(direct, proto, directSeries.targetFile[proto], p, seed, h.serverPid);
              directSeries.rounds[proto].push(d);
              return d;
            };
            const measured = (s: Series) => {
              const round = () => runRound(s.mode, proto, s.targetFile[proto], p, seed, h.serverPid);
              const sp = progs.get(s.mode);
              return sp ? progStats.measure(progSeries(s, proto), sp, round, scale) : round();
            };
            for (let i = 0; i < order.length; i += 2) {
              const a = order[i]!;
              const b = order[i + 1];
              let d: RoundResult;
              if (b || r % 2 === 1) {
                a.rounds[proto].push(await measured(a));
                d = await directRound();
              } else {
                d = await directRound();
                a.rounds[proto].push(await measured(a));
              }
              a.baseline[proto].push(d);
              if (b) {
                b.rounds[proto].push(await measured(b));
                b.baseline[proto].push(d);
              }
            }
            if (others.length === 0) await directRound();
          }
        }
      }
      for (const s of series) {
        for (const proto of PROTOS) {
          const res: SeriesResult = {
            mode: s.mode.id, label: s.mode.label, kind: s.kind, family: s.family, proto, summary: summarize(s.rounds[proto]), rounds: s.rounds[proto],
            ...(s.mode === direct ? {} : { baseline: s.baseline[proto] }),
          };
          sr.series.push(res);
        }
      }
      // h-maglev: connect per algorithm at the tax scale, socket LB against direct.
      if (scale === p.taxScale && loadedOf[4].includes(sock) && sock.bpffs) {
        const t0 = Date.now();
        const alg: AlgorithmBenchResult = (report.algorithms ??= { connect: [], addedS: 0, notes: [] });
        alg.connectServices = scale;
        try {
          alg.connect = await measureAlgorithmConnect({
            bpffs: sock.bpffs, services: scale, rounds: p.quick ? 4 : 7, progStats, progs: progs.get(sock) ?? [], log,
            round: (via, r) => runRound(via === 'direct' ? direct : sock, 'tcp', via === 'direct' ? directTargets[4].tcp : vipTargets[4].tcp, p, 7000 + r, h.serverPid),
          });
        } catch (e) {
          alg.notes.push(`connect per algorithm: ${(e as Error).message}`);
        }
        alg.addedS += (Date.now() - t0) / 1000;
      }
      // One endpoint change with kube-proxy's writers, while the baselines are loaded.
      if (scale === p.taxScale) {
        const ns = (m: Mode) => (loadedOf[4].includes(m) ? m.client.netns : undefined);
        const budgetMs = Math.min(p.rules.budgetMs, Math.max(10_000, deadline - Date.now() - p.reservePerScaleMs * (p.scales.length - 1 - p.scales.indexOf(scale))));
        report.ruleUpdates = await measureRuleUpdates({
          ports, netns: { legacy: ns(legacy), nft: ns(nftBackend), nftables: ns(nftables) },
          changes: p.rules.changes, fullChanges: p.rules.fullChanges, writeTimeoutMs: p.rules.writeTimeoutMs, budgetMs, log,
          initialLoadMs: Object.fromEntries(['iptables-legacy', 'iptables-nft', 'nftables'].filter((id) => sr.loads[id]?.loaded).map((id) => [id, sr.loads[id]!.ms])), // IPv4 loads
        });
      }
      // Unload the baselines now: their rules would only slow the next load.
      for (const m of loaded) {
        if (m === direct) continue;
        const t0 = Date.now();
        try {
          await m.unload();
        } catch (e) {
          report.notes.push(`scale ${scale}: unloading ${m.label} failed: ${(e as Error).message}`);
        }
        if (Date.now() - t0 > 2000) log(`scale ${scale}: ${m.label}: flushed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      }
    }
    // The control-plane half, then NodePort throughput: after the data-path
    // half, each in its own budget (docs/bench.md).
    const makeCgroup = (t: string) => h.makeCgroup(t);
    const makeBpffs = (t: string) => h.makeBpffsDir(t);
    {
      // h-maglev: Maglev table build time and memory (no traffic).
      const t0 = Date.now();
      const alg: AlgorithmBenchResult = (report.algorithms ??= { connect: [], addedS: 0, notes: [] });
      try {
        alg.maglev = measureMaglevBuild(p.quick ? 1000 : 10000, log);
      } catch (e) {
        alg.notes.push(`maglev build: ${(e as Error).message}`);
      }
      alg.addedS += (Date.now() - t0) / 1000;
    }
    report.controlPlane = await measureControlPlane({ root: ROOT, ...p.cp, makeCgroup, makeBpffs, log });
    report.nodePort = await measureNodePort({ root: ROOT, ...p.nodePort, suffix: h.suffix, makeCgroup, makeBpffs, log, progStats });
    // The real thing: upstream kube-proxy's own sync against the agent's, on the cluster tier's control plane.
    report.upstream = p.upstream.services > 0
      ? await measureUpstream({ root: ROOT, ...p.upstream, log })
      : { services: 0, endpointsPerService: 0, rows: [], skipped: 'full run only (QUICK=1 keeps to 2 minutes; `make bench-kubeproxy` runs it alone)', notes: [] };
  } finally {
    progStats.restore();
    report.programs = { rows: progStats.rows(), notes: progStats.notes };
    const problems = await h.destroy();
    fs.rmSync(tmp, { recursive: true, force: true });
    for (const pr of problems) report.notes.push(`cleanup: ${pr}`);
    if (problems.length) log(`cleanup problems: ${problems.join('; ')}`);
  }
  report.durationS = (Date.now() - started) / 1000;
  const files = writeReport(report, path.join(ROOT, 'bench', 'results'), path.join(ROOT, 'docs'));
  log(`done in ${report.durationS.toFixed(0)} s; wrote ${files.join(', ')}`);
}

let interrupted = false;

main().catch((e: unknown) => {
  // When interrupted, the signal handler exits after cleanup.
  if (interrupted) return;
  process.stderr.write(`bench: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
