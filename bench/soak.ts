// Churn soak (issue 13 item 2; `make soak`, its short form in the e2e tier).
//
// The real agent (bin/sluice agent, a child process with the capabilities the
// DaemonSet has) watches the built-in API server in this process, which holds
// S Services x 10 endpoints. A bounded generator replaces endpoints at R
// EndpointSlice updates per second spread over all Services (each update:
// one endpoint removed, another added). Client processes in the sandbox's
// cgroup connect continuously through the socket LB to a sample of Services
// whose endpoints are real listeners; part of the change budget goes to
// them so their backends come and go often. Meanwhile this process polls the
// sampled Services' entries in the pinned maps (every POLL_MS) and records
// when each backend left and came back, and samples the agent's RSS and CPU.
//
// Figures (SoakResult): connections that reached a backend more than N ms
// after the map poll saw it removed (N = the agent's p99 network programming
// latency from its histogram; also N = 0); failed connections (the sampled
// Services always keep 10 live backends); RSS over time and its slope after
// warm-up; agent CPU per update; and, after every Service is deleted, the
// entry count of every pinned map and the agent's id allocators against the
// baseline taken before the first Service was created.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../src/k8s/apiserver';
import { Sandbox, labScript, waitFor } from '../src/lab/sandbox';
import { AgentProcess, AGENT_CAPS } from '../src/lab/agentProcess';
import { BpfMap } from '../src/bpf';
import { openSockLbMaps, type SockLbMaps } from '../src/datapath/maps';
import { ip4ToNumber } from '../src/datapath/addr';
import { LB_PROTO_TCP, LB_SCOPE_EXTERNAL } from '../src/abi/generated';
import { Worker } from 'node:worker_threads';
import type { PollerInput, PollerMessage } from './soakPoller';

export interface SoakOptions {
  /** Churn duration. */
  seconds: number;
  services: number;
  endpointsPerService: number;
  /** EndpointSlice updates per second asked of the generator (each replaces one endpoint). */
  rate: number;
  /** Services the clients connect to (their endpoints are real listeners). */
  sampled: number;
  /** Share of the updates that go to the sampled Services. */
  sampledShare: number;
  /** Client processes, each with `parallel` connect loops. */
  clients: number;
  parallel: number;
  /** Name prefix of the netns/cgroup/bpffs (the helper's name goes in it). */
  prefix: string;
  log: (line: string) => void;
}

export const SOAK_DEFAULTS: SoakOptions = {
  seconds: 180, services: 10_000, endpointsPerService: 10, rate: 1000, sampled: 16, sampledShare: 0.1,
  clients: 2, parallel: 4, prefix: 'sluice-soak', log: (l) => process.stdout.write(`${l}\n`),
};

const NODE = 'soak-node';
const NAMESPACE = 'default';
const PORT = 80;
const TARGET_PORT = 8080;
const POLL_MS = 5;
/** Real listeners the sampled Services draw their endpoints from. */
const POOL = (n: number) => Array.from({ length: n }, (_, i) => `198.18.200.${i + 1}`);
/** The other Services' endpoints: never connected to, distinct, from 198.18.0.0/15 below the pool. */
const fakeEndpoint = (n: number) => `198.${18 + ((n >> 16) & 1)}.${(n >> 8) & 255}.${n & 255}`;
const FAKE_SPACE = 198 * 256; // 198.18.0.0 .. 198.18.197.255: clear of the pool

