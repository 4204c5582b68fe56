// Upstream kube-proxy itself against the Sluice agent on one real control
// plane (the cluster tier's etcd + kube-apiserver v1.34.4): all watch the same
// Services and EndpointSlices (S Services x 10 endpoints), each proxy on its
// own node namespace (kube-proxy writes its iptables/nft rules there, never
// in the root namespace), one after the other so none slows another.
//
// Rows: kube-proxy iptables and nftables, each with its defaults
// (minSyncPeriod 1 s, as users run it; `0s` in its config is also defaulted to
// 1 s) and tuned to its fastest (minSyncPeriod 5 ms), and the Sluice agent.
// Measured alike for each:
//   cold start   process start -> every Service programmed. kube-proxy: the
//                end of its first sync (kubeproxy_sync_proxy_rules_last_timestamp_seconds;
//                it does not sync before both informers have listed, so the
//                first sync is the full one), checked once against its rules.
//                Sluice: every master entry in the pinned map has 10 backends.
//   one change   an EndpointSlice replaced (10 -> 9 endpoints, back again),
//                the next one written as soon as the previous is visible (as
//                churn arrives): kube-proxy, the end of the first sync after
//                the write (same metric, polled every 10 ms); Sluice, the
//                map entry (polled every 0.5 ms).
//   RSS, CPU     VmRSS / VmHWM of the process after the changes; CPU (user +
//                system, with the waited-for iptables-restore / nft children)
//                from start to programmed: the list, the decode and one full sync.
//   own metrics  kubeproxy_sync_proxy_rules_duration_seconds (Sluice's agent
//                exports the same names): the first (full) sync, and the
//                mean over the changes.
// Locks: /tmp/sluice-cluster.lock while the control plane is up (it shares
// the machine with the cluster tier); `make bench-kubeproxy` takes
// /tmp/sluice-bench.lock around the whole part.
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { startCluster, type Cluster } from '../test/cluster/harness';
import { kubeProxyConfig, type KubeProxyMode } from '../test/cluster/kubeProxy';
import { startProcess, stopPid, type ManagedProcess } from '../test/cluster/proc';
import { pinnedVersions, type Binaries } from '../test/cluster/binaries';
import type { ClusterNode } from '../test/cluster/nodes';
import { openSockLbMaps, type SockLbMaps } from '../src/datapath/maps';
import { ip4ToNumber } from '../src/datapath/addr';
import { LB_PROTO_TCP, SLUICE_MAP_BACKENDS4, SLUICE_MAP_RANGES4, SLUICE_MAP_REVNAT4, SLUICE_MAP_SERVICES4, SLUICE_MAX_RANGE4 } from '../src/abi/generated';
import { run } from './exec';
import { SNAPSHOT_ROOT, ensureSnapshot, type Snapshot } from './snapshot';
import { UPSTREAM_CONTROL_PLANE, UPSTREAM_ENDPOINTS, UPSTREAM_NAMESPACE, UPSTREAM_SERVICE_CIDR, buildUpstreamSnapshot, upstreamGeneratorHash, upstreamName } from './upstreamObjects';

export interface UpstreamRow {
  id: string;
  label: string;
  minSyncPeriod?: string;
  coldStartMs?: number;
  changeMs: number[];
  timeouts: number;
  rssMiB?: number;
  peakRssMiB?: number;
  /** CPU seconds (user + system, children included) from process start to every Service programmed. */
  coldCpuS?: number;
  /** kubeproxy_sync_proxy_rules_duration_seconds of the first (full) sync, and the mean of the later ones. */
  firstSyncS?: number;
  changeSyncMeanMs?: number;
  /** Why the row stopped early. */
  stopped?: string;
}

export interface UpstreamResult {
  skipped?: string;
  services: number;
  endpointsPerService: number;
  kubernetesVersion?: string;
  /** Creating the objects through the API for the snapshot (only when it was built by this run). */
  createMs?: number;
  /** The etcd snapshot the control plane started from (bench/snapshot.ts). */
  snapshot?: { key: string; cached: boolean; builtAt: string; buildMs: number; serviceCidr: string };
  /** kube-apiserver start on the snapshot -> ready. */
  clusterStartMs?: number;
  /** Wall-clock budget for each proxy's cold start (the row stops there). */
  coldBudgetS?: number;
  rows: UpstreamRow[];
  notes: string[];
}

