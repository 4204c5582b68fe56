// Builders for Services, EndpointSlices and expectations used by the translate tests.

import type { V1Endpoint, V1EndpointSlice, V1Service, V1ServicePort, V1ServiceSpec, V1ServiceStatus } from '@kubernetes/client-node';
import type { Frontend, NodeContext, ServiceTranslation } from '../../src/model/frontend';

export const NODE: NodeContext = { name: 'node-a', zone: 'zone-a', addresses: ['192.0.2.10'] };

export interface SvcInput extends Partial<V1ServiceSpec> {
  name?: string;
  namespace?: string;
  labels?: Record<string, string>;
  status?: V1ServiceStatus;
  created?: string;
}

export const HTTP: V1ServicePort = { name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' };

export function svc(input: SvcInput = {}): V1Service {
  const { name = 'web', namespace = 'default', labels, status, created, ...spec } = input;
  const s: V1Service = {
    metadata: { name, namespace, ...(labels ? { labels } : {}), ...(created ? { creationTimestamp: new Date(created) } : {}) },
    spec: {
      type: 'ClusterIP',
      clusterIP: '10.96.0.10',
      clusterIPs: spec.clusterIP && !spec.clusterIPs ? [spec.clusterIP] : ['10.96.0.10'],
      ipFamilies: ['IPv4'],
      ports: [HTTP],
      ...spec,
    },
  };
  if (status) s.status = status;
  return s;
}

export interface EpInput {
  node?: string;
  zone?: string;
  ready?: boolean;
  serving?: boolean;
  terminating?: boolean;
  zones?: string[];
  nodes?: string[];
  extra?: string[];
}

export function ep(address: string, o: EpInput = {}): V1Endpoint {
  const e: V1Endpoint = { addresses: [address, ...(o.extra ?? [])] };
  const cond: NonNullable<V1Endpoint['conditions']> = {};
  if (o.ready !== undefined) cond.ready = o.ready;
  if (o.serving !== undefined) cond.serving = o.serving;
  if (o.terminating !== undefined) cond.terminating = o.terminating;
  if (Object.keys(cond).length > 0) e.conditions = cond;
  if (o.node) e.nodeName = o.node;
  if (o.zone) e.zone = o.zone;
  if (o.zones || o.nodes) {
    e.hints = {};
    if (o.zones) e.hints.forZones = o.zones.map((name) => ({ name }));
    if (o.nodes) e.hints.forNodes = o.nodes.map((name) => ({ name }));
  }
  return e;
}

export interface SliceInput {
  service?: string;
  namespace?: string;
  addressType?: string;
  ports?: { name?: string; port?: number; protocol?: string }[];
  labels?: Record<string, string>;
}

export function slice(name: string, endpoints: V1Endpoint[], o: SliceInput = {}): V1EndpointSlice {
  return {
    metadata: {
      name,
      namespace: o.namespace ?? 'default',
      labels: { 'kubernetes.io/service-name': o.service ?? 'web', ...(o.labels ?? {}) },
    },
    addressType: o.addressType ?? 'IPv4',
    ports: o.ports ?? [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints,
  };
}

/** "Kind host:port/PROTO[ internal]". */
export function frontendId(fe: Frontend): string {
  const host = fe.address.includes(':') ? `[${fe.address}]` : fe.address;
  return `${fe.kind} ${host}:${fe.port}/${fe.proto}${fe.scope === 'internal' ? ' internal' : ''}`;
}

/** "ip:port", with " T" when the backend is there through the terminating fallback. */
export function backendIds(fe: Frontend): string[] {
  return fe.backends.map((b) => {
    const host = b.address.includes(':') ? `[${b.address}]` : b.address;
    return `${host}:${b.port}${b.terminating ? ' T' : ''}`;
  });
}

export function summarize(t: ServiceTranslation): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const fe of t.frontends) out[frontendId(fe)] = backendIds(fe);
  return out;
}
