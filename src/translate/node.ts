// The local Node as translate needs it: its name (endpoint locality), its zone
// (topology hints) and the addresses NodePorts listen on.

import type { V1Node } from '@kubernetes/client-node';
import type { IPFamily, NodeContext, TranslateOptions } from '../model/frontend';
import { cidrContains, compareIP, parseCIDR, parseIP, type ParsedCIDR, type ParsedIP } from './ip';

export const LABEL_TOPOLOGY_ZONE = 'topology.kubernetes.io/zone';

const IPV4_LOOPBACK = parseCIDR('127.0.0.0/8')!;
const IPV6_LOOPBACK = parseCIDR('::1/128')!;
const IPV6_LINK_LOCAL = parseCIDR('fe80::/10')!;
const LOCALHOST = parseIP('127.0.0.1')!;

export type NodeAddressOptions = Pick<TranslateOptions, 'nodePortAddresses' | 'localhostNodePorts' | 'nodeIP'>;

/**
 * Build the NodeContext. NodePorts listen, as kube-proxy's do
 * (pkg/proxy/util NodePortAddresses.GetNodeIPs), on the node's own
 * addresses: `localAddresses` (its interfaces), plus the Node object's
 * InternalIP and ExternalIP addresses (so a Node whose address lives on
 * another netns or a cloud NAT is still served from inside the cluster).
 * A Node that is re-registering or has no addresses yet therefore keeps
 * its NodePorts on the interfaces.
 *
 * nodePortAddresses filters them with kube-proxy's per-family rule: CIDRs
 * apply to their own family, a family with no CIDR listed matches all of
 * its addresses. The keyword 'primary' stands for the node's primary IP of
 * each family (k8s.io/component-helpers GetNodeHostIPs: InternalIPs first,
 * then ExternalIPs; kube-proxy's bindAddress overrides it); with no primary
 * IP known yet it matches everything, as kube-proxy falls back to all local
 * IPs. Loopback: 127.0.0.1 only with localhostNodePorts (kube-proxy's
 * iptables mode) and when the IPv4 CIDRs are unset or cover 127.0.0.0/8;
 * ::1 and IPv6 link-local never.
 */
export function nodeContextFromNode(
  node: V1Node | undefined,
  nodeName: string,
  opts: NodeAddressOptions,
  localAddresses: readonly string[] = [],
): NodeContext {
  const zone = node?.metadata?.labels?.[LABEL_TOPOLOGY_ZONE];
  const fromNode: ParsedIP[] = [];
  for (const type of ['InternalIP', 'ExternalIP']) {
    for (const a of node?.status?.addresses ?? []) {
      if (a.type !== type) continue;
      const ip = parseIP(a.address);
      if (ip) fromNode.push(ip);
    }
  }
  const local = localAddresses.map((a) => parseIP(a)).filter((ip): ip is ParsedIP => ip !== undefined);

  const cidrs = nodePortCIDRs(opts, fromNode);
  const cidrFamilies = new Set<IPFamily>(cidrs.map((c) => c.family));
  const matches = (ip: ParsedIP): boolean => !cidrFamilies.has(ip.family) || cidrs.some((c) => cidrContains(c, ip));
  const loopbackAllowed = opts.localhostNodePorts === true && (!cidrFamilies.has('IPv4') || cidrs.some((c) => cidrContains(c, LOCALHOST)));
  const usable = (ip: ParsedIP): boolean => {
    if (cidrContains(IPV6_LOOPBACK, ip) || cidrContains(IPV6_LINK_LOCAL, ip)) return false;
    if (cidrContains(IPV4_LOOPBACK, ip)) return loopbackAllowed && matches(ip);
    return matches(ip);
  };

  const byText = new Map<string, ParsedIP>();
  for (const ip of [...local, ...fromNode]) if (usable(ip)) byText.set(ip.text, ip);
  const addresses = [...byText.values()].sort(compareIP).map((ip) => ip.text);

  const ctx: NodeContext = { name: nodeName, addresses };
  if (zone) ctx.zone = zone;
  return ctx;
}

/** The CIDRs nodePortAddresses stands for; 'primary' resolved to /32 and /128 host routes. */
function nodePortCIDRs(opts: NodeAddressOptions, fromNode: ParsedIP[]): ParsedCIDR[] {
  const cidrs: ParsedCIDR[] = [];
  for (const entry of opts.nodePortAddresses ?? []) {
    if (entry === 'primary') {
      for (const ip of primaryIPs(fromNode, opts.nodeIP)) {
        if (cidrContains(IPV4_LOOPBACK, ip) || cidrContains(IPV6_LOOPBACK, ip)) continue;
        const c = parseCIDR(`${ip.text}/${ip.family === 'IPv4' ? 32 : 128}`);
        if (c) cidrs.push(c);
      }
      continue;
    }
    const c = parseCIDR(entry.trim(), true);
    if (c) cidrs.push(c);
  }
  return cidrs;
}

/** One per family: the Node's first address of each, the bind address overriding its family's. */
function primaryIPs(ordered: ParsedIP[], nodeIP: string | undefined): ParsedIP[] {
  const byFamily = new Map<IPFamily, ParsedIP>();
  for (const ip of ordered) if (!byFamily.has(ip.family)) byFamily.set(ip.family, ip);
  const bind = nodeIP ? parseIP(nodeIP) : undefined;
  if (bind) byFamily.set(bind.family, bind);
  return [...byFamily.values()];
}
