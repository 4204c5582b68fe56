// Read-only views of the pinned maps: what `sluice services|backends|status`
// print. They need no agent: everything comes from bpffs.
import * as abi from '../abi/generated';
import { openSockLbMaps, type SockLbMaps } from '../datapath/maps';
import { counterName, readCounters } from '../datapath/counters';
import { LbProgrammer } from '../datapath/programmer';
import { bytesToIp6, formatEndpoint, isIp6, numberToIp4 } from '../datapath/addr';
import { IdArrayMap, type TypedMap } from '../datapath/typedMap';
import { sockLbStatus, type AttachmentStatus } from '../datapath/sockLb';
import { staleSocketStatus, type StaleSocketStatus } from '../datapath/sockTerm';
import { readServiceNames, serviceNameOf, type ServiceName } from '../datapath/serviceNames';
import { xdpStatus, type XdpDeviceStatus } from '../datapath/xdp/status';
import { pinnedNodePortMode, type NodePortMode } from '../datapath/tc/config';

export function flagNames(flags: number): string[] {
  const names: Array<[number, string]> = [
    [abi.LB_SVC_FLAG_CLUSTER_IP, 'ClusterIP'],
    [abi.LB_SVC_FLAG_NODEPORT, 'NodePort'],
    [abi.LB_SVC_FLAG_EXTERNAL_IP, 'ExternalIP'],
    [abi.LB_SVC_FLAG_LOADBALANCER, 'LoadBalancer'],
    [abi.LB_SVC_FLAG_EXT_LOCAL, 'externalTrafficPolicy=Local'],
    [abi.LB_SVC_FLAG_INT_LOCAL, 'internalTrafficPolicy=Local'],
    [abi.LB_SVC_FLAG_TWO_SCOPES, 'two-scopes'],
    [abi.LB_SVC_FLAG_AFFINITY, 'sessionAffinity=ClientIP'],
    [abi.LB_SVC_FLAG_SOURCE_RANGE, 'sourceRanges'],
    [abi.LB_SVC_FLAG_DROP_NO_BACKEND, 'drop-no-backend'],
  ];
  return names.filter(([bit]) => flags & bit).map(([, name]) => name);
}

export function backendFlagNames(flags: number): string[] {
  const out: string[] = [];
  if (flags & abi.LB_BACKEND_FLAG_LOCAL) out.push('local');
  if (flags & abi.LB_BACKEND_FLAG_TERMINATING) out.push('terminating');
  return out;
}

/** Master entry algorithm (LB_ALG_*) -> the name the annotation uses. */
export const ALGORITHMS: Record<number, string> = {
  [abi.LB_ALG_RANDOM]: 'random',
  [abi.LB_ALG_ROUND_ROBIN]: 'round-robin',
  [abi.LB_ALG_SOURCE_HASH]: 'source-hash',
  [abi.LB_ALG_LEAST_CONN]: 'least-connection',
  [abi.LB_ALG_MAGLEV]: 'maglev', // h-maglev
};

export interface ServiceView {
  /** "10.96.0.10:80/tcp" or "[fd00::10]:80/tcp". */
  frontend: string;
  family: 'IPv4' | 'IPv6';
  address: string;
  port: number;
  protocol: string;
  scope: string;
  flags: string[];
  revNatId: number;
  affinityTimeoutSeconds: number;
  /** Backend selection (LB_ALG_* by name). */
  algorithm: string;
  /** The Service and port that own the frontend (absent: programmed by `sluice service upsert`, or by an older agent). */
  service?: ServiceName;
  backends: Array<{ id: number; address: string; port: number; flags: string[] }>;
  /** loadBalancerSourceRanges (flag sourceRanges) read back from the LPM map, sorted CIDRs. */
  sourceRanges?: string[];
}

export function servicesView(maps: SockLbMaps): ServiceView[] {
  const state = LbProgrammer.adopt(maps);
  const byId = new Map(state.programmedBackends().map((b) => [b.id, b]));
  const names = maps.serviceNames ? readServiceNames(maps.serviceNames) : new Map<string, ServiceName>();
  return state
    .programmedFrontends()
    .sort((a, b) => a.id.localeCompare(b.id, 'en'))
    .map((f) => ({
      frontend: formatEndpoint(f),
      family: isIp6(f.address) ? 'IPv6' : 'IPv4',
      address: f.address,
      port: f.port,
      protocol: f.proto,
      scope: f.scope,
      flags: flagNames(f.flags),
      revNatId: f.revNatId,
      affinityTimeoutSeconds: f.affinityTimeout,
      algorithm: ALGORITHMS[f.algorithm] ?? `algorithm ${f.algorithm}`,
      service: serviceNameOf(names, f.revNatId, f.proto),
      backends: f.backendIds.map((id) => {
        const b = byId.get(id) ?? backendWrittenSince(maps, id);
        return b
          ? { id, address: b.address, port: b.port, flags: backendFlagNames(b.flags) }
          : { id, address: '?', port: 0, flags: ['missing'] };
      }),
      ...(f.sourceRanges.length > 0 ? { sourceRanges: [...f.sourceRanges].sort() } : {}),
    }));
}

