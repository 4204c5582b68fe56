// The bench's synthetic cluster as Kubernetes API objects, for the built-in
// API server the agent watches: the same Services as bench/services.ts (one
// TCP and one UDP port each, ClusterIP from 198.19.0.0/16, ten endpoints
// 198.18.1.1-10:8080), one EndpointSlice per Service, optionally of type
// NodePort with a node port per service port.
import { BACKEND_COUNT, BACKEND_PORT, backendAddress, vipFor } from './services';

export const BENCH_NAMESPACE = 'bench';
/** The built-in API's --service-cluster-ip-range for the bench: the VIPs of services.ts. */
export const BENCH_SERVICE_CIDR = '198.19.0.0/16';
/** Wide enough for 10 000 Services x 2 NodePorts (TCP, UDP) each. */
export const BENCH_NODEPORT_RANGE = '10000-32767';
export const BENCH_NODEPORT_BASE = 10000;

export interface ClusterShape {
  /** Service ports per Service: TCP only, or TCP + UDP (kube-dns-like, the data-path half's shape). */
  protos: Array<'TCP' | 'UDP'>;
  type: 'ClusterIP' | 'NodePort';
  /** Node name of the endpoints (the agent treats endpoints on its own node as local). */
  endpointNode?: string;
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
  const { vip, port } = vipFor(i);
  return {
    apiVersion: 'v1', kind: 'Service',
    metadata: { name: serviceName(i), namespace: BENCH_NAMESPACE },
    spec: {
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
  const { port } = vipFor(i);
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: {
      name: `${serviceName(i)}-1`, namespace: BENCH_NAMESPACE,
      labels: { 'kubernetes.io/service-name': serviceName(i), 'endpointslice.kubernetes.io/managed-by': 'sluice-bench' },
    },
    addressType: 'IPv4',
    ports: shape.protos.map((proto) => ({ name: portName(proto, port), port: BACKEND_PORT, protocol: proto })),
    endpoints: Array.from({ length: endpoints }, (_, e) => ({
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
