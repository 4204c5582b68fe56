// The watch side's memory: the current Services, EndpointSlices and Node as
// the informers last saw them, and which Services changed since the last
// sync. Event handlers only record and mark dirty (kube-proxy's change
// trackers); the syncer does the work.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { serviceKey, objectKey } from '../translate';

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

  constructor(private readonly onChange: () => void) {}

  upsertService(svc: V1Service): void {
    const key = serviceKey(svc);
    if (!key) return;
    this.services.set(key, svc);
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
    if (!m) this.slices.set(key, (m = new Map()));
    m.set(name, slice);
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

  setNode(node: V1Node | undefined): void {
    this.node = node;
    this.nodeChanged = true;
    this.onChange();
  }

  slicesOf(key: string): V1EndpointSlice[] {
    return [...(this.slices.get(key)?.values() ?? [])];
  }

  /** Take the set of changed Services (all of them when the Node changed). */
  takeDirty(): { keys: Set<string>; all: boolean; triggerTimes: Map<string, number> } {
    const all = this.nodeChanged;
    const keys = all ? new Set([...this.services.keys(), ...this.dirty]) : this.dirty;
    const triggerTimes = this.triggerTimes;
    this.dirty = new Set();
    this.triggerTimes = new Map();
    this.nodeChanged = false;
    return { keys, all, triggerTimes };
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
