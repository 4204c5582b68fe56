// The control-plane half of `make bench` for Sluice (issue 6 items 4 and 5b):
//
// * cold start: the built-in API preloaded with S Services x 10 endpoints
//   (one EndpointSlice each), realistic objects (managedFields, ownerReferences,
//   targetRef, nodeName, zone, distinct endpoint addresses: k8sobjects.ts),
//   then the real agent (`bin/sluice agent`, a child
//   process) is started; timed from its start to "every frontend's master
//   entry is in the pinned services map with all its backends", and from its
//   "informers synced" log line to that;
// * agent RSS after it settles (/proc/PID/status) and BPF map memory
//   (bpftool's bytes_memlock of every map it pinned), with the V8 heap figures
//   from its own /metrics to say where the memory goes;
// * one endpoint change at S Services: N sequential EndpointSlice updates
//   (10 -> 9 endpoints of a different Service each), timed from the API write
//   (the built-in API sends the watch event synchronously inside it) to the
//   moment the agent's map writes returned (its CLOCK_MONOTONIC stamp in the
//   `sync done` line), each confirmed by reading the master entries' new
//   count from the map in this process, every 1 ms (the time of that read is
//   kept too, as `seenMs`: an upper bound that includes the timer's wake-up).
//
// Safety: no traffic at all. The agent attaches its socket hooks to a child
// cgroup the bench made (no process ever joins it here) and pins under a bench
// bpffs directory; the API listens on 127.0.0.1. Both go at cleanup.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../src/k8s/apiserver';
import { openSockLbMaps, type SockLbMaps } from '../src/datapath/maps';
import { ip4ToNumber } from '../src/datapath/addr';
import { LB_PROTO_TCP, LB_PROTO_UDP, LB_SCOPE_EXTERNAL, SLUICE_MAP_BACKENDS4, SLUICE_MAP_RANGES4, SLUICE_MAX_RANGE4, SLUICE_MAP_COUNTERS, SLUICE_MAP_REVNAT4, SLUICE_MAP_SERVICES4, SLUICE_MAP_SVC_NAMES } from '../src/abi/generated';
import { AgentProcess } from '../src/lab/agentProcess';
import { run } from './exec';
import { BENCH_NODEPORT_RANGE, BENCH_SERVICE_CIDR, REALISTIC_SERVICE_CIDR, preload, sliceObject, vipOf, type ClusterShape } from './k8sobjects';
import { BACKEND_COUNT } from './services';

export interface ControlPlaneOptions {
  root: string;
  services: number;
  changes: number;
  /** How long the agent may settle after programming before its RSS is read. */
  settleMs: number;
  budgetMs: number;
  makeCgroup: (tag: string) => string;
  makeBpffs: (tag: string) => string;
  log: (msg: string) => void;
  /** false: the data-path half's bench-shaped objects (ten shared backends, nothing else), for comparing with older runs. */
  realistic?: boolean;
}

export interface Percentiles {
  n: number;
  p50: number;
  p99: number;
  max: number;
}

export interface ControlPlaneResult {
  services: number;
  servicePorts: number;
  endpointsPerService: number;
  preloadMs: number;
  coldStart?: {
    /** agent process start -> every master entry present with all backends. */
    startToProgrammedMs: number;
    /** "informers synced" log line -> programmed. */
    syncedToProgrammedMs: number;
    /** Phases from the agent's own log lines, ms after the process started. */
    phases: Record<string, number>;
    /** Sync passes the agent reported until programmed (kind, services, written, durationMs). */
    syncs: Array<Record<string, unknown>>;
    /** The agent's own time split of its first sync (its 'first sync' log line), ms. */
    split?: { listMs: number; decodeMs: number; translateMs: number; writeMs: number };
    /** CPU time the agent used from its start until programmed (user + system), ms: steadier than wall time here. */
    agentCpuMs?: number;
    /** /healthz answered while the agent listed and programmed: latency of probes every 50 ms. */
    healthz?: Percentiles & { failures: number };
  };
  memory?: {
    vmRss: number;
    vmHwm: number;
    rssAnon: number;
    rssFile: number;
    /** nodejs_* gauges from the agent's /metrics (heap used/total, external, per space). */
    heap: Record<string, number>;
  };
  maps?: { totalBytes: number; perMap: Record<string, number> };
  change?: Percentiles & {
    samplesMs: number[];
    timeouts: number;
    /** The agent's own duration of the sync passes during the changes (translate + diff + apply), ms. */
    agentSyncMs: Percentiles;
    /** The API write itself (store.update, which sends the watch event), ms: the bench's own share. */
    apiWriteMs: Percentiles;
    /** API write -> the store in the agent recorded the change (the built-in API, the watch stream, the event's decoding), ms. */
    watchMs: Percentiles;
    /** The store recorded the change -> the pass's map writes returned (the agent's own share), ms. */
    agentMs: Percentiles;
    /** API write -> the bench read both entries' new count, after the agent's `sync done` line reached it (an upper bound), ms. */
    seenMs: Percentiles;
  };
  /** Memory again after the changes. */
  memoryAfterChanges?: { vmRss: number };
  error?: string;
  notes: string[];
}

