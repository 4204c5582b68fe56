// Bad input through the real watch path (#13 item 3): the real `sluice
// agent` watching the built-in API server, fed generated Services and
// EndpointSlices that are malformed (fields of the wrong JSON type, stored
// with the test-only `raw` write so no defaulting or validation stops them),
// invalid (ports, protocols, addresses, CIDRs, timeouts), conflicting (two
// Services on one ExternalIP:port), oversized (a 200 KiB annotation, more
// endpoints than the per-frontend guard), duplicated, unicode-named, or of
// another API version (a discovery.k8s.io/v1beta1 EndpointSlice, unknown
// fields). Properties: the agent never exits and its watch never fails;
// every bad object gets exactly one warn line naming it with its reason and
// one sluice_errors_total{reason} count; acceptable odd objects are
// programmed; the good Service keeps its frontends in the real maps, follows
// an EndpointSlice change after every batch, and serves real connections.
//
// Short form in `make test` (a few batches); FUZZ_RUNS=N for the long form,
// FUZZ_SEED=S to replay a failure. Counts go to build/fuzz-results.json.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import fc from 'fast-check';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import type { KubeObject } from '../../src/k8s/apiserver';
import { Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { startBackends } from '../helpers/backends';
import { AgentProcess } from '../helpers/agentProcess';
import { fuzzRuns, fuzzSeed, recordFuzzResults } from '../helpers/fuzzResults';

const NODE = 'node-fuzz';
const BACKENDS = ['198.18.30.2', '198.18.30.3', '198.18.30.4'];
/** The good Service's ExternalIP: generated Services that claim it must lose. */
const CONFLICT_IP = '198.19.77.1';
const MAX_ENDPOINTS = 8;

let sb: Sandbox;
let api: ApiServerHandle;
let agent: AgentProcess;
let tmp: string;
let metricsAddress: string;
let goodVip: string;

type Programmed = Array<{ frontend: string; backends: Array<{ address: string; port: number }>; service?: { name: string } }>;

function programmed(): Programmed {
  return JSON.parse(sh(sluiceBin, ['services', '-o', 'json', '--bpffs', sb.bpffs])) as Programmed;
}

async function waitProgrammed(frontend: string, backends: string[]): Promise<void> {
  const want = backends.map((b) => `${b}:8080`).sort().join(',');
  await waitFor(`${frontend} -> ${want}`, () => {
    const f = programmed().find((s) => s.frontend === frontend);
    return f !== undefined && f.backends.map((b) => `${b.address}:${b.port}`).sort().join(',') === want;
  }, 15000).catch((err: Error) => {
    const complaints = agent.lines.filter((l) => l.level >= 40).slice(-5).map((l) => JSON.stringify(l).slice(0, 300));
    throw new Error(`${err.message}; agent exited: ${agent.exited}; last warnings: ${complaints.join(' | ')}`);
  });
}

function sliceOf(service: string, name: string, ips: string[], extra: Record<string, unknown> = {}): KubeObject {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name, namespace: 'default', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true }, nodeName: NODE })),
    ...extra,
  } as KubeObject;
}

function serviceOf(name: string, clusterIP: string, spec: Record<string, unknown> = {}, metadata: Record<string, unknown> = {}): KubeObject {
  return {
    apiVersion: 'v1', kind: 'Service',
    metadata: { name, namespace: 'default', ...metadata },
    spec: { type: 'ClusterIP', clusterIP, clusterIPs: [clusterIP], ipFamilies: ['IPv4'], ports: [{ name: 'http', port: 80, protocol: 'TCP' }], ...spec },
  } as KubeObject;
}

/** Objects are stored as given: no defaulting, allocation or validation (test-only). */
const RAW = { raw: true } as const;

async function errorCounts(): Promise<Map<string, number>> {
  const text = await (await fetch(`http://${metricsAddress}/metrics`)).text();
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^sluice_errors_total\{reason="([^"]+)"\} (\d+)/gm)) out.set(m[1]!, Number(m[2]));
  return out;
}

