// Service + EndpointSlices + local Node → frontends with their backend sets.
// Pure functions, no I/O. The frontends that exist, and the endpoint set each
// one gets, follow kube-proxy's iptables proxier (pkg/proxy/iptables/proxier.go
// syncProxyRules):
//
//   ClusterIP      → internal policy chain: Local set if internalTrafficPolicy
//                    Local (no fallback to remote: empty = refused), else Cluster set.
//   NodePort, ExternalIP, LoadBalancer VIP
//                  → external policy chain: Local set if externalTrafficPolicy
//                    Local, else Cluster set. With Local, traffic from pods on
//                    this node and from the node itself is "short-circuited" to
//                    the Cluster set; we emit that as a second, internal-scope
//                    frontend on the same address (twoScopes on both).

import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import {
  DEFAULT_MAX_ENDPOINTS_PER_SERVICE,
  MAX_BACKENDS_PER_FRONTEND,
  type Backend,
  type Frontend,
  type FrontendKind,
  type HealthCheckService,
  type IPFamily,
  type NodeContext,
  type ServiceTranslation,
  type TranslateOptions,
  type TranslateProblem,
} from '../model/frontend';
import { categorizeEndpoints, type ServicePortPolicy } from './categorize';
import { collectEndpoints, servicePortKey, type EndpointInfo, type EndpointsByServicePort } from './endpoints';
import { ipSortKey, parseIP, type ParsedIP } from './ip';
import { readServiceSpec, type ServiceSpecInfo } from './service';
import { serviceKey, shouldSkipService } from './skip';
import { DEFAULT_LB_ALGORITHM, serviceLbAlgorithm } from './algorithm';

const KIND_ORDER: Record<FrontendKind, number> = { ClusterIP: 0, NodePort: 1, ExternalIP: 2, LoadBalancer: 3 };

export function translateService(
  svc: V1Service,
  slices: readonly V1EndpointSlice[],
  node: NodeContext,
  opts: TranslateOptions,
): ServiceTranslation {
  const service = serviceKey(svc) ?? '';
  const object = `Service ${service}`;
  const problems: TranslateProblem[] = [];
  const skipped = shouldSkipService(svc);
  if (skipped) return { service, frontends: [], problems, skipped };

  const spec = readServiceSpec(svc, object, problems);
  const programmed = (opts.ipFamilies ?? ['IPv4']).filter(
    (f) => spec.clusterIPs.has(f) || spec.invalidClusterIPFamilies.has(f),
  );
  const families = new Set<IPFamily>(programmed);
  const ownSlices = slices.filter((s) => serviceKey(s) === service);
  const endpoints = collectEndpoints(ownSlices, node.name, families, problems);

  const frontends: Frontend[] = [];
  for (const family of families) {
    frontends.push(...familyFrontends(service, family, spec, endpoints, node));
  }
  capBackends(frontends, opts, object, problems);
  const algorithm = serviceLbAlgorithm(svc, opts.defaultLbAlgorithm ?? DEFAULT_LB_ALGORITHM, object, problems);
  for (const fe of frontends) fe.algorithm = algorithm;

  const result: ServiceTranslation = { service, frontends: dedupAndSort(frontends), problems };
  if (spec.healthCheckNodePort !== 0 && families.size > 0) {
    result.healthCheck = healthCheck(service, spec.healthCheckNodePort, endpoints, families);
  }
  return result;
}

export interface TranslateAllResult {
  /** One per Service, sorted by service key. */
  services: ServiceTranslation[];
  /** Every frontend of every Service, in service order. */
  frontends: Frontend[];
  healthChecks: HealthCheckService[];
  /** Every problem, including cross-Service frontend conflicts. */
  problems: TranslateProblem[];
}

/**
 * Translate every Service. slicesByService is keyed by serviceKey (see
 * groupSlicesByService). When two Services claim the same frontend
 * (address, port, protocol, scope), the older Service keeps it (creation
 * time, then key) and the other gets a 'frontend_conflict' problem.
 */
export function translateAll(
  services: readonly V1Service[],
  slicesByService: ReadonlyMap<string, readonly V1EndpointSlice[]>,
  node: NodeContext,
  opts: TranslateOptions,
): TranslateAllResult {
  const ordered = [...services].sort(compareServiceAge);
  const owner = new Map<string, string>();
  const translations: ServiceTranslation[] = [];
  for (const svc of ordered) {
    const key = serviceKey(svc) ?? '';
    const t = translateService(svc, slicesByService.get(key) ?? [], node, opts);
    t.frontends = t.frontends.filter((fe) => {
      const id = `${fe.address}|${fe.port}|${fe.proto}|${fe.scope}`;
      const holder = owner.get(id);
      if (holder === undefined) {
        owner.set(id, t.service);
        return true;
      }
      t.problems.push({
        object: `Service ${t.service}`,
        reason: 'frontend_conflict',
        message: `Service ${t.service}: ${fe.kind} ${formatHostPort(fe.address, fe.port)}/${fe.proto} is already used by Service ${holder}; frontend skipped`,
      });
      return false;
    });
    translations.push(t);
  }
  translations.sort((a, b) => compareStrings(a.service, b.service));
  const result: TranslateAllResult = { services: translations, frontends: [], healthChecks: [], problems: [] };
  for (const t of translations) {
    result.frontends.push(...t.frontends);
    if (t.healthCheck) result.healthChecks.push(t.healthCheck);
    result.problems.push(...t.problems);
  }
  return result;
}

