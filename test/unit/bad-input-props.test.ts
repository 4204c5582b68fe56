// Property-based tests of the watch side's decode path (#13 item 3): any
// JSON shape handed over as a Service, EndpointSlice or Node (fields of
// every type, nulls inside lists, unknown fields, huge and unicode strings)
// goes through ClusterState (shape check + slim projection) and translate
// without a throw. An object is either accepted or rejected exactly once,
// by name, as malformed_object; every translate problem names its object
// and a known reason; the result does not depend on the order of the
// Services (frontend conflicts go to the older one, then the smaller name).
// The e2e twin (test/e2e/bad_input.test.ts) runs such objects through a
// real agent; this one runs thousands per second.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { ClusterState, type Rejection } from '../../src/agent/store';
import { printableKey, shapeError, type WatchedKind } from '../../src/agent/shape';
import { nodeContextFromNode, translateAll, translateService } from '../../src/translate';
import { fuzzRuns, fuzzSeed, recordFuzzResults } from '../helpers/fuzzResults';

/** Every reason translate and the watch give objects (docs/bad-input.md lists them). */
const KNOWN_REASONS = new Set([
  'invalid_port', 'invalid_protocol', 'unsupported_protocol', 'invalid_cluster_ip', 'invalid_ip', 'invalid_source_range',
  'invalid_affinity_timeout', 'too_many_endpoints', 'frontend_conflict', 'unknown_lb_algorithm', 'malformed_object',
]);

