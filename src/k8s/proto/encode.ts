// ServiceList and EndpointSliceList in Kubernetes protobuf, from the plain
// (JSON-shaped) objects the built-in API stores: every field the decoders
// (service.ts, endpointSlice.ts, meta.ts) read, in the same field numbers,
// plus the metadata a client may look at (generateName, generation,
// annotations, finalizers). Fields the built-in API's objects do not have
// are not written (Go would write its zero values; decoders read both the same).
// Not a general encoder: managedFields, ownerReferences, targetRef and
// status conditions are left out (JSON answers keep them).
import { Writer } from './writer';
import { PROTOBUF_MAGIC } from './meta';

type Obj = Record<string, unknown>;

/**
 * A stored object with a field of the wrong type (the built-in API keeps
 * the bad objects the bad-input tests inject): not encodable, the caller
 * answers that page in JSON, so the agent sees the object as it is.
 */
export class NotEncodable extends Error {}
const wrong = (what: string, v: unknown): never => {
  throw new NotEncodable(`${what}: ${JSON.stringify(v)?.slice(0, 40)}`);
};
const o = (v: unknown): Obj => (v === undefined || v === null ? {} : typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : wrong('not an object', v));
const s = (v: unknown): string | undefined => (v === undefined || v === null ? undefined : typeof v === 'string' ? v : wrong('not a string', v));
const n = (v: unknown): number | undefined => (v === undefined || v === null ? undefined : Number.isSafeInteger(v) ? (v as number) : wrong('not an integer', v));
const b = (v: unknown): boolean | undefined => (v === undefined || v === null ? undefined : typeof v === 'boolean' ? v : wrong('not a boolean', v));
const list = (v: unknown): Obj[] => (v === undefined || v === null ? [] : Array.isArray(v) ? v.map(o) : wrong('not a list', v));
const strs = (v: unknown): string[] => {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) return wrong('not a list', v);
  return v.map((x) => s(x) ?? wrong('not a string', x));
};
const smap = (v: unknown): Record<string, string> => {
  const m = o(v);
  for (const x of Object.values(m)) if (typeof x !== 'string') wrong('map value not a string', x);
  return m as Record<string, string>;
};

function time(w: Writer, field: number, v: unknown): void {
  if (v === undefined || v === null) return;
  const ms = typeof v === 'string' ? Date.parse(v) : NaN;
  if (Number.isNaN(ms)) wrong('not a time', v);
  w.message(field, () => w.int(1, Math.floor(ms / 1000)));
}

function objectMeta(w: Writer, m: Obj): void {
  w.message(1, () => {
    w.string(1, s(m['name']));
    w.string(2, s(m['generateName']));
    w.string(3, s(m['namespace']));
    w.string(5, s(m['uid']));
    w.string(6, s(m['resourceVersion']));
    w.int(7, n(m['generation']));
    time(w, 8, m['creationTimestamp']);
    w.map(11, smap(m['labels']));
    w.map(12, smap(m['annotations']));
    w.strings(14, strs(m['finalizers']));
  });
}

