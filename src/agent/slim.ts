// What the agent keeps of a Service or an EndpointSlice: only the fields the
// translate step reads, projected as each object arrives from a list page or
// a watch event, so the decoded API object (managedFields, ownerReferences,
// targetRef, annotations, status conditions...) is garbage at once and the
// agent holds each object once, slim.
//
// The records keep the API's field names (translate reads V1Service and
// V1EndpointSlice), but repeated strings are interned (namespaces, port
// names, label values: one copy each), and a slice's endpoints are packed:
// two small integers per endpoint (the IPv4 address; conditions, node and
// zone as indexes into shared tables) instead of ~170 bytes of objects and
// strings. `endpoints` unpacks them when translate reads it (garbage right
// after). Endpoints that do not pack exactly (IPv6, a non-canonical address,
// hints) keep the plain slim objects.
// A field the translate step starts to read must be added here: the
// translate fixtures run through this projection in test/unit/slim.test.ts.
import type { V1EndpointSlice, V1Service, V1ServicePort, V1Endpoint, DiscoveryV1EndpointPort as V1EndpointPort } from '@kubernetes/client-node';
import { LABEL_HEADLESS, LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME, LB_ALGORITHM_ANNOTATION } from '../translate';
import type { PackedIPv4Endpoints, PackedIPv4Visitor } from '../translate/endpoints';

/** One copy of each repeated string (node names, zones, namespaces, port names). */
export class StringPool {
  private readonly pool = new Map<string, string>();
  intern<T extends string | undefined | null>(s: T): T {
    if (typeof s !== 'string') return s;
    const have = this.pool.get(s);
    if (have !== undefined) return have as T;
    // A flat copy: a string sliced out of a big JSON text would keep that text alive.
    const flat = (' ' + s).slice(1);
    this.pool.set(flat, flat);
    return flat as T;
  }
  get size(): number {
    return this.pool.size;
  }
}

/** Labels translate looks at (the rest of a Service's labels are not its business). */
const KEPT_LABELS = [LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME, LABEL_HEADLESS];

function slimLabels(labels: Record<string, string> | undefined, pool: StringPool): Record<string, string> | undefined {
  if (!labels) return undefined;
  let out: Record<string, string> | undefined;
  for (const k of KEPT_LABELS) {
    const v = labels[k];
    if (v !== undefined) (out ??= {})[k] = pool.intern(v);
  }
  return out;
}

function slimMetadata(m: V1Service['metadata'], pool: StringPool): V1Service['metadata'] {
  const out: NonNullable<V1Service['metadata']> = { name: m?.name, namespace: pool.intern(m?.namespace) };
  const labels = slimLabels(m?.labels, pool);
  if (labels) out.labels = labels;
  // Frontend conflicts go to the older Service.
  if (m?.creationTimestamp !== undefined) out.creationTimestamp = m.creationTimestamp;
  return out;
}

const SERVICE_SPEC_FIELDS = [
  'type', 'clusterIP', 'clusterIPs', 'ipFamilies', 'externalIPs', 'loadBalancerSourceRanges', 'externalTrafficPolicy',
  'internalTrafficPolicy', 'sessionAffinity', 'sessionAffinityConfig', 'healthCheckNodePort', 'trafficDistribution',
] as const;

export function slimService(svc: V1Service, pool: StringPool): V1Service {
  const spec = svc.spec;
  const out: V1Service = { metadata: slimMetadata(svc.metadata, pool) };
  // h-alg: the one annotation translate reads (the rest is dropped).
  const algorithm = svc.metadata?.annotations?.[LB_ALGORITHM_ANNOTATION];
  if (algorithm !== undefined) out.metadata!.annotations = { [LB_ALGORITHM_ANNOTATION]: pool.intern(algorithm) };
  if (spec) {
    const s: Record<string, unknown> = {};
    for (const f of SERVICE_SPEC_FIELDS) if (spec[f] !== undefined) s[f] = typeof spec[f] === 'string' ? pool.intern(spec[f] as string) : spec[f];
    if (spec.ports) {
      s['ports'] = spec.ports.map((p): V1ServicePort => {
        const port: V1ServicePort = { port: p.port };
        if (p.name !== undefined) port.name = pool.intern(p.name);
        if (p.protocol !== undefined) port.protocol = pool.intern(p.protocol);
        if (p.nodePort !== undefined) port.nodePort = p.nodePort;
        return port;
      });
    }
    out.spec = s as V1Service['spec'];
  }
  const ingress = svc.status?.loadBalancer?.ingress;
  if (ingress && ingress.length > 0) {
    out.status = { loadBalancer: { ingress: ingress.map((i) => ({ ...(i.ip !== undefined ? { ip: i.ip } : {}), ...(i.ipMode !== undefined ? { ipMode: i.ipMode } : {}) })) } };
  }
  return out;
}