const junk = fc.oneof(
  fc.constant(null), fc.integer(), fc.double(), fc.string({ maxLength: 6 }), fc.boolean(),
  fc.array(fc.jsonValue({ maxDepth: 1 }), { maxLength: 2 }), fc.dictionary(fc.string({ maxLength: 3 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 2 }),
);
/** Mostly the right thing, sometimes absent, now and then anything (about half the objects come out well typed, so translate sees many). */
const maybe = <T>(a: fc.Arbitrary<T>) => fc.oneof({ weight: 30, arbitrary: a }, { weight: 1, arbitrary: junk }, { weight: 4, arbitrary: fc.constant(undefined) });
const text = fc.oneof(fc.string({ maxLength: 12 }), fc.string({ unit: 'grapheme', maxLength: 12 }), fc.constant('x'.repeat(70000)));
const addr = fc.constantFrom('10.96.0.1', '10.96.0.2', '198.18.0.5', '010.0.0.1', '999.1.1.1', 'fd00::1', '', 'None', ' 10.96.0.3');
const port = maybe(fc.record({
  name: maybe(fc.constantFrom('http', '', 'dns', 'ü')), port: maybe(fc.oneof(fc.integer({ min: -5, max: 70000 }), fc.constant(80), fc.double())),
  protocol: maybe(fc.constantFrom('TCP', 'UDP', 'SCTP', 'tcp', '')), nodePort: maybe(fc.integer({ min: 0, max: 70000 })),
}, { requiredKeys: [] }));
const metadata = (names: fc.Arbitrary<string>) => maybe(fc.record({
  name: maybe(names), namespace: maybe(fc.constantFrom('default', 'ns-ü', '')),
  labels: maybe(fc.dictionary(fc.constantFrom('kubernetes.io/service-name', 'service.kubernetes.io/headless', 'app'), maybe(fc.constantFrom('s1', 's2')))),
  annotations: maybe(fc.dictionary(fc.constantFrom('sluice.io/lb-algorithm', 'big', 'endpoints.kubernetes.io/last-change-trigger-time'), maybe(fc.oneof(text, fc.constantFrom('rr', 'maglev'))))),
  creationTimestamp: maybe(fc.constantFrom('2026-01-01T00:00:00Z', '2026-01-01T00:00:01Z', 'yesterday')),
  futureField: junk,
}, { requiredKeys: [] }));

const service = fc.record({
  apiVersion: maybe(fc.constantFrom('v1', 'v2alpha1')),
  metadata: metadata(fc.constantFrom('s1', 's2', 's3', 'ü-svc')),
  spec: maybe(fc.record({
    type: maybe(fc.constantFrom('ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName', 'Weird')), clusterIP: maybe(addr), clusterIPs: maybe(fc.array(maybe(addr), { maxLength: 2 })),
    ipFamilies: maybe(fc.array(maybe(fc.constantFrom('IPv4', 'IPv6', 'IPv5')), { maxLength: 2 })), externalIPs: maybe(fc.array(maybe(addr), { maxLength: 3 })),
    ports: maybe(fc.array(port, { maxLength: 4 })), loadBalancerSourceRanges: maybe(fc.array(maybe(fc.constantFrom('10.0.0.0/8', ' 1.2.3.0/24 ', 'x/33')), { maxLength: 2 })),
    sessionAffinity: maybe(fc.constantFrom('ClientIP', 'None')), sessionAffinityConfig: maybe(fc.record({ clientIP: maybe(fc.record({ timeoutSeconds: maybe(fc.integer({ min: -10, max: 100000 })) })) })),
    externalTrafficPolicy: maybe(fc.constantFrom('Local', 'Cluster')), internalTrafficPolicy: maybe(fc.constantFrom('Local', 'Cluster')), healthCheckNodePort: maybe(fc.integer({ min: -1, max: 70000 })),
    unknownSpecField: junk,
  }, { requiredKeys: [] })),
  status: maybe(fc.record({ loadBalancer: maybe(fc.record({ ingress: maybe(fc.array(maybe(fc.record({ ip: maybe(addr), ipMode: maybe(fc.constantFrom('VIP', 'Proxy')) }, { requiredKeys: [] })), { maxLength: 2 })) })) })),
}, { requiredKeys: [] });

const endpoint = maybe(fc.record({
  addresses: maybe(fc.array(maybe(addr), { maxLength: 2 })),
  conditions: maybe(fc.record({ ready: maybe(fc.boolean()), serving: maybe(fc.boolean()), terminating: maybe(fc.boolean()) }, { requiredKeys: [] })),
  nodeName: maybe(fc.constantFrom('node-a', 'node-b', '')), zone: maybe(fc.constantFrom('z1', 'z2')),
  hints: maybe(fc.record({ forZones: maybe(fc.array(maybe(fc.record({ name: maybe(fc.constantFrom('z1', 'z2')) })), { maxLength: 2 })), forNodes: maybe(fc.array(maybe(fc.record({ name: maybe(fc.constantFrom('node-a')) })), { maxLength: 1 })) })),
  topology: maybe(fc.dictionary(fc.constant('kubernetes.io/hostname'), fc.constant('node-a'))), // discovery.k8s.io/v1beta1
}, { requiredKeys: [] }));
const slice = fc.record({
  apiVersion: maybe(fc.constantFrom('discovery.k8s.io/v1', 'discovery.k8s.io/v1beta1')),
  metadata: metadata(fc.constantFrom('s1-a', 's1-b', 's2-a', 's3-a')),
  addressType: maybe(fc.constantFrom('IPv4', 'IPv6', 'FQDN')),
  ports: maybe(fc.array(port, { maxLength: 3 })), endpoints: maybe(fc.array(endpoint, { maxLength: 12 })),
}, { requiredKeys: [] });
const node = fc.record({
  metadata: maybe(fc.record({ name: maybe(fc.constant('node-a')), labels: maybe(fc.dictionary(fc.constant('topology.kubernetes.io/zone'), maybe(fc.constantFrom('z1', 'z2')))) }, { requiredKeys: [] })),
  status: maybe(fc.record({ addresses: maybe(fc.array(maybe(fc.record({ type: maybe(fc.constantFrom('InternalIP', 'ExternalIP', 'Hostname')), address: maybe(addr) }, { requiredKeys: [] })), { maxLength: 3 })) })),
}, { requiredKeys: [] });

const OPTS = { maxEndpointsPerService: 8 };

test('any shape: the watch side never throws, rejects by name exactly once, and translate names every problem', () => {
  const counts = { generated: 0, rejected: 0, problems: 0 };
  fc.assert(fc.property(fc.array(service, { maxLength: 4 }), fc.array(slice, { maxLength: 4 }), fc.option(node, { nil: undefined }), (services, slices, n) => {
    const rejections: Rejection[] = [];
    const state = new ClusterState(() => undefined);
    state.onRejected = (r) => rejections.push(r);
    // The API holds one object per name: the last generated one of each name.
    const byName = new Map<string, readonly [WatchedKind, unknown]>();
    for (const [kind, o] of [...services.map((o) => ['Service', o] as const), ...slices.map((o) => ['EndpointSlice', o] as const), ...(n ? [['Node', n] as const] : [])]) {
      byName.set(`${kind} ${printableKey(o, kind !== 'Node')}`, [kind, o]);
    }
    const objects = [...byName.values()];
    for (const [kind, o] of objects) {
      if (kind === 'Service') state.upsertService(o as V1Service);
      else if (kind === 'EndpointSlice') state.upsertSlice(o as V1EndpointSlice);
      else state.setNode(o as V1Node);
    }
    // The same event again (a relist) is no new rejection.
    for (const [kind, o] of objects) if (kind === 'Service') state.upsertService(o as V1Service);
    counts.generated += objects.length;
    const malformed = objects.filter(([kind, o]) => shapeError(kind, o) !== undefined);
    const names = (list: Array<{ object: string }>) => list.map((r) => r.object).sort();
    assert.deepEqual(new Set(names(rejections)).size, rejections.length, `one rejection per object: ${JSON.stringify(rejections)}`);
    assert.deepEqual(names(rejections), names(malformed.map(([kind, o]) => ({ object: `${kind} ${printableKey(o, kind !== 'Node')}` }))));
    for (const r of rejections) assert.match(r.message, /^(Service|EndpointSlice|Node) .*: rejected: .* is .*, want /);
    counts.rejected += rejections.length;

    const ctx = nodeContextFromNode(state.node, 'node-a', {}, ['198.18.0.1']);
    for (const [key, svc] of state.services) {
      const t = translateService(svc, state.slicesOf(key), ctx, OPTS);
      for (const p of t.problems) {
        assert.ok(KNOWN_REASONS.has(p.reason), `unknown reason ${p.reason}`);
        assert.match(p.object, /^(Service|EndpointSlice) /);
        assert.ok(p.message.startsWith(p.object), p.message);
      }
      counts.problems += t.problems.length;
      for (const f of t.frontends) {
        assert.ok(Number.isInteger(f.port) && f.port >= 1 && f.port <= 65535, `frontend port ${f.port}`);
        for (const b of f.backends) assert.ok(Number.isInteger(b.port) && b.port >= 1 && b.port <= 65535, `backend port ${b.port}`);
        assert.ok(f.proto === 'TCP' || f.proto === 'UDP');
      }
    }
  }), { numRuns: fuzzRuns(6) * 500, seed: fuzzSeed(1311), includeErrorInReport: true });
  recordFuzzResults('decode', { generated: counts.generated, rejected: counts.rejected, problems: counts.problems, crashed: 0, seed: fuzzSeed(1311), runs: fuzzRuns(6) * 500 });
});

test('frontend conflicts are decided the same whatever order the Services come in', () => {
  const svc = (name: string, created: string, externalIP: string): V1Service => ({
    metadata: { name, namespace: 'default', creationTimestamp: created as unknown as Date },
    spec: { clusterIP: `10.96.1.${name.length}`, ports: [{ port: 80, protocol: 'TCP' }], externalIPs: [externalIP] },
  });
  const arb = fc.array(fc.tuple(fc.constantFrom('a', 'bb', 'ccc', 'dddd', 'eeeee'), fc.constantFrom('2026-01-01T00:00:00Z', '2026-01-01T00:00:05Z'), fc.constantFrom('198.19.0.1', '198.19.0.2')), { minLength: 2, maxLength: 6 })
    .map((list) => [...new Map(list.map(([n, c, ip]) => [n, svc(n, c, ip)])).values()]);
  fc.assert(fc.property(arb.chain((list) => fc.tuple(fc.constant(list), fc.shuffledSubarray(list, { minLength: list.length }))), ([list, shuffled]) => {
    const ctx = { name: 'node-a', addresses: [] };
    const a = translateAll(list, new Map(), ctx, OPTS);
    const b = translateAll(shuffled, new Map(), ctx, OPTS);
    assert.deepEqual(b.frontends, a.frontends);
    assert.deepEqual(b.problems.map((p) => p.message).sort(), a.problems.map((p) => p.message).sort());
    // The holder of each ExternalIP is the oldest claimant, then the smallest name (kube-proxy: see docs/bad-input.md).
    for (const ip of ['198.19.0.1', '198.19.0.2']) {
      const claimants = list.filter((s) => s.spec!.externalIPs![0] === ip)
        .sort((x, y) => String(x.metadata!.creationTimestamp).localeCompare(String(y.metadata!.creationTimestamp)) || x.metadata!.name!.localeCompare(y.metadata!.name!));
      const holder = a.frontends.find((f) => f.address === ip)?.service;
      assert.equal(holder, claimants[0] ? `default/${claimants[0].metadata!.name}` : undefined);
    }
  }), { numRuns: fuzzRuns(6) * 50, seed: fuzzSeed(1312) });
});

test('a rejected object is reported once; again only after it was fixed, deleted, or gone from a relist', () => {
  const rejections: string[] = [];
  const state = new ClusterState(() => undefined);
  state.onRejected = (r) => rejections.push(r.message);
  const bad = { metadata: { name: 'web', namespace: 'default' }, spec: { ports: '80' } } as unknown as V1Service;
  const good = { metadata: { name: 'web', namespace: 'default' }, spec: { clusterIP: '10.96.0.1', ports: [{ port: 80 }] } } as V1Service;
  state.upsertService(bad);
  state.upsertService(bad);
  assert.equal(rejections.length, 1);
  assert.match(rejections[0]!, /^Service default\/web: rejected: spec\.ports is a string, want a list/);
  assert.equal(state.services.size, 0, 'a new object of the wrong shape is not kept');
  state.upsertService(good);
  state.upsertService(bad);
  assert.equal(rejections.length, 2, 'bad again after a good version: a new rejection');
  assert.equal(state.services.get('default/web')?.spec?.clusterIP, '10.96.0.1', 'the last good version stays');
  state.retainServices(new Set(['default/web']));
  state.upsertService(bad);
  assert.equal(rejections.length, 2, 'still the same rejection');
  state.retainServices(new Set());
  state.upsertService(bad);
  assert.equal(rejections.length, 3, 'gone from a relist, then back: reported again');
});