/**
 * A backend the master names but the snapshot lacks: adopt() reads the
 * backends before the masters and ranges, and the agent writes a new
 * backend before the master that names it, so a Service that gained
 * backends between the two reads names ids the snapshot never saw. Looked
 * up again by id: only a backend that is really gone shows as missing.
 */
function backendWrittenSince(maps: SockLbMaps, id: number): { address: string; port: number; flags: number } | undefined {
  const b4 = maps.backends.get(id);
  if (b4) return { address: numberToIp4(b4.address), port: b4.port, flags: b4.flags };
  const b6 = maps.v6?.backends.get(id);
  return b6 ? { address: bytesToIp6(b6.address), port: b6.port, flags: b6.flags } : undefined;
}

export interface MapFill {
  name: string;
  entries: number;
  maxEntries: number;
}

export interface AgentStatusView {
  lastSync?: string;
  lastSyncAgoSeconds?: number;
  lastFullSync?: string;
  syncs: number;
  agentPid: number;
  agentRunning: boolean;
  services: number;
  frontends: number;
  backends: number;
  lastSyncFailures: number;
}

export interface StatusView {
  bpffs: string;
  agent?: AgentStatusView;
  attachments: AttachmentStatus[];
  /** Whether sockets connected to deleted backends are destroyed (issue 13.1). */
  staleSockets: StaleSocketStatus;
  maps: MapFill[];
  counters: Record<string, string>;
  /** XDP in front of TC (issue 17): per device, its mode and counters; empty when never used. */
  xdp: XdpDeviceStatus[];
  /** --nodeport-mode the TC path runs (issue 17 item 2, docs/dsr.md); absent without TC maps. */
  nodePortMode?: NodePortMode;
}

export function statusView(bpffs: string, maps: SockLbMaps, cgroupRoot?: string): StatusView {
  const fill = (name: string, count: number, max: number): MapFill => ({ name, entries: count, maxEntries: max });
  const counters: Record<string, string> = {};
  for (const { labels, value } of readCounters(maps.counters)) counters[counterName(labels)] = value.toString();
  const a = maps.agent?.get(0);
  const iso = (ms: bigint) => (ms > 0n ? new Date(Number(ms)).toISOString() : undefined);
  const agent: AgentStatusView | undefined = a && a.syncs > 0n ? {
    lastSync: iso(a.last_sync_unix_ms),
    lastSyncAgoSeconds: Math.round((Date.now() - Number(a.last_sync_unix_ms)) / 1000),
    lastFullSync: iso(a.last_full_sync_unix_ms),
    syncs: Number(a.syncs),
    agentPid: a.agent_pid,
    agentRunning: processAlive(a.agent_pid),
    services: a.services,
    frontends: a.frontends,
    backends: a.backends,
    lastSyncFailures: a.last_sync_failures,
  } : undefined;
  return {
    bpffs,
    agent,
    attachments: sockLbStatus(bpffs, cgroupRoot),
    staleSockets: staleSocketStatus(bpffs),
    maps: [
      fill(maps.services.name, count(maps.services.map), maps.services.map.maxEntries),
      // The range array and the id arrays: entries in use, not indices.
      fill(maps.ranges.name, maps.services.readAll().reduce((n, [, v]) => n + v.count, 0), maps.ranges.map.maxEntries),
      fill(maps.backends.name, used(maps.backends), maps.backends.map.maxEntries),
      fill(maps.revNat.name, used(maps.revNat), maps.revNat.map.maxEntries),
      fill(maps.nodeIps.name, count(maps.nodeIps.map), maps.nodeIps.map.maxEntries),
      fill(maps.affinity.name, count(maps.affinity.map), maps.affinity.map.maxEntries),
      ...(maps.serviceNames ? [fill(maps.serviceNames.name, count(maps.serviceNames.map), maps.serviceNames.map.maxEntries)] : []),
      ...(maps.v6 ? [
        fill(maps.v6.services.name, count(maps.v6.services.map), maps.v6.services.map.maxEntries),
        fill(maps.v6.ranges.name, maps.v6.services.readAll().reduce((n, [, v]) => n + v.count, 0), maps.v6.ranges.map.maxEntries),
        fill(maps.v6.backends.name, used(maps.v6.backends), maps.v6.backends.map.maxEntries),
        fill(maps.v6.revNat.name, used(maps.v6.revNat), maps.v6.revNat.map.maxEntries),
        ...[maps.v6.nodeIps, maps.v6.affinity].map((m) => fill(m.name, count(m.map), m.map.maxEntries)),
      ] : []),
    ],
    counters,
    xdp: xdpStatus(bpffs),
    nodePortMode: pinnedNodePortMode(bpffs),
  };
}

export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function used(m: TypedMap<number, unknown>): number {
  return m instanceof IdArrayMap ? m.countUsed() : count(m.map);
}

function count(map: { keys(): Iterable<Buffer> }): number {
  let n = 0;
  for (const _ of map.keys()) n++;
  return n;
}

export function withMaps<T>(bpffs: string, fn: (maps: SockLbMaps) => T): T {
  const maps = openSockLbMaps(bpffs);
  try {
    return fn(maps);
  } finally {
    maps.close();
  }
}
