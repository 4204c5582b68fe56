// One Service → its ports, addresses and policies, validated, as kube-proxy's
// BaseServicePortInfo (pkg/proxy/serviceport.go newBaseServiceInfo) and
// pkg/api/v1/service/util.go see them. Bad fields become TranslateProblems and
// only the part they belong to is dropped.

import type { V1Service } from '@kubernetes/client-node';
import {
  DEFAULT_AFFINITY_TIMEOUT_SECONDS,
  type IPFamily,
  type L4Proto,
  type TranslateProblem,
} from '../model/frontend';
import { parseCIDR, parseIP, type ParsedCIDR, type ParsedIP } from './ip';

export interface ServicePortSpec {
  name: string;
  proto: L4Proto;
  port: number;
  /** 0 = no NodePort frontends for this port. */
  nodePort: number;
}

export interface ServiceSpecInfo {
  type: string;
  ports: ServicePortSpec[];
  /** Valid ClusterIP per family; a family missing here is not programmed for this Service. */
  clusterIPs: Map<IPFamily, ParsedIP>;
  /** Families whose ClusterIP was set but invalid: the ClusterIP frontend is dropped, the rest kept. */
  invalidClusterIPFamilies: Set<IPFamily>;
  externalIPs: ParsedIP[];
  /** status.loadBalancer.ingress IPs in VIP mode (ipMode unset or "VIP"). */
  loadBalancerVIPs: ParsedIP[];
  sourceRanges: ParsedCIDR[];
  /** apiservice.ExternalPolicyLocal: externally accessible type and externalTrafficPolicy Local. */
  externalPolicyLocal: boolean;
  /** apiservice.InternalPolicyLocal. */
  internalPolicyLocal: boolean;
  affinityTimeoutSeconds: number;
  /** healthCheckNodePort when apiservice.NeedsHealthCheck (LoadBalancer + eTP Local), else 0. */
  healthCheckNodePort: number;
}

const MAX_AFFINITY_TIMEOUT_SECONDS = 86400; // API validation: 0 < timeout <= 86400

