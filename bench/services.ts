// The synthetic cluster the bench loads into every mode: S Services, each
// with one ClusterIP port per protocol and the same ten backend Pods.
//
// Addresses (TESTING.md): backends 198.18.1.1-10, VIPs from 198.19.0.0/16.
// 198.19.0.0/16 holds 65 534 usable VIPs, so Services past that reuse the
// addresses with the next port (80, 81, ...): every (VIP, port) stays unique,
// as kube-proxy and Sluice key on the triple (address, protocol, port).

export type Proto = 'tcp' | 'udp';

export interface Endpoint {
  address: string;
  port: number;
}

export interface ServicePort {
  /** kube-proxy's ServicePortName: namespace/name:port-name. */
  name: string;
  namespace: string;
  service: string;
  portName: string;
  vip: string;
  port: number;
  proto: Proto;
  endpoints: Endpoint[];
}

export const BACKEND_PORT = 8080;
export const BACKEND_COUNT = 10;
export const VIP_CIDR = '198.19.0.0/16';
export const BACKEND_CIDR = '198.18.1.0/24';
/** The "pod CIDR" kube-proxy is told about: the client links live in it, so
 *  client -> ClusterIP traffic is pod-to-service traffic, not masqueraded. */
export const CLUSTER_CIDR = '198.18.0.0/24';

const VIPS_PER_PORT = 65534;

export function backendAddress(i: number): string {
  return `198.18.1.${i + 1}`;
}

export function backends(): Endpoint[] {
  return Array.from({ length: BACKEND_COUNT }, (_, i) => ({ address: backendAddress(i), port: BACKEND_PORT }));
}

export function vipFor(index: number): { vip: string; port: number } {
  const host = (index % VIPS_PER_PORT) + 1;
  return { vip: `198.19.${host >> 8}.${host & 255}`, port: 80 + Math.floor(index / VIPS_PER_PORT) };
}

/** Service ports for `count` Services and the given protocols. */
export function makeServicePorts(count: number, protos: Proto[]): ServicePort[] {
  const eps = backends();
  const out: ServicePort[] = [];
  for (let i = 0; i < count; i++) {
    const { vip, port } = vipFor(i);
    for (const proto of protos) {
      const service = `svc-${i}`;
      const portName = `${proto}${port}`;
      out.push({ name: `bench/${service}:${portName}`, namespace: 'bench', service, portName, vip, port, proto, endpoints: eps });
    }
  }
  return out;
}

/** "address port" lines, the target list format of build/connbench. */
export function targetLines(targets: Array<{ address: string; port: number }>): string {
  return targets.map((t) => `${t.address} ${t.port}`).join('\n') + '\n';
}
