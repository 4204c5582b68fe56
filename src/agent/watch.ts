// Watch: informers for Services, EndpointSlices and this agent's Node, with
// kube-proxy's label selectors. An informer that loses the API server is
// restarted with backoff; a 410 Gone makes it relist (client-node does that).
// Nothing here deletes state because the API is away: only a successful list
// or a DELETED event removes an object.
import {
  KubeConfig, ListWatch, Watch, makeInformer,
  type KubernetesObject, type V1EndpointSlice, type V1Node, type V1Service, type Informer, type ObjectCache,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { PROXY_LABEL_SELECTOR, LABEL_SERVICE_NAME } from '../translate';
import type { ClusterState } from './store';
import { rawLister } from './rawList';
import type { AgentMetrics } from './metrics';

/** kube-proxy watches only slices that name their Service. */
export const SLICE_LABEL_SELECTOR = `${LABEL_SERVICE_NAME},${PROXY_LABEL_SELECTOR}`;

const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 30_000;

type Watched<T extends KubernetesObject> = Informer<T> & ObjectCache<T>;

export class ClusterWatch {
  private readonly informers: Array<{ name: string; informer: Watched<KubernetesObject>; synced: boolean; backoff: number; timer?: NodeJS.Timeout }> = [];
  private stopped = false;
  private onSynced: (() => void) | undefined;

  constructor(
    kc: KubeConfig,
    nodeName: string,
    state: ClusterState,
    private readonly metrics: AgentMetrics,
    private readonly log: Logger,
  ) {
    const services = makeInformer<V1Service>(kc, '/api/v1/services',
      this.listed('services', rawLister<V1Service>(kc, '/api/v1/services', { labelSelector: PROXY_LABEL_SELECTOR })), PROXY_LABEL_SELECTOR);
    services.on('add', (s) => state.upsertService(s));
    services.on('update', (s) => state.upsertService(s));
    services.on('delete', (s) => state.deleteService(s));

    const slices = makeInformer<V1EndpointSlice>(kc, '/apis/discovery.k8s.io/v1/endpointslices',
      this.listed('endpointslices', rawLister<V1EndpointSlice>(kc, '/apis/discovery.k8s.io/v1/endpointslices', { labelSelector: SLICE_LABEL_SELECTOR })), SLICE_LABEL_SELECTOR);
    slices.on('add', (s) => state.upsertSlice(s));
    slices.on('update', (s) => state.upsertSlice(s));
    slices.on('delete', (s) => state.deleteSlice(s));

    const fieldSelector = `metadata.name=${nodeName}`;
    const node = new ListWatch<V1Node>('/api/v1/nodes', new Watch(kc),
      this.listed('node', rawLister<V1Node>(kc, '/api/v1/nodes', { fieldSelector })), false, undefined, fieldSelector);
    node.on('add', (n) => state.setNode(n));
    node.on('update', (n) => state.setNode(n));
    node.on('delete', () => state.setNode(undefined));

    for (const [name, informer] of [['services', services], ['endpointslices', slices], ['node', node]] as const) {
      const entry = { name, informer: informer as unknown as Watched<KubernetesObject>, synced: false, backoff: BACKOFF_MIN_MS };
      this.informers.push(entry);
      informer.on('error', (err: unknown) => this.restartLater(entry, err));
    }
  }

  /** Wrap a list call: the first success marks the informer synced. */
  private listed<T>(name: string, list: () => Promise<T>): () => Promise<T> {
    return async () => {
      const result = await list();
      const entry = this.informers.find((i) => i.name === name);
      if (entry) {
        entry.backoff = BACKOFF_MIN_MS;
        if (!entry.synced) {
          entry.synced = true;
          this.log.info({ informer: name }, `listed ${name}`);
          // Not yet: the informer adds the listed objects to its cache (and
          // emits their 'add' events) only after this function returns. A
          // full sync started now would miss them, e.g. program every
          // Service with no endpoints for a moment. setImmediate runs after
          // that synchronous continuation.
          if (this.informers.every((i) => i.synced)) setImmediate(() => this.onSynced?.());
        }
      }
      return result;
    };
  }

  private restartLater(entry: (typeof this.informers)[number], err: unknown): void {
    if (this.stopped) return;
    const e = err as { message?: string; code?: string; statusCode?: number };
    this.metrics.errors.inc({ reason: 'watch_failed' });
    this.log.warn({ informer: entry.name, error: e?.message ?? String(err), retryInMs: entry.backoff },
      `watch of ${entry.name} failed; the maps keep serving, retrying`);
    clearTimeout(entry.timer);
    // client-go's reflector relists after a failed watch (the API server may
    // have restarted, or the resourceVersion is "too large" for it); client-node
    // 1.x relists only after a 410. Clearing its resourceVersion makes the
    // restart list again, and the list's result replaces what we held.
    (entry.informer as unknown as { resourceVersion: string }).resourceVersion = '';
    entry.timer = setTimeout(() => {
      entry.informer.start().catch((e2: unknown) => this.restartLater(entry, e2));
    }, entry.backoff);
    entry.backoff = Math.min(entry.backoff * 2, BACKOFF_MAX_MS);
  }

  /** Start every informer; `synced` runs once all three have listed. */
  start(synced: () => void): void {
    this.onSynced = synced;
    for (const entry of this.informers) {
      entry.informer.start().catch((err: unknown) => this.restartLater(entry, err));
    }
  }

  get synced(): boolean {
    return this.informers.every((i) => i.synced);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const entry of this.informers) {
      clearTimeout(entry.timer);
      await entry.informer.stop();
    }
  }
}

/** Kubeconfig from a file, else in-cluster; --k8s-api-server overrides the server. */
export function loadKubeConfig(path: string | undefined, apiServer: string | undefined): KubeConfig {
  const kc = new KubeConfig();
  if (path) kc.loadFromFile(path);
  else kc.loadFromCluster();
  if (apiServer) {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig has no current cluster to point at --k8s-api-server');
    const scheme = cluster.server.startsWith('http://') ? 'http' : 'https';
    const server = /^https?:\/\//.test(apiServer) ? apiServer : `${scheme}://${apiServer}`;
    kc.clusters = kc.clusters.map((c) => (c.name === cluster.name ? { ...c, server } : c));
  }
  return kc;
}