/** Group EndpointSlices by the Service they belong to (slices without the service-name label are dropped). */
export function groupSlicesByService(slices: readonly V1EndpointSlice[]): Map<string, V1EndpointSlice[]> {
  const out = new Map<string, V1EndpointSlice[]>();
  for (const s of slices) {
    const key = serviceKey(s);
    if (key === undefined) continue;
    let list = out.get(key);
    if (!list) out.set(key, (list = []));
    list.push(s);
  }
  return out;
}

/**
 * The node's addresses parsed once per address list, not once per Service
 * and family: a full sync translates every Service against the same node
 * context, so the same few addresses were parsed 10k times per pass. Keyed
 * by the list itself, so a new context parses again.
 */
const nodeAddressCache = new WeakMap<readonly string[], readonly ParsedIP[]>();
function parsedNodeAddresses(addresses: readonly string[]): readonly ParsedIP[] {
  let parsed = nodeAddressCache.get(addresses);
  if (!parsed) {
    parsed = addresses.map((a) => parseIP(a)).filter((ip): ip is ParsedIP => ip !== undefined);
    nodeAddressCache.set(addresses, parsed);
  }
  return parsed;
}

function familyFrontends(
  service: string,
  family: IPFamily,
  spec: ServiceSpecInfo,
  endpoints: EndpointsByServicePort,
  node: NodeContext,
): Frontend[] {
  const ofFamily = (ips: readonly ParsedIP[]): ParsedIP[] => ips.filter((ip) => ip.family === family);
  const clusterIP = spec.clusterIPs.get(family);
  const externalIPs = ofFamily(spec.externalIPs);
  const lbVIPs = ofFamily(spec.loadBalancerVIPs);
  const nodeAddrs = ofFamily(parsedNodeAddresses(node.addresses));
  const sourceRanges = spec.sourceRanges.filter((c) => c.family === family).map((c) => c.text);

  const out: Frontend[] = [];
  for (const port of spec.ports) {
    const eps = [...(endpoints.get(servicePortKey(family, port.name, port.proto))?.values() ?? [])];
    const policy: ServicePortPolicy = {
      internalPolicyLocal: spec.internalPolicyLocal,
      externalPolicyLocal: spec.externalPolicyLocal,
      externallyAccessible: port.nodePort !== 0 || externalIPs.length > 0 || lbVIPs.length > 0,
    };
    const sets = categorizeEndpoints(eps, policy, node.name, node.zone ?? '');
    const clusterSet = toBackends(sets.cluster ?? [], sets.clusterTerminating);
    const localSet = toBackends(sets.local ?? [], sets.localTerminating);

    const base = (kind: FrontendKind, address: string, feport: number): Frontend => ({
      service,
      portName: port.name,
      kind,
      family,
      address,
      port: feport,
      proto: port.proto,
      scope: 'external',
      backends: clusterSet,
      noBackendVerdict: 'reject',
      externalLocal: false,
      internalLocal: false,
      twoScopes: false,
      affinityTimeoutSeconds: spec.affinityTimeoutSeconds,
      sourceRanges: [],
      algorithm: 'random', // set for the whole Service by translateService
    });

    if (clusterIP) {
      const fe = base('ClusterIP', clusterIP.text, port.port);
      if (spec.internalPolicyLocal) {
        fe.backends = localSet;
        fe.internalLocal = true;
        fe.noBackendVerdict = dropUnlessUsable(localSet, sets.hasAnyEndpoints);
      }
      out.push(fe);
    }

    const external = (kind: FrontendKind, address: string, feport: number): void => {
      const fe = base(kind, address, feport);
      if (kind === 'LoadBalancer') fe.sourceRanges = sourceRanges;
      if (!spec.externalPolicyLocal) {
        out.push(fe);
        return;
      }
      fe.backends = localSet;
      fe.externalLocal = true;
      fe.twoScopes = true;
      fe.noBackendVerdict = dropUnlessUsable(localSet, sets.hasAnyEndpoints);
      const twin: Frontend = { ...fe, scope: 'internal', backends: clusterSet, externalLocal: false, noBackendVerdict: 'reject' };
      out.push(fe, twin);
    };
    if (port.nodePort !== 0) for (const a of nodeAddrs) external('NodePort', a.text, port.nodePort);
    for (const ip of externalIPs) external('ExternalIP', ip.text, port.port);
    for (const ip of lbVIPs) external('LoadBalancer', ip.text, port.port);
  }
  return out;
}

/**
 * kube-proxy (nftables/iptables syncProxyRules): a Local policy with no
 * local endpoint while the Service has endpoints elsewhere is "drop"; no
 * endpoint at all is "reject".
 */
