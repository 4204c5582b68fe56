// The bench's synthetic cluster as Kubernetes API objects, for the built-in
// API server the agent watches: the same Services as bench/services.ts (one
// TCP and one UDP port each, ClusterIP from 198.19.0.0/16, ten endpoints
// 198.18.1.1-10:8080), one EndpointSlice per Service, optionally of type
// NodePort with a node port per service port.
import { BACKEND_COUNT, BACKEND_PORT, backendAddress, vipFor } from './services';

export const BENCH_NAMESPACE = 'bench';
/** The built-in API's --service-cluster-ip-range for the bench: the VIPs of services.ts. */
export const BENCH_SERVICE_CIDR = '198.19.0.0/16';
/**
 * The realistic shape's --service-cluster-ip-range: one ClusterIP per Service
 * up to 131 070 (the API refuses two Services one ClusterIP, and the /16
 * above holds 65 534). Control-plane only: no packet is ever sent to them.
 */
export const REALISTIC_SERVICE_CIDR = '198.18.0.0/15';

/** Service i's ClusterIP and port in this shape. */
export function vipOf(i: number, shape: ClusterShape): { vip: string; port: number } {
  if (!shape.realistic) return vipFor(i);
  const n = i + 1;
  return { vip: `198.${18 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`, port: 80 };
}
/** Wide enough for 10 000 Services x 2 NodePorts (TCP, UDP) each. */
export const BENCH_NODEPORT_RANGE = '10000-32767';
export const BENCH_NODEPORT_BASE = 10000;

export interface ClusterShape {
  /** Service ports per Service: TCP only, or TCP + UDP (kube-dns-like, the data-path half's shape). */
  protos: Array<'TCP' | 'UDP'>;
  type: 'ClusterIP' | 'NodePort';
  /** Node name of the endpoints (the agent treats endpoints on its own node as local). */
  endpointNode?: string;
  /**
   * Objects as a real cluster holds them (the control-plane half, no
   * traffic): managedFields, uid, ownerReferences, last-applied and trigger
   * annotations, a selector; endpoints with distinct addresses (Service i's
   * e-th endpoint: realisticBackendAddress), targetRef, nodeName of one of
   * 100 nodes, zone of one of 3. The agent keeps only what it needs of them.
   */
  realistic?: boolean;
}

/** Service i's e-th endpoint in a realistic cluster: distinct across 13 107 Services x 10, from 198.18.0.0/15. */
export function realisticBackendAddress(i: number, e: number): string {
  const n = (i * BACKEND_COUNT + e) % 131072;
  return `198.${18 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`;
}

