// apimachinery's envelope and metadata in protobuf (field numbers from
// k8s.io/apimachinery's pkg/runtime and pkg/apis/meta/v1 generated.proto,
// v0.34):
//
//   body        = "k8s\0" + runtime.Unknown
//   Unknown     = 1 typeMeta (2 kind), 2 raw (the encoded object), 3 contentEncoding, 4 contentType
//   XList       = 1 ListMeta metadata, 2 repeated X items
//   ListMeta    = 2 resourceVersion, 3 continue
//   ObjectMeta  = 1 name, 3 namespace, 5 uid, 6 resourceVersion, 8 Time creationTimestamp,
//                 11 map labels, 12 map annotations (13 ownerReferences, 17 managedFields... skipped)
//   Time        = 1 int64 seconds (2 nanos: JSON has whole seconds, so does this)
//   map entry   = 1 key, 2 value
//
// Decoded objects have the JSON form's shape for the fields read: Go writes
// plain (non-pointer) strings and numbers to protobuf even when empty, where
// JSON's omitempty leaves them out, so the decoders drop those empties.
import { Reader, ProtoError } from './wire';

/** What the list decoders fill: the fields of ObjectMeta the agent reads. */
export interface DecodedMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: string | null;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface DecodedList<T> {
  metadata: { resourceVersion?: string; continue?: string };
  items: T[];
}

export const PROTOBUF_MAGIC = Buffer.from('k8s\0', 'latin1');
export const PROTOBUF_CONTENT_TYPE = 'application/vnd.kubernetes.protobuf';

/** Go's RFC 3339 with whole seconds, as metav1.Time's JSON (null for the zero time, which protobuf writes as an empty message). */
function readTime(r: Reader): string | null {
  const end = r.lengthEnd();
  if (end === r.pos) return null;
  let seconds = 0;
  while (r.pos < end) {
    const t = r.uint();
    if (t === 8) seconds = r.int64();
    else r.skip(t & 7);
  }
  r.close(end);
  if (seconds === lastSeconds) return lastTime;
  const d = new Date(seconds * 1000);
  if (Number.isNaN(d.getTime())) r.fail(`time ${seconds} s out of range`);
  lastSeconds = seconds;
  lastTime = d.toISOString().replace(/\.\d{3}Z$/, 'Z');
  return lastTime;
}
// Objects listed together were mostly created in the same second.
let lastSeconds = NaN;
let lastTime = '';

/** One map<string,string> entry into `into`; with `only`, entries whose key is not in it are skipped unread. */
function readMapEntry(r: Reader, into: Record<string, string> | DecodedMeta, only?: readonly Buffer[]): void {
  const end = r.lengthEnd();
  let key: string | undefined;
  let value = '';
  while (r.pos < end) {
    const t = r.uint();
    if (t === 10) {
      const start = r.pos;
      if (only && !only.some((k) => ((r.pos = start), r.stringEquals(k)))) {
        r.pos = end; // not a key the caller reads: the value is never decoded
        return;
      }
      r.pos = start;
      key = r.string();
    } else if (t === 18) value = r.string();
    else r.skip(t & 7);
  }
  r.close(end);
  // With `only`: `into` is the metadata, and the annotations object exists only once a kept key is found.
  if (only) ((into as DecodedMeta).annotations ??= {})[key ?? ''] = value;
  else (into as Record<string, string>)[key ?? ''] = value;
}

/** The annotation keys a kind's decoder keeps (the rest, e.g. kubectl's last-applied-configuration, is skipped unread). */
export const annotationKeys = (keys: readonly string[]): Buffer[] => keys.map((k) => Buffer.from(k, 'utf8'));

