// What the real API server does to a Service beyond storing it, and that
// Sluice depends on: defaulting, ClusterIP / NodePort / healthCheckNodePort
// allocation, keeping allocated values across updates, and (when
// strictValidation is on) rejecting invalid specs with 422.
//
// With strictValidation off (the default) out-of-range or malformed values are
// stored as given and never tracked by the allocators, so tests can feed the
// agent port 70000 or a clusterIP of "banana". Two Services claiming the same
// in-range ClusterIP or NodePort are always refused: no real cluster has them.

import { NodePortAllocator, ServiceIpAllocator } from './allocators';
import { parseIp, IpFamily } from './ip';
import { errors } from './status';
import type { StoredObject } from './types';
import * as v from './validation';

export interface ServiceAllocators {
  /** The primary family's allocator first, as in --service-cluster-ip-range. */
  ips: ServiceIpAllocator[];
  nodePorts: NodePortAllocator;
}

interface ServicePort {
  name?: string;
  protocol?: string;
  port?: number;
  targetPort?: number | string;
  nodePort?: number;
  [field: string]: unknown;
}

interface ServiceSpec {
  type?: string;
  clusterIP?: string;
  clusterIPs?: string[];
  ipFamilies?: string[];
  ipFamilyPolicy?: string;
  ports?: ServicePort[];
  sessionAffinity?: string;
  sessionAffinityConfig?: { clientIP?: { timeoutSeconds?: number } };
  externalTrafficPolicy?: string;
  internalTrafficPolicy?: string;
  healthCheckNodePort?: number;
  allocateLoadBalancerNodePorts?: boolean;
  externalName?: string;
  externalIPs?: string[];
  loadBalancerIP?: string;
  loadBalancerSourceRanges?: string[];
  [field: string]: unknown;
}

interface Service extends StoredObject {
  spec?: ServiceSpec;
  status?: unknown;
}

const TYPES = ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'];

const needsClusterIp = (spec: ServiceSpec) => spec.type !== 'ExternalName';
const needsNodePorts = (spec: ServiceSpec) =>
  spec.type === 'NodePort' || (spec.type === 'LoadBalancer' && spec.allocateLoadBalancerNodePorts !== false);
const needsHealthCheckNodePort = (spec: ServiceSpec) =>
  spec.type === 'LoadBalancer' && spec.externalTrafficPolicy === 'Local';
const isHeadless = (spec: ServiceSpec) => spec.clusterIP === 'None';

function applyDefaults(spec: ServiceSpec): void {
  spec.type ??= 'ClusterIP';
  spec.sessionAffinity ??= 'None';
  if (spec.sessionAffinity === 'ClientIP') {
    spec.sessionAffinityConfig ??= {};
    spec.sessionAffinityConfig.clientIP ??= {};
    spec.sessionAffinityConfig.clientIP.timeoutSeconds ??= 10800;
  }
  if (spec.type !== 'ExternalName') spec.internalTrafficPolicy ??= 'Cluster';
  if (spec.type === 'NodePort' || spec.type === 'LoadBalancer') spec.externalTrafficPolicy ??= 'Cluster';
  if (spec.type === 'LoadBalancer') spec.allocateLoadBalancerNodePorts ??= true;
  for (const port of spec.ports ?? []) {
    port.protocol ??= 'TCP';
    if (port.targetPort === undefined || port.targetPort === 0 || port.targetPort === '') port.targetPort = port.port;
  }
}

/** The real registry's patchAllocatedValues: an update that omits allocated values keeps them. */
function keepAllocatedValues(old: ServiceSpec, spec: ServiceSpec): void {
  if (needsClusterIp(old) && needsClusterIp(spec)) {
    if (!spec.clusterIP && old.clusterIP) spec.clusterIP = old.clusterIP;
    if ((!spec.clusterIPs || spec.clusterIPs.length === 0) && old.clusterIPs && spec.clusterIP === old.clusterIP) {
      spec.clusterIPs = [...old.clusterIPs];
    }
    if (!spec.ipFamilies && old.ipFamilies && spec.clusterIP === old.clusterIP) spec.ipFamilies = [...old.ipFamilies];
    if (!spec.ipFamilyPolicy && old.ipFamilyPolicy && spec.clusterIP === old.clusterIP) spec.ipFamilyPolicy = old.ipFamilyPolicy;
  }
  if (needsNodePorts(old) && needsNodePorts(spec)) {
    const nodePortsOf = (s: ServiceSpec) => new Set((s.ports ?? []).map((p) => p.nodePort).filter((n) => n));
    const newPorts = nodePortsOf(spec);
    const byName = new Map((old.ports ?? []).map((p) => [p.name ?? '', p.nodePort]));
    for (const port of spec.ports ?? []) {
      if (port.nodePort) continue;
      const previous = byName.get(port.name ?? '');
      if (previous && !newPorts.has(previous)) port.nodePort = previous;
    }
  }
  if (needsHealthCheckNodePort(old) && needsHealthCheckNodePort(spec) && !spec.healthCheckNodePort) {
    spec.healthCheckNodePort = old.healthCheckNodePort;
  }
}

