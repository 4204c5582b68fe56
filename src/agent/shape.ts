// The JSON shape of what the agent reads from a Service, an EndpointSlice or
// its Node, checked before anything else touches the object.
//
// A real kube-apiserver only hands out objects that decode into the Go
// types, so a field of the wrong JSON type ("ports": "80", a label value
// that is a number, a null inside a list) never reaches kube-proxy: its
// client-go decoder would fail the whole watch event. Such an object can
// still reach this agent (an aggregated or proxied API, a test server, a
// bug), and without this check one of them throws deep in the projection
// or in translate. So the watch layer rejects it here, by name, with the
// path of the first field that is wrong, and keeps the last good version
// of the object, as kube-proxy's informer cache would. Values of the right
// type but wrong content (port 70000, address "999.1.1.1") pass: translate
// rejects those one field at a time (TranslateProblem reasons).
//
// Only fields the agent reads are checked: unknown fields and fields of
// other API versions (a v1beta1 EndpointSlice's `topology`) are ignored, as
// client-go's non-strict decoding ignores them. null stands for "absent"
// (Go decodes null into the zero value), except inside a list.

type Shape =
  | 'string'
  | 'number'
  | 'boolean'
  | { readonly object: Readonly<Record<string, Shape>> }
  | { readonly list: Shape }
  | { readonly mapOf: 'string' };

const str = 'string' as const;
const obj = (fields: Record<string, Shape>): Shape => ({ object: fields });
const list = (of: Shape): Shape => ({ list: of });
const stringMap: Shape = { mapOf: 'string' };

const METADATA = obj({ name: str, namespace: str, labels: stringMap, annotations: stringMap, creationTimestamp: str, resourceVersion: str });

const SERVICE: Shape = obj({
  metadata: METADATA,
  spec: obj({
    type: str, clusterIP: str, clusterIPs: list(str), ipFamilies: list(str), externalIPs: list(str), loadBalancerSourceRanges: list(str),
    externalTrafficPolicy: str, internalTrafficPolicy: str, sessionAffinity: str, trafficDistribution: str, healthCheckNodePort: 'number',
    sessionAffinityConfig: obj({ clientIP: obj({ timeoutSeconds: 'number' }) }),
    ports: list(obj({ name: str, protocol: str, port: 'number', nodePort: 'number' })),
  }),
  status: obj({ loadBalancer: obj({ ingress: list(obj({ ip: str, ipMode: str })) }) }),
});

const NAMED = list(obj({ name: str }));
const ENDPOINT_SLICE: Shape = obj({
  metadata: METADATA,
  addressType: str,
  ports: list(obj({ name: str, protocol: str, port: 'number' })),
  endpoints: list(obj({
    addresses: list(str),
    conditions: obj({ ready: 'boolean', serving: 'boolean', terminating: 'boolean' }),
    nodeName: str,
    zone: str,
    hints: obj({ forZones: NAMED, forNodes: NAMED }),
  })),
});

const NODE: Shape = obj({ metadata: METADATA, status: obj({ addresses: list(obj({ type: str, address: str })) }) });

function kindOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

const WANT: Record<string, string> = { string: 'a string', number: 'a number', boolean: 'a boolean' };

/** The path of a wrong field, built only when one is found (a good object costs no string per field). */
type Segment = string | number;
interface Wrong {
  /** Innermost first: check() prepends nothing on the way in, appends on the way out. */
  path: Segment[];
  found: unknown;
  want: string;
}

/** Each object shape's fields as a list, made once (not Object.entries per checked object). */
const FIELDS = new WeakMap<object, Array<[string, Shape]>>();
const fieldsOf = (shape: { readonly object: Readonly<Record<string, Shape>> }) => {
  let f = FIELDS.get(shape);
  if (!f) FIELDS.set(shape, (f = Object.entries(shape.object)));
  return f;
};

function check(v: unknown, shape: Shape): Wrong | undefined {
  if (typeof shape === 'string') {
    return typeof v === shape && (shape !== 'number' || Number.isFinite(v)) ? undefined : { path: [], found: v, want: WANT[shape]! };
  }
  if ('list' in shape) {
    if (!Array.isArray(v)) return { path: [], found: v, want: 'a list' };
    for (let i = 0; i < v.length; i++) {
      const wrong = check(v[i], shape.list);
      if (wrong) {
        wrong.path.push(i);
        return wrong;
      }
    }
    return undefined;
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { path: [], found: v, want: 'an object' };
  const o = v as Record<string, unknown>;
  if ('mapOf' in shape) {
    for (const k of Object.keys(o)) {
      const value = o[k];
      if (typeof value !== 'string') return { path: [`[${JSON.stringify(k)}]`], found: value, want: 'a string' };
    }
    return undefined;
  }
  for (const [field, sub] of fieldsOf(shape)) {
    const value = o[field];
    if (value === undefined || value === null) continue;
    const wrong = check(value, sub);
    if (wrong) {
      wrong.path.push(field);
      return wrong;
    }
  }
  return undefined;
}

/** "spec.ports[0].port" from the innermost-first segments. */
function pathText(path: Segment[]): string {
  let at = '';
  for (let i = path.length - 1; i >= 0; i--) {
    const s = path[i]!;
    if (typeof s === 'number') at += `[${s}]`;
    else if (s.startsWith('[')) at += s;
    else at += at === '' ? s : `.${s}`;
  }
  return at;
}

const SHAPES = { Service: SERVICE, EndpointSlice: ENDPOINT_SLICE, Node: NODE };
export type WatchedKind = keyof typeof SHAPES;

/** Why this object cannot be read as a `kind` (its first wrongly typed field), or undefined when it can. */
export function shapeError(kind: WatchedKind, o: unknown): string | undefined {
  const wrong = check(o, SHAPES[kind]);
  return wrong && `${pathText(wrong.path) || 'the object'} is ${kindOf(wrong.found)}, want ${wrong.want}`;
}

/** "namespace/name" ("name" for a Node) for a log line, whatever the metadata holds. */
export function printableKey(o: unknown, namespaced: boolean): string {
  const m = (o as { metadata?: { namespace?: unknown; name?: unknown } } | null)?.metadata;
  const part = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v) ?? '');
  const name = part(m?.name ?? '');
  return namespaced ? `${part(m?.namespace ?? '')}/${name}` : name;
}