function service(w: Writer, svc: Obj): void {
  objectMeta(w, o(svc['metadata']));
  const spec = o(svc['spec']);
  w.message(2, () => {
    for (const p of list(spec['ports'])) {
      w.message(1, () => {
        w.string(1, s(p['name']));
        w.string(2, s(p['protocol']));
        w.int(3, n(p['port']));
        const t = p['targetPort'];
        if (typeof t === 'number') w.message(4, () => (w.int(1, 0), w.int(2, n(t))));
        else if (typeof t === 'string') w.message(4, () => (w.int(1, 1), w.string(3, t)));
        else if (t !== undefined && t !== null) wrong('targetPort', t);
        w.int(5, n(p['nodePort']));
        w.string(6, s(p['appProtocol']));
      });
    }
    w.map(2, smap(spec['selector']));
    w.string(3, s(spec['clusterIP']));
    w.string(4, s(spec['type']));
    w.strings(5, strs(spec['externalIPs']));
    w.string(7, s(spec['sessionAffinity']));
    w.string(8, s(spec['loadBalancerIP']));
    w.strings(9, strs(spec['loadBalancerSourceRanges']));
    w.string(10, s(spec['externalName']));
    w.string(11, s(spec['externalTrafficPolicy']));
    w.int(12, n(spec['healthCheckNodePort']));
    w.int(13, b(spec['publishNotReadyAddresses']));
    if (spec['sessionAffinityConfig'] !== undefined && spec['sessionAffinityConfig'] !== null) {
      const clientIP = o(spec['sessionAffinityConfig'])['clientIP'];
      w.message(14, () => {
        if (clientIP !== undefined && clientIP !== null) w.message(1, () => w.int(1, n(o(clientIP)['timeoutSeconds'])));
      });
    }
    w.string(17, s(spec['ipFamilyPolicy']));
    w.strings(18, strs(spec['clusterIPs']));
    w.strings(19, strs(spec['ipFamilies']));
    w.int(20, b(spec['allocateLoadBalancerNodePorts']));
    w.string(21, s(spec['loadBalancerClass']));
    w.string(22, s(spec['internalTrafficPolicy']));
    w.string(23, s(spec['trafficDistribution']));
  });
  const ingress = list(o(o(svc['status'])['loadBalancer'])['ingress']);
  w.message(3, () => w.message(1, () => {
    for (const i of ingress) w.message(1, () => (w.string(1, s(i['ip'])), w.string(2, s(i['hostname'])), w.string(3, s(i['ipMode']))));
  }));
}

function endpointSlice(w: Writer, slice: Obj): void {
  objectMeta(w, o(slice['metadata']));
  for (const e of list(slice['endpoints'])) {
    w.message(2, () => {
      w.strings(1, strs(e['addresses']));
      if (e['conditions'] !== undefined && e['conditions'] !== null) {
        const c = o(e['conditions']);
        w.message(2, () => (w.int(1, b(c['ready'])), w.int(2, b(c['serving'])), w.int(3, b(c['terminating']))));
      }
      w.string(3, s(e['hostname']));
      w.string(6, s(e['nodeName']));
      w.string(7, s(e['zone']));
      if (e['hints'] !== undefined && e['hints'] !== null) {
        const h = o(e['hints']);
        w.message(8, () => {
          for (const z of list(h['forZones'])) w.message(1, () => w.string(1, s(z['name'])));
          for (const z of list(h['forNodes'])) w.message(2, () => w.string(1, s(z['name'])));
        });
      }
    });
  }
  for (const p of list(slice['ports'])) {
    w.message(3, () => (w.string(1, s(p['name'])), w.string(2, s(p['protocol'])), w.int(3, n(p['port'])), w.string(4, s(p['appProtocol']))));
  }
  w.string(4, s(slice['addressType']));
}

const ENCODERS: Record<string, (w: Writer, item: Obj) => void> = { ServiceList: service, EndpointSliceList: endpointSlice };

/** Whether encodeList can write a list of this kind. */
export const canEncodeList = (listKind: string): boolean => listKind in ENCODERS;

/** "k8s\0" + runtime.Unknown{typeMeta, raw = the list} for a list of stored objects; NotEncodable when one has a field of the wrong type. */
export function encodeList(apiVersion: string, listKind: string, meta: { resourceVersion: string; continue?: string }, items: readonly unknown[]): Buffer {
  const item = ENCODERS[listKind];
  if (!item) throw new Error(`no protobuf encoding for ${listKind}`);
  const w = new Writer();
  w.raw(PROTOBUF_MAGIC);
  w.message(1, () => (w.string(1, apiVersion), w.string(2, listKind)));
  w.message(2, () => {
    w.message(1, () => (w.string(2, meta.resourceVersion), w.string(3, meta.continue)));
    for (const it of items) w.message(2, () => item(w, o(it)));
  });
  w.string(3, '');
  w.string(4, '');
  return Buffer.from(w.bytes());
}