/** Endpoint conditions: 3 tri-state flags, one shared frozen object per combination. */
const conditionsCache = new Map<string, NonNullable<V1Endpoint['conditions']>>();
function sharedConditions(c: V1Endpoint['conditions']): V1Endpoint['conditions'] {
  if (!c) return undefined;
  const key = `${c.ready}|${c.serving}|${c.terminating}`;
  let shared = conditionsCache.get(key);
  if (!shared) {
    shared = {};
    if (c.ready !== undefined && c.ready !== null) shared.ready = c.ready;
    if (c.serving !== undefined && c.serving !== null) shared.serving = c.serving;
    if (c.terminating !== undefined && c.terminating !== null) shared.terminating = c.terminating;
    conditionsCache.set(key, Object.freeze(shared));
  }
  return shared;
}

/** Node and zone names by small index, for packed endpoints (one table per agent). */
class NameTable {
  readonly names: string[] = [''];
  private readonly index = new Map<string, number>([['', 0]]);
  id(name: string | undefined | null, limit: number): number {
    if (!name) return 0;
    let id = this.index.get(name);
    if (id === undefined) {
      if (this.names.length >= limit) return -1;
      id = this.names.length;
      this.names.push(name);
      this.index.set(name, id);
    }
    return id;
  }
}
const nodeNames = new NameTable();
const zoneNames = new NameTable();

const TRI = (v: boolean | undefined | null) => (v === true ? 1 : v === false ? 2 : 0);
const UNTRI = [undefined, true, false] as const;
const NODE_LIMIT = 1 << 16;
const ZONE_LIMIT = 1 << 9;

/**
 * The address as a number when `text` is a canonical dotted quad (what
 * unpacking prints back: no leading zeros), else undefined (the text is
 * kept). A scan, not a regular expression: it runs once per endpoint of
 * every listed slice (100k at 10k x 10), and a scan allocates nothing.
 */
export function ip4Exact(text: string): number | undefined {
  let n = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 46 /* . */) {
      if (digits === 0 || dots === 3) return undefined;
      n = n * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
    } else if (c >= 48 && c <= 57) {
      if (digits === 3 || (digits === 1 && octet === 0)) return undefined; // "01" is not canonical
      octet = octet * 10 + (c - 48);
      if (octet > 255) return undefined;
      digits++;
    } else {
      return undefined;
    }
  }
  if (dots !== 3 || digits === 0) return undefined;
  return n * 256 + octet;
}

/**
 * `[address0, meta0, address1, meta1, ...]` as int32 (small integers, no
 * objects): meta = conditions (a presence bit and 3 tri-states, 7 bits) |
 * node index << 7 | zone index << 23; undefined when some endpoint does not
 * pack exactly.
 */
function packEndpoints(endpoints: readonly V1Endpoint[]): number[] | undefined {
  const packed: number[] = [];
  for (const ep of endpoints) {
    if (ep.hints || ep.addresses?.length !== 1) return undefined;
    const address = ip4Exact(ep.addresses[0]!);
    const node = nodeNames.id(ep.nodeName, NODE_LIMIT);
    const zone = zoneNames.id(ep.zone, ZONE_LIMIT);
    if (address === undefined || node < 0 || zone < 0) return undefined;
    const c = ep.conditions;
    const conditions = c ? 1 | (TRI(c.ready) << 1) | (TRI(c.serving) << 3) | (TRI(c.terminating) << 5) : 0;
    packed.push(address | 0, conditions | (node << 7) | (zone << 23));
  }
  return packed;
}