export interface SoakResult {
  options: Omit<SoakOptions, 'log'>;
  preloadProgrammedMs: number;
  updatesAsked: number;
  updatesApplied: number;
  churnSeconds: number;
  /** The agent's kubeproxy_sync_proxy_rules_endpoint_changes_total over the churn. */
  agentEndpointChanges: number;
  /** Time from the end of the churn until the sampled Services' maps equal the API. */
  convergeMs: number;
  /** p99 of kubeproxy_network_programming_duration_seconds: the bucket bound, ms. */
  programmingP99Ms: number;
  programmingSamples: number;
  /** API write -> map poll saw the removal, over the sampled Services' removals (ms). */
  removalSeenP50Ms: number;
  removalSeenP99Ms: number;
  removalsSeen: number;
  connections: number;
  failedConnections: number;
  failedReasons: Record<string, number>;
  /** Connections that reached a backend the poll had seen removed more than N ms before (and still removed when connect() returned). */
  staleAfterN: number;
  staleAfterZero: number;
  /** Connections to a backend the poll saw gone, but which the API had added back meanwhile (not decidable from the poll). */
  staleUndecided: number;
  /** Longest gap between two polls of a sampled Service (the resolution of the figures above). */
  pollMaxGapMs: number;
  staleExamples: string[];
  rss: Array<{ s: number; mib: number }>;
  rssSlopeMibPerMin: number;
  rssStartMib: number;
  /** At the end of the churn, and once every Service was deleted. */
  rssEndMib: number;
  rssAfterDeleteMib: number;
  /** V8 heap in use (nodejs_heap_size_used_bytes): whether RSS growth is live JS objects or memory V8 keeps. */
  heapMib: { start: number; end: number; afterDelete: number };
  /** Most updates written to the API but not yet counted by the agent's watch (sampled every 5 s). */
  maxBacklog: number;
  /** Every 5 s of the churn: RSS, V8 heap in use and external (Buffer) memory of the agent. */
  memory: Array<{ s: number; rssMib: number; heapMib: number; heapTotalMib: number; externalMib: number }>;
  cpuMsPerUpdate: number;
  agentCpuMs: number;
  baseline: Record<string, number>;
  afterDelete: Record<string, number>;
  leaked: number;
  leakDetail: string[];
}

interface Conn { t0: number; t1: number; svc: number; backend?: string; error?: string }

const monoMs = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function serviceName(i: number): string {
  return `soak-${i}`;
}

function sliceObject(i: number, addresses: string[]): Record<string, unknown> {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: {
      name: `${serviceName(i)}-1`, namespace: NAMESPACE,
      labels: { 'kubernetes.io/service-name': serviceName(i) },
      // What the endpoint controller sets; the agent's programming-latency histogram starts here.
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': new Date().toISOString() },
    },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: TARGET_PORT, protocol: 'TCP' }],
    endpoints: addresses.map((a) => ({ addresses: [a], conditions: { ready: true }, nodeName: NODE })),
  };
}

/** Entry count of every map pinned in the directory (links/ and the like skipped). */
function pinnedMapCounts(bpffs: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const name of fs.readdirSync(bpffs).sort()) {
    const pin = path.join(bpffs, name);
    if (fs.statSync(pin).isDirectory()) continue;
    let map: BpfMap;
    try {
      map = BpfMap.fromPinned(pin);
    } catch {
      continue; // a pinned program or link
    }
    try {
      const type = map.info().type;
      // Arrays always hold max_entries keys; a ring buffer has none. Only hash-like maps can leak.
      if ([2, 6, 13, 27].includes(type)) continue; // ARRAY, PERCPU_ARRAY, ARRAY_OF_MAPS, RINGBUF
      let n = 0;
      for (const _ of map.keys()) n++;
      out[name] = n;
    } catch {
      // socket/cgroup storage maps have no key iteration: their entries live and die with their sockets
    } finally {
      map.close();
    }
  }
  return out;
}

/** The agent's /metrics text. */
async function scrape(agent: AgentProcess): Promise<string> {
  const address = agent.find(/^serving \/healthz/)?.['metrics'] as string | undefined;
  if (!address) throw new Error('agent: no metrics address logged');
  const res = await fetch(`http://${address}/metrics`, { signal: AbortSignal.timeout(10000) });
  return res.text();
}

function metricValue(text: string, name: string, labels = ''): number {
  const re = new RegExp(`^${name}${labels ? `\\{${labels.replace(/[{}]/g, '')}\\}` : '(?:\\{[^}]*\\})?'}\\s+(\\S+)$`, 'm');
  return Number(re.exec(text)?.[1] ?? NaN);
}

