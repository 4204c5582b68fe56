// IPv6 map capacities from whether this node serves IPv6 (issue 12: agent
// map memory <= 100 MiB at 10 000 Services x 10 endpoints).
//
// The socket LB's IPv6 tables are declared in sluice_abi.h at the IPv4
// tables' capacities, and their cost does not follow use: a hash map's
// bucket array follows max_entries (sluice_svc6 8 MiB, sluice_be6 4 MiB,
// sluice_revnat6 1 MiB, empty) and an LRU hash is preallocated
// (sluice_affin6 13 MiB). An IPv4-only node paid 26 MiB for tables it never
// fills. Here they start small unless the node is dual-stack, where
// "dual-stack" is what Kubernetes says about the node: an IPv6 pod CIDR or
// an IPv6 address on its Node object. `ipv6Maps` in the config decides
// instead of the Node when set to small or full; `maxEntries` still wins
// for a map it names; a map already pinned keeps its capacity (a restart
// never shrinks a table that may hold entries).
//
// Small tables hold about 700 IPv6 service ports with 10 endpoints each (a
// frontend takes 1 + endpoints entries of sluice_svc6). Past that, the
// agent's writes fail with sluice_errors_total{reason="map_full"}; set
// `ipv6Maps: full` (or maxEntries) and restart: the pinned maps migrate to
// the new capacity with their entries.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as abi from '../abi/generated';
import type { KubeConnection } from './kubeClient';

export type Ipv6Maps = 'auto' | 'small' | 'full';

/** Capacities of the IPv6 tables on a node that does not serve IPv6. */
export const IPV6_SMALL_ENTRIES: Readonly<Record<string, number>> = {
  [abi.SLUICE_MAP_SERVICES6]: 8192,
  [abi.SLUICE_MAP_BACKENDS6]: 4096,
  [abi.SLUICE_MAP_REVNAT6]: 1024,
  [abi.SLUICE_MAP_AFFINITY6]: 4096,
};

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
 * The capacities to ask for: the config's maxEntries, plus the small IPv6
 * ones when the node does not serve IPv6 (for maps the config does not name
 * and that are not pinned yet).
 */
export function mapCapacities(maxEntries: Record<string, number>, bpffs: string, ipv6: boolean): Record<string, number> {
  if (ipv6) return { ...maxEntries };
  const out = { ...maxEntries };
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