/** Drops fields that belong to another Service type (the real dropTypeDependentFields). */
function dropTypeDependentFields(spec: ServiceSpec): void {
  if (!needsClusterIp(spec)) {
    delete spec.clusterIP;
    delete spec.clusterIPs;
    delete spec.ipFamilies;
    delete spec.ipFamilyPolicy;
  }
  if (spec.type !== 'NodePort' && spec.type !== 'LoadBalancer') {
    for (const port of spec.ports ?? []) delete port.nodePort;
  }
  if (!needsHealthCheckNodePort(spec)) delete spec.healthCheckNodePort;
}

function validateStrict(svc: Service, allocators: ServiceAllocators): void {
  const spec = svc.spec ?? {};
  const e = new v.FieldErrors();
  e.check('metadata.name', v.dns1035Label(svc.metadata.name));
  e.check('spec.type', v.oneOf(spec.type, TYPES));
  const ports = spec.ports ?? [];
  if (ports.length === 0 && spec.type !== 'ExternalName' && !isHeadless(spec)) e.check('spec.ports', 'Required value');
  const seenNames = new Set<string>();
  ports.forEach((p, i) => {
    const f = `spec.ports[${i}]`;
    if (ports.length > 1 || p.name) {
      e.check(`${f}.name`, ports.length > 1 && !p.name ? 'Required value' : p.name ? v.dns1123Label(p.name) : undefined);
      if (p.name && seenNames.has(p.name)) e.check(`${f}.name`, `Duplicate value: ${JSON.stringify(p.name)}`);
      if (p.name) seenNames.add(p.name);
    }
    e.check(`${f}.port`, v.portNumber(p.port));
    e.check(`${f}.protocol`, v.protocol(p.protocol));
    e.check(`${f}.targetPort`, typeof p.targetPort === 'string' ? v.portName(p.targetPort) : v.portNumber(p.targetPort));
    if (p.nodePort && !allocators.nodePorts.contains(p.nodePort)) {
      e.check(`${f}.nodePort`, `provided port is not in the valid range. The range of valid ports is ${allocators.nodePorts.min}-${allocators.nodePorts.max}`);
    }
  });
  if (spec.type === 'ExternalName') e.check('spec.externalName', spec.externalName ? v.dns1123Subdomain(spec.externalName) : 'Required value');
  const ips = spec.clusterIPs ?? (spec.clusterIP ? [spec.clusterIP] : []);
  ips.forEach((ip, i) => {
    if (ip === 'None') return;
    const f = `spec.clusterIPs[${i}]`;
    if (v.ipAddress(ip)) e.check(f, v.ipAddress(ip));
    else if (!allocators.ips.some((a) => a.contains(ip))) {
      e.check(f, `provided IP is not in the valid range. The range of valid IPs is ${allocators.ips.map((a) => a.cidr.text).join(',')}`);
    }
  });
  (spec.externalIPs ?? []).forEach((ip, i) => e.check(`spec.externalIPs[${i}]`, v.ipAddress(ip)));
  (spec.loadBalancerSourceRanges ?? []).forEach((c, i) => e.check(`spec.loadBalancerSourceRanges[${i}]`, v.cidr(c)));
  if (spec.loadBalancerIP) e.check('spec.loadBalancerIP', v.ipAddress(spec.loadBalancerIP));
  e.check('spec.sessionAffinity', v.oneOf(spec.sessionAffinity, ['None', 'ClientIP']));
  const timeout = spec.sessionAffinityConfig?.clientIP?.timeoutSeconds;
  if (timeout !== undefined && (!Number.isInteger(timeout) || timeout < 1 || timeout > 86400)) {
    e.check('spec.sessionAffinityConfig.clientIP.timeoutSeconds', 'must be greater than 0 and less than 86400');
  }
  if (spec.internalTrafficPolicy !== undefined) e.check('spec.internalTrafficPolicy', v.oneOf(spec.internalTrafficPolicy, ['Cluster', 'Local']));
  if (spec.externalTrafficPolicy !== undefined) {
    const external = spec.type === 'NodePort' || spec.type === 'LoadBalancer' || (spec.externalIPs ?? []).length > 0;
    e.check('spec.externalTrafficPolicy', external ? v.oneOf(spec.externalTrafficPolicy, ['Cluster', 'Local']) : 'may only be set for externally-accessible services');
  }
  if (e.list.length > 0) throw errors.invalid('Service', svc.metadata.name, e.list);
}

