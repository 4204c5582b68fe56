// The built-in Kubernetes API server: composes the store, the allocators, the
// watch hub and the HTTP handler, and gives tests a handle to drive it.

import { writeFile } from 'node:fs/promises';
import { createServer, Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { stringify as toYaml } from 'yaml';
import { NodePortAllocator, ServiceIpAllocator } from './allocators';
import { handleRequest } from './http-handler';
import { parseIp } from './ip';
import { ObjectStore } from './store';
import { WatchHub } from './watch';

export interface ApiServerOptions {
  /** Listen address; default 127.0.0.1. */
  host?: string;
  /** 0 (the default) picks a free port. */
  port?: number;
  /** As kube-apiserver's --service-cluster-ip-range: one CIDR, or two of different families ("10.96.0.0/12,fd00:10:96::/112"). */
  serviceCIDR?: string;
  /** As --service-node-port-range; default "30000-32767". */
  nodePortRange?: string;
  /** Changes kept for watches to resume from; default 1000. */
  historySize?: number;
  /** How often a watch with allowWatchBookmarks=true gets a BOOKMARK; default 1000 ms, 0 = never. */
  bookmarkIntervalMs?: number;
  /** Create default/kubernetes (ClusterIP = first address of the CIDR) pointing at this endpoint. */
  createKubernetesService?: { address: string; port: number };
  /** Reject invalid Services/EndpointSlices with 422, as a real cluster would. Default false: store them, so tests can feed the agent bad input. */
  strictValidation?: boolean;
  /** Disconnect a watcher whose unread output exceeds this; default 64 MiB. */
  maxWatchBufferBytes?: number;
  logger?: Logger;
  /** Listen on an address other than loopback. The server has no authentication: anyone who reaches it can rewrite every Service. */
  allowNonLoopback?: boolean;
}

/** 127.0.0.0/8, ::1, localhost (and ::ffff:127.x): reachable from this host's network namespace only. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^(::ffff:)?127\.\d+\.\d+\.\d+$/.test(h);
}

export interface ApiServerHandle {
  /** e.g. http://127.0.0.1:40123 */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** Synchronous create/get/list/update/patch/delete with the same semantics as the HTTP API. */
  readonly store: ObjectStore;
  /** Open watch streams right now. */
  readonly activeWatches: number;
  /** Forget the change history: watches resuming from any earlier resourceVersion get 410 Expired. */
  compactHistory(): void;
  /** End every open watch (default: cut the connection, as a network drop). Returns how many. */
  closeAllWatches(mode?: 'drop' | 'graceful'): number;
  /** A kubeconfig (YAML) that client-node's KubeConfig.loadFromString/loadFromFile accepts. */
  kubeconfig(namespace?: string): string;
  writeKubeconfig(path: string, namespace?: string): Promise<void>;
  close(): Promise<void>;
}

const DEFAULT_NAMESPACES = ['default', 'kube-system'];

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

export async function startApiServer(options: ApiServerOptions = {}): Promise<ApiServerHandle> {
  const host = options.host ?? '127.0.0.1';
  if (!isLoopbackHost(host) && !options.allowNonLoopback) {
    throw new Error(
      `refusing to listen on ${host}: the built-in API server has no authentication, so anyone who reaches it can rewrite ` +
        'every Service; listen on loopback, or pass --allow-non-loopback (allowNonLoopback: true) to expose it deliberately',
    );
  }
  const cidrs = (options.serviceCIDR ?? '10.96.0.0/12').split(',').map((c) => c.trim()).filter((c) => c !== '');
  const ips = cidrs.map((c) => new ServiceIpAllocator(c));
  if (ips.length === 0 || ips.length > 2 || (ips.length === 2 && ips[0]?.family === ips[1]?.family)) {
    throw new Error(`apiserver: serviceCIDR "${options.serviceCIDR}": expected one CIDR, or one IPv4 and one IPv6`);
  }
  const nodePorts = new NodePortAllocator(options.nodePortRange ?? '30000-32767');
  const strict = options.strictValidation ?? false;
  const logger = options.logger;
  const store = new ObjectStore({
    historySize: options.historySize ?? 1000,
    strictValidation: strict,
    context: { allocators: { ips, nodePorts }, strict },
  });
  for (const name of DEFAULT_NAMESPACES) store.create('namespaces', { metadata: { name } });

  const watches = new WatchHub(store, {
    bookmarkIntervalMs: options.bookmarkIntervalMs ?? 1000,
    maxBufferedBytes: options.maxWatchBufferBytes ?? 64 * 1024 * 1024,
    logger,
  });
  let address = '';
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    void handleRequest(req, res, { store, watches, serverAddress: () => address, logger });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await listen(server, options.port ?? 0, host);
  const bound = server.address();
  const port = typeof bound === 'object' && bound ? bound.port : (options.port ?? 0);
  const hostInUrl = parseIp(host)?.family === 'IPv6' ? `[${host}]` : host;
  address = `${hostInUrl}:${port}`;
  const url = `http://${address}`;

  if (options.createKubernetesService) {
    const { address: endpoint, port: endpointPort } = options.createKubernetesService;
    const family = parseIp(endpoint)?.family ?? 'IPv4';
    store.create('services', {
      metadata: { name: 'kubernetes', namespace: 'default', labels: { component: 'apiserver', provider: 'kubernetes' } },
      spec: {
        type: 'ClusterIP',
        clusterIP: ips[0]?.kubernetesServiceIp,
        ports: [{ name: 'https', port: 443, protocol: 'TCP', targetPort: endpointPort }],
        sessionAffinity: 'None',
      },
    });
    store.create('endpointslices', {
      metadata: { name: 'kubernetes', namespace: 'default', labels: { 'kubernetes.io/service-name': 'kubernetes', 'endpointslice.kubernetes.io/managed-by': 'sluice-builtin-apiserver' } },
      addressType: family,
      endpoints: [{ addresses: [endpoint], conditions: { ready: true, serving: true, terminating: false } }],
      ports: [{ name: 'https', port: endpointPort, protocol: 'TCP' }],
    });
  }
  logger?.info({ url, serviceCIDR: cidrs.join(','), strictValidation: strict }, 'built-in API server listening');

  const kubeconfig = (namespace = 'default'): string =>
    toYaml({
      apiVersion: 'v1',
      kind: 'Config',
      // client-node 1.x refuses a plain-http server unless insecure-skip-tls-verify is set.
      clusters: [{ name: 'sluice-builtin', cluster: { server: url, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'sluice-builtin', user: {} }],
      contexts: [{ name: 'sluice-builtin', context: { cluster: 'sluice-builtin', user: 'sluice-builtin', namespace } }],
      'current-context': 'sluice-builtin',
    });

  let closing: Promise<void> | undefined;
  return {
    url,
    host,
    port,
    store,
    get activeWatches() {
      return watches.activeCount;
    },
    compactHistory: () => store.compactHistory(),
    closeAllWatches: (mode) => watches.closeAll(mode),
    kubeconfig,
    writeKubeconfig: (path, namespace) => writeFile(path, kubeconfig(namespace), { mode: 0o600 }),
    close: () => {
      closing ??= new Promise<void>((resolve) => {
        watches.closeAll('drop');
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      });
      return closing;
    },
  };
}
