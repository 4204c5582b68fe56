// The synthetic cluster the bench loads into every mode: S Services, each
// with one ClusterIP port per protocol and the same ten backend Pods.
//
// Addresses (TESTING.md): backends 198.18.1.1-10, VIPs from 198.19.0.0/16.
// 198.19.0.0/16 holds 65 534 usable VIPs, so Services past that reuse the
// addresses with the next port (80, 81, ...): every (VIP, port) stays unique,
// as kube-proxy and Sluice key on the triple (address, protocol, port).
// IPv6 (issue 14) is the same cluster in ULA space: backends fd00:18:1::1-a,
// VIPs fd00:19::1-fffe (the same host numbers), client links in fd00:18::/64.

export type Proto = 'tcp' | 'udp';
export type Family = 4 | 6;
export const FAMILIES: Family[] = [4, 6];

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
  /** The VIP's and endpoints' address family (4 when absent). */
  family?: Family;
}

export const BACKEND_PORT = 8080;
export const BACKEND_COUNT = 10;
export const VIP_CIDR = '198.19.0.0/16';
export const BACKEND_CIDR = '198.18.1.0/24';
/** The "pod CIDR" kube-proxy is told about: the client links live in it, so
 *  client -> ClusterIP traffic is pod-to-service traffic, not masqueraded. */
export const CLUSTER_CIDR = '198.18.0.0/24';

/** The CIDRs above, per family. */
export const CIDRS: Record<Family, { backends: string; vips: string; cluster: string }> = {
  4: { backends: BACKEND_CIDR, vips: VIP_CIDR, cluster: CLUSTER_CIDR },
  6: { backends: 'fd00:18:1::/64', vips: 'fd00:19::/112', cluster: 'fd00:18::/64' },
};

const VIPS_PER_PORT = 65534;

export function backendAddress(i: number, family: Family = 4): string {
  return family === 6 ? `fd00:18:1::${(i + 1).toString(16)}` : `198.18.1.${i + 1}`;
}

export function backends(family: Family = 4): Endpoint[] {
  return Array.from({ length: BACKEND_COUNT }, (_, i) => ({ address: backendAddress(i, family), port: BACKEND_PORT }));
}

export function vipFor(index: number, family: Family = 4): { vip: string; port: number } {
  const host = (index % VIPS_PER_PORT) + 1;
  const vip = family === 6 ? `fd00:19::${host.toString(16)}` : `198.19.${host >> 8}.${host & 255}`;
  return { vip, port: 80 + Math.floor(index / VIPS_PER_PORT) };
}

/** Service ports for `count` Services and the given protocols (IPv6: same names, the family's addresses). */
export function makeServicePorts(count: number, protos: Proto[], family: Family = 4): ServicePort[] {
  const eps = backends(family);
  const out: ServicePort[] = [];
  for (let i = 0; i < count; i++) {
    const { vip, port } = vipFor(i, family);
    for (const proto of protos) {
      const service = `svc-${i}`;
      const portName = `${proto}${port}`;
      out.push({ name: `bench/${service}:${portName}`, namespace: 'bench', service, portName, vip, port, proto, endpoints: eps, family });
    }
  }
  return out;
}

/** A port list's family (all of one family; an empty list is IPv4). */
export function familyOf(ports: ServicePort[]): Family {
  return ports[0]?.family ?? 4;
}

/** address:port as kube-proxy and the loaders write it ([a]:p for IPv6). */
export function hostPort(address: string, port: number): string {
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}

/** "address port" lines, the target list format of build/connbench. */
export function targetLines(targets: Array<{ address: string; port: number }>): string {
  return targets.map((t) => `${t.address} ${t.port}`).join('\n') + '\n';
}
