// The built-in API server's pieces without HTTP: selectors, patches, the
// allocators and the store's Kubernetes semantics.

import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { NodePortAllocator, ServiceIpAllocator } from '../../src/k8s/apiserver/allocators';
import { applyJsonPatch, applyMergePatch } from '../../src/k8s/apiserver/patch';
import { matchesLabels, parseFieldSelector, matchesFields, parseLabelSelector } from '../../src/k8s/apiserver/selectors';
import { ObjectStore } from '../../src/k8s/apiserver/store';
import { ApiError } from '../../src/k8s/apiserver/status';
import type { KubeObject } from '../../src/k8s/apiserver/types';

function newStore(opts: { strict?: boolean; historySize?: number; cidr?: string[] } = {}): ObjectStore {
  const strict = opts.strict ?? false;
  const store = new ObjectStore({
    historySize: opts.historySize ?? 1000,
    strictValidation: strict,
    context: {
      allocators: { ips: (opts.cidr ?? ['10.96.0.0/12']).map((c) => new ServiceIpAllocator(c)), nodePorts: new NodePortAllocator('30000-32767') },
      strict,
    },
  });
  store.create('namespaces', { metadata: { name: 'default' } });
  return store;
}

function apiError(code: number, reason?: string): (err: unknown) => boolean {
  return (err: unknown) => {
    assert.ok(err instanceof ApiError, `expected ApiError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    if (reason) assert.equal(err.reason, reason);
    return true;
  };
}

interface Svc extends KubeObject {
  spec: {
    type: string;
    clusterIP?: string;
    clusterIPs?: string[];
    ipFamilies?: string[];
    ipFamilyPolicy?: string;
    ports: { name?: string; port: number; protocol?: string; targetPort?: number | string; nodePort?: number }[];
    sessionAffinity?: string;
    externalTrafficPolicy?: string;
    internalTrafficPolicy?: string;
    healthCheckNodePort?: number;
  };
}

const svc = (name: string, spec: Record<string, unknown> = {}, labels?: Record<string, string>): KubeObject => ({
  metadata: { name, namespace: 'default', ...(labels ? { labels } : {}) },
  spec: { ports: [{ port: 80 }], ...spec },
});

describe('label selectors', () => {
  const cases: [string, Record<string, string> | undefined, boolean][] = [
    ['', undefined, true],
    ['app', { app: 'x' }, true],
    ['app', {}, false],
    ['!app', {}, true],
    ['!app', { app: 'x' }, false],
    ['app=web', { app: 'web' }, true],
    ['app==web', { app: 'web' }, true],
    ['app=web', { app: 'db' }, false],
    ['app!=web', { app: 'db' }, true],
    ['app!=web', {}, true],
    ['app!=web', { app: 'web' }, false],
    ['tier in (a, b)', { tier: 'b' }, true],
    ['tier in (a,b)', { tier: 'c' }, false],
    ['tier notin (a,b)', { tier: 'c' }, true],
    ['tier notin (a,b)', {}, true],
    ['tier notin (a,b)', { tier: 'a' }, false],
    ['!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name', {}, true],
    ['!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name', { 'service.kubernetes.io/headless': '' }, false],
    ['!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name', { 'service.kubernetes.io/service-proxy-name': 'other' }, false],
    ['app=web,tier in (a,b),!canary', { app: 'web', tier: 'a' }, true],
    ['app=web,tier in (a,b),!canary', { app: 'web', tier: 'a', canary: 'y' }, false],
  ];
  for (const [selector, labels, expected] of cases) {
    it(`${JSON.stringify(selector)} on ${JSON.stringify(labels)} → ${expected}`, () => {
      assert.equal(matchesLabels(parseLabelSelector(selector), labels), expected);
    });
  }
  it('rejects malformed selectors with 400', () => {
    assert.throws(() => parseLabelSelector('app=(x'), apiError(400, 'BadRequest'));
    assert.throws(() => parseLabelSelector('a b c'), apiError(400, 'BadRequest'));
  });
});

describe('field selectors', () => {
  it('selects by metadata.name and metadata.namespace, refuses unknown fields', () => {
    const obj = { metadata: { name: 'node-a', namespace: 'ns' } };
    assert.equal(matchesFields(parseFieldSelector('metadata.name=node-a', 'nodes'), obj), true);
    assert.equal(matchesFields(parseFieldSelector('metadata.name=node-b', 'nodes'), obj), false);
    assert.equal(matchesFields(parseFieldSelector('metadata.name!=node-b,metadata.namespace=ns', 'nodes'), obj), true);
    assert.throws(() => parseFieldSelector('spec.podCIDR=x', 'nodes'), apiError(400));
  });
});

describe('patches', () => {
  it('JSON merge patch (RFC 7386)', () => {
    assert.deepEqual(applyMergePatch({ a: 1, b: { c: 2, d: 3 }, l: [1, 2] }, { b: { c: null, e: 4 }, l: [3], f: 'x' }), {
      a: 1,
      b: { d: 3, e: 4 },
      l: [3],
      f: 'x',
    });
  });
  it('JSON patch (RFC 6902): add, replace, remove, move, copy, test', () => {
    const doc = { spec: { ports: [{ port: 80 }], type: 'ClusterIP' }, metadata: { labels: { 'a/b': '1' } } };
    const out = applyJsonPatch(doc, [
      { op: 'add', path: '/spec/ports/-', value: { port: 443 } },
      { op: 'replace', path: '/spec/type', value: 'NodePort' },
      { op: 'remove', path: '/metadata/labels/a~1b' },
      { op: 'copy', from: '/spec/ports/0', path: '/spec/first' },
      { op: 'move', from: '/spec/first', path: '/spec/moved' },
      { op: 'test', path: '/spec/moved/port', value: 80 },
    ]);
    assert.deepEqual(out, { spec: { ports: [{ port: 80 }, { port: 443 }], type: 'NodePort', moved: { port: 80 } }, metadata: { labels: {} } });
    assert.deepEqual(doc.spec.ports, [{ port: 80 }], 'the input is not modified');
    assert.throws(() => applyJsonPatch(doc, [{ op: 'replace', path: '/nope/x', value: 1 }]), apiError(400));
    assert.throws(() => applyJsonPatch(doc, [{ op: 'test', path: '/spec/type', value: 'x' }]), apiError(422));
  });
});

describe('allocators', () => {
  it('ClusterIP: skips network, .1 and broadcast, never hands out a duplicate, wraps to freed addresses', () => {
    const ips = new ServiceIpAllocator('198.18.0.0/29'); // 8 addresses: .2 .. .6 allocatable
    const got = [1, 2, 3, 4, 5].map((i) => ips.allocate(`ns/s${i}`));
    assert.deepEqual(got, ['198.18.0.2', '198.18.0.3', '198.18.0.4', '198.18.0.5', '198.18.0.6']);
    assert.throws(() => ips.allocate('ns/full'), apiError(500));
    ips.release('198.18.0.4', 'ns/s3');
    ips.release('198.18.0.5', 'ns/not-the-owner');
    assert.equal(ips.allocate('ns/again'), '198.18.0.4');
    assert.equal(ips.kubernetesServiceIp, '198.18.0.1');
    assert.equal(ips.contains('198.18.0.7'), false);
    assert.equal(ips.contains('198.18.0.0'), false);
  });
  it('ClusterIP: IPv6 ranges', () => {
    const ips = new ServiceIpAllocator('fd00:10:96::/112');
    assert.equal(ips.allocate('a/b'), 'fd00:10:96::2');
    assert.equal(ips.kubernetesServiceIp, 'fd00:10:96::1');
    assert.equal(ips.claim('fd00:10:96::ff', 'a/c'), true);
    assert.equal(ips.claim('fd00:10:96:0::ff', 'a/d'), false, 'the same address spelled differently is the same address');
  });
  it('NodePort: next-fit in range, owner-aware claims', () => {
    const ports = new NodePortAllocator('30000-30002');
    assert.deepEqual([ports.allocate('a'), ports.allocate('b'), ports.allocate('c')], [30000, 30001, 30002]);
    assert.throws(() => ports.allocate('d'), apiError(500));
    assert.equal(ports.claim(30001, 'b'), true, 'the owner may claim what it holds (TCP and UDP on one nodePort)');
    assert.equal(ports.claim(30001, 'x'), false);
  });
});

describe('store: Service semantics', () => {
  it('defaults and allocates like the real API server', () => {
    const store = newStore();
    const s = store.create<Svc>('services', svc('web', { type: 'LoadBalancer', externalTrafficPolicy: 'Local', ports: [{ port: 80 }, { port: 53, protocol: 'UDP', name: 'dns' }] }));
    assert.equal(s.kind, 'Service');
    assert.equal(s.apiVersion, 'v1');
    assert.match(String(s.metadata?.uid), /^[0-9a-f-]{36}$/);
    assert.equal(s.spec.clusterIP, '10.96.0.2');
    assert.deepEqual(s.spec.clusterIPs, ['10.96.0.2']);
    assert.deepEqual(s.spec.ipFamilies, ['IPv4']);
    assert.equal(s.spec.ipFamilyPolicy, 'SingleStack');
    assert.equal(s.spec.sessionAffinity, 'None');
    assert.equal(s.spec.internalTrafficPolicy, 'Cluster');
    assert.equal(s.spec.ports[0]?.protocol, 'TCP');
    assert.equal(s.spec.ports[0]?.targetPort, 80);
    assert.equal(s.spec.ports[1]?.targetPort, 53);
    assert.equal(s.spec.ports[0]?.nodePort, 30000);
    assert.equal(s.spec.ports[1]?.nodePort, 30001);
    assert.equal(s.spec.healthCheckNodePort, 30002);

    const plain = store.create<Svc>('services', svc('plain'));
    assert.equal(plain.spec.type, 'ClusterIP');
    assert.equal(plain.spec.externalTrafficPolicy, undefined);
    assert.equal(plain.spec.ports[0]?.nodePort, undefined);

    const headless = store.create<Svc>('services', svc('headless', { clusterIP: 'None' }));
    assert.deepEqual(headless.spec.clusterIPs, ['None']);
    const external = store.create<Svc>('services', svc('ext', { type: 'ExternalName', externalName: 'example.com' }));
    assert.equal(external.spec.clusterIP, undefined);
  });

  it('keeps allocated values across an update that omits them, releases them on type change and delete', () => {
    const store = newStore();
    const s = store.create<Svc>('services', svc('np', { type: 'NodePort', ports: [{ port: 80, name: 'http' }] }));
    const nodePort = s.spec.ports[0]?.nodePort;
    const updated = store.update<Svc>('services', { metadata: { name: 'np', namespace: 'default' }, spec: { type: 'NodePort', ports: [{ port: 8080, name: 'http' }] } });
    assert.equal(updated.spec.clusterIP, s.spec.clusterIP);
    assert.equal(updated.spec.ports[0]?.nodePort, nodePort);
    const toClusterIp = store.update<Svc>('services', { ...updated, spec: { ...updated.spec, type: 'ClusterIP' } });
    assert.equal(toClusterIp.spec.ports[0]?.nodePort, undefined);
    const other = store.create<Svc>('services', svc('other', { type: 'NodePort', ports: [{ port: 80, nodePort }] }));
    assert.equal(other.spec.ports[0]?.nodePort, nodePort, 'the released nodePort can be claimed');
    store.delete('services', 'np');
    const reuse = store.create<Svc>('services', svc('reuse', { clusterIP: s.spec.clusterIP }));
    assert.equal(reuse.spec.clusterIP, s.spec.clusterIP, 'the released ClusterIP can be claimed');
  });

  it('refuses a duplicate ClusterIP or NodePort, and a changed ClusterIP, with 422', () => {
    const store = newStore();
    const a = store.create<Svc>('services', svc('a', { type: 'NodePort' }));
    assert.throws(() => store.create('services', svc('b', { clusterIP: a.spec.clusterIP })), apiError(422, 'Invalid'));
    assert.throws(() => store.create('services', svc('c', { type: 'NodePort', ports: [{ port: 1, nodePort: a.spec.ports[0]?.nodePort }] })), apiError(422, 'Invalid'));
    assert.throws(() => store.update('services', { ...a, spec: { ...a.spec, clusterIP: '10.96.9.9', clusterIPs: ['10.96.9.9'] } }), apiError(422, 'Invalid'));
    // The failed attempts left nothing allocated: c's nodePort from the range is still free.
    const d = store.create<Svc>('services', svc('d', { type: 'NodePort' }));
    assert.notEqual(d.spec.ports[0]?.nodePort, a.spec.ports[0]?.nodePort);
    // A failed update keeps what the Service held before it.
    const aPort = a.spec.ports[0]?.nodePort as number;
    const dPort = d.spec.ports[0]?.nodePort as number;
    assert.throws(
      () => store.update('services', { ...a, spec: { ...a.spec, ports: [{ port: 80, name: 'a', nodePort: aPort }, { port: 81, name: 'b', nodePort: dPort }] } }),
      apiError(422, 'Invalid'),
    );
    assert.throws(() => store.create('services', svc('e', { type: 'NodePort', ports: [{ port: 1, nodePort: aPort }] })), apiError(422, 'Invalid'));
    assert.equal(store.get<Svc>('services', 'a').spec.ports[0]?.nodePort, aPort);
  });

  it('stores invalid Services by default, refuses them with strictValidation', () => {
    const lenient = newStore();
    const bad = lenient.create<Svc>('services', svc('bad', { ports: [{ port: 70000, protocol: 'ICMP' }], clusterIP: 'banana' }));
    assert.equal(bad.spec.ports[0]?.port, 70000);
    assert.equal(bad.spec.clusterIP, 'banana');
    const strict = newStore({ strict: true });
    assert.throws(() => strict.create('services', svc('bad', { ports: [{ port: 70000 }] })), apiError(422, 'Invalid'));
    assert.throws(() => strict.create('services', svc('bad', { ports: [{ port: 80, protocol: 'ICMP' }] })), apiError(422, 'Invalid'));
    assert.throws(() => strict.create('services', svc('bad', { clusterIP: '192.0.2.1' })), apiError(422, 'Invalid'));
    assert.throws(() => strict.create('services', svc('Bad_Name')), apiError(422, 'Invalid'));
    assert.throws(
      () => strict.create('endpointslices', { metadata: { name: 'e', namespace: 'default' }, addressType: 'IPv4', endpoints: [{ addresses: ['300.1.1.1'] }] }),
      apiError(422, 'Invalid'),
    );
    assert.throws(() => strict.create('services', { metadata: { name: 'x' }, spec: {} }, { namespace: 'nowhere' }), apiError(404, 'NotFound'));
    const lenientSlice = lenient.create('endpointslices', { metadata: { name: 'e', namespace: 'default' }, addressType: 'IPv4', endpoints: [{ addresses: ['300.1.1.1'] }], ports: [{ port: 70000 }] });
    assert.equal((lenientSlice['ports'] as { protocol: string }[])[0]?.protocol, 'TCP');
  });

  it('allocates dual-stack ClusterIPs when asked and configured', () => {
    const store = newStore({ cidr: ['10.96.0.0/16', 'fd00:96::/112'] });
    const s = store.create<Svc>('services', svc('ds', { ipFamilyPolicy: 'PreferDualStack' }));
    assert.deepEqual(s.spec.clusterIPs, ['10.96.0.2', 'fd00:96::2']);
    assert.deepEqual(s.spec.ipFamilies, ['IPv4', 'IPv6']);
    const v6 = store.create<Svc>('services', svc('v6', { ipFamilies: ['IPv6'] }));
    assert.deepEqual(v6.spec.clusterIPs, ['fd00:96::3']);
    const single = newStore();
    assert.throws(() => single.create('services', svc('ds', { ipFamilyPolicy: 'RequireDualStack' })), apiError(422));
  });

  it('optimistic concurrency, no-op updates, status only through /status, generateName', () => {
    const store = newStore();
    const s = store.create<Svc>('services', svc('web'));
    const rv = store.revision;
    const same = store.update<Svc>('services', s);
    assert.equal(same.metadata?.resourceVersion, s.metadata?.resourceVersion, 'an unchanged object gets no new revision');
    assert.equal(store.revision, rv);
    const changed = store.update<Svc>('services', { ...s, metadata: { ...s.metadata, labels: { a: 'b' } }, status: { loadBalancer: { ingress: [{ ip: '192.0.2.9' }] } } });
    assert.notEqual(changed.metadata?.resourceVersion, s.metadata?.resourceVersion);
    assert.deepEqual(changed['status'], { loadBalancer: {} }, 'status is not written through the main resource');
    assert.throws(() => store.update('services', { ...s, spec: { ...s.spec, sessionAffinity: 'ClientIP' } }), apiError(409, 'Conflict'));
    const withStatus = store.updateStatus('services', { metadata: { name: 'web', namespace: 'default' }, status: { loadBalancer: { ingress: [{ ip: '192.0.2.9' }] } } });
    assert.deepEqual(withStatus['status'], { loadBalancer: { ingress: [{ ip: '192.0.2.9' }] } });
    const generated = store.create('services', { metadata: { generateName: 'gen-' }, spec: { ports: [{ port: 1 }] } });
    assert.match(String(generated.metadata?.name), /^gen-[a-z0-9]{5}$/);
    assert.throws(() => store.create('services', svc('web')), apiError(409, 'AlreadyExists'));
    assert.throws(() => store.get('services', 'nope'), apiError(404, 'NotFound'));
    assert.throws(() => store.delete('services', 'web', 'default', { preconditions: { resourceVersion: '1' } }), apiError(409, 'Conflict'));
    const patched = store.patch<Svc>('services', 'web', { spec: { sessionAffinity: 'ClientIP' } }, { contentType: 'application/merge-patch+json' });
    assert.equal(patched.spec.sessionAffinity, 'ClientIP');
    assert.equal((patched.spec as Record<string, unknown>)['sessionAffinityConfig'] !== undefined, true, 'ClientIP gets its default timeout');
  });

  it('keeps a bounded history; older revisions are Expired; list with NotOlderThan too', () => {
    const store = newStore({ historySize: 10 });
    const start = store.revision;
    for (let i = 0; i < 40; i++) store.createOrReplace('nodes', { metadata: { name: `n${i % 5}`, labels: { i: String(i) } } });
    assert.throws(() => store.changesSince(start), apiError(410, 'Expired'));
    const recent = store.changesSince(store.revision - 5);
    assert.equal(recent.length, 5);
    assert.deepEqual(recent.map((e) => e.revision), [1, 2, 3, 4, 5].map((i) => store.revision - 5 + i));
    assert.throws(() => store.list('nodes', { resourceVersion: String(start), resourceVersionMatch: 'NotOlderThan' }), apiError(410, 'Expired'));
    store.compactHistory();
    assert.deepEqual(store.changesSince(store.revision), []);
    assert.throws(() => store.changesSince(store.revision - 1), apiError(410));
  });

  it('deleting a namespace deletes what it holds; unknown namespaces are created on demand', () => {
    const store = newStore();
    store.create('services', { metadata: { name: 'a' }, spec: { ports: [{ port: 80 }] } }, { namespace: 'team' });
    store.create('endpointslices', { metadata: { name: 'a-1', labels: { 'kubernetes.io/service-name': 'a' } }, addressType: 'IPv4', endpoints: [] }, { namespace: 'team' });
    assert.equal(store.get('namespaces', 'team').metadata.labels?.['kubernetes.io/metadata.name'], 'team');
    store.delete('namespaces', 'team');
    assert.equal(store.list('services', { namespace: 'team' }).items.length, 0);
    assert.equal(store.list('endpointslices').items.length, 0);
  });
});
