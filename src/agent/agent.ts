// `sluice agent`: the pieces composed. Install (or adopt) the data path, open
// the pinned maps, watch the API, keep the maps in sync, serve health and
// metrics. Stopping leaves maps and programs serving (the kernel keeps
// forwarding from the pinned maps until a new agent adopts them).
import type * as http from 'node:http';
import pino, { type Logger } from 'pino';
import type { AgentConfig } from './config';
import { parseHostPort } from './config';
import { installSockLbAsync, bpfObjectPath } from '../datapath/sockLb';
import { mapCapacities, nodeServesIpv6 } from './mapSizing';
import { summarize } from '../datapath/migrate';
import { netnsCookieOf, ownNetnsCookie } from '../datapath/netnsCookie';
import { syncNodeAddresses, syncNodeAddresses6 } from '../datapath/sockConfig';
import { pinPodPrograms } from '../datapath/pod/attach';
import { PodFrontendSet } from '../datapath/pod/frontendSet';
import { openSockLbMaps, type SockLbMaps } from '../datapath/maps';
import { readCounters } from '../datapath/counters';
import { isIp6 } from '../datapath/addr';
import { connectToApi } from './kubeClient';
import { AgentMetrics, startMetricsServer } from './metrics';
import { ProxyHealth, startHealthServer } from './health';
import { CountedClusterState } from './changeMetrics';
import { localInterfaceAddresses } from './nodeAddresses';
import { Syncer, type SyncReport } from './syncer';
import { ClusterWatch, type ListTiming } from './watch';
import type { KubeConnection } from './kubeClient';
import { startNorthSouth } from './northSouth';
import { startStaleSockets } from './staleSockets';

export interface AgentHandle {
  syncer: Syncer;
  metrics: AgentMetrics;
  health: ProxyHealth;
  healthAddress?: string;
  metricsAddress?: string;
  synced: Promise<void>;
  stop(): Promise<void>;
}

export function makeLogger(level: string): Logger {
  return pino({ level, base: { component: 'sluice-agent' } });
}

export async function startAgent(config: AgentConfig, log: Logger = makeLogger(config.logLevel)): Promise<AgentHandle> {
  const hostNetnsCookie = config.hostNetns ? netnsCookieOf(config.hostNetns) : ownNetnsCookie();
  const socketLb = { mode: config.socketLB, hostNetnsCookie };
  // The IPv6 tables' capacity follows whether this node serves IPv6 (mapSizing.ts).
  const api = await connectToApi(config.kubeconfig, config.k8sApiServer);
  const metrics = new AgentMetrics();
  const health = new ProxyHealth(2 * config.syncPeriodSeconds * 1000);
  let syncer: Syncer | undefined;
  const state = new CountedClusterState(() => {
    health.syncNode(state.node); // nodeEligible follows every Node event (kube-proxy's SyncNode)
    syncer?.trigger(); // a no-op until the syncer exists and has started
  }, metrics);
  // An object of the wrong shape (shape.ts): one line and one count per distinct rejection.
  state.onRejected = (r) => {
    metrics.errors.inc({ reason: r.reason });
    log.warn({ object: r.object, reason: r.reason }, r.message);
  };
  // The lists start now, while the BPF objects load below (the API server
  // prepares each next page meanwhile, and pages that arrived are decoded at
  // each yield). Only the state fills: nothing is programmed before the
  // syncer exists (maps loaded and adopted) and all three lists are complete.
  const watch = new ClusterWatch(api, config.nodeName, state, metrics, log);
  const listed = new Promise<ListTiming>((resolve) => watch.start(resolve));
  try {
    return await startDataPath(config, log, { api, metrics, health, state, watch, listed, socketLb, setSyncer: (s) => (syncer = s) });
  } catch (err) {
    await watch.stop();
    throw err;
  }
}

/** The event loop reads what arrived (list pages) between two blocking BPF loads. */
const yieldToIo = () => new Promise<void>((resolve) => setImmediate(resolve));