/** Warn lines that name this object ("Service default/x"). */
function linesAbout(object: string) {
  return agent.lines.filter((l) => l.level >= 40 && (l as { object?: string }).object === object);
}

async function connect(vip: string, port: number, count: number) {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', vip, String(port), String(count)]);
  return (JSON.parse(out) as { results: Array<{ backend?: string; error?: string }> }).results;
}

before(async () => {
  sb = Sandbox.create('sluice-fuzz');
  await startBackends(sb, BACKENDS);
  api = await startApiServer({ port: 0 });
  api.store.create('nodes', {
    apiVersion: 'v1', kind: 'Node', metadata: { name: NODE }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] },
  } as KubeObject);
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-fuzz-'));
  const kubeconfig = path.join(tmp, 'kubeconfig');
  await api.writeKubeconfig(kubeconfig);
  agent = new AgentProcess([
    '--kubeconfig', kubeconfig, '--node-name', NODE, '--cgroup-path', sb.cgroup, '--bpffs', sb.bpffs,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0',
    '--sync-period', '5', '--drift-repair-period', '5', '--max-endpoints-per-service', String(MAX_ENDPOINTS), '--log-level', 'info',
  ]);
  await agent.waitForLog(/informers synced/);
  metricsAddress = String((agent.find(/serving \/healthz/) as { metrics?: string }).metrics);
  const good = api.store.create('services', {
    apiVersion: 'v1', kind: 'Service', metadata: { name: 'good', namespace: 'default' },
    spec: { ports: [{ name: 'http', port: 80, protocol: 'TCP' }], externalIPs: [CONFLICT_IP] },
  } as KubeObject) as unknown as { spec: { clusterIP: string } };
  goodVip = good.spec.clusterIP;
  api.store.create('endpointslices', sliceOf('good', 'good-1', [BACKENDS[0]!]));
  await waitProgrammed(`${goodVip}:80/tcp`, [BACKENDS[0]!]);
  // Creation times have 1 s resolution: every generated Service is younger than `good`.
  await new Promise((r) => setTimeout(r, 1100));
});