export function readObjectMeta(r: Reader, annotations: readonly Buffer[]): DecodedMeta {
  const end = r.lengthEnd();
  const m: DecodedMeta = {};
  while (r.pos < end) {
    const t = r.uint();
    switch (t) {
      case 10: // 1 name
        { const v = r.nonEmpty(); if (v !== undefined) m.name = v; }
        break;
      case 26: // 3 namespace
        { const v = r.nonEmpty(); if (v !== undefined) m.namespace = v; }
        break;
      case 42: // 5 uid
        { const v = r.nonEmpty(); if (v !== undefined) m.uid = v; }
        break;
      case 50: // 6 resourceVersion
        { const v = r.nonEmpty(); if (v !== undefined) m.resourceVersion = v; }
        break;
      case 66: // 8 creationTimestamp
        m.creationTimestamp = readTime(r);
        break;
      case 90: // 11 labels
        readMapEntry(r, (m.labels ??= {}));
        break;
      case 98: // 12 annotations
        if (annotations.length === 0) r.skip(2);
        else readMapEntry(r, m, annotations);
        break;
      default:
        r.skip(t & 7);
    }
  }
  r.close(end);
  return m;
}

function readListMeta(r: Reader): DecodedList<never>['metadata'] {
  const end = r.lengthEnd();
  const m: DecodedList<never>['metadata'] = {};
  while (r.pos < end) {
    const t = r.uint();
    if (t === 18) { const v = r.nonEmpty(); if (v !== undefined) m.resourceVersion = v; }
    else if (t === 26) { const v = r.nonEmpty(); if (v !== undefined) m.continue = v; }
    else r.skip(t & 7);
  }
  r.close(end);
  return m;
}

/**
 * A list body: the envelope and the list's metadata are read at once (so the
 * caller can ask for the next page), the items when `items()` is called.
 */
export interface OpenedList<T> {
  metadata: DecodedList<T>['metadata'];
  items(): T[];
}

/** Open a protobuf list body of `kind` ("ServiceList"); `item` reads one length-delimited item. */
export function openList<T>(body: Buffer, kind: string, item: (r: Reader) => T): OpenedList<T> {
  if (body.length < 4 || body.compare(PROTOBUF_MAGIC, 0, 4, 0, 4) !== 0) throw new ProtoError('no "k8s\\0" protobuf magic');
  const r = new Reader(body, 4);
  let rawStart = -1;
  let rawEnd = -1;
  let gotKind = '';
  let encoding = '';
  while (r.pos < r.end) {
    const t = r.uint();
    if (t === 10) {
      const end = r.lengthEnd();
      while (r.pos < end) {
        const tt = r.uint();
        if (tt === 18) gotKind = r.string();
        else r.skip(tt & 7);
      }
      r.close(end);
    } else if (t === 18) {
      rawEnd = r.lengthEnd();
      rawStart = r.pos;
      r.pos = rawEnd;
    } else if (t === 26) encoding = r.string();
    else r.skip(t & 7);
  }
  if (gotKind !== kind) throw new ProtoError(`the envelope holds kind "${gotKind}", not ${kind}`);
  if (encoding !== '') throw new ProtoError(`content encoding "${encoding}" is not supported`);
  if (rawStart < 0) throw new ProtoError('the envelope has no object');
  const lr = new Reader(body, rawStart, rawEnd);
  let metadata: DecodedList<T>['metadata'] = {};
  // ListMeta comes first (field 1); the items follow.
  const itemsFrom = (): number => {
    while (lr.pos < lr.end) {
      const start = lr.pos;
      const t = lr.uint();
      if (t === 10) metadata = readListMeta(lr);
      else if (t === 18) return start;
      else lr.skip(t & 7);
    }
    return lr.pos;
  };
  const first = itemsFrom();
  return {
    metadata,
    items(): T[] {
      const out: T[] = [];
      lr.pos = first;
      while (lr.pos < lr.end) {
        const t = lr.uint();
        if (t === 18) out.push(item(lr));
        else if (t === 10) metadata = readListMeta(lr); // (not where Go writes it, but valid)
        else lr.skip(t & 7);
      }
      return out;
    },
  };
}