interface StartContext {
  api: KubeConnection;
  metrics: AgentMetrics;
  health: ProxyHealth;
  state: CountedClusterState;
  watch: ClusterWatch;
  listed: Promise<ListTiming>;
  socketLb: { mode: AgentConfig['socketLB']; hostNetnsCookie: bigint };
  setSyncer(s: Syncer): void;
}

async function startDataPath(config: AgentConfig, log: Logger, c: StartContext): Promise<AgentHandle> {
  const { api, metrics, health, state, watch, listed, socketLb } = c;
  const v6 = await nodeServesIpv6(config.ipv6Maps, api, config.nodeName);
  const maxEntries = mapCapacities(config.maxEntries, config.bpffs, v6.ipv6);
  log.info({ ipv6Tables: v6.ipv6 ? 'full' : 'small', why: v6.why }, 'IPv6 table capacity');
  const install = await installSockLbAsync({ bpffs: config.bpffs, cgroupPath: config.cgroupPath, maxEntries, socketLb });
  const { migrated, created, ...links } = install;
  if (migrated.length > 0) log.info({ migrated: summarize(migrated) }, 'pinned maps migrated to their new capacity or layout; programs switched in place');
  log.info({ bpffs: config.bpffs, cgroup: config.cgroupPath, socketLB: config.socketLB, hostNetns: config.hostNetns ?? 'own', ...links }, 'socket load balancer attached');
  await yieldToIo();
  const maps = openSockLbMaps(config.bpffs);
  maps.maglevTableSize = config.maglevTableSize; // h-maglev
  const northSouth = await startNorthSouth(config, () => health.healthy(), metrics, log);
  await yieldToIo();
  // After the TC object: maps both share (conntrack) are migrated once, with the TC links.
  if (config.podVethPrograms) {
    preparePodPrograms(config.bpffs, config.maxEntries, log);
    await yieldToIo();
  }
  const podFrontends = config.podVethPrograms ? openPodFrontends(config.bpffs, log) : undefined;
  const staleSockets = startStaleSockets(config, metrics, log);
  await yieldToIo();
  const writeNodeAddresses = nodeAddressWriter(maps, metrics, log);
  let podFrontendsFailedLogged = false;
  const syncer: Syncer = new Syncer(state, maps, {
    // Maps the install just created are all zero: adoption need not read them (ARRAY tables: ~250 ns a slot in the kernel).
    emptyMaps: new Set(created ?? []),
    ...(podFrontends ? { podFrontends } : {}),
    nodeName: config.nodeName,
    localAddresses: localInterfaceAddresses,
    onBackendsDeleted: (ids) => northSouth?.backendsDeleted(ids),
    onBackendsGone: (backends, since) => staleSockets?.backendsGone(backends, since),
    onHealthChecks: (checks) => northSouth?.healthChecks(checks),
    onNodeAddresses: (addresses) => {
      podFrontends?.setNodeAddresses(addresses);
      writeNodeAddresses(addresses);
    },
    // Handed over by each pass before it writes the frontends (a NodePort flow
    // to a backend behind a node-to-node device needs that device's SNAT address first).
    ...(northSouth ? {
      onExternalBackends: ({ local, remote }: { local?: string[]; remote?: string[] }) => {
        if (local) northSouth.localBackends(local);
        if (remote) northSouth.remoteBackends(remote);
      },
    } : {}),
    onSyncDone: (report, programmed) => {
      recordStatus(maps, report, programmed);
      if (podFrontends && report.kind === 'full') {
        podFrontends.markMaintained(); // every frontend went through add() by now
        if (podFrontends.failed && !podFrontendsFailedLogged) {
          podFrontendsFailedLogged = true;
          metrics.errors.inc({ reason: 'pod_frontends_failed' });
          log.error({ error: podFrontends.failed }, `pod-veth frontend-address bitmap not maintained (pods keep the full lookups): ${podFrontends.failed}`);
        }
      }
      if (northSouth) {
        northSouth.frontends(syncer.northSouthFrontends()); // an index, not a walk of every frontend (issue 12 item 5)
      }
    },
    translate: {
      nodePortAddresses: config.nodePortAddresses,
      localhostNodePorts: config.localhostNodePorts,
      ...(config.nodeIP ? { nodeIP: config.nodeIP } : {}),
      maxEndpointsPerService: config.maxEndpointsPerService,
      // Both families when the pinned maps have the IPv6 tables (issue 14):
      // every path (socket LB, TC and XDP north-south, pod veths) serves them.
      ipFamilies: maps.v6 ? ['IPv4', 'IPv6'] : ['IPv4'],
      defaultLbAlgorithm: config.lbAlgorithm,
    },
    minSyncPeriodMs: config.minSyncPeriodMs,
    syncPeriodMs: config.syncPeriodSeconds * 1000,
    driftRepairPeriodMs: config.driftRepairPeriodSeconds * 1000,
  }, metrics, health, log);
  c.setSyncer(syncer);
  // Adopted frontends are in the maps already: their addresses count before the first sync.
  podFrontends?.add(syncer.programmed().programmedFrontends().map((f) => f.id));
  const adopted = syncer.programmed().frontendCount();
  log.info({ frontends: adopted }, adopted ? 'adopted the frontends already in the pinned maps' : 'maps are empty');

  const servers: http.Server[] = [];
  const listen = async (what: string, address: string, start: (h: string, p: number) => Promise<http.Server>) => {
    if (!address) return undefined;
    const { host, port } = parseHostPort(address, what);
    const server = await start(host, port);
    servers.push(server);
    const a = server.address();
    return typeof a === 'object' && a ? `${a.address}:${a.port}` : address;
  };
  let lastCounters = new Map<number, bigint>();
  const scrape = () => {
    lastCounters = exportCounters(maps, metrics, lastCounters);
    exportFill(maps, syncer!, metrics);
  };
  const healthAddress = await listen('--healthz-bind-address', config.healthzBindAddress, (h, p) => startHealthServer(health, h, p, {
    healthz: (code) => metrics.healthzTotal.inc({ code: String(code) }),
    livez: (code) => metrics.livezTotal.inc({ code: String(code) }),
  }));
  const metricsAddress = await listen('--metrics-bind-address', config.metricsBindAddress, (h, p) => startMetricsServer(metrics, h, p, scrape));

  log.info({ healthz: healthAddress, metrics: metricsAddress }, 'serving /healthz, /livez and /metrics');
  // Lists that ended while the BPF objects loaded start the first sync now.
  const synced = listed.then((timing) => {
    log.info({ ...timing }, 'informers synced; programming the maps');
    syncer.start(timing);
  });

  return {
    syncer, metrics, health, healthAddress, metricsAddress, synced,
    async stop() {
      syncer.stop();
      await watch.stop();
      await northSouth?.stop();
      staleSockets?.stop();
      await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
      maps.close();
      log.info('agent stopped; the data path keeps serving from the pinned maps');
    },
  };
}