export function percentiles(samples: number[]): Percentiles {
  const v = samples.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  const at = (q: number) => (v.length ? v[Math.min(v.length - 1, Math.ceil(q * v.length) - 1)]! : NaN);
  return { n: v.length, p50: at(0.5), p99: at(0.99), max: v.length ? v[v.length - 1]! : NaN };
}

const NODE = { name: 'bench-node', address: '198.18.0.250' };
const REALISTIC: ClusterShape = { protos: ['TCP', 'UDP'], type: 'ClusterIP', realistic: true };

export const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

export type MasterKey = ReturnType<typeof masterKey>;

export function masterKey(vip: string, port: number, proto: number) {
  return { address: ip4ToNumber(vip), port, proto, scope: LB_SCOPE_EXTERNAL };
}

/** Opens the pinned maps once the agent has created them all. */
export async function openWhenPinned(bpffs: string, agent: AgentProcess, deadline: number): Promise<SockLbMaps> {
  for (;;) {
    if (fs.existsSync(path.join(bpffs, SLUICE_MAP_COUNTERS))) {
      try {
        return openSockLbMaps(bpffs);
      } catch { /* still pinning */ }
    }
    if (agent.exited) throw new Error(`agent exited before pinning its maps: ${agent.tail()}`);
    if (Date.now() > deadline) throw new Error(`agent: maps not pinned under ${bpffs} in time: ${agent.tail()}`);
    await tick(1);
  }
}

/** The master entries (slot 0) of Services 0..S-1, TCP and UDP, of this shape. */
export function clusterIpMasterKeys(services: number, shape: ClusterShape): MasterKey[] {
  const keys: MasterKey[] = [];
  for (let i = 0; i < services; i++) {
    const { vip, port } = vipOf(i, shape);
    keys.push(masterKey(vip, port, LB_PROTO_TCP), masterKey(vip, port, LB_PROTO_UDP));
  }
  return keys;
}

/**
 * Waits until every master entry is in the map with `count` backends and
 * returns that moment. A cursor walks the keys in order and only re-checks
 * the first one still missing, so polling costs ~one lookup per key overall;
 * it yields every 2 000 lookups (the API server runs in this process too).
 */
export async function waitMastersProgrammed(maps: SockLbMaps, keys: MasterKey[], count: number, agent: AgentProcess, deadline: number): Promise<number> {
  let cursor = 0;
  for (;;) {
    let budget = 2000;
    while (cursor < keys.length && budget-- > 0 && maps.services.get(keys[cursor]!)?.count === count) cursor++;
    if (cursor === keys.length) return Date.now();
    if (agent.exited) throw new Error(`agent exited while programming: ${agent.tail()}`);
    if (Date.now() > deadline) throw new Error(`agent: ${cursor} of ${keys.length} frontends programmed when the budget ran out`);
    if (budget <= 0) await new Promise((r) => setImmediate(r));
    else await tick(1);
  }
}

/** bytes_memlock of every map pinned in the directory (links/ skipped). */
export async function pinnedMapMemory(bpffs: string): Promise<{ totalBytes: number; perMap: Record<string, number> }> {
  const perMap: Record<string, number> = {};
  let totalBytes = 0;
  for (const name of fs.readdirSync(bpffs)) {
    const pin = path.join(bpffs, name);
    if (fs.statSync(pin).isDirectory()) continue;
    const r = await run(['bpftool', '-j', 'map', 'show', 'pinned', pin], { timeoutMs: 5000, allowFailure: true });
    if (r.code !== 0) continue;
    const info = JSON.parse(r.stdout) as { bytes_memlock?: number };
    if (typeof info.bytes_memlock === 'number') {
      perMap[name] = info.bytes_memlock;
      totalBytes += info.bytes_memlock;
    }
  }
  return { totalBytes, perMap };
}