after(async () => {
  await agent?.stop();
  await api?.close();
  sb?.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('a Service of the wrong shape is rejected by name, and the watch goes on: later Services are programmed', async () => {
  api.store.create('services', serviceOf('wrong-shape', '10.96.250.1', { ports: '80' }), RAW);
  api.store.create('services', serviceOf('after-wrong-shape', '10.96.250.2'), RAW);
  api.store.create('endpointslices', sliceOf('after-wrong-shape', 'after-wrong-shape-1', [BACKENDS[1]!]), RAW);
  await waitProgrammed('10.96.250.2:80/tcp', [BACKENDS[1]!]);
  // The agent logs the rejection when the event arrives, before the later
  // Service is even received; but the line reaches this process through a
  // pipe only when its event loop turns, and waitProgrammed's first probe
  // (a synchronous `sluice services`) can see the maps programmed without a
  // turn: wait for the line, as the generated cases below do.
  await waitFor('Service default/wrong-shape rejected', () => linesAbout('Service default/wrong-shape').length > 0, 10000);
  const lines = linesAbout('Service default/wrong-shape');
  assert.equal(lines.length, 1, JSON.stringify(lines));
  assert.equal(lines[0]!.reason, 'malformed_object');
  assert.match(lines[0]!.msg, /spec\.ports is a string, want a list/);
  assert.equal(agent.find(/watch of services failed/), undefined, 'the watch never failed');
  api.store.delete('services', 'wrong-shape', 'default');
  api.store.delete('services', 'after-wrong-shape', 'default');
  api.store.delete('endpointslices', 'after-wrong-shape-1', 'default');
});

test('two bad EndpointSlices of one Service: each problem is logged once, not again when the other arrives', async () => {
  api.store.create('services', serviceOf('two-bad', '10.96.250.3'), RAW);
  api.store.create('endpointslices', sliceOf('two-bad', 'two-bad-ok', [BACKENDS[2]!]), RAW);
  await waitProgrammed('10.96.250.3:80/tcp', [BACKENDS[2]!]);
  api.store.create('endpointslices', sliceOf('two-bad', 'two-bad-1', ['999.1.1.1']), RAW);
  await agent.waitForLog(/EndpointSlice default\/two-bad-1: 1 endpoint address/);
  api.store.create('endpointslices', sliceOf('two-bad', 'two-bad-2', ['not-an-ip']), RAW);
  await agent.waitForLog(/EndpointSlice default\/two-bad-2: 1 endpoint address/);
  await waitProgrammed('10.96.250.3:80/tcp', [BACKENDS[2]!]);
  assert.equal(linesAbout('EndpointSlice default/two-bad-1').length, 1, 'the first slice\'s problem is not repeated');
  assert.equal(linesAbout('EndpointSlice default/two-bad-2').length, 1);
  for (const n of ['two-bad-ok', 'two-bad-1', 'two-bad-2']) api.store.delete('endpointslices', n, 'default');
  api.store.delete('services', 'two-bad', 'default');
});

test('an update of the wrong shape keeps the last good version (EndpointSlice and Node)', async () => {
  const before = await errorCounts();
  const current = api.store.get('endpointslices', 'good-1', 'default') as KubeObject;
  api.store.update('endpointslices', { ...current, endpoints: [{ addresses: BACKENDS[1], conditions: { ready: 'yes' } }] } as KubeObject, RAW);
  await agent.waitForLog(/EndpointSlice default\/good-1: rejected: endpoints\[0\]\.addresses is a string, want a list/);
  const node = api.store.get('nodes', NODE) as KubeObject;
  api.store.updateStatus('nodes', { ...node, status: { addresses: [null] } } as KubeObject);
  await agent.waitForLog(/Node node-fuzz: rejected: status\.addresses\[0\] is null, want an object/);
  await waitProgrammed(`${goodVip}:80/tcp`, [BACKENDS[0]!]);
  assert.deepEqual((await connect(goodVip, 80, 5)).map((r) => r.backend), Array(5).fill(`${BACKENDS[0]}:8080`));
  assert.equal(((await errorCounts()).get('malformed_object') ?? 0) - (before.get('malformed_object') ?? 0), 2);
  api.store.update('endpointslices', sliceOf('good', 'good-1', [BACKENDS[0]!]));
  api.store.updateStatus('nodes', { ...node, metadata: { ...node.metadata, resourceVersion: undefined } } as KubeObject);
});

test('a Node address without an address field: the agent keeps running and syncing', async () => {
  const node = api.store.get('nodes', NODE) as KubeObject;
  // Right shape (the field is absent), so the watch accepts it; translate must not throw on it.
  api.store.updateStatus('nodes', { ...node, status: { addresses: [{ type: 'InternalIP' }, { type: 'InternalIP', address: '198.18.0.1' }] } } as KubeObject);
  api.store.update('endpointslices', sliceOf('good', 'good-1', [BACKENDS[0]!, BACKENDS[2]!]));
  await waitProgrammed(`${goodVip}:80/tcp`, [BACKENDS[0]!, BACKENDS[2]!]);
  assert.equal(agent.exited, false, `the agent is running: ${agent.tail()}`);
  api.store.update('endpointslices', sliceOf('good', 'good-1', [BACKENDS[0]!]));
  await waitProgrammed(`${goodVip}:80/tcp`, [BACKENDS[0]!]);
  api.store.updateStatus('nodes', { ...node, metadata: { ...node.metadata, resourceVersion: undefined } } as KubeObject);
});

// ---- generated cases ----------------------------------------------------

interface Case {
  category: string;
  /** The field made wrong, for malformed cases. */
  detail?: string;
  /** Objects to store (raw), in order. */
  objects: Array<{ resource: 'services' | 'endpointslices'; object: KubeObject }>;
  /** The one rejection expected (object as the agent names it, reason), or the frontend that must be programmed. */
  expect: { object: string; reason: string } | { frontend: string; backends: string[] };
}

type Field = 'string' | 'number' | 'boolean' | 'object' | 'list';
const JUNK: Record<Field, fc.Arbitrary<unknown>> = {
  string: fc.string({ maxLength: 8 }),
  number: fc.integer({ min: -100000, max: 100000 }),
  boolean: fc.boolean(),
  object: fc.dictionary(fc.string({ maxLength: 4 }), fc.integer(), { maxKeys: 2 }),
  list: fc.array(fc.integer(), { maxLength: 2 }),
};
/** A value of any JSON type but `want`. */
const wrongType = (want: Field) => fc.oneof(...(Object.keys(JUNK) as Field[]).filter((k) => k !== want).map((k) => JUNK[k]));

/** Where a Service or EndpointSlice can hold a wrongly typed value, and what the agent says about it. */
const SERVICE_PATHS: Array<[Array<string | number>, Field]> = [
  [['spec'], 'object'], [['spec', 'ports'], 'list'], [['spec', 'ports', 0], 'object'], [['spec', 'ports', 0, 'port'], 'number'],
  [['spec', 'ports', 0, 'protocol'], 'string'], [['spec', 'ports', 0, 'nodePort'], 'number'], [['spec', 'clusterIP'], 'string'],
  [['spec', 'clusterIPs'], 'list'], [['spec', 'externalIPs', 0], 'string'], [['spec', 'sessionAffinityConfig', 'clientIP', 'timeoutSeconds'], 'number'],
  [['metadata', 'labels', 'app'], 'string'], [['metadata', 'annotations', 'note'], 'string'], [['status', 'loadBalancer', 'ingress'], 'list'],
  [['spec', 'loadBalancerSourceRanges'], 'list'], [['spec', 'healthCheckNodePort'], 'number'],
];
const SLICE_PATHS: Array<[Array<string | number>, Field]> = [
  [['endpoints'], 'list'], [['endpoints', 0], 'object'], [['endpoints', 0, 'addresses'], 'list'], [['endpoints', 0, 'addresses', 0], 'string'],
  [['endpoints', 0, 'conditions', 'ready'], 'boolean'], [['endpoints', 0, 'nodeName'], 'string'], [['endpoints', 0, 'hints', 'forZones'], 'list'],
  [['ports', 0, 'port'], 'number'], [['ports'], 'list'], [['addressType'], 'string'],
];

function setPath(o: Record<string, unknown>, p: Array<string | number>, value: unknown): void {
  let cur: Record<string | number, unknown> = o;
  for (let i = 0; i < p.length - 1; i++) {
    const k = p[i]!;
    if (typeof cur[k] !== 'object' || cur[k] === null) cur[k] = typeof p[i + 1] === 'number' ? [] : {};
    cur = cur[k] as Record<string | number, unknown>;
  }
  cur[p[p.length - 1]!] = value;
}

/** Each generated case gets its own name and ClusterIP (10.97.0.0/16 lies in the test range 10.96.0.0/12). */
let caseCounter = 0;
function next(): { n: number; name: string; vip: string } {
  const n = ++caseCounter;
  return { n, name: `gen-${n}`, vip: `10.97.${n >> 8}.${n & 255}` };
}

const svcObj = (name: string) => `Service default/${name}`;
const sliceObj = (name: string) => `EndpointSlice default/${name}`;

const CASES: Array<fc.Arbitrary<() => Case>> = [
  // Fields of the wrong JSON type: rejected whole at the watch.
  fc.constantFrom(...SERVICE_PATHS).chain(([p, want]) => wrongType(want).map((v) => () => {
    const { name, vip, n } = next();
    const o = serviceOf(name, vip, { externalIPs: [`198.19.88.${n & 255}`] }) as unknown as Record<string, unknown>;
    setPath(o, p, v);
    return { category: 'malformed Service', detail: p.join('.'), objects: [{ resource: 'services', object: o as KubeObject }], expect: { object: svcObj(name), reason: 'malformed_object' } };
  })),
  fc.constantFrom(...SLICE_PATHS).chain(([p, want]) => wrongType(want).map((v) => () => {
    const { name, vip } = next();
    const s = sliceOf(name, `${name}-1`, [BACKENDS[1]!]) as unknown as Record<string, unknown>;
    setPath(s, p, v);
    return {
      category: 'malformed EndpointSlice', detail: p.join('.'),
      objects: [{ resource: 'services', object: serviceOf(name, vip) }, { resource: 'endpointslices', object: s as KubeObject }],
      expect: { object: sliceObj(`${name}-1`), reason: 'malformed_object' },
    };
  })),
  // Right type, wrong value: translate drops the part it belongs to.
  fc.oneof(fc.integer({ min: -70000, max: 0 }), fc.integer({ min: 65536, max: 1 << 30 }), fc.double({ min: 1.1, max: 100, noNaN: true }).filter((d) => !Number.isInteger(d)))
    .map((port) => () => {
      const { name, vip } = next();
      return { category: 'invalid port', objects: [{ resource: 'services', object: serviceOf(name, vip, { ports: [{ name: 'http', port, protocol: 'TCP' }] }) }], expect: { object: svcObj(name), reason: 'invalid_port' } };
    }),
  fc.string({ maxLength: 12 }).filter((p) => !['TCP', 'UDP', 'SCTP'].includes(p)).map((protocol) => () => {
    const { name, vip } = next();
    return { category: 'invalid protocol', objects: [{ resource: 'services', object: serviceOf(name, vip, { ports: [{ name: 'http', port: 80, protocol }] }) }], expect: { object: svcObj(name), reason: 'invalid_protocol' } };
  }),
  fc.constant(() => {
    const { name, vip } = next();
    return { category: 'SCTP', objects: [{ resource: 'services', object: serviceOf(name, vip, { ports: [{ name: 'sctp', port: 80, protocol: 'SCTP' }] }) }], expect: { object: svcObj(name), reason: 'unsupported_protocol' } };
  }),
  fc.constantFrom('256.1.1.1', '10.96.1', '1.2.3.4.5', 'fe80::zz', 'ten.ninety.six', ' 10.96.0.1').map((bad) => () => {
    const { name, vip } = next();
    return { category: 'invalid externalIP', objects: [{ resource: 'services', object: serviceOf(name, vip, { externalIPs: [bad] }) }], expect: { object: svcObj(name), reason: 'invalid_ip' } };
  }),
  fc.constantFrom('10.96.0.0/33', '10.0.0.0', 'x/8', '1.2.3.4/-1').map((bad) => () => {
    const { name, vip } = next();
    const object = serviceOf(name, vip, { type: 'LoadBalancer', loadBalancerSourceRanges: [bad] });
    return { category: 'invalid source range', objects: [{ resource: 'services', object }], expect: { object: svcObj(name), reason: 'invalid_source_range' } };
  }),
  fc.oneof(fc.integer({ min: -5, max: 0 }), fc.integer({ min: 86401, max: 1 << 30 })).map((t) => () => {
    const { name, vip } = next();
    const object = serviceOf(name, vip, { sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: t } } });
    return { category: 'invalid affinity timeout', objects: [{ resource: 'services', object }], expect: { object: svcObj(name), reason: 'invalid_affinity_timeout' } };
  }),
  fc.string({ minLength: 1, maxLength: 10 }).filter((s) => !/^(random|round-robin|rr|source-hash|sh)$/i.test(s.trim())).map((alg) => () => {
    const { name, vip } = next();
    const object = serviceOf(name, vip, {}, { annotations: { 'sluice.io/lb-algorithm': alg } });
    return { category: 'unknown algorithm', objects: [{ resource: 'services', object }], expect: { object: svcObj(name), reason: 'unknown_lb_algorithm' } };
  }),
  fc.constantFrom('999.1.1.1', 'not-an-ip', '10.0.0', 'fd00::1', '').map((bad) => () => {
    const { name, vip } = next();
    return {
      category: 'invalid endpoint address',
      objects: [{ resource: 'services', object: serviceOf(name, vip) }, { resource: 'endpointslices', object: sliceOf(name, `${name}-1`, [bad === '' ? 'x' : bad]) }],
      expect: { object: sliceObj(`${name}-1`), reason: 'invalid_ip' },
    };
  }),
  fc.oneof(fc.integer({ min: 65536, max: 1 << 20 }), fc.integer({ min: -100, max: 0 })).map((port) => () => {
    const { name, vip } = next();
    return {
      category: 'invalid endpoint port',
      objects: [{ resource: 'services', object: serviceOf(name, vip) }, { resource: 'endpointslices', object: sliceOf(name, `${name}-1`, [BACKENDS[1]!], { ports: [{ name: 'http', port, protocol: 'TCP' }] }) }],
      expect: { object: sliceObj(`${name}-1`), reason: 'invalid_port' },
    };
  }),
  // Two Services on one ExternalIP:port: the older one (`good`) keeps it, as in kube-proxy's ordering of KUBE-SERVICES rules.
  fc.constant(() => {
    const { name, vip } = next();
    return { category: 'ExternalIP conflict', objects: [{ resource: 'services', object: serviceOf(name, vip, { externalIPs: [CONFLICT_IP] }) }], expect: { object: svcObj(name), reason: 'frontend_conflict' } };
  }),
  fc.integer({ min: MAX_ENDPOINTS + 1, max: 40 }).map((count) => () => {
    const { name, vip } = next();
    const ips = Array.from({ length: count }, (_, i) => `198.18.31.${i + 1}`);
    return {
      category: 'too many endpoints',
      objects: [{ resource: 'services', object: serviceOf(name, vip) }, { resource: 'endpointslices', object: sliceOf(name, `${name}-1`, ips) }],
      expect: { object: svcObj(name), reason: 'too_many_endpoints' },
    };
  }),
  // Odd but acceptable: programmed, and nothing logged about them.
  fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }).map((tail) => () => {
    const { name, vip } = next();
    const uname = `${name}-ü-${tail}`;
    return {
      category: 'unicode name',
      objects: [{ resource: 'services', object: serviceOf(uname, vip) }, { resource: 'endpointslices', object: sliceOf(uname, `${name}-1`, [BACKENDS[1]!]) }],
      expect: { frontend: `${vip}:80/tcp`, backends: [BACKENDS[1]!] },
    };
  }),
  fc.integer({ min: 1, max: 200 * 1024 }).map((size) => () => {
    const { name, vip } = next();
    const object = serviceOf(name, vip, {}, { annotations: { 'example.com/huge': 'x'.repeat(size) }, labels: { big: 'y'.repeat(63) } });
    return {
      category: 'huge annotation',
      objects: [{ resource: 'services', object }, { resource: 'endpointslices', object: sliceOf(name, `${name}-1`, [BACKENDS[2]!]) }],
      expect: { frontend: `${vip}:80/tcp`, backends: [BACKENDS[2]!] },
    };
  }),
  fc.constant(() => {
    const { name, vip } = next();
    // discovery.k8s.io/v1beta1: topology instead of nodeName/zone; plus fields no version has.
    const slice = sliceOf(name, `${name}-1`, [], {
      apiVersion: 'discovery.k8s.io/v1beta1',
      endpoints: [{ addresses: [BACKENDS[1]], conditions: { ready: true }, topology: { 'kubernetes.io/hostname': NODE } }],
      futureField: { nested: [1, 2, 3] },
    });
    return {
      category: 'other API version',
      objects: [{ resource: 'services', object: serviceOf(name, vip, { futureSpecField: 'x' }) }, { resource: 'endpointslices', object: slice }],
      expect: { frontend: `${vip}:80/tcp`, backends: [BACKENDS[1]!] },
    };
  }),
  fc.constant(() => {
    const { name, vip } = next();
    const dup = { name: 'http', port: 80, protocol: 'TCP' };
    return {
      category: 'duplicated',
      objects: [
        { resource: 'services', object: serviceOf(name, vip, { ports: [dup, dup] }) },
        { resource: 'endpointslices', object: sliceOf(name, `${name}-1`, [BACKENDS[1]!, BACKENDS[1]!, BACKENDS[2]!]) },
        { resource: 'endpointslices', object: sliceOf(name, `${name}-2`, [BACKENDS[2]!]) },
      ],
      expect: { frontend: `${vip}:80/tcp`, backends: [BACKENDS[1]!, BACKENDS[2]!] },
    };
  }),
];