/** Keeps the node-address map equal to the node's addresses; writes only on change. */
function nodeAddressWriter(maps: SockLbMaps, metrics: AgentMetrics, log: Logger): (addresses: string[]) => void {
  let last = '';
  return (addresses) => {
    const text = [...addresses].sort().join(',');
    if (text === last) return;
    try {
      const changed = syncNodeAddresses(maps.nodeIps, addresses);
      if (maps.v6) {
        const changed6 = syncNodeAddresses6(maps.v6.nodeIps, addresses);
        changed.added.push(...changed6.added);
        changed.removed.push(...changed6.removed);
      }
      last = text;
      log.info({ ...changed }, 'node addresses for the socket hooks');
    } catch (err) {
      metrics.errors.inc({ reason: 'node_addresses_failed' });
      log.error({ err, addresses }, `${maps.nodeIps.name}: node addresses not written; ExternalIP and bind rules use the old set`);
    }
  };
}

/**
 * Pin the pod-veth programs so the CNI plugin can attach them to pods that
 * bypass the socket LB, and swap them into existing pod links on upgrade.
 * Not fatal: the socket LB serves every pod that does not need them.
 */
function preparePodPrograms(bpffs: string, maxEntries: Record<string, number>, log: Logger): void {
  try {
    const { migrated, ...pinned } = pinPodPrograms(bpfObjectPath('pod_lb.bpf.o'), bpffs, maxEntries);
    if (migrated.length > 0) log.info({ migrated: summarize(migrated) }, 'pod-veth maps migrated to their new capacity or layout');
    log.info({ ...pinned }, 'pod-veth programs pinned for the CNI plugin');
  } catch (err) {
    log.warn({ error: (err as Error).message }, 'pod-veth programs not available: pods chained with the Sluice CNI plugin in per-packet mode get no Service translation');
  }
}