/** Records claims made by one create/update so that a failure can undo them. */
class AllocationTransaction {
  private readonly undo: (() => void)[] = [];
  constructor(private readonly owner: string) {}

  claimIp(allocator: ServiceIpAllocator, ip: string, field: string, name: string): void {
    if (allocator.ownerOf(ip) === this.owner) return;
    if (!allocator.claim(ip, this.owner)) {
      throw errors.invalid('Service', name, [{ field, message: `Invalid value: "${ip}": provided IP is already allocated` }]);
    }
    this.undo.push(() => allocator.release(ip, this.owner));
  }

  allocateIp(allocator: ServiceIpAllocator): string {
    const ip = allocator.allocate(this.owner);
    this.undo.push(() => allocator.release(ip, this.owner));
    return ip;
  }

  claimPort(allocator: NodePortAllocator, port: number, field: string, name: string): void {
    if (allocator.ownerOf(port) === this.owner) return; // held already (by the old object, or another port of this one)
    if (!allocator.claim(port, this.owner)) {
      throw errors.invalid('Service', name, [{ field, message: `Invalid value: ${port}: provided port is already allocated` }]);
    }
    this.undo.push(() => allocator.release(port, this.owner));
  }

  allocatePort(allocator: NodePortAllocator): number {
    const port = allocator.allocate(this.owner);
    this.undo.push(() => allocator.release(port, this.owner));
    return port;
  }

  rollback(): void {
    for (const undo of this.undo.reverse()) undo();
  }
}

function familyOf(ip: string, fallback: IpFamily): IpFamily {
  return parseIp(ip)?.family ?? fallback;
}

function assignClusterIps(svc: Service, allocators: ServiceAllocators, txn: AllocationTransaction): void {
  const spec = svc.spec as ServiceSpec;
  const name = svc.metadata.name;
  const primary = allocators.ips[0] as ServiceIpAllocator;
  const allocatorFor = (family: string) => allocators.ips.find((a) => a.family === family);
  const given = spec.clusterIPs && spec.clusterIPs.length > 0 ? [...spec.clusterIPs] : spec.clusterIP ? [spec.clusterIP] : [];
  if (spec.clusterIP && given[0] !== spec.clusterIP) given[0] = spec.clusterIP;

  let families: string[] = spec.ipFamilies && spec.ipFamilies.length > 0
    ? [...spec.ipFamilies]
    : given.filter((ip) => ip !== 'None').map((ip) => familyOf(ip, primary.family));
  if (families.length === 0) families = [primary.family];
  const policy = spec.ipFamilyPolicy ?? (families.length > 1 ? 'RequireDualStack' : 'SingleStack');
  if ((policy === 'PreferDualStack' || policy === 'RequireDualStack') && families.length === 1) {
    const other = allocators.ips.find((a) => a.family !== families[0]);
    if (other) families.push(other.family);
    else if (policy === 'RequireDualStack') {
      throw errors.invalid('Service', name, [{ field: 'spec.ipFamilyPolicy', message: 'Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services' }]);
    }
  }
  for (const [i, family] of families.entries()) {
    if (!allocatorFor(family)) {
      throw errors.invalid('Service', name, [{ field: `spec.ipFamilies[${i}]`, message: `Invalid value: "${family}": not configured on this cluster` }]);
    }
  }
  spec.ipFamilies = families;
  spec.ipFamilyPolicy = policy;

  if (given[0] === 'None') {
    spec.clusterIP = 'None';
    spec.clusterIPs = ['None'];
    return;
  }
  const ips = families.map((family, i) => {
    const allocator = allocatorFor(family) as ServiceIpAllocator;
    const requested = given[i];
    if (requested === undefined || requested === '') return txn.allocateIp(allocator);
    if (allocator.contains(requested)) txn.claimIp(allocator, requested, `spec.clusterIPs[${i}]`, name);
    return requested; // out of range or malformed: stored as given, untracked (strict validation refused it earlier)
  });
  spec.clusterIP = ips[0];
  spec.clusterIPs = ips;
}