/** A Prometheus histogram's cumulative buckets: [upper bound (s), count], sorted. */
export function histogramBuckets(text: string, name: string): Array<[number, number]> {
  const buckets: Array<[number, number]> = [];
  for (const m of text.matchAll(new RegExp(`^${name}_bucket\\{[^}]*le="([^"]+)"[^}]*\\}\\s+(\\S+)$`, 'gm'))) {
    buckets.push([m[1] === '+Inf' ? Infinity : Number(m[1]), Number(m[2])]);
  }
  return buckets.sort((a, b) => a[0] - b[0]);
}

/**
 * p99 of the samples a histogram gained between two scrapes, as the upper
 * bound of the bucket that holds it (ms), and their count.
 */
export function histogramP99(after: Array<[number, number]>, before: Array<[number, number]> = []): { p99Ms: number; count: number } {
  const buckets = after.map(([le, c]): [number, number] => [le, c - (before.find(([b]) => b === le)?.[1] ?? 0)]);
  const count = buckets.at(-1)?.[1] ?? 0;
  const bound = buckets.find(([, c]) => c >= count * 0.99)?.[0] ?? NaN;
  return { p99Ms: bound * 1000, count };
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

/** Least-squares slope of y over x. */
export function slope(points: Array<[number, number]>): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  const num = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0);
  const den = points.reduce((s, [x]) => s + (x - mx) ** 2, 0);
  return den === 0 ? NaN : num / den;
}

/**
 * What the map poll saw of one sampled Service: per backend address, the
 * intervals in which it was certainly absent (first and last poll that did
 * not find it), and the time of each API write that removed or added it.
 */
class ServiceTimeline {
  present = new Set<string>();
  absent = new Map<string, Array<{ first: number; last: number }>>();
  pendingRemovals = new Map<string, number>(); // address -> API write time
  /** API writes that added each address back (monotonic ms): a presence the poll may have missed between two polls. */
  apiAdds = new Map<string, number[]>();

  /** The poll at `t` found `backends`; the one before (tPrev) still found the previous set. */
  change(t: number, tPrev: number, backends: Set<string>, removalSeen: (ms: number) => void): void {
    for (const a of this.present) {
      if (backends.has(a)) continue;
      const list = this.absent.get(a) ?? [];
      list.push({ first: t, last: Infinity });
      this.absent.set(a, list);
      const wrote = this.pendingRemovals.get(a);
      if (wrote !== undefined && wrote <= t) {
        removalSeen(t - wrote);
        this.pendingRemovals.delete(a);
      }
    }
    for (const a of backends) {
      const open = this.absent.get(a)?.at(-1);
      if (open && open.last === Infinity) open.last = tPrev;
    }
    this.present = backends;
  }

  /** The last poll: absences still open end there. */
  finish(t: number): void {
    for (const list of this.absent.values()) {
      const open = list.at(-1)!;
      if (open.last === Infinity) open.last = t;
    }
  }

  /**
   * Was `a` absent in every poll from before t0 - n until after t1?
   * `readded`: the API added it back within that absence (from up to 60 s
   * before it was seen gone until t1), so the agent may have programmed it
   * for a moment between two polls: the connection is not proof of a stale
   * backend and is counted apart.
   */
  staleAt(a: string, t0: number, t1: number, n: number): { first: number; readded: boolean } | undefined {
    const iv = this.absent.get(a)?.find((x) => x.first + n <= t0 && t1 <= x.last);
    if (!iv) return undefined;
    const readded = (this.apiAdds.get(a) ?? []).some((t) => t > iv.first - 60000 && t <= t1);
    return { first: iv.first, readded };
  }
}