const ENDPOINTS = UPSTREAM_ENDPOINTS;
const METRICS_PORT = 10249;
const TUNED_MIN_SYNC = '5ms';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Holds an flock(1) lock until release() (or until this process dies: the holder's stdin closes). */
async function holdLock(file: string, timeoutS: number): Promise<{ release(): void } | undefined> {
  const child: ChildProcess = spawn('flock', ['-w', String(timeoutS), file, '-c', 'echo locked; exec cat >/dev/null'], { stdio: ['pipe', 'pipe', 'ignore'] });
  const got = await new Promise<boolean>((resolve) => {
    child.stdout!.on('data', (d: Buffer) => { if (d.toString().includes('locked')) resolve(true); });
    child.on('exit', () => resolve(false));
  });
  if (!got) return undefined;
  return { release: () => child.stdin!.end() };
}

/**
 * Prometheus text -> value of `name`, summed (or the max) over its label sets,
 * leaving out the lines `skip` matches. kube-proxy v1.34 runs an IPv6 proxier
 * beside the IPv4 one when ip6tables works, and labels its sync metrics
 * ip_family: the bench's objects are IPv4, so its IPv6 lines are left out.
 */
export function metricValue(text: string, name: string, how: 'sum' | 'max' = 'sum', skip?: RegExp): number | undefined {
  let out: number | undefined;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== ' ' && rest[0] !== '{') continue;
    if (skip?.test(line)) continue;
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (!Number.isFinite(v)) continue;
    out = out === undefined ? v : how === 'sum' ? out + v : Math.max(out, v);
  }
  return out;
}

async function scrape(node: ClusterNode, port: number): Promise<string> {
  const r = await run(['nsenter', `--net=/run/netns/${node.netns}`, 'curl', '-s', '--max-time', '2', `http://127.0.0.1:${port}/metrics`], { timeoutMs: 5000, allowFailure: true });
  return r.code === 0 ? r.stdout : '';
}

interface SyncState { lastTs: number; count: number; sum: number }
async function syncState(node: ClusterNode, port: number): Promise<SyncState> {
  const t = await scrape(node, port);
  const v6 = /ip_family="IPv6"/;
  return {
    lastTs: metricValue(t, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', 'max', v6) ?? 0,
    count: metricValue(t, 'kubeproxy_sync_proxy_rules_duration_seconds_count', 'sum', v6) ?? 0,
    sum: metricValue(t, 'kubeproxy_sync_proxy_rules_duration_seconds_sum', 'sum', v6) ?? 0,
  };
}

function procStatus(pid: number): { rssMiB?: number; peakRssMiB?: number } {
  try {
    const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(s)?.[1] ?? NaN) / 1024;
    return { rssMiB: kb('VmRSS'), peakRssMiB: kb('VmHWM') };
  } catch {
    return {};
  }
}

/** utime + stime + cutime + cstime of a process, seconds. */
function procCpuS(pid: number): number | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ').map(Number);
    return (f[11]! + f[12]! + f[13]! + f[14]!) / 100;
  } catch {
    return undefined;
  }
}

async function poll(what: () => Promise<boolean> | boolean, timeoutMs: number, intervalMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await what()) return true;
    await sleep(intervalMs);
  }
  return false;
}

/** kube-proxy's config for this bench: the cluster tier's, with minSyncPeriod as given (undefined: not set, its 1 s default). */
export function benchKubeProxyConfig(node: ClusterNode, mode: KubeProxyMode, minSync: string | undefined): string {
  const lines = kubeProxyConfig(node, mode).split('\n');
  return lines.filter((l) => minSync !== undefined || !l.includes('minSyncPeriod'))
    .map((l) => (l.includes('minSyncPeriod') ? `  minSyncPeriod: ${minSync}` : l)).join('\n');
}

/** Rules kube-proxy programmed (checked once after its cold start, untimed): Services with endpoint rules. */
async function kubeProxyServices(node: ClusterNode, mode: KubeProxyMode, legacy: boolean): Promise<number> {
  if (mode === 'iptables') {
    const r = await run(['nsenter', `--net=/run/netns/${node.netns}`, legacy ? 'iptables-legacy-save' : 'iptables-save', '-t', 'nat'], { timeoutMs: 120_000 });
    return new Set([...r.stdout.matchAll(/^-A (KUBE-SVC-\S+) .*-j KUBE-SEP-/gm)].map((m) => m[1])).size;
  }
  // Only the service-ips verdict map (one element per Service port): listing the
  // whole table at 10 000 Services took over 120 s on the loaded machine.
  const r = await run(['nsenter', `--net=/run/netns/${node.netns}`, 'nft', 'list', 'map', 'ip', 'kube-proxy', 'service-ips'], { timeoutMs: 300_000 });
  return new Set([...r.stdout.matchAll(/goto (service-\S+-default\/up-\d+\/tcp\/http)/g)].map((m) => m[1])).size;
}