/** nodejs_* process gauges from the agent's Prometheus endpoint. */
async function heapMetrics(address: string | undefined): Promise<Record<string, number>> {
  if (!address) return {};
  const out: Record<string, number> = {};
  try {
    const res = await fetch(`http://${address}/metrics`, { signal: AbortSignal.timeout(5000) });
    for (const line of (await res.text()).split('\n')) {
      const m = /^(nodejs_(?:heap_size_used_bytes|heap_size_total_bytes|external_memory_bytes|heap_space_size_used_bytes\{space="[a-z_]+"\}))\s+(\S+)/.exec(line);
      if (m) out[m[1]!.replace(/\{space="([a-z_]+)"\}/, '.$1')] = Number(m[2]);
    }
  } catch { /* metrics are a detail */ }
  return out;
}

/** Probes the agent's /healthz every 50 ms until stopped; latencies in ms. */
function probeHealthz(agent: AgentProcess): { stop(): Promise<Percentiles & { failures: number }> } {
  const samples: number[] = [];
  let failures = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped && !agent.exited) {
      const address = agent.find(/^serving \/healthz/)?.['healthz'] as string | undefined;
      if (address) {
        const t0 = performance.now();
        try {
          const r = await fetch(`http://${address}/healthz`, { signal: AbortSignal.timeout(5000) });
          await r.text();
          samples.push(performance.now() - t0);
        } catch {
          failures++;
        }
      }
      await tick(50);
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return { ...percentiles(samples), failures };
    },
  };
}

/**
 * The agent's map capacities for S Services x `protos` ports x 10 endpoints
 * (defaults hold 10k; 100k needs more). Realistic endpoint addresses come
 * from 198.18.0.0/15, so at most 131 072 distinct backends per protocol.
 */
export function controlPlaneMaxEntries(services: number, protos: number): Record<string, number> {
  const atLeast = (n: number, min: number) => Math.max(min, 2 ** Math.ceil(Math.log2(n * 1.1)));
  const ports = services * protos;
  return {
    [SLUICE_MAP_SERVICES4]: atLeast(ports, 524288),
    [SLUICE_MAP_RANGES4]: atLeast(ports * BACKEND_COUNT * 1.25, SLUICE_MAX_RANGE4),
    [SLUICE_MAP_BACKENDS4]: atLeast(Math.min(services * BACKEND_COUNT, 131072) * protos, 262144),
    [SLUICE_MAP_REVNAT4]: atLeast(ports, 65536),
    // One name per frontend: at 100k x 2 ports the default 131 072 filled,
    // and every first sync threw there (the 100k part never reached its changes).
    [SLUICE_MAP_SVC_NAMES]: atLeast(ports, 131072),
  };
}