export function readServiceSpec(svc: V1Service, object: string, problems: TranslateProblem[]): ServiceSpecInfo {
  const spec = svc.spec ?? {};
  const type = spec.type ?? 'ClusterIP';
  const hasNodePorts = type === 'NodePort' || type === 'LoadBalancer';
  const problem = (reason: string, message: string): void => {
    problems.push({ object, reason, message: `${object}: ${message}` });
  };

  const ports: ServicePortSpec[] = [];
  for (const p of spec.ports ?? []) {
    const name = p.name ?? '';
    const label = `port "${name}" (${p.port}/${p.protocol ?? 'TCP'})`;
    const proto = p.protocol ?? 'TCP';
    if (proto === 'SCTP') {
      problem('unsupported_protocol', `${label}: SCTP is not supported; port skipped`);
      continue;
    }
    if (proto !== 'TCP' && proto !== 'UDP') {
      problem('invalid_protocol', `${label}: unknown protocol "${proto}"; port skipped`);
      continue;
    }
    if (!isPort(p.port)) {
      problem('invalid_port', `${label}: port must be 1..65535; port skipped`);
      continue;
    }
    let nodePort = 0;
    // kube-proxy programs any non-zero nodePort; the API server only allows one on
    // NodePort/LoadBalancer Services (and on LoadBalancer, allocateLoadBalancerNodePorts:
    // false leaves it unset unless the user asked for one), so honour exactly that.
    if (hasNodePorts && p.nodePort !== undefined && p.nodePort !== null && p.nodePort !== 0) {
      if (isPort(p.nodePort)) nodePort = p.nodePort;
      else problem('invalid_port', `${label}: nodePort ${p.nodePort} must be 1..65535; NodePort frontends skipped`);
    }
    ports.push({ name, proto, port: p.port, nodePort });
  }

  const clusterIPs = new Map<IPFamily, ParsedIP>();
  const invalidClusterIPFamilies = new Set<IPFamily>();
  for (const family of ['IPv4', 'IPv6'] as const) {
    const text = clusterIPByFamily(svc, family);
    if (text === '') continue;
    const ip = parseIP(text);
    if (!ip || ip.family !== family) {
      problem('invalid_cluster_ip', `clusterIP "${text}" is not a valid ${family} address; ClusterIP frontends skipped`);
      invalidClusterIPFamilies.add(family);
      continue;
    }
    clusterIPs.set(family, ip);
  }

  const externalIPs: ParsedIP[] = [];
  for (const text of spec.externalIPs ?? []) {
    const ip = parseIP(text);
    if (ip) externalIPs.push(ip);
    else problem('invalid_ip', `externalIP "${text}" is not a valid IP address; skipped`);
  }

  const loadBalancerVIPs: ParsedIP[] = [];
  for (const ing of svc.status?.loadBalancer?.ingress ?? []) {
    // Hostname-only ingress points and ipMode: Proxy are not VIPs (proxyutil.IsVIPMode).
    if (!ing.ip || ing.ipMode === 'Proxy') continue;
    const ip = parseIP(ing.ip);
    if (ip) loadBalancerVIPs.push(ip);
    else problem('invalid_ip', `loadBalancer ingress IP "${ing.ip}" is not a valid IP address; skipped`);
  }

  const sourceRanges: ParsedCIDR[] = [];
  for (const raw of spec.loadBalancerSourceRanges ?? []) {
    // Validation lets whitespace padding through; kube-proxy trims it.
    const cidr = parseCIDR(raw.trim());
    if (cidr) sourceRanges.push(cidr);
    else problem('invalid_source_range', `loadBalancerSourceRange "${raw}" is not a valid CIDR; skipped`);
  }

  const externallyAccessible =
    type === 'LoadBalancer' || type === 'NodePort' || (type === 'ClusterIP' && (spec.externalIPs ?? []).length > 0);
  const externalPolicyLocal = externallyAccessible && spec.externalTrafficPolicy === 'Local';
  const internalPolicyLocal = spec.internalTrafficPolicy === 'Local';

  let affinityTimeoutSeconds = 0;
  if (spec.sessionAffinity === 'ClientIP') {
    const t = spec.sessionAffinityConfig?.clientIP?.timeoutSeconds;
    if (t === undefined || t === null) {
      affinityTimeoutSeconds = DEFAULT_AFFINITY_TIMEOUT_SECONDS;
    } else if (Number.isInteger(t) && t > 0 && t <= MAX_AFFINITY_TIMEOUT_SECONDS) {
      affinityTimeoutSeconds = t;
    } else {
      problem(
        'invalid_affinity_timeout',
        `sessionAffinityConfig.clientIP.timeoutSeconds ${t} must be 1..${MAX_AFFINITY_TIMEOUT_SECONDS}; using ${DEFAULT_AFFINITY_TIMEOUT_SECONDS}`,
      );
      affinityTimeoutSeconds = DEFAULT_AFFINITY_TIMEOUT_SECONDS;
    }
  }

  let healthCheckNodePort = 0;
  if (type === 'LoadBalancer' && externalPolicyLocal) {
    const hc = spec.healthCheckNodePort;
    if (hc !== undefined && hc !== null && isPort(hc)) healthCheckNodePort = hc;
    else problem('invalid_port', `externalTrafficPolicy Local LoadBalancer has no valid healthCheckNodePort (${hc ?? 'unset'}); no health check served`);
  }

  return {
    type,
    ports,
    clusterIPs,
    invalidClusterIPFamilies,
    externalIPs,
    loadBalancerVIPs,
    sourceRanges,
    externalPolicyLocal,
    internalPolicyLocal,
    affinityTimeoutSeconds,
    healthCheckNodePort,
  };
}

/**
 * proxyutil.GetClusterIPByFamily: with spec.ipFamilies, the clusterIPs entry at
 * that family's index; without (old objects), spec.clusterIP if it is of the family.
 */
export function clusterIPByFamily(svc: V1Service, family: IPFamily): string {
  const spec = svc.spec ?? {};
  const families = spec.ipFamilies ?? [];
  if (families.length === 0) {
    const ip = spec.clusterIP ?? '';
    if (ip === '' || ip === 'None') return '';
    return ip.includes(':') === (family === 'IPv6') ? ip : '';
  }
  const ips = spec.clusterIPs && spec.clusterIPs.length > 0 ? spec.clusterIPs : spec.clusterIP ? [spec.clusterIP] : [];
  const idx = families.indexOf(family);
  if (idx < 0) return '';
  const ip = ips[idx] ?? '';
  return ip === 'None' ? '' : ip;
}

function isPort(n: number | undefined | null): n is number {
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65535;
}
