// The local Node as translate needs it: its name (endpoint locality), its zone
// (topology hints) and the addresses NodePorts listen on.

import type { V1Node } from '@kubernetes/client-node';
import type { IPFamily, NodeContext, TranslateOptions } from '../model/frontend';
import { cidrContains, compareIP, parseCIDR, parseIP, type ParsedCIDR, type ParsedIP } from './ip';

export const LABEL_TOPOLOGY_ZONE = 'topology.kubernetes.io/zone';

/**
 * Build the NodeContext. addresses are the node's InternalIP and ExternalIP
 * addresses, filtered by nodePortAddresses with kube-proxy's per-family rule
 * (pkg/proxy/util NewNodePortAddresses): CIDRs apply to their own family, and
 * a family with no CIDR listed matches all of its addresses. The keyword
 * 'primary' stands for the node's primary IP of each family (k8s.io/component-helpers
 * GetNodeHostIPs: InternalIPs first, then ExternalIPs; the first, plus the first
 * of the other family).
 */
export function nodeContextFromNode(
  node: V1Node | undefined,
  nodeName: string,
  opts: Pick<TranslateOptions, 'nodePortAddresses'>,
): NodeContext {
  const zone = node?.metadata?.labels?.[LABEL_TOPOLOGY_ZONE];
  const ordered: ParsedIP[] = [];
  for (const type of ['InternalIP', 'ExternalIP']) {
    for (const a of node?.status?.addresses ?? []) {
      if (a.type !== type) continue;
      const ip = parseIP(a.address);
      if (ip) ordered.push(ip);
    }
  }

  const cidrs: ParsedCIDR[] = [];
  for (const entry of opts.nodePortAddresses ?? []) {
    if (entry === 'primary') {
      for (const ip of primaryIPs(ordered)) {
        const c = parseCIDR(`${ip.text}/${ip.family === 'IPv4' ? 32 : 128}`);
        if (c) cidrs.push(c);
      }
      continue;
    }
    const c = parseCIDR(entry.trim(), true);
    if (c) cidrs.push(c);
  }
  const cidrFamilies = new Set<IPFamily>(cidrs.map((c) => c.family));
  const matches = (ip: ParsedIP): boolean =>
    !cidrFamilies.has(ip.family) || cidrs.some((c) => cidrContains(c, ip));

  const byText = new Map<string, ParsedIP>();
  for (const ip of ordered) if (matches(ip)) byText.set(ip.text, ip);
  const addresses = [...byText.values()].sort(compareIP).map((ip) => ip.text);

  const ctx: NodeContext = { name: nodeName, addresses };
  if (zone) ctx.zone = zone;
  return ctx;
}

function primaryIPs(ordered: ParsedIP[]): ParsedIP[] {
  const first = ordered[0];
  if (!first) return [];
  const other = ordered.find((ip) => ip.family !== first.family);
  return other ? [first, other] : [first];
}