test('generated bad objects: one named rejection each, the agent keeps syncing, the good Service keeps working', async () => {
  const runs = fuzzRuns(6);
  const seed = fuzzSeed(1313);
  const errorsBefore = await errorCounts();
  const expectedReasons = new Map<string, number>();
  const rejections: Array<{ object: string; reason: string }> = [];
  const categories: Record<string, number> = {};
  let generated = 0;
  let flip = false;

  await fc.assert(fc.asyncProperty(fc.array(fc.oneof(...CASES), { minLength: 1, maxLength: 5 }), async (makers) => {
    const cases = makers.map((m) => m());
    for (const c of cases) {
      for (const o of c.objects) api.store.create(o.resource, o.object, RAW);
      categories[c.category] = (categories[c.category] ?? 0) + 1;
    }
    generated += cases.length;
    // The good Service follows a change made after the batch: the watch and the syncer are still going.
    flip = !flip;
    const goodBackends = flip ? [BACKENDS[0]!, BACKENDS[1]!] : [BACKENDS[0]!];
    api.store.update('endpointslices', sliceOf('good', 'good-1', goodBackends));
    await waitProgrammed(`${goodVip}:80/tcp`, goodBackends);
    for (const c of cases) {
      if ('frontend' in c.expect) {
        await waitProgrammed(c.expect.frontend, c.expect.backends);
        continue;
      }
      const { object, reason } = c.expect;
      await waitFor(`${c.category} ${c.detail ?? ''}: ${object} rejected (${reason})`, () => linesAbout(object).length > 0, 10000);
      rejections.push({ object, reason });
      expectedReasons.set(reason, (expectedReasons.get(reason) ?? 0) + 1);
    }
    const conflict = programmed().find((s) => s.frontend === `${CONFLICT_IP}:80/tcp`);
    assert.equal(conflict?.service?.name, 'good', 'the older Service keeps the contested ExternalIP:port');
    assert.equal(agent.exited, false, 'the agent is running');
    for (const c of cases) for (const o of [...c.objects].reverse()) {
      const m = (o.object as { metadata: { name: string } }).metadata;
      api.store.delete(o.resource, m.name, 'default');
    }
  }), { numRuns: runs, seed, endOnFailure: true, includeErrorInReport: true });

  // Exactly one line per rejected object, with its reason; one count each.
  await waitProgrammed(`${goodVip}:80/tcp`, flip ? [BACKENDS[0]!, BACKENDS[1]!] : [BACKENDS[0]!]);
  for (const { object, reason } of rejections) {
    const lines = linesAbout(object);
    assert.equal(lines.length, 1, `${object}: ${JSON.stringify(lines.map((l) => l.msg))}`);
    assert.equal(lines[0]!.reason, reason, lines[0]!.msg);
  }
  const errorsAfter = await errorCounts();
  for (const [reason, n] of expectedReasons) {
    assert.equal((errorsAfter.get(reason) ?? 0) - (errorsBefore.get(reason) ?? 0), n, `sluice_errors_total{reason="${reason}"} rose by one per rejected object`);
  }
  for (const reason of ['watch_failed', 'sync_failed', 'translate_failed', 'apply_failed']) {
    assert.equal((errorsAfter.get(reason) ?? 0) - (errorsBefore.get(reason) ?? 0), 0, `no ${reason}`);
  }
  const results = await connect(goodVip, 80, 20);
  assert.deepEqual(results.filter((r) => r.error), [], 'the good Service serves real connections');
  recordFuzzResults('watch', { generated, rejected: rejections.length, accepted: generated - rejections.length, crashed: agent.exited ? 1 : 0, seed, batches: runs, categories });
  console.log(`bad input through the watch: ${generated} generated objects in ${runs} batches (seed ${seed}), ${rejections.length} rejected by name, ${generated - rejections.length} odd but accepted and programmed`);
});