interface Run {
  row: UpstreamRow;
  node: ClusterNode;
  vips: string[];
  services: number;
  changes: number;
  coldBudgetMs: number;
  cluster: Cluster;
  log: (m: string) => void;
  /** Each changed Service's full endpoint list, as first read. */
  fullEndpoints: Map<number, V1EndpointSlice['endpoints']>;
}

/** Service i's slice as stored, with its endpoints cut to `count` (the first ones of the full set). */
async function sliceWith(r: Run, i: number, count: number): Promise<V1EndpointSlice> {
  const cur = await r.cluster.discovery.readNamespacedEndpointSlice({ name: upstreamName(i), namespace: UPSTREAM_NAMESPACE });
  const full = r.fullEndpoints.get(i) ?? cur.endpoints;
  r.fullEndpoints.set(i, full);
  return { ...cur, endpoints: full.slice(0, count) };
}

/** Back-to-back EndpointSlice changes; `visible(i, want, writeAt)` resolves with ms or undefined on timeout. */
async function changes(r: Run, visible: (i: number, want: number, writeAt: number) => Promise<number | undefined>): Promise<void> {
  for (let k = 0; k < r.changes; k++) {
    const i = (k * 7919) % r.services;
    const want = Math.floor(k / r.services) % 2 === 0 ? ENDPOINTS - 1 : ENDPOINTS;
    const body = await sliceWith(r, i, want);
    const writeAt = Date.now();
    await r.cluster.discovery.replaceNamespacedEndpointSlice({ name: upstreamName(i), namespace: UPSTREAM_NAMESPACE, body });
    const ms = await visible(i, want, writeAt);
    if (ms === undefined) r.row.timeouts++;
    else r.row.changeMs.push(ms);
  }
  // Back to 10 endpoints, so the next row starts from the same objects.
  for (let k = 0; k < Math.min(r.changes, r.services); k++) {
    const i = (k * 7919) % r.services;
    await r.cluster.discovery.replaceNamespacedEndpointSlice({ name: upstreamName(i), namespace: UPSTREAM_NAMESPACE, body: await sliceWith(r, i, ENDPOINTS) });
  }
}

/** A PATH directory whose iptables* are the legacy (x_tables) backend: what kube-proxy's image picks on a node with legacy rules. */
function legacyPath(dir: string): string {
  const bin = path.join(dir, 'iptables-legacy-bin');
  fs.mkdirSync(bin, { recursive: true });
  for (const n of ['iptables', 'iptables-save', 'iptables-restore', 'ip6tables', 'ip6tables-save', 'ip6tables-restore']) {
    if (!fs.existsSync(path.join(bin, n))) fs.symlinkSync('/usr/sbin/xtables-legacy-multi', path.join(bin, n));
  }
  return bin;
}