function assignNodePorts(svc: Service, allocators: ServiceAllocators, txn: AllocationTransaction): void {
  const spec = svc.spec as ServiceSpec;
  const nodePorts = allocators.nodePorts;
  if (needsNodePorts(spec)) {
    (spec.ports ?? []).forEach((port, i) => {
      if (port.nodePort) {
        if (nodePorts.contains(port.nodePort)) txn.claimPort(nodePorts, port.nodePort, `spec.ports[${i}].nodePort`, svc.metadata.name);
      } else {
        port.nodePort = txn.allocatePort(nodePorts);
      }
    });
  } else if (spec.type === 'LoadBalancer') {
    (spec.ports ?? []).forEach((port, i) => {
      if (port.nodePort && nodePorts.contains(port.nodePort)) txn.claimPort(nodePorts, port.nodePort, `spec.ports[${i}].nodePort`, svc.metadata.name);
    });
  }
  if (needsHealthCheckNodePort(spec)) {
    if (spec.healthCheckNodePort) {
      if (nodePorts.contains(spec.healthCheckNodePort)) txn.claimPort(nodePorts, spec.healthCheckNodePort, 'spec.healthCheckNodePort', svc.metadata.name);
    } else {
      spec.healthCheckNodePort = txn.allocatePort(nodePorts);
    }
  }
}

/** The tracked (in-range) values a Service holds, for releasing on update/delete. */
function heldValues(spec: ServiceSpec | undefined, allocators: ServiceAllocators): { ips: string[]; ports: number[] } {
  // A Service stored raw (a test's malformed object, store.ts WriteOptions.raw) may hold anything here.
  if (!spec || typeof spec !== 'object') return { ips: [], ports: [] };
  const listed = Array.isArray(spec.clusterIPs) ? spec.clusterIPs : spec.clusterIP ? [spec.clusterIP] : [];
  const ips = needsClusterIp(spec) ? listed.filter((ip) => typeof ip === 'string' && ip && ip !== 'None') : [];
  const ports = (Array.isArray(spec.ports) ? spec.ports : []).map((p) => p?.nodePort).filter((n): n is number => typeof n === 'number' && n > 0);
  if (typeof spec.healthCheckNodePort === 'number') ports.push(spec.healthCheckNodePort);
  return { ips, ports: ports.filter((p) => allocators.nodePorts.contains(p)) };
}

export function ownerKey(obj: StoredObject): string {
  return `${obj.metadata.namespace ?? ''}/${obj.metadata.name}`;
}

export function releaseService(svc: Service, allocators: ServiceAllocators, keep?: Service): void {
  const owner = ownerKey(svc);
  const held = heldValues(svc.spec, allocators);
  const kept = heldValues(keep?.spec, allocators);
  for (const ip of held.ips) {
    if (kept.ips.includes(ip)) continue;
    for (const allocator of allocators.ips) allocator.release(ip, owner);
  }
  for (const port of held.ports) if (!kept.ports.includes(port)) allocators.nodePorts.release(port, owner);
}

export function prepareServiceCreate(svc: Service, allocators: ServiceAllocators, strict: boolean): void {
  svc.spec ??= {};
  applyDefaults(svc.spec);
  dropTypeDependentFields(svc.spec);
  if (strict) validateStrict(svc, allocators);
  const txn = new AllocationTransaction(ownerKey(svc));
  try {
    if (needsClusterIp(svc.spec)) assignClusterIps(svc, allocators, txn);
    assignNodePorts(svc, allocators, txn);
  } catch (err) {
    txn.rollback();
    throw err;
  }
  svc.status = { loadBalancer: {} };
}

export function prepareServiceUpdate(old: Service, svc: Service, allocators: ServiceAllocators, strict: boolean): void {
  svc.spec ??= {};
  applyDefaults(svc.spec);
  keepAllocatedValues(old.spec ?? {}, svc.spec);
  dropTypeDependentFields(svc.spec);
  const oldSpec = old.spec ?? {};
  if (needsClusterIp(oldSpec) && needsClusterIp(svc.spec) && oldSpec.clusterIP && svc.spec.clusterIP !== oldSpec.clusterIP) {
    throw errors.invalid('Service', svc.metadata.name, [
      { field: 'spec.clusterIPs[0]', message: `Invalid value: ${JSON.stringify(svc.spec.clusterIP ?? '')}: may not change once set` },
    ]);
  }
  if (strict) validateStrict(svc, allocators);
  const txn = new AllocationTransaction(ownerKey(svc));
  try {
    if (needsClusterIp(svc.spec)) assignClusterIps(svc, allocators, txn);
    assignNodePorts(svc, allocators, txn);
  } catch (err) {
    txn.rollback();
    throw err;
  }
  // status is carried over by the store: only /status writes change it.
  releaseService(old, allocators, svc);
}