function unpackEndpoints(packed: readonly number[]): V1Endpoint[] {
  const out: V1Endpoint[] = [];
  for (let i = 0; i < packed.length; i += 2) {
    const a = packed[i]! >>> 0;
    const meta = packed[i + 1]!;
    const e: V1Endpoint = { addresses: [`${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}`] };
    if (meta & 1) {
      e.conditions = sharedConditions({ ready: UNTRI[(meta >> 1) & 3], serving: UNTRI[(meta >> 3) & 3], terminating: UNTRI[(meta >> 5) & 3] } as V1Endpoint['conditions']);
    }
    const node = (meta >>> 7) & 0xffff;
    const zone = (meta >>> 23) & 0x1ff;
    if (node) e.nodeName = nodeNames.names[node];
    if (zone) e.zone = zoneNames.names[zone];
    out.push(e);
  }
  return out;
}

/**
 * A slice whose endpoints are packed; `endpoints` unpacks them for the reader (the getter is on the prototype: no closure per slice).
 * The translation reads them through `forEachPackedIPv4` instead: no endpoint objects, no address text parsed again.
 */
class PackedSlice implements PackedIPv4Endpoints {
  ports?: V1EndpointPort[];
  constructor(readonly addressType: string, readonly metadata: V1EndpointSlice['metadata'], private readonly packed: number[]) {}
  get endpoints(): V1Endpoint[] {
    return unpackEndpoints(this.packed);
  }
  forEachPackedIPv4(visit: PackedIPv4Visitor): void {
    const packed = this.packed;
    for (let i = 0; i < packed.length; i += 2) {
      const meta = packed[i + 1]!;
      // TRI 0 (and no conditions at all, bit 0 clear) read as absent, as unpackEndpoints' objects do.
      visit(
        packed[i]! >>> 0,
        UNTRI[(meta >> 1) & 3],
        UNTRI[(meta >> 3) & 3],
        UNTRI[(meta >> 5) & 3],
        nodeNames.names[(meta >>> 7) & 0xffff] || undefined,
        zoneNames.names[(meta >>> 23) & 0x1ff] || undefined,
      );
    }
  }
}

export function slimSlice(slice: V1EndpointSlice, pool: StringPool): V1EndpointSlice {
  const packed = packEndpoints(slice.endpoints ?? []);
  const out: V1EndpointSlice = packed
    ? new PackedSlice(pool.intern(slice.addressType), slimMetadata(slice.metadata, pool), packed)
    : { addressType: pool.intern(slice.addressType), endpoints: [], metadata: slimMetadata(slice.metadata, pool) };
  if (slice.ports) {
    out.ports = slice.ports.map((p): V1EndpointPort => {
      const port: V1EndpointPort = {};
      if (p.name !== undefined) port.name = pool.intern(p.name);
      if (p.port !== undefined) port.port = p.port;
      if (p.protocol !== undefined) port.protocol = pool.intern(p.protocol);
      return port;
    });
  }
  for (const ep of packed ? [] : slice.endpoints ?? []) {
    // Only the first address counts (kube-proxy ignores the rest).
    const first = ep.addresses?.[0];
    const e: V1Endpoint = { addresses: first === undefined ? [] : [first] };
    const conditions = sharedConditions(ep.conditions);
    if (conditions) e.conditions = conditions;
    if (ep.nodeName) e.nodeName = pool.intern(ep.nodeName);
    if (ep.zone) e.zone = pool.intern(ep.zone);
    if (ep.hints) {
      e.hints = {};
      if (ep.hints.forZones) e.hints.forZones = ep.hints.forZones.map((z) => ({ name: pool.intern(z.name) }));
      if (ep.hints.forNodes) e.hints.forNodes = ep.hints.forNodes.map((n) => ({ name: pool.intern(n.name) }));
    }
    out.endpoints.push(e);
  }
  return out;
}