async function measureKubeProxy(r: Run, mode: KubeProxyMode, minSync: string | undefined, legacy: boolean): Promise<void> {
  const { row, node, cluster } = r;
  const config = path.join(cluster.dir, `kube-proxy-bench-${node.name}-${mode}.yaml`);
  fs.writeFileSync(config, benchKubeProxyConfig(node, mode, minSync));
  const env = legacy ? { ...process.env, PATH: `${legacyPath(cluster.dir)}:${process.env.PATH ?? '/usr/sbin:/usr/bin'}` } : undefined;
  const t0 = Date.now();
  // `ip netns exec` execs kube-proxy (same pid) after remounting /sys for the namespace.
  const proc: ManagedProcess = startProcess(`kube-proxy bench ${node.name}`, ['ip', 'netns', 'exec', node.netns, cluster.binaries.kubeProxy, `--config=${config}`, '--v=1'],
    path.join(cluster.dir, 'logs', `kube-proxy-bench-${node.name}-${mode}.log`), env);
  try {
    let first: SyncState | undefined;
    const synced = await poll(async () => {
      const s = await syncState(node, METRICS_PORT);
      if (s.count >= 1 && s.lastTs > 0) first = s;
      return first !== undefined;
    }, r.coldBudgetMs, 100);
    if (!synced || !first) {
      row.stopped = `no first sync within the ${Math.round(r.coldBudgetMs / 1000)} s budget`;
      return;
    }
    row.coldCpuS = procCpuS(proc.pid);
    row.coldStartMs = Math.round(first.lastTs * 1000 - t0);
    r.log(`upstream: ${row.label}: its sync metrics: ${(await scrape(node, METRICS_PORT)).split('\n').filter((l) => l.startsWith('kubeproxy_sync_proxy_rules_last_timestamp')).join(' / ')}`);
    row.firstSyncS = first.sum / first.count;
    const seen = await kubeProxyServices(node, mode, legacy);
    if (seen < r.services) {
      row.stopped = `its first sync programmed ${seen} of ${r.services} Services`;
      row.coldStartMs = undefined;
      return;
    }
    r.log(`upstream: ${row.label}: cold start ${row.coldStartMs} ms (first sync ${row.firstSyncS.toFixed(2)} s, CPU ${row.coldCpuS?.toFixed(1)} s)`);
    let last = await syncState(node, METRICS_PORT);
    const base = last;
    await changes(r, async (_i, _want, writeAt) => {
      let ms: number | undefined;
      await poll(async () => {
        const s = await syncState(node, METRICS_PORT);
        if (s.count > last.count && s.lastTs * 1000 >= writeAt) {
          ms = Math.round(s.lastTs * 1000 - writeAt);
          last = s;
          return true;
        }
        return false;
      }, 30_000, 10);
      return ms;
    });
    if (last.count > base.count) row.changeSyncMeanMs = ((last.sum - base.sum) / (last.count - base.count)) * 1000;
    Object.assign(row, procStatus(proc.pid));
  } finally {
    await stopPid(proc.pid);
  }
}