function dropUnlessUsable(localSet: readonly Backend[], hasAnyEndpoints: boolean): 'reject' | 'drop' {
  return localSet.length === 0 && hasAnyEndpoints ? 'drop' : 'reject';
}

function toBackends(eps: readonly EndpointInfo[], terminating: boolean): Backend[] {
  const sorted = [...eps].sort((a, b) => compareStrings(a.sortKey, b.sortKey) || a.port - b.port);
  return sorted.map((ep) => {
    const be: Backend = { address: ep.address, port: ep.port, proto: ep.proto, local: ep.local, terminating };
    if (ep.zone !== undefined) be.zone = ep.zone;
    if (ep.nodeName !== undefined) be.nodeName = ep.nodeName;
    return be;
  });
}

/**
 * The per-frontend map-capacity guard (see TranslateOptions): kube-proxy
 * programs every endpoint, so a frontend over the guard still gets the
 * first `max` backends (traffic keeps flowing) and one problem per
 * Service names the largest set.
 */
function capBackends(frontends: Frontend[], opts: TranslateOptions, object: string, problems: TranslateProblem[]): void {
  const asked = opts.maxEndpointsPerService > 0 ? opts.maxEndpointsPerService : DEFAULT_MAX_ENDPOINTS_PER_SERVICE;
  const max = Math.min(asked, MAX_BACKENDS_PER_FRONTEND);
  let largest = 0;
  for (const fe of frontends) {
    if (fe.backends.length <= max) continue;
    largest = Math.max(largest, fe.backends.length);
    fe.backends = fe.backends.slice(0, max);
  }
  if (largest > 0) {
    problems.push({
      object,
      reason: 'too_many_endpoints',
      message: `${object}: a frontend has ${largest} backends, over the per-frontend limit of ${max} (maxEndpointsPerService); the first ${max} are programmed`,
    });
  }
}

/**
 * kube-proxy's EndpointsMap.LocalReadyEndpoints: local endpoints that are
 * *ready* (terminating ones make the health check fail on purpose), counted
 * by unique IP across all of the Service's slice ports. kube-proxy keeps one
 * map per family; we report the family with the most, so a dual-stack node is
 * healthy when either family has a local endpoint.
 */
function healthCheck(
  service: string,
  nodePort: number,
  endpoints: EndpointsByServicePort,
  families: Set<IPFamily>,
): HealthCheckService {
  let best = 0;
  for (const family of families) {
    const ips = new Set<string>();
    for (const [key, set] of endpoints) {
      if (!key.startsWith(`${family}|`)) continue;
      for (const ep of set.values()) if (ep.local && ep.ready) ips.add(ep.address);
    }
    best = Math.max(best, ips.size);
  }
  return { service, nodePort, localEndpoints: best };
}

/**
 * Drop frontends with the same (address, port, protocol, scope) inside one
 * Service, keeping the one kube-proxy's rules would match first: ClusterIP,
 * then ExternalIP, then LoadBalancer (all in KUBE-SERVICES, in that order),
 * then NodePort (KUBE-NODEPORTS is the last rule of KUBE-SERVICES).
 */
function dedupAndSort(frontends: Frontend[]): Frontend[] {
  const priority: Record<FrontendKind, number> = { ClusterIP: 0, ExternalIP: 1, LoadBalancer: 2, NodePort: 3 };
  const byId = new Map<string, Frontend>();
  for (const fe of frontends) {
    const id = `${fe.address}|${fe.port}|${fe.proto}|${fe.scope}`;
    const have = byId.get(id);
    if (!have || priority[fe.kind] < priority[have.kind]) byId.set(id, fe);
  }
  return sortFrontends([...byId.values()]);
}

/** Stable total order: service, kind, address (numerically), port, protocol, scope (external first). */
export function sortFrontends(frontends: Frontend[]): Frontend[] {
  const keyed = frontends.map((fe) => ({ fe, addr: addressKey(fe.address) }));
  keyed.sort(
    (a, b) =>
      compareStrings(a.fe.service, b.fe.service) ||
      KIND_ORDER[a.fe.kind] - KIND_ORDER[b.fe.kind] ||
      compareStrings(a.addr, b.addr) ||
      a.fe.port - b.fe.port ||
      compareStrings(a.fe.proto, b.fe.proto) ||
      compareStrings(a.fe.scope, b.fe.scope),
  );
  return keyed.map((k) => k.fe);
}

function addressKey(text: string): string {
  const ip = parseIP(text);
  return ip ? ipSortKey(ip) : text;
}

export function compareServiceAge(a: V1Service, b: V1Service): number {
  const ta = timeOf(a.metadata?.creationTimestamp);
  const tb = timeOf(b.metadata?.creationTimestamp);
  if (ta !== tb) return ta - tb;
  return compareStrings(serviceKey(a) ?? '', serviceKey(b) ?? '');
}

function timeOf(t: Date | string | undefined): number {
  if (t === undefined) return Number.MAX_SAFE_INTEGER;
  const ms = new Date(t).getTime();
  return Number.isNaN(ms) ? Number.MAX_SAFE_INTEGER : ms;
}

function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function formatHostPort(address: string, port: number): string {
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}