const uid = (kind: string, i: number) => `${kind}0000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
const TIME = '2026-11-30T12:00:00Z';

/** What the API server and kubectl add to an object: the bulk of a real one that the agent ignores. */
function realisticMetadata(kind: 'svc' | 'eps', i: number, fields: Record<string, unknown>): Record<string, unknown> {
  return {
    uid: uid(kind, i),
    creationTimestamp: TIME,
    generation: 1,
    managedFields: [{
      manager: kind === 'svc' ? 'kubectl-client-side-apply' : 'kube-controller-manager',
      operation: 'Update', apiVersion: kind === 'svc' ? 'v1' : 'discovery.k8s.io/v1', time: TIME, fieldsType: 'FieldsV1',
      fieldsV1: fields,
    }],
  };
}

export function serviceName(i: number): string {
  return `svc-${i}`;
}

const portName = (proto: string, port: number) => `${proto.toLowerCase()}${port}`;

/** NodePort of Service i's TCP or UDP port, in a cluster of `services` Services. */
export function nodePortOf(i: number, proto: 'TCP' | 'UDP', services: number): number {
  return BENCH_NODEPORT_BASE + i + (proto === 'UDP' ? services : 0);
}

export function serviceObject(i: number, shape: ClusterShape, services = 0): Record<string, unknown> {
  const { vip, port } = vipOf(i, shape);
  const extra = shape.realistic
    ? {
      metadata: {
        ...realisticMetadata('svc', i, { 'f:metadata': { 'f:annotations': { '.': {}, 'f:kubectl.kubernetes.io/last-applied-configuration': {} }, 'f:labels': { '.': {}, 'f:app': {} } }, 'f:spec': { 'f:ports': { '.': {} }, 'f:selector': {}, 'f:sessionAffinity': {}, 'f:type': {} } }),
        labels: { app: serviceName(i), 'app.kubernetes.io/part-of': 'bench' },
        annotations: { 'kubectl.kubernetes.io/last-applied-configuration': JSON.stringify({ apiVersion: 'v1', kind: 'Service', metadata: { name: serviceName(i), namespace: BENCH_NAMESPACE }, spec: { selector: { app: serviceName(i) } } }) },
      },
      spec: { selector: { app: serviceName(i) }, sessionAffinity: 'None', ipFamilies: ['IPv4'], ipFamilyPolicy: 'SingleStack', internalTrafficPolicy: 'Cluster' },
    }
    : { metadata: {}, spec: {} };
  return {
    apiVersion: 'v1', kind: 'Service',
    metadata: { name: serviceName(i), namespace: BENCH_NAMESPACE, ...extra.metadata },
    spec: {
      ...extra.spec,
      type: shape.type,
      clusterIP: vip,
      ports: shape.protos.map((proto) => ({
        name: portName(proto, port), port, protocol: proto, targetPort: BACKEND_PORT,
        ...(shape.type === 'NodePort' ? { nodePort: nodePortOf(i, proto, services) } : {}),
      })),
      ...(shape.type === 'NodePort' ? { externalTrafficPolicy: 'Cluster' } : {}),
    },
  };
}

/** Service i's slice with the first `endpoints` of the ten backends. */
export function sliceObject(i: number, shape: ClusterShape, endpoints = BACKEND_COUNT): Record<string, unknown> {
  const { port } = vipOf(i, shape);
  const name = `${serviceName(i)}-1`;
  const realistic = shape.realistic
    ? {
      ...realisticMetadata('eps', i, { 'f:addressType': {}, 'f:endpoints': {}, 'f:metadata': { 'f:labels': { '.': {}, 'f:kubernetes.io/service-name': {} }, 'f:ownerReferences': { '.': {} } }, 'f:ports': {} }),
      generateName: `${serviceName(i)}-`,
      ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: serviceName(i), uid: uid('svc', i), controller: true, blockOwnerDeletion: true }],
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': TIME },
    }
    : {};
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: {
      name, namespace: BENCH_NAMESPACE,
      labels: { 'kubernetes.io/service-name': serviceName(i), 'endpointslice.kubernetes.io/managed-by': shape.realistic ? 'endpointslice-controller.k8s.io' : 'sluice-bench' },
      ...realistic,
    },
    addressType: 'IPv4',
    ports: shape.protos.map((proto) => ({ name: portName(proto, port), port: BACKEND_PORT, protocol: proto })),
    endpoints: Array.from({ length: endpoints }, (_, e) => (shape.realistic
      ? {
        addresses: [realisticBackendAddress(i, e)],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: shape.endpointNode ?? `node-${(i * BACKEND_COUNT + e) % 100}`,
        zone: `zone-${(i + e) % 3}`,
        targetRef: { kind: 'Pod', namespace: BENCH_NAMESPACE, name: `${serviceName(i)}-7d9f8c6b5-${e.toString(36).padStart(5, 'x')}`, uid: uid('pod', i * BACKEND_COUNT + e) },
      }
      : {
        addresses: [backendAddress(e)],
        conditions: { ready: true, serving: true, terminating: false },
        ...(shape.endpointNode ? { nodeName: shape.endpointNode } : {}),
      })),
  };
}

/** The store surface the bench needs (ObjectStore of the built-in API). */
export interface WritableStore {
  create(resource: 'services' | 'endpointslices' | 'nodes' | 'namespaces', obj: Record<string, unknown>): unknown;
  update(resource: 'services' | 'endpointslices' | 'nodes' | 'namespaces', obj: Record<string, unknown>): unknown;
}

/** Namespace, the agent's Node, S Services and their slices. */
export function preload(store: WritableStore, services: number, shape: ClusterShape, node: { name: string; address: string }): void {
  store.create('namespaces', { metadata: { name: BENCH_NAMESPACE } });
  store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: node.name }, status: { addresses: [{ type: 'InternalIP', address: node.address }] } });
  for (let i = 0; i < services; i++) {
    store.create('services', serviceObject(i, shape, services));
    store.create('endpointslices', sliceObject(i, shape));
  }
}