export async function runSoak(o: SoakOptions): Promise<SoakResult> {
  const log = o.log;
  const pool = POOL(Math.max(o.endpointsPerService * 2, 20));
  const sb = Sandbox.create(o.prefix);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), `${o.prefix}-`));
  let api: ApiServerHandle | undefined;
  let agent: AgentProcess | undefined;
  let maps: SockLbMaps | undefined;
  const clients: Array<ReturnType<Sandbox['spawnInCgroup']>> = [];
  const timers: NodeJS.Timeout[] = [];
  try {
    await sb.startBackends(pool, [TARGET_PORT]);
    api = await startApiServer({ port: 0, bookmarkIntervalMs: 0 });
    api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: NODE }, status: { addresses: [{ type: 'InternalIP', address: '198.18.255.1' }] } });
    const kubeconfig = path.join(tmp, 'kubeconfig');
    await api.writeKubeconfig(kubeconfig);
    agent = new AgentProcess(['--kubeconfig', kubeconfig, '--node-name', NODE, '--cgroup-path', sb.cgroup, '--bpffs', sb.bpffs,
      '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', '--stale-socket-netns=', '--log-level', 'info'], { caps: AGENT_CAPS });
    await agent.waitForLog(/informers synced/, 60000);
    await agent.waitForLog(/^serving \/healthz/, 10000);
    await waitFor('maps pinned', () => { try { maps = openSockLbMaps(sb.bpffs); return true; } catch { return false; } }, 20000);
    await sleep(500);
    const baseline = pinnedMapCounts(sb.bpffs);
    const baseMetrics = await scrape(agent);
    baseline['ids_in_use{backend}'] = metricValue(baseMetrics, 'sluice_ids_in_use', 'kind="backend"');
    baseline['ids_in_use{rev_nat}'] = metricValue(baseMetrics, 'sluice_ids_in_use', 'kind="rev_nat"');

    // ---- preload: S Services x E endpoints; the sampled ones on the pool ----
    let rng = 0x5eed;
    const random = (n: number) => ((rng = (Math.imul(rng, 1103515245) + 12345) & 0x7fffffff) % n);
    const endpoints: string[][] = [];
    const vips: string[] = [];
    let fakeNext = 0;
    const t0 = Date.now();
    for (let i = 0; i < o.services; i++) {
      const svc = api.store.create('services', {
        apiVersion: 'v1', kind: 'Service', metadata: { name: serviceName(i), namespace: NAMESPACE },
        spec: { ports: [{ name: 'http', port: PORT, targetPort: TARGET_PORT, protocol: 'TCP' }] },
      }) as { spec: { clusterIP: string } };
      vips.push(svc.spec.clusterIP);
      const eps = i < o.sampled
        ? pool.slice((i * 3) % pool.length).concat(pool).slice(0, o.endpointsPerService)
        : Array.from({ length: o.endpointsPerService }, () => fakeEndpoint(fakeNext++ % FAKE_SPACE));
      endpoints.push(eps);
      api.store.create('endpointslices', sliceObject(i, eps));
    }
    const master = (i: number) => ({ address: ip4ToNumber(vips[i]!), port: PORT, proto: LB_PROTO_TCP, scope: LB_SCOPE_EXTERNAL });
    await waitFor('every Service programmed', () => {
      for (let i = o.services - 1; i >= 0; i -= Math.max(1, Math.floor(o.services / 200))) if (maps!.services.get(master(i))?.count !== o.endpointsPerService) return false;
      return maps!.services.get(master(0))?.count === o.endpointsPerService;
    }, 180000, 100);
    const preloadProgrammedMs = Date.now() - t0;
    log(`soak: ${o.services} Services x ${o.endpointsPerService} endpoints programmed ${(preloadProgrammedMs / 1000).toFixed(1)} s after the first write`);

    // ---- map poll of the sampled Services ----
    const timelines = Array.from({ length: o.sampled }, () => new ServiceTimeline());
    const removalLatencies: number[] = [];
    const stopPoll = new SharedArrayBuffer(4);
    let pollDone: { t: number; polls: number; maxGapMs: number } | undefined;
    const poller = new Worker(path.join(__dirname, 'soakPoller.js'), {
      workerData: { bpffs: sb.bpffs, frontends: vips.slice(0, o.sampled).map((v) => ({ address: ip4ToNumber(v), port: PORT })), pollMs: POLL_MS, stop: stopPoll } satisfies PollerInput,
    });
    const pollerExit = new Promise<void>((resolve, reject) => {
      poller.on('message', (m: PollerMessage) => {
        if (m.kind === 'change') timelines[m.svc]!.change(m.t, m.tPrev, new Set(m.backends), (ms) => removalLatencies.push(ms));
        else pollDone = m;
      });
      poller.on('error', reject);
      poller.on('exit', () => resolve());
    });
    await waitFor('first poll', () => timelines.every((t) => t.present.size === o.endpointsPerService), 10000, 10);

    // ---- clients ----
    const conns: Conn[] = [];
    const clientMs = o.seconds * 1000 + 1000;
    const clientDone: Array<Promise<void>> = [];
    for (let c = 0; c < o.clients; c++) {
      const child = sb.spawnInCgroup(['node', labScript('lbClient'), 'soak', String(PORT), String(clientMs), vips.slice(0, o.sampled).join(','), String(o.parallel)]);
      clients.push(child);
      let buf = '';
      child.stdout!.setEncoding('utf8').on('data', (d: string) => {
        buf += d;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const [a, b, svc, what] = buf.slice(0, i).split(' ');
          buf = buf.slice(i + 1);
          conns.push({ t0: Number(a), t1: Number(b), svc: Number(svc), ...(what?.startsWith('!') ? { error: what.slice(1) } : { backend: what }) });
        }
      });
      clientDone.push(new Promise((resolve) => child.on('exit', () => resolve())));
    }

    // ---- churn: a bounded generator at o.rate updates/s ----
    const rss: Array<{ s: number; mib: number }> = [];
    const churnStart = Date.now();
    const cpuStart = agent.cpuMs();
    const startMetrics = await scrape(agent);
    const changesStart = metricValue(startMetrics, 'kubeproxy_sync_proxy_rules_endpoint_changes_total');
    const HEAP = 'nodejs_heap_size_used_bytes';
    const heapStartMib = metricValue(startMetrics, HEAP) / 2 ** 20;
    const PROGRAMMING = 'kubeproxy_network_programming_duration_seconds';
    const programmingStart = histogramBuckets(startMetrics, PROGRAMMING);
    let applied = 0;
    const TICK_MS = 10;
    const sampler = setInterval(() => { if (!agent!.exited) rss.push({ s: (Date.now() - churnStart) / 1000, mib: agent!.memory().vmRss / 2 ** 20 }); }, 1000);
    // Where a backlog sits: updates written to the API but not yet counted by the agent's watch.
    let maxBacklog = 0;
    const memory: SoakResult['memory'] = [];
    const backlogSampler = setInterval(() => {
      scrape(agent!).then((m) => {
        maxBacklog = Math.max(maxBacklog, applied - (metricValue(m, 'kubeproxy_sync_proxy_rules_endpoint_changes_total') - changesStart));
        memory.push({ s: (Date.now() - churnStart) / 1000, rssMib: rss.at(-1)?.mib ?? NaN, heapMib: metricValue(m, HEAP) / 2 ** 20, heapTotalMib: metricValue(m, 'nodejs_heap_size_total_bytes') / 2 ** 20, externalMib: metricValue(m, 'nodejs_external_memory_bytes') / 2 ** 20 });
      }, () => undefined);
    }, 5000);
    timers.push(backlogSampler);
    timers.push(sampler);
    await new Promise<void>((resolve) => {
      const churn = setInterval(() => {
        const elapsed = Date.now() - churnStart;
        if (elapsed >= o.seconds * 1000) {
          clearInterval(churn);
          resolve();
          return;
        }
        // Catch up at most 100 ms' worth per tick: a generator far behind
        // schedule skips ahead instead of bursting (the table prints the rate achieved).
        const due = Math.min(Math.floor((elapsed / 1000) * o.rate) - applied, Math.ceil(o.rate / 10));
        for (let k = 0; k < due; k++) {
          const sampledChange = o.sampled > 0 && random(1000) < o.sampledShare * 1000;
          const i = sampledChange ? random(o.sampled) : o.sampled + random(o.services - o.sampled);
          const eps = endpoints[i]!;
          const slot = random(eps.length);
          const removed = eps[slot]!;
          let added: string;
          if (i < o.sampled) {
            const free = pool.filter((a) => !eps.includes(a));
            added = free[random(free.length)]!;
          } else {
            added = fakeEndpoint(fakeNext++ % FAKE_SPACE);
          }
          eps[slot] = added;
          api!.store.update('endpointslices', sliceObject(i, eps));
          if (i < o.sampled) {
            const tl = timelines[i]!;
            const key = `${removed}:${TARGET_PORT}`;
            if (!tl.pendingRemovals.has(key)) tl.pendingRemovals.set(key, monoMs());
            tl.pendingRemovals.delete(`${added}:${TARGET_PORT}`);
            const adds = tl.apiAdds.get(`${added}:${TARGET_PORT}`) ?? [];
            adds.push(monoMs());
            tl.apiAdds.set(`${added}:${TARGET_PORT}`, adds);
          }
          applied++;
        }
      }, TICK_MS);
      timers.push(churn);
    });
    const churnSeconds = (Date.now() - churnStart) / 1000;
    clearInterval(backlogSampler);
    const rssChurnEnd = rss.at(-1)?.mib ?? NaN;
    const agentCpuMs = agent.cpuMs() - cpuStart;
    log(`soak: churn done: ${applied} updates in ${churnSeconds.toFixed(1)} s (${(applied / churnSeconds).toFixed(0)}/s asked ${o.rate}/s)`);

    // ---- convergence: the sampled Services' maps equal the API ----
    const convergeStart = Date.now();
    const want = (i: number) => endpoints[i]!.map((a) => `${a}:${TARGET_PORT}`).sort().join(',');
    await waitFor('sampled Services converged', () => {
      for (let i = 0; i < o.sampled; i++) if ([...timelines[i]!.present].sort().join(',') !== want(i)) return false;
      return true;
    }, 120000, 20);
    const convergeMs = Date.now() - convergeStart;
    await Promise.all(clientDone);
    Atomics.store(new Int32Array(stopPoll), 0, 1);
    await pollerExit;
    if (!pollDone) throw new Error('soak: the map poller ended without its summary');
    for (const t of timelines) t.finish(pollDone.t);
    const metrics = await scrape(agent);
    const agentEndpointChanges = metricValue(metrics, 'kubeproxy_sync_proxy_rules_endpoint_changes_total') - changesStart;
    const heapEndMib = metricValue(metrics, HEAP) / 2 ** 20;
    // Over the churn only: the preload's first sync is not a change's latency.
    const { p99Ms: programmingP99Ms, count: programmingSamples } = histogramP99(histogramBuckets(metrics, PROGRAMMING), programmingStart);

    // ---- stale and failed connections ----
    let staleAfterN = 0;
    let staleAfterZero = 0;
    let staleUndecided = 0;
    const staleExamples: string[] = [];
    const failedReasons: Record<string, number> = {};
    for (const c of conns) {
      if (c.error) {
        failedReasons[c.error] = (failedReasons[c.error] ?? 0) + 1;
        continue;
      }
      const tl = timelines[c.svc]!;
      const zero = tl.staleAt(c.backend!, c.t0, c.t1, 0);
      if (!zero) continue;
      if (zero.readded) {
        staleUndecided++;
        continue;
      }
      staleAfterZero++;
      const late = tl.staleAt(c.backend!, c.t0, c.t1, programmingP99Ms);
      if (late) staleAfterN++;
      if (staleExamples.length < 5) staleExamples.push(`${vips[c.svc]} -> ${c.backend}: connect() ${c.t0.toFixed(1)}-${c.t1.toFixed(1)} ms, gone from the map since the poll at ${zero.first.toFixed(1)} ms`);
    }
    const failedConnections = Object.values(failedReasons).reduce((a, b) => a + b, 0);

    // ---- RSS slope after warm-up (the first third of the churn) ----
    const warm = rss.filter((p) => p.s >= churnSeconds / 3 && p.s <= churnSeconds);
    const rssSlopeMibPerMin = slope(warm.map((p) => [p.s / 60, p.mib]));

    // ---- delete everything; the maps and allocators go back to the baseline ----
    for (let i = 0; i < o.services; i++) {
      api.store.delete('endpointslices', `${serviceName(i)}-1`, NAMESPACE);
      api.store.delete('services', serviceName(i), NAMESPACE);
    }
    await waitFor('every Service gone from the maps', () => maps!.services.get(master(0)) === undefined && maps!.services.get(master(o.services - 1)) === undefined, 120000, 100);
    let afterDelete: Record<string, number> = {};
    const leakDetail: string[] = [];
    // The agent's last pass may still be writing: settle until two reads agree with the baseline or 30 s pass.
    const settleEnd = Date.now() + 30000;
    for (;;) {
      afterDelete = pinnedMapCounts(sb.bpffs);
      const m = await scrape(agent);
      afterDelete['ids_in_use{backend}'] = metricValue(m, 'sluice_ids_in_use', 'kind="backend"');
      afterDelete['ids_in_use{rev_nat}'] = metricValue(m, 'sluice_ids_in_use', 'kind="rev_nat"');
      const diff = Object.keys({ ...baseline, ...afterDelete }).filter((k) => (afterDelete[k] ?? 0) !== (baseline[k] ?? 0));
      if (diff.length === 0 || Date.now() > settleEnd) {
        for (const k of diff) leakDetail.push(`${k}: baseline ${baseline[k] ?? 0}, after delete ${afterDelete[k] ?? 0}`);
        break;
      }
      await sleep(500);
    }
    clearInterval(sampler);
    const rssAfterDeleteMib = agent.memory().vmRss / 2 ** 20;
    const heapAfterDeleteMib = metricValue(await scrape(agent), HEAP) / 2 ** 20;
    const leaked = Object.keys({ ...baseline, ...afterDelete }).reduce((n, k) => n + Math.max(0, (afterDelete[k] ?? 0) - (baseline[k] ?? 0)), 0);

    const sortedRemoval = [...removalLatencies].sort((a, b) => a - b);
    const { log: _log, ...options } = o;
    return {
      options,
      preloadProgrammedMs,
      updatesAsked: Math.round(o.rate * o.seconds),
      updatesApplied: applied,
      churnSeconds,
      agentEndpointChanges,
      convergeMs,
      programmingP99Ms,
      programmingSamples,
      removalSeenP50Ms: percentile(sortedRemoval, 0.5),
      removalSeenP99Ms: percentile(sortedRemoval, 0.99),
      removalsSeen: sortedRemoval.length,
      connections: conns.length,
      failedConnections,
      failedReasons,
      staleAfterN,
      staleAfterZero,
      staleUndecided,
      pollMaxGapMs: pollDone.maxGapMs,
      staleExamples,
      rss,
      rssSlopeMibPerMin,
      rssStartMib: rss[0]?.mib ?? NaN,
      rssEndMib: rssChurnEnd,
      rssAfterDeleteMib,
      heapMib: { start: heapStartMib, end: heapEndMib, afterDelete: heapAfterDeleteMib },
      maxBacklog,
      memory,
      cpuMsPerUpdate: agentCpuMs / Math.max(1, applied),
      agentCpuMs,
      baseline,
      afterDelete,
      leaked,
      leakDetail,
    };
  } finally {
    for (const t of timers) clearInterval(t);
    for (const c of clients) c.kill('SIGKILL');
    maps?.close();
    await agent?.stop('SIGTERM');
    await api?.close();
    sb.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}