async function measureSluice(r: Run, root: string): Promise<void> {
  const { row, node, cluster, vips } = r;
  let maps: SockLbMaps | undefined;
  const port = 10250;
  const key = (vip: string) => ({ address: ip4ToNumber(vip), port: 80, proto: LB_PROTO_TCP, scope: 0 });
  const count = (vip: string) => maps!.services.get(key(vip))?.count;
  // Maps sized for the scale past the defaults (they hold 10k x 10), as bench/controlplane.ts does.
  const config = path.join(cluster.dir, `agent-bench-${node.name}.yaml`);
  const atLeast = (n: number, min: number) => Math.max(min, 2 ** Math.ceil(Math.log2(n * 1.1)));
  fs.writeFileSync(config, ['maxEntries:',
    `  ${SLUICE_MAP_SERVICES4}: ${atLeast(r.services, 524288)}`,
    `  ${SLUICE_MAP_RANGES4}: ${atLeast(r.services * ENDPOINTS * 1.25, SLUICE_MAX_RANGE4)}`,
    `  ${SLUICE_MAP_BACKENDS4}: ${atLeast(Math.min(r.services * ENDPOINTS, 131072), 262144)}`,
    `  ${SLUICE_MAP_REVNAT4}: ${atLeast(r.services, 65536)}`, ''].join('\n'));
  const t0 = Date.now();
  const proc = cluster.startInNode(node, 'sluice-agent-bench', [path.join(root, 'bin', 'sluice'), 'agent', ...(r.services > 10000 ? ['--config', config] : []), '--kubeconfig', node.kubeconfigPath,
    '--node-name', node.name, '--cgroup-path', node.cgroup, '--bpffs', node.bpffsDir,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', `127.0.0.1:${port}`], { cgroup: node.cgroup });
  try {
    let pending = 0;
    const ready = await poll(() => {
      try {
        maps ??= openSockLbMaps(node.bpffsDir);
      } catch {
        return false; // not pinned yet
      }
      while (pending < vips.length && count(vips[pending]!) === ENDPOINTS) pending++;
      return pending === vips.length;
    }, r.coldBudgetMs, 5);
    if (!ready) {
      row.stopped = `${pending} of ${vips.length} Services programmed within the ${Math.round(r.coldBudgetMs / 1000)} s budget`;
      return;
    }
    row.coldStartMs = Date.now() - t0;
    row.coldCpuS = procCpuS(proc.pid);
    const first = await syncState(node, port);
    row.firstSyncS = first.count ? first.sum / first.count : undefined;
    r.log(`upstream: ${row.label}: cold start ${row.coldStartMs} ms (CPU ${row.coldCpuS?.toFixed(1)} s)`);
    await changes(r, async (i, want, writeAt) => ((await poll(() => count(vips[i]!) === want, 30_000, 0.5)) ? Date.now() - writeAt : undefined));
    const after = await syncState(node, port);
    if (after.count > first.count) row.changeSyncMeanMs = ((after.sum - first.sum) / (after.count - first.count)) * 1000;
    Object.assign(row, procStatus(proc.pid));
  } finally {
    maps?.close();
    await stopPid(proc.pid);
  }
}

export interface UpstreamOptions {
  root: string;
  services: number;
  changes: number;
  log: (m: string) => void;
  /** Cold-start budget per proxy, and for creating the objects; seconds. */
  coldBudgetS?: number;
  createBudgetS?: number;
  /** Rows to run (default all): ids of ROWS. */
  only?: string[];
  /** Where the etcd snapshots live (default SNAPSHOT_ROOT, /var/cache/sluice/snapshots). */
  snapshotRoot?: string;
}

const ROWS: Array<{ id: string; label: string; mode?: KubeProxyMode; minSync?: string; legacy?: boolean }> = [
  { id: 'kube-proxy-iptables', label: 'kube-proxy iptables (nft backend), defaults (minSyncPeriod 1s)', mode: 'iptables' },
  { id: 'kube-proxy-iptables-tuned', label: `kube-proxy iptables (nft backend), minSyncPeriod ${TUNED_MIN_SYNC}`, mode: 'iptables', minSync: TUNED_MIN_SYNC },
  { id: 'kube-proxy-iptables-legacy', label: 'kube-proxy iptables (legacy backend), defaults (minSyncPeriod 1s)', mode: 'iptables', legacy: true },
  { id: 'kube-proxy-iptables-legacy-tuned', label: `kube-proxy iptables (legacy backend), minSyncPeriod ${TUNED_MIN_SYNC}`, mode: 'iptables', minSync: TUNED_MIN_SYNC, legacy: true },
  { id: 'kube-proxy-nftables', label: 'kube-proxy nftables, defaults (minSyncPeriod 1s)', mode: 'nftables' },
  { id: 'kube-proxy-nftables-tuned', label: `kube-proxy nftables, minSyncPeriod ${TUNED_MIN_SYNC}`, mode: 'nftables', minSync: TUNED_MIN_SYNC },
  { id: 'sluice', label: 'Sluice agent' },
];

/**
 * The k8s binaries scripts/k8s-binaries.sh built (the lead's job), by path:
 * never started from here (the script waits on its build lock while another
 * build, e.g. the node tier's kubelet, runs).
 */
function cachedBinaries(): Binaries | string {
  const v = pinnedVersions();
  const dir = path.join(process.env.SLUICE_CACHE ?? '/var/cache/sluice', `k8s-${v.kubernetes}`, 'bin');
  const missing = ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-proxy'].filter((b) => !fs.existsSync(path.join(dir, b)));
  if (missing.length) return `${missing.join(', ')} not built yet in ${dir} (scripts/k8s-binaries.sh)`;
  return {
    binDir: dir, etcd: path.join(dir, 'etcd'), kubeApiserver: path.join(dir, 'kube-apiserver'), kubeControllerManager: path.join(dir, 'kube-controller-manager'),
    kubeProxy: path.join(dir, 'kube-proxy'), kubernetesVersion: v.kubernetes, etcdVersion: v.etcd,
  };
}

export async function measureUpstream(opts: UpstreamOptions): Promise<UpstreamResult> {
  const rows = ROWS.filter((r) => !opts.only || opts.only.includes(r.id));
  const coldBudgetS = opts.coldBudgetS ?? 300;
  const result: UpstreamResult = { services: opts.services, endpointsPerService: ENDPOINTS, coldBudgetS, rows: [], notes: [], kubernetesVersion: pinnedVersions().kubernetes };
  const binaries = cachedBinaries();
  if (typeof binaries === 'string') return { ...result, skipped: binaries };
  // The objects: a cached etcd data directory of a control plane that holds
  // them (built through the API on the first run for this key; loopback only,
  // so it needs no cluster lock).
  let snap: Snapshot;
  const v = pinnedVersions();
  try {
    snap = await ensureSnapshot(opts.snapshotRoot ?? SNAPSHOT_ROOT, {
      kubernetes: v.kubernetes, etcd: v.etcd, services: opts.services, endpointsPerService: ENDPOINTS, serviceCidr: UPSTREAM_SERVICE_CIDR, generator: upstreamGeneratorHash(),
    }, (etcdDir, partial) => buildUpstreamSnapshot(binaries, opts.services, etcdDir, partial, (opts.createBudgetS ?? 900) * 1000, opts.log), opts.log);
  } catch (e) {
    return { ...result, skipped: `the objects could not be created: ${(e as Error).message}` };
  }
  result.snapshot = { key: snap.meta.key, cached: snap.cached, builtAt: snap.meta.builtAt, buildMs: snap.meta.buildMs, serviceCidr: UPSTREAM_SERVICE_CIDR };
  if (!snap.cached) result.createMs = snap.meta.buildMs;
  opts.log(`upstream: ${opts.services} Services x ${ENDPOINTS} endpoints: ${snap.cached ? 'cached' : 'new'} etcd snapshot ${snap.dir} (built ${snap.meta.builtAt} in ${(snap.meta.buildMs / 1000).toFixed(1)} s)`);
  const lock = await holdLock('/tmp/sluice-cluster.lock', 900);
  if (!lock) return { ...result, skipped: 'the cluster lock (/tmp/sluice-cluster.lock) was not free within 15 min' };
  try {
    let t = Date.now();
    const started = await startCluster({ nodes: rows.length, binaries, controlPlane: { ...UPSTREAM_CONTROL_PLANE, etcdSeedDir: snap.etcdDir } });
    if (!started.ok) return { ...result, skipped: started.skip };
    result.clusterStartMs = Date.now() - t;
    const c = started.cluster;
    try {
      const vips = snap.meta.clusterIPs;
      // The API server reads the snapshot's objects back: check the last Service and slice.
      const last = opts.services - 1;
      const svc = await c.core.readNamespacedService({ name: upstreamName(last), namespace: UPSTREAM_NAMESPACE });
      const eps = await c.discovery.readNamespacedEndpointSlice({ name: upstreamName(last), namespace: UPSTREAM_NAMESPACE });
      if (svc.spec?.clusterIP !== vips[last] || eps.endpoints.length !== ENDPOINTS) throw new Error(`the snapshot's ${upstreamName(last)} reads back as ${svc.spec?.clusterIP} with ${eps.endpoints.length} endpoints, not ${vips[last]} with ${ENDPOINTS}`);
      opts.log(`upstream: cluster up on the snapshot in ${(result.clusterStartMs / 1000).toFixed(1)} s`);
      for (const [k, spec] of rows.entries()) {
        const row: UpstreamRow = { id: spec.id, label: spec.label, minSyncPeriod: spec.mode ? (spec.minSync ?? '1s (default)') : '0 (default)', changeMs: [], timeouts: 0 };
        result.rows.push(row);
        const r: Run = { row, node: c.nodes[k]!, vips, services: opts.services, changes: opts.changes, coldBudgetMs: coldBudgetS * 1000, cluster: c, log: opts.log, fullEndpoints: new Map() };
        // The tuned twin of a row that did not program within the budget would not either (same first sync): skip it.
        const twin = spec.minSync ? result.rows.find((x) => x.id === spec.id.replace(/-tuned$/, '')) : undefined;
        if (twin && twin.coldStartMs === undefined) {
          row.stopped = `not run: ${twin.label} did not program every Service (${twin.stopped ?? 'no cold start'}); the first sync does not depend on minSyncPeriod`;
          continue;
        }
        try {
          if (spec.mode) await measureKubeProxy(r, spec.mode, spec.minSync, spec.legacy ?? false);
          else await measureSluice(r, opts.root);
        } catch (e) {
          row.stopped = (e as Error).message;
        }
        if (row.stopped) opts.log(`upstream: ${row.label}: stopped: ${row.stopped}`);
      }
      result.notes.push(`kube-proxy: change latency = its sync's end (kubeproxy_sync_proxy_rules_last_timestamp_seconds, polled every 10 ms) - the API write; the next change is written once the previous is visible (churn), so minSyncPeriod's wait is part of what it takes. Sluice: the map entry, polled every 0.5 ms.`);
      void t;
    } finally {
      await c.close();
    }
  } catch (e) {
    result.notes.push(`stopped: ${(e as Error).message}`);
  } finally {
    lock.release();
  }
  return result;
}
