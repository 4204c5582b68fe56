// healthCheckNodePort servers for Services with externalTrafficPolicy: Local,
// answering like kube-proxy (pkg/proxy/healthcheck/service_health.go): any
// GET returns 200 when this node has local endpoints for the Service and the
// proxy is healthy, 503 otherwise, with the header
// X-Load-Balancing-Endpoint-Weight and the same JSON body:
//   {"service":{"namespace":…,"name":…},"localEndpoints":N,"serviceProxyHealthy":true}
// Cloud load balancers probe it to send traffic only to nodes with backends.
//
// Declarative, as kube-proxy's: syncServices(wanted listeners) then
// syncEndpoints(local endpoint counts); each call makes the state equal to
// its argument.
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface HealthCheckService {
  namespace: string;
  name: string;
  /** spec.healthCheckNodePort */
  port: number;
}

export interface HealthCheckOptions {
  /**
   * Addresses to listen on (kube-proxy: nodePortAddresses); default both
   * families, as kube-proxy's `:port`. `::` listens on IPv6 only (IPV6_V6ONLY)
   * so that it and `0.0.0.0` can both be given; a node without IPv6 skips it.
   */
  addresses?: string[];
  /** The proxy's own health (kube-proxy answers 503 when its healthz fails). */
  proxyHealthy?: () => boolean;
  /** Errors of listeners (port in use, ...); default: ignored after close. */
  onError?: (service: string, err: Error) => void;
}

/** kube-proxy's default: every address of both families. */
export const ALL_ADDRESSES = ['0.0.0.0', '::'];

const serviceKey = (s: { namespace: string; name: string }) => `${s.namespace}/${s.name}`;

interface Listener {
  service: HealthCheckService;
  servers: http.Server[];
}

export class HealthCheckServer {
  private readonly listeners = new Map<string, Listener>();
  private endpoints = new Map<string, number>();
  private readonly addresses: string[];
  private readonly proxyHealthy: () => boolean;

  constructor(private readonly opts: HealthCheckOptions = {}) {
    this.addresses = opts.addresses ?? ALL_ADDRESSES;
    this.proxyHealthy = opts.proxyHealthy ?? (() => true);
  }

  /** Open listeners for new services (or a changed port), close the ones not wanted. */
  async syncServices(services: HealthCheckService[]): Promise<void> {
    const wanted = new Map(services.map((s) => [serviceKey(s), s]));
    const closing: Array<Promise<void>> = [];
    for (const [key, l] of this.listeners) {
      const w = wanted.get(key);
      if (w && w.port === l.service.port) continue;
      this.listeners.delete(key);
      closing.push(...l.servers.map((s) => closeServer(s)));
    }
    await Promise.all(closing);
    const opening: Array<Promise<void>> = [];
    for (const [key, s] of wanted) {
      if (this.listeners.has(key)) continue;
      const servers = this.addresses.map((address) => this.listen(s, address, opening));
      this.listeners.set(key, { service: s, servers });
    }
    await Promise.all(opening);
  }

  /** Local endpoint counts by "namespace/name"; services not named have 0. */
  syncEndpoints(counts: Map<string, number> | Record<string, number>): void {
    this.endpoints = counts instanceof Map ? new Map(counts) : new Map(Object.entries(counts));
  }

  /** The port each service actually listens on (useful with port 0 in tests). */
  ports(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [key, l] of this.listeners) {
      const addr = l.servers[0]?.address() as AddressInfo | null;
      if (addr) out.set(key, addr.port);
    }
    return out;
  }

  async close(): Promise<void> {
    const all = [...this.listeners.values()].flatMap((l) => l.servers);
    this.listeners.clear();
    await Promise.all(all.map((s) => closeServer(s)));
  }

  /** What a probe gets, without HTTP (for `sluice status`). */
  answer(namespace: string, name: string): { status: number; body: string; count: number } {
    const count = this.endpoints.get(serviceKey({ namespace, name })) ?? 0;
    const healthy = this.proxyHealthy();
    const body = JSON.stringify(
      { service: { namespace, name }, localEndpoints: count, serviceProxyHealthy: healthy },
      null,
      '\t',
    );
    return { status: count > 0 && healthy ? 200 : 503, body, count };
  }

  private listen(s: HealthCheckService, address: string, pending: Array<Promise<void>>): http.Server {
    const server = http.createServer((req, res) => {
      const a = this.answer(s.namespace, s.name);
      res.writeHead(a.status, {
        'Content-Type': 'application/json',
        'X-Content-Type-Options': 'nosniff',
        'X-Load-Balancing-Endpoint-Weight': String(a.count),
      });
      res.end(req.method === 'HEAD' ? undefined : a.body);
    });
    pending.push(
      new Promise<void>((resolve, reject) => {
        server.once('error', (err: NodeJS.ErrnoException) => {
          // `::` on a node whose kernel has IPv6 off: IPv4 is served, nothing to say.
          if (address === '::' && (err.code === 'EAFNOSUPPORT' || err.code === 'EADDRNOTAVAIL')) return resolve();
          const e = new Error(`healthCheckNodePort ${s.port} of Service ${serviceKey(s)} on ${address}: ${err.message}`);
          if (this.opts.onError) { this.opts.onError(serviceKey(s), e); resolve(); } else reject(e);
        });
        server.listen({ port: s.port, host: address, ipv6Only: address === '::' }, () => resolve());
      }),
    );
    return server;
  }
}

function closeServer(server: http.Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