/** The pod path's frontend-address bitmap the pod object pinned (absent: nothing to maintain). */
function openPodFrontends(bpffs: string, log: Logger): PodFrontendSet | undefined {
  try {
    return PodFrontendSet.open(bpffs);
  } catch (err) {
    log.warn({ error: (err as Error).message }, 'pod-veth frontend-address bitmap not opened: pods keep the full lookups');
    return undefined;
  }
}

let syncCount = 0n;
let lastFullSync = 0n;

/** The pinned status entry `sluice status` shows when no agent runs. */
function recordStatus(maps: SockLbMaps, report: SyncReport, programmed: { services: number; frontends: number; backends: number }): void {
  if (!maps.agent) return;
  syncCount++;
  const now = BigInt(Date.now());
  if (report.kind === 'full' && report.failures === 0) lastFullSync = now;
  try {
    maps.agent.set(0, {
      last_sync_unix_ms: now,
      last_full_sync_unix_ms: lastFullSync,
      syncs: syncCount,
      agent_pid: process.pid,
      services: programmed.services,
      frontends: programmed.frontends,
      backends: programmed.backends,
      last_sync_failures: report.failures,
    });
  } catch {
    // Status only: never let it fail a sync.
  }
}

function exportCounters(maps: SockLbMaps, metrics: AgentMetrics, last: Map<number, bigint>): Map<number, bigint> {
  const next = new Map<number, bigint>();
  for (const { index, labels, value } of readCounters(maps.counters)) {
    const delta = value - (last.get(index) ?? 0n);
    if (delta > 0n) metrics.datapath.inc({ ...labels }, Number(delta));
    next.set(index, value);
  }
  return next;
}

function exportFill(maps: SockLbMaps, syncer: Syncer, metrics: AgentMetrics): void {
  const p = syncer.programmed();
  const frontends = p.programmedFrontends();
  // IPv4 frontends are one master each; their backend ids live in the range
  // array (used: named by masters or waiting for their grace period). A full
  // range array fails the frontend with RangeArrayFull: sluice_errors_total{reason="map_full"}.
  const masters = frontends.filter((f) => !isIp6(f.address)).length;
  const revNats = new Set(frontends.map((f) => f.revNatId)).size;
  const ranges = p.rangeStats();
  const rows: Array<[{ name: string; map: { maxEntries: number } }, number]> = [[maps.services, masters], [maps.ranges, ranges.used + ranges.quarantined], [maps.backends, p.backendCount()], [maps.revNat, revNats]];
  // IPv6 frontends: the same layout in their own master hash and range array.
  if (maps.v6) {
    const ranges6 = p.rangeStats(true);
    rows.push([maps.v6.services, frontends.length - masters], [maps.v6.ranges, ranges6.used + ranges6.quarantined]);
  }
  for (const [map, entries] of rows) {
    metrics.mapEntries.set({ map: map.name }, entries);
    metrics.mapMaxEntries.set({ map: map.name }, map.map.maxEntries);
  }
  const ids = p.idsInUse();
  metrics.idsInUse.set({ kind: 'backend' }, ids.backend);
  metrics.idsInUse.set({ kind: 'rev_nat' }, ids.revNat);
}
