// The watch side's memory: the current Services, EndpointSlices and Node as
// the reflectors last saw them, and which Services changed since the last
// sync. Event handlers only record and mark dirty (kube-proxy's change
// trackers); the syncer does the work. Objects are kept once, here, and slim
// (see slim.ts): projected as they arrive from a list page or a watch event.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { serviceKey, objectKey } from '../translate';
import { slimService, slimSlice, StringPool } from './slim';

export const TRIGGER_TIME_ANNOTATION = 'endpoints.kubernetes.io/last-change-trigger-time';

export class ClusterState {
  readonly services = new Map<string, V1Service>();
  /** serviceKey -> slice name -> slice. */
  readonly slices = new Map<string, Map<string, V1EndpointSlice>>();
  node: V1Node | undefined;
  private dirty = new Set<string>();
  private nodeChanged = false;
  /** serviceKey -> earliest endpoints change not yet programmed (ms). */
  private triggerTimes = new Map<string, number>();

  private readonly pool = new StringPool();

  constructor(private readonly onChange: () => void) {}

  upsertService(svc: V1Service): void {
    const key = serviceKey(svc);
    if (!key) return;
    this.services.set(this.pool.intern(key), slimService(svc, this.pool));
    this.mark(key);
  }

  deleteService(svc: V1Service): void {
    const key = serviceKey(svc);
    if (!key) return;
    this.services.delete(key);
    this.mark(key);
  }

  upsertSlice(slice: V1EndpointSlice): void {
    const key = serviceKey(slice);
    const name = objectKey(slice);
    if (!key || !name) return;
    let m = this.slices.get(key);
    if (!m) this.slices.set(this.pool.intern(key), (m = new Map()));
    m.set(name, slimSlice(slice, this.pool));
    const trigger = Date.parse(slice.metadata?.annotations?.[TRIGGER_TIME_ANNOTATION] ?? '');
    if (!Number.isNaN(trigger) && !this.triggerTimes.has(key)) this.triggerTimes.set(key, trigger);
    this.mark(key);
  }

  deleteSlice(slice: V1EndpointSlice): void {
    const key = serviceKey(slice);
    const name = objectKey(slice);
    if (!key || !name) return;
    const m = this.slices.get(key);
    m?.delete(name);
    if (m && m.size === 0) this.slices.delete(key);
    this.mark(key);
  }

  /** After a relist: Services the list no longer held are gone. */
  retainServices(seen: Set<string>): void {
    for (const svc of this.services.values()) if (!seen.has(objectKey(svc))) this.deleteService(svc);
  }

  /** After a relist: EndpointSlices the list no longer held are gone. */
  retainSlices(seen: Set<string>): void {
    for (const m of [...this.slices.values()]) {
      for (const [name, slice] of [...m]) if (!seen.has(name)) this.deleteSlice(slice);
    }
  }

  setNode(node: V1Node | undefined): void {
    this.node = node;
    this.nodeChanged = true;
    this.onChange();
  }

  slicesOf(key: string): V1EndpointSlice[] {
    return [...(this.slices.get(key)?.values() ?? [])];
  }

  /**
   * Take the set of changed Services; `nodeChanged` says the Node object
   * changed (the syncer decides whether what it derives from it did).
   */
  takeDirty(): { keys: Set<string>; nodeChanged: boolean; triggerTimes: Map<string, number> } {
    const nodeChanged = this.nodeChanged;
    const keys = this.dirty;
    const triggerTimes = this.triggerTimes;
    this.dirty = new Set();
    this.triggerTimes = new Map();
    this.nodeChanged = false;
    return { keys, nodeChanged, triggerTimes };
  }

  hasPending(): boolean {
    return this.dirty.size > 0 || this.nodeChanged;
  }

  /** Sync this Service again (after a failure). */
  markDirty(key: string): void {
    this.mark(key);
  }

  private mark(key: string): void {
    this.dirty.add(key);
    this.onChange();
  }
}