export async function measureControlPlane(o: ControlPlaneOptions): Promise<ControlPlaneResult> {
  const SHAPE: ClusterShape = o.realistic === false ? { ...REALISTIC, realistic: false } : REALISTIC;
  const started = Date.now();
  const deadline = started + o.budgetMs;
  const res: ControlPlaneResult = { services: o.services, servicePorts: o.services * SHAPE.protos.length, endpointsPerService: BACKEND_COUNT, preloadMs: 0, notes: [] };
  let api: ApiServerHandle | undefined;
  let agent: AgentProcess | undefined;
  let maps: SockLbMaps | undefined;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bench-cp-'));
  try {
    api = await startApiServer({ serviceCIDR: SHAPE.realistic ? REALISTIC_SERVICE_CIDR : BENCH_SERVICE_CIDR, nodePortRange: BENCH_NODEPORT_RANGE, bookmarkIntervalMs: 0 });
    const t0 = Date.now();
    preload(api.store, o.services, SHAPE, NODE);
    res.preloadMs = Date.now() - t0;
    o.log(`control plane: API preloaded with ${o.services} Services x ${BACKEND_COUNT} endpoints in ${(res.preloadMs / 1000).toFixed(1)} s`);
    const kubeconfig = path.join(tmp, 'kubeconfig');
    await api.writeKubeconfig(kubeconfig);
    const cgroup = o.makeCgroup('cp');
    const bpffs = o.makeBpffs('cp');

    // Maps sized for the scale (defaults hold 10k x 10; 100k needs more).
    const config = path.join(tmp, 'agent.yaml');
    fs.writeFileSync(config, ['maxEntries:', ...Object.entries(controlPlaneMaxEntries(o.services, SHAPE.protos.length)).map(([map, n]) => `  ${map}: ${n}`), ''].join('\n'));
    agent = new AgentProcess(['--config', config,
      '--kubeconfig', kubeconfig, '--node-name', NODE.name, '--cgroup-path', cgroup, '--bpffs', bpffs,
      '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', '--log-level', 'debug',
    ]);
    maps = await openWhenPinned(bpffs, agent, deadline);
    const prober = probeHealthz(agent);
    const programmedAt = await waitMastersProgrammed(maps, clusterIpMasterKeys(o.services, SHAPE), BACKEND_COUNT, agent, deadline);
    const agentCpuMs = agent.cpuMs();
    const healthz = await prober.stop();
    const synced = await agent.waitForLog(/^informers synced/, 5000);
    const phases: Record<string, number> = {};
    for (const [key, re] of [
      ['log: starting', /^starting$/], ['IPv6 table capacity (BPF load starts)', /^IPv6 table capacity/], ['socket LB attached', /^socket load balancer attached/],
      ['serving /healthz (syncer ready)', /^serving \/healthz/],
      ['listed node', /^listed node/], ['listed services', /^listed services/], ['listed endpointslices', /^listed endpointslices/],
      ['informers synced', /^informers synced/],
    ] as const) {
      const line = agent.find(re);
      if (line) phases[key] = line.time - agent.startedAt;
    }
    phases['programmed (maps polled)'] = programmedAt - agent.startedAt;
    res.coldStart = { startToProgrammedMs: programmedAt - agent.startedAt, syncedToProgrammedMs: programmedAt - synced.time, phases, syncs: [], agentCpuMs, healthz };
    const first = await agent.waitForLog(/^first sync/, 5000).catch(() => undefined);
    if (first) res.coldStart.split = { listMs: Number(first['listMs']), decodeMs: Number(first['decodeMs']), translateMs: Number(first['translateMs']), writeMs: Number(first['writeMs']) };
    o.log(`control plane: cold start ${res.coldStart.startToProgrammedMs} ms (synced -> programmed ${res.coldStart.syncedToProgrammedMs} ms; agent CPU ${agentCpuMs} ms; ` +
      `split ${JSON.stringify(res.coldStart.split ?? {})}; /healthz p99 ${healthz.p99.toFixed(1)} ms, max ${healthz.max.toFixed(1)} ms, ${healthz.failures} failed)`);

    await tick(o.settleMs);
    // The sync passes until programmed (their 'sync done' line comes after the maps are written).
    const firstAfter = agent.lines.findIndex((l) => l.msg === 'sync done' && l.time >= programmedAt);
    res.coldStart.syncs = agent.lines.slice(0, firstAfter >= 0 ? firstAfter + 1 : undefined).filter((l) => l.msg === 'sync done')
      .map((l) => ({ kind: l['kind'], services: l['services'], written: l['written'], durationMs: l['durationMs'], atMs: l.time - agent!.startedAt }));
    const metricsAddress = agent.find(/^serving \/healthz/)?.['metrics'] as string | undefined;
    res.memory = { ...agent.memory(), heap: await heapMetrics(metricsAddress) };
    res.maps = await pinnedMapMemory(bpffs);
    o.log(`control plane: agent RSS ${(res.memory.vmRss / 1048576).toFixed(1)} MiB (peak ${(res.memory.vmHwm / 1048576).toFixed(1)}), BPF maps ${(res.maps.totalBytes / 1048576).toFixed(1)} MiB`);

    // One endpoint change at a time, each on a different Service.
    const samples: number[] = [];
    let timeouts = 0;
    const linesBefore = agent.lines.length;
    const writes: number[] = [];
    const seen: number[] = [];
    const pending: Array<{ begin: bigint; seenAt: bigint }> = [];
    for (let k = 0; k < o.changes; k++) {
      if (Date.now() > deadline) {
        res.notes.push(`one-change latency: stopped after ${k} of ${o.changes} changes, the budget ran out`);
        break;
      }
      const i = Math.floor(((k + 0.5) * o.services) / o.changes);
      const { vip, port } = vipOf(i, SHAPE);
      const keys = [masterKey(vip, port, LB_PROTO_TCP), masterKey(vip, port, LB_PROTO_UDP)];
      const want = BACKEND_COUNT - 1;
      const linesAt = agent.lines.length;
      const begin = process.hrtime.bigint();
      api.store.update('endpointslices', sliceObject(i, SHAPE, want));
      writes.push(Number(process.hrtime.bigint() - begin) / 1e6);
      let done = false;
      const limit = begin + 2_000_000_000n;
      // The sample ends at the agent's stamp (below); the bench only
      // confirms the change in the map, after the agent's line for a pass
      // that wrote maps arrived: its process sleeps in epoll meanwhile and
      // leaves both CPUs to the agent. A 1 ms timer poll of the map woke up
      // once or twice inside most changes (measured, docs/bench.md "one
      // change"); a 0.1 ms one before it woke 1.3-2.5 ms late and moved the
      // figure itself.
      for (let from = linesAt; !done && process.hrtime.bigint() < limit;) {
        const next = await agent.waitForLine((l) => l.msg === 'sync done' && Number(l['written']) > 0 && typeof l['mapsWrittenAtNs'] === 'number' && BigInt(l['mapsWrittenAtNs']) > begin,
          from, Math.max(1, Number(limit - process.hrtime.bigint()) / 1e6));
        if (!next) break;
        from = next.index + 1;
        done = keys.every((key) => maps!.services.get(key)?.count === want);
      }
      if (done) {
        const seenAt = process.hrtime.bigint();
        seen.push(Number(seenAt - begin) / 1e6);
        pending.push({ begin, seenAt });
      } else timeouts++;
      await tick(20); // let both processes go idle before the next change (and its log line arrive)
    }
    // Each change's sample ends at the last pass that wrote maps between its
    // API write and the poll reading the new count: the entries were written
    // by one of those passes, so no sample ends early. When the poll read
    // them before the writing pass took its stamp, the poll's time ends it.
    const passes = agent.lines.slice(linesBefore).filter((l) => l.msg === 'sync done' && typeof l['mapsWrittenAtNs'] === 'number' && Number(l['written']) > 0)
      .map((l) => ({ written: BigInt(l['mapsWrittenAtNs'] as number), changed: typeof l['changedAtNs'] === 'number' ? BigInt(l['changedAtNs']) : undefined }));
    let endedAtPoll = 0;
    // The split of each sample at the agent's other stamp (changedAtNs: the
    // store recorded the pass's oldest change): before it the API's write,
    // the watch stream and the event's decoding; after it the agent's pass.
    const watchShare: number[] = [];
    const agentShare: number[] = [];
    for (const { begin, seenAt } of pending) {
      const pass = passes.filter((p) => p.written > begin && p.written <= seenAt).pop();
      if (pass === undefined) endedAtPoll++;
      samples.push(Number((pass?.written ?? seenAt) - begin) / 1e6);
      if (pass?.changed !== undefined && pass.changed > begin) {
        watchShare.push(Number(pass.changed - begin) / 1e6);
        agentShare.push(Number(pass.written - pass.changed) / 1e6);
      }
    }
    if (endedAtPoll > 0) res.notes.push(`one-change latency: ${endedAtPoll} of ${pending.length} samples end when the bench read the map (no agent stamp before it)`);
    const agentSyncMs = percentiles(agent.lines.slice(linesBefore).filter((l) => l.msg === 'sync done').map((l) => Number(l['durationMs'])));
    res.change = { ...percentiles(samples), samplesMs: samples.map((x) => Math.round(x * 1000) / 1000), timeouts, agentSyncMs, apiWriteMs: percentiles(writes), watchMs: percentiles(watchShare), agentMs: percentiles(agentShare), seenMs: percentiles(seen) };
    res.memoryAfterChanges = { vmRss: agent.memory().vmRss };
    o.log(`control plane: one change at ${o.services} Services: p50 ${res.change.p50.toFixed(2)} ms, p99 ${res.change.p99.toFixed(2)} ms over ${res.change.n} changes (API + watch p50 ${res.change.watchMs.p50.toFixed(2)}, p99 ${res.change.watchMs.p99.toFixed(2)}; agent p50 ${res.change.agentMs.p50.toFixed(2)}, p99 ${res.change.agentMs.p99.toFixed(2)}; the bench read the map after the agent's line: p50 ${res.change.seenMs.p50.toFixed(2)}, p99 ${res.change.seenMs.p99.toFixed(2)} ms)${timeouts ? `, ${timeouts} not seen within 2 s` : ''}`);
  } catch (e) {
    res.error = (e as Error).message;
    o.log(`control plane: ${res.error}`);
  } finally {
    maps?.close();
    await agent?.stop();
    await api?.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  return res;
}
