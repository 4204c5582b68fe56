// IPv6 map capacities from whether this node serves IPv6 (issue 12: agent
// map memory <= 100 MiB at 10 000 Services x 10 endpoints).
//
// The socket LB's IPv6 tables are declared in sluice_abi.h at the IPv4
// tables' capacities, and their cost does not follow use: a hash map's
// bucket array follows max_entries (sluice_svc6 8 MiB empty), an ARRAY is
// preallocated (sluice_rng6 4 MiB) and so is an LRU hash (sluice_affin6
// 13 MiB). Here those start small unless the node is dual-stack, where
// "dual-stack" is what Kubernetes says about the node: an IPv6 pod CIDR or
// an IPv6 address on its Node object. `ipv6Maps` in the config decides
// instead of the Node when set to small or full; `maxEntries` still wins
// for a map it names; a map already pinned keeps its capacity (a restart
// never shrinks a table that may hold entries).
//
// Small tables hold about 800 IPv6 service ports with 10 endpoints each (a
// frontend takes one sluice_svc6 master and one sluice_rng6 entry per
// endpoint, and the range array keeps replaced ranges for a grace period).
// Past that, the agent's writes fail with sluice_errors_total{reason=
// "map_full"}; set `ipv6Maps: full` (or maxEntries) and restart: the pinned
// maps migrate to the new capacity with their entries.
//
// sluice_be6 and sluice_revnat6 are ARRAYs indexed by backend and rev-NAT
// ids, which come from one pool for both families: an IPv6 backend may get
// any id an IPv4 one could. On a node that serves IPv6 each is therefore
// asked for at its IPv4 twin's capacity (always: a smaller pin, a small
// table pinned before the node became dual-stack, migrates to it). Small,
// they cost 96 KiB and 24 KiB instead of 6 MiB and 1.5 MiB, and an IPv6
// frontend whose backend or rev-NAT id falls beyond them is refused by the
// programmer naming the map (the node was said to serve no IPv6).
//
// sluice_maglev4 is an ARRAY_OF_MAPS indexed by rev-NAT id and scope: with
// a rev-NAT capacity in maxEntries it is asked for at twice that, and so is
// the names map (sluice_svcname: rev-NAT id and protocol) when that is
// more than its default.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as abi from '../abi/generated';
import type { KubeConnection } from './kubeClient';

export type Ipv6Maps = 'auto' | 'small' | 'full';

/** Capacities of the IPv6 tables on a node that does not serve IPv6. */
export const IPV6_SMALL_ENTRIES: Readonly<Record<string, number>> = {
  [abi.SLUICE_MAP_SERVICES6]: 2048,
  [abi.SLUICE_MAP_RANGES6]: 16384,
  [abi.SLUICE_MAP_BACKENDS6]: 4096,
  [abi.SLUICE_MAP_REVNAT6]: 1024,
  [abi.SLUICE_MAP_AFFINITY6]: 4096,
};

/** IPv6 id arrays and the IPv4 twin whose capacity they follow. */
const IPV6_ID_ARRAYS: ReadonlyArray<[string, string]> = [
  [abi.SLUICE_MAP_BACKENDS6, abi.SLUICE_MAP_BACKENDS4],
  [abi.SLUICE_MAP_REVNAT6, abi.SLUICE_MAP_REVNAT4],
];

interface NodeLike {
  spec?: { podCIDR?: string; podCIDRs?: string[] };
  status?: { addresses?: Array<{ address?: string }> };
}

/** The Node object says the node has IPv6: a pod CIDR or an address of that family. */
export function nodeHasIpv6(node: NodeLike): boolean {
  const cidrs = [...(node.spec?.podCIDRs ?? []), ...(node.spec?.podCIDR ? [node.spec.podCIDR] : [])];
  const addrs = (node.status?.addresses ?? []).map((a) => a.address ?? '');
  return [...cidrs, ...addrs].some((a) => a.includes(':'));
}

/**
 * The capacities to ask for: the config's maxEntries; on a node that serves
 * IPv6 the IPv6 id arrays at their IPv4 twins' capacity (always asked for,
 * so a smaller pin migrates to it); else the small IPv6 ones (for maps the
 * config does not name and that are not pinned yet).
 */
export function mapCapacities(maxEntries: Record<string, number>, bpffs: string, ipv6: boolean): Record<string, number> {
  const out = { ...maxEntries };
  // Maglev tables are indexed by rev-NAT id and scope (bpf/lib/maglev.h): two entries per rev-NAT id.
  const revNats = maxEntries[abi.SLUICE_MAP_REVNAT4];
  if (revNats !== undefined) out[abi.SLUICE_MAP_MAGLEV4] ??= 2 * revNats;
  // The CLI's names: one entry per rev-NAT id and protocol (ids come from
  // one pool for both families; TCP and UDP on one address:port share an
  // id), so a rev-NAT capacity whose double passes the names map's default
  // raises it (at 100 000 Services x 2 ports the default filled).
  if (revNats !== undefined && 2 * revNats > abi.SLUICE_MAX_SVC_NAMES) out[abi.SLUICE_MAP_SVC_NAMES] ??= 2 * revNats;
  if (ipv6) {
    for (const [v6, v4] of IPV6_ID_ARRAYS) out[v6] ??= maxEntries[v4] ?? abi.MAP_SPECS[v4]!.maxEntries;
    return out;
  }
  for (const [name, n] of Object.entries(IPV6_SMALL_ENTRIES)) {
    if (name in out || fs.existsSync(path.join(bpffs, name))) continue;
    out[name] = n;
  }
  return out;
}

/**
 * Whether this node serves IPv6, per `mode`; in auto, one GET of the Node
 * (bounded: the data path does not wait on a slow API server). Unknown (no
 * Node, no answer in time) counts as IPv6: full tables cost memory, small
 * ones could refuse Services.
 */
export async function nodeServesIpv6(mode: Ipv6Maps, api: KubeConnection | undefined, nodeName: string, timeoutMs = 2000): Promise<{ ipv6: boolean; why: string }> {
  if (mode !== 'auto') return { ipv6: mode === 'full', why: `ipv6Maps: ${mode}` };
  if (!api) return { ipv6: true, why: 'no API connection' };
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const res = await api.get(`/api/v1/nodes/${encodeURIComponent(nodeName)}`, {}, signal);
    const chunks: Buffer[] = [];
    for await (const c of res) chunks.push(c as Buffer);
    if (res.statusCode !== 200) return { ipv6: true, why: `GET Node ${nodeName}: HTTP ${res.statusCode}` };
    const has = nodeHasIpv6(JSON.parse(Buffer.concat(chunks).toString('utf8')) as NodeLike);
    return { ipv6: has, why: has ? 'the Node has an IPv6 pod CIDR or address' : 'the Node has no IPv6 pod CIDR or address' };
  } catch (err) {
    return { ipv6: true, why: `GET Node ${nodeName}: ${(err as Error).message}` };
  }
}
