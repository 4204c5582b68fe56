// Watch: reflectors for Services, EndpointSlices and this agent's Node, with
// kube-proxy's label selectors (headless Services and those of another
// service proxy are never even listed). A reflector that loses the API server
// resumes its watch from the last resourceVersion, with backoff; only a 410
// Gone makes it relist (see reflector.ts). Nothing here deletes state because
// the API is away: only a completed list or a DELETED event removes an object.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { PROXY_LABEL_SELECTOR, LABEL_SERVICE_NAME } from '../translate';
import type { ClusterState } from './store';
import type { AgentMetrics } from './metrics';
import type { KubeConnection } from './kubeClient';
import { Reflector, type ReflectorSink, type ApiObject, type ReflectorOptions } from './reflector';
import { openEndpointSliceList, openServiceList } from '../k8s/proto';

/** kube-proxy watches only slices that name their Service. */
export const SLICE_LABEL_SELECTOR = `${LABEL_SERVICE_NAME},${PROXY_LABEL_SELECTOR}`;

/** Time the first complete list took, for the first sync's time split. */
export interface ListTiming {
  /** From start() to the last reflector's list end, ms. */
  listMs: number;
  /** Of which: decoding and projecting the pages (JSON.parse + slim records), ms. */
  decodeMs: number;
  bytes: number;
  pages: number;
}

export class ClusterWatch {
  private readonly reflectors: Array<Reflector<ApiObject>> = [];
  private onSynced: ((timing: ListTiming) => void) | undefined;
  private startedAt = 0;
  private readonly timing: ListTiming = { listMs: 0, decodeMs: 0, bytes: 0, pages: 0 };

  constructor(
    api: KubeConnection,
    nodeName: string,
    state: ClusterState,
    private readonly metrics: AgentMetrics,
    private readonly log: Logger,
    options: { pageSize?: number; minWatchTimeoutSeconds?: number } = {},
  ) {
    const reflect = <T extends ApiObject>(name: string, path: string, query: { labelSelector?: string; fieldSelector?: string }, sink: Omit<ReflectorSink<T>, 'listed'> & { retain(seen: Set<string>): void }, protobuf?: ReflectorOptions['protobuf']) => {
      const r: Reflector<T> = new Reflector<T>(api, { name, path, query, protobuf, ...options }, {
        upsert: (o) => sink.upsert(o),
        delete: (o) => sink.delete(o),
        listed: (seen) => {
          sink.retain(seen);
          this.listed(name);
        },
      }, {
        onError: (n, err, retryInMs) => this.failed(n, err, retryInMs),
        onPage: (_n, bytes, decodeMs) => {
          this.timing.bytes += bytes;
          this.timing.decodeMs += decodeMs;
          this.timing.pages++;
        },
      });
      this.reflectors.push(r as unknown as Reflector<ApiObject>);
    };
    reflect<V1Service>('services', '/api/v1/services', { labelSelector: PROXY_LABEL_SELECTOR }, {
      upsert: (s) => state.upsertService(s), delete: (s) => state.deleteService(s), retain: (seen) => state.retainServices(seen),
    }, openServiceList);
    reflect<V1EndpointSlice>('endpointslices', '/apis/discovery.k8s.io/v1/endpointslices', { labelSelector: SLICE_LABEL_SELECTOR }, {
      upsert: (s) => state.upsertSlice(s), delete: (s) => state.deleteSlice(s), retain: (seen) => state.retainSlices(seen),
    }, openEndpointSliceList);
    reflect<V1Node>('node', '/api/v1/nodes', { fieldSelector: `metadata.name=${nodeName}` }, {
      upsert: (n) => state.setNode(n), delete: () => state.setNode(undefined),
      retain: (seen) => (seen.size === 0 ? state.setNode(undefined) : undefined),
    });
  }

  private readonly listedOnce = new Set<string>();
  private listed(name: string): void {
    const before = this.listedOnce.size;
    this.listedOnce.add(name);
    this.log.info({ informer: name }, `listed ${name}`);
    if (before < this.reflectors.length && this.listedOnce.size === this.reflectors.length) {
      this.timing.listMs = performance.now() - this.startedAt;
      // After the reflector marks itself synced (right after this returns).
      queueMicrotask(() => this.onSynced?.({ ...this.timing }));
    }
  }

  private failed(name: string, err: Error, retryInMs: number): void {
    this.metrics.errors.inc({ reason: 'watch_failed' });
    this.log.warn({ informer: name, error: err.message, retryInMs }, `watch of ${name} failed; the maps keep serving, retrying`);
  }

  /** Start every reflector; `synced` runs once all three have listed. */
  start(synced: (timing: ListTiming) => void): void {
    this.onSynced = synced;
    this.startedAt = performance.now();
    for (const r of this.reflectors) r.start();
  }

  get synced(): boolean {
    return this.reflectors.every((r) => r.hasSynced);
  }

  async stop(): Promise<void> {
    await Promise.all(this.reflectors.map((r) => r.stop()));
  }
}
