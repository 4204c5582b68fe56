// The watch side's memory: the current Services, EndpointSlices and Node as
// the reflectors last saw them, and which Services changed since the last
// sync. Event handlers only record and mark dirty (kube-proxy's change
// trackers); the syncer does the work. Objects are kept once, here, and slim
// (see slim.ts): projected as they arrive from a list page or a watch event.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { serviceKey, objectKey } from '../translate';
import { slimService, slimSlice, StringPool } from './slim';
import { printableKey, shapeError, type WatchedKind } from './shape';

/** An object the watch handed over that the agent cannot read (see shape.ts). */
export interface Rejection {
  /** "Service default/web". */
  object: string;
  reason: 'malformed_object';
  message: string;
}

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
  /**
   * When the oldest change not yet taken arrived here (process.hrtime,
   * CLOCK_MONOTONIC ns; 0: none pending): with the pass's map stamp it
   * splits a change's latency into the API and the watch's share and the
   * agent's own (bench/controlplane.ts).
   */
  private firstChangeAtNs = 0n;

  private readonly pool = new StringPool();
  /** "Kind namespace/name" -> the message it was last rejected with (one log line per distinct rejection). */
  private readonly rejected = new Map<string, string>();
  /** Told once per distinct rejection of an object (the agent logs and counts it). */
  onRejected: (r: Rejection) => void = () => undefined;

  constructor(private readonly onChange: () => void) {}

  /**
   * False when the object cannot be read as a `kind`: it is reported (once
   * per distinct reason) and the caller keeps the last good version, as
   * kube-proxy's informer cache keeps the last object it could decode. The
   * projection runs inside the guard too, so no object can make the watch
   * throw (a throw would fail the watch, and its resume replay the same
   * event forever).
   */
  private readable<T>(kind: WatchedKind, o: unknown, project: () => T): T | undefined {
    const object = `${kind} ${printableKey(o, kind !== 'Node')}`;
    let why = shapeError(kind, o);
    let out: T | undefined;
    if (!why) {
      try {
        out = project();
      } catch (err) {
        why = `cannot be read: ${(err as Error).message}`;
      }
    }
    if (!why) {
      this.rejected.delete(object);
      return out;
    }
    if (this.rejected.get(object) !== why) {
      this.rejected.set(object, why);
      this.onRejected({ object, reason: 'malformed_object', message: `${object}: rejected: ${why}; the last readable version (if any) stays in use` });
    }
    return undefined;
  }

  /** After a relist: rejected objects the list no longer holds were deleted while the watch was away. */
  private forgetRejectedBut(kind: WatchedKind, seen: Set<string>): void {
    for (const object of [...this.rejected.keys()]) if (object.startsWith(`${kind} `) && !seen.has(object.slice(kind.length + 1))) this.rejected.delete(object);
  }

  private forget(kind: WatchedKind, o: unknown): void {
    this.rejected.delete(`${kind} ${printableKey(o, kind !== 'Node')}`);
  }

  upsertService(svc: V1Service): void {
    const slim = this.readable('Service', svc, () => slimService(svc, this.pool));
    if (!slim) return;
    const key = serviceKey(svc);
    if (!key) return;
    this.services.set(this.pool.intern(key), slim);
    this.mark(key);
  }

  deleteService(svc: V1Service): void {
    this.forget('Service', svc);
    const key = serviceKey(svc);
    if (!key) return;
    this.services.delete(key);
    this.mark(key);
  }

  upsertSlice(slice: V1EndpointSlice): void {
    const slim = this.readable('EndpointSlice', slice, () => slimSlice(slice, this.pool));
    if (!slim) return;
    const key = serviceKey(slice);
    const name = objectKey(slice);
    if (!key || !name) return;
    let m = this.slices.get(key);
    if (!m) this.slices.set(this.pool.intern(key), (m = new Map()));
    m.set(name, slim);
    const trigger = Date.parse(slice.metadata?.annotations?.[TRIGGER_TIME_ANNOTATION] ?? '');
    if (!Number.isNaN(trigger) && !this.triggerTimes.has(key)) this.triggerTimes.set(key, trigger);
    this.mark(key);
  }

  deleteSlice(slice: V1EndpointSlice): void {
    this.forget('EndpointSlice', slice);
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
    this.forgetRejectedBut('Service', seen);
  }

  /** After a relist: EndpointSlices the list no longer held are gone. */
  retainSlices(seen: Set<string>): void {
    for (const m of [...this.slices.values()]) {
      for (const [name, slice] of [...m]) if (!seen.has(name)) this.deleteSlice(slice);
    }
    this.forgetRejectedBut('EndpointSlice', seen);
  }

  setNode(node: V1Node | undefined): void {
    if (node !== undefined && !this.readable('Node', node, () => node)) return;
    this.node = node;
    this.nodeChanged = true;
    this.stampChange();
    this.onChange();
  }

  slicesOf(key: string): V1EndpointSlice[] {
    return [...(this.slices.get(key)?.values() ?? [])];
  }

  /**
   * Take the set of changed Services; `nodeChanged` says the Node object
   * changed (the syncer decides whether what it derives from it did).
   */
  takeDirty(): { keys: Set<string>; nodeChanged: boolean; triggerTimes: Map<string, number>; firstChangeAtNs: bigint } {
    const nodeChanged = this.nodeChanged;
    const keys = this.dirty;
    const triggerTimes = this.triggerTimes;
    const firstChangeAtNs = this.firstChangeAtNs;
    this.dirty = new Set();
    this.triggerTimes = new Map();
    this.nodeChanged = false;
    this.firstChangeAtNs = 0n;
    return { keys, nodeChanged, triggerTimes, firstChangeAtNs };
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
    this.stampChange();
    this.onChange();
  }

  private stampChange(): void {
    if (this.firstChangeAtNs === 0n) this.firstChangeAtNs = process.hrtime.bigint();
  }
}
