// The protobuf list decoders (src/k8s/proto) against lists captured from the
// real kube-apiserver v1.34 as JSON and as protobuf (test/fixtures/k8sproto,
// re-captured by `node dist/bench/protolist.js --etcd-seed <dir> --rounds 0
// --capture test/fixtures/k8sproto`): what the agent keeps of each object
// (slim.ts, plus the store's trigger-time annotation) is the same either way.
// And the reflector: asks for protobuf, decodes by Content-Type, names the
// resource when a page is malformed.
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { encodeList, openEndpointSliceList, openServiceList, ProtoError, PROTOBUF_CONTENT_TYPE } from '../../src/k8s/proto';
import { startApiServer } from '../../src/k8s/apiserver';
import { connectToApi } from '../../src/agent/kubeClient';
import { slimService, slimSlice, StringPool } from '../../src/agent/slim';
import { TRIGGER_TIME_ANNOTATION } from '../../src/agent/store';
import { Reflector, type ApiObject } from '../../src/agent/reflector';
import type { KubeConnection } from '../../src/agent/kubeClient';
import { repoRoot } from '../cluster/binaries';

const dir = join(repoRoot, 'test', 'fixtures', 'k8sproto');
const fixture = (name: string) => ({ json: JSON.parse(readFileSync(join(dir, `${name}.json`), 'utf8')) as { metadata: { resourceVersion: string }; items: unknown[] }, pb: readFileSync(join(dir, `${name}.pb`)) });

describe('protobuf list decoders (captured from kube-apiserver v1.34)', () => {
  it('Services: slim(JSON) equals slim(protobuf), every field the agent reads', () => {
    const { json, pb } = fixture('services');
    const list = openServiceList(pb);
    assert.equal(list.metadata.resourceVersion, json.metadata.resourceVersion);
    const items = list.items();
    const want = json.items as V1Service[];
    assert.equal(items.length, want.length);
    assert.ok(want.length >= 6);
    const [pj, pp] = [new StringPool(), new StringPool()];
    for (let i = 0; i < want.length; i++) {
      const name = want[i]!.metadata!.name;
      assert.deepStrictEqual(slimService(items[i]!, pp), slimService(want[i]!, pj), name);
      // Beyond slim: the spec fields as JSON has them (targetPort int or name, pointers, omitempty).
      const { spec: js } = want[i]!;
      const ps = items[i]!.spec!;
      for (const k of ['type', 'clusterIP', 'clusterIPs', 'externalIPs', 'sessionAffinity', 'sessionAffinityConfig', 'loadBalancerIP', 'loadBalancerSourceRanges', 'externalName', 'externalTrafficPolicy', 'healthCheckNodePort',
        'publishNotReadyAddresses', 'ipFamilies', 'ipFamilyPolicy', 'allocateLoadBalancerNodePorts', 'loadBalancerClass', 'internalTrafficPolicy', 'trafficDistribution', 'selector', 'ports'] as const) {
        assert.deepStrictEqual(ps[k], js![k], `${name} spec.${k}`);
      }
      assert.deepStrictEqual(items[i]!.metadata!.labels, want[i]!.metadata!.labels, `${name} labels`);
      assert.equal(items[i]!.metadata!.creationTimestamp, want[i]!.metadata!.creationTimestamp as unknown as string);
      assert.equal(items[i]!.metadata!.uid, want[i]!.metadata!.uid);
      assert.deepStrictEqual(items[i]!.status?.loadBalancer?.ingress, want[i]!.status?.loadBalancer?.ingress, `${name} ingress`);
    }
    const multi = items.find((s) => s.metadata?.name === 'multi')!;
    assert.deepStrictEqual(multi.metadata?.annotations, { 'sluice.io/lb-algorithm': 'maglev' }, 'only the annotation translate reads is decoded');
    assert.equal(multi.spec?.ports?.[0]?.targetPort, 'web');
    const lb = items.find((s) => s.metadata?.name === 'lb')!;
    assert.equal(lb.spec?.ports?.[0]?.nodePort, undefined, 'allocateLoadBalancerNodePorts=false: no nodePort, as in JSON');
    assert.ok(lb.spec?.healthCheckNodePort);
  });

  it('EndpointSlices: slim(JSON) equals slim(protobuf); absent conditions stay absent', () => {
    const { json, pb } = fixture('endpointslices');
    const list = openEndpointSliceList(pb);
    const items = list.items();
    const want = json.items as V1EndpointSlice[];
    assert.equal(items.length, want.length);
    const [pj, pp] = [new StringPool(), new StringPool()];
    for (let i = 0; i < want.length; i++) {
      const name = want[i]!.metadata!.name;
      assert.deepStrictEqual(slimSlice(items[i]!, pp), slimSlice(want[i]!, pj), name);
      assert.deepStrictEqual(items[i]!.metadata!.annotations, { [TRIGGER_TIME_ANNOTATION]: want[i]!.metadata!.annotations![TRIGGER_TIME_ANNOTATION]! }, name);
      assert.deepStrictEqual(items[i]!.metadata!.labels, want[i]!.metadata!.labels);
      for (const [j, e] of (want[i]!.endpoints ?? []).entries()) {
        const got = items[i]!.endpoints[j]!;
        for (const k of ['addresses', 'conditions', 'nodeName', 'zone', 'hints', 'hostname'] as const) assert.deepStrictEqual(got[k], e[k], `${name} endpoint ${j} ${k}`);
      }
      assert.deepStrictEqual(items[i]!.ports, want[i]!.ports ?? undefined, `${name} ports`);
    }
    const v4 = items.find((s) => s.metadata?.name === 'multi-v4')!;
    assert.deepStrictEqual(v4.endpoints[1]!.conditions, {}, 'no conditions given: the API server writes an empty (all unknown) set, JSON and protobuf alike');
    assert.deepStrictEqual(v4.endpoints[3]!.conditions, { serving: false });
    assert.deepStrictEqual(v4.endpoints[4]!.conditions, {});
    assert.equal(items.find((s) => s.metadata?.name === 'multi-v6')!.addressType, 'IPv6');
  });

  it('every truncation and garbage gives a ProtoError, never another exception', () => {
    for (const [name, open] of [['services', openServiceList], ['endpointslices', openEndpointSliceList]] as const) {
      const { pb } = fixture(name);
      for (let n = 0; n < pb.length; n += n < 64 ? 1 : 17) {
        assert.throws(() => open(pb.subarray(0, n)).items(), ProtoError, `${name} cut at ${n}`);
      }
      let seed = 7;
      for (let k = 0; k < 300; k++) {
        const bad = Buffer.from(pb);
        for (let j = 0; j < 4; j++) {
          seed = (seed * 1103515245 + 12345) & 0x7fffffff;
          bad[4 + (seed % (bad.length - 4))] = seed & 0xff;
        }
        try {
          open(bad).items();
        } catch (e) {
          assert.ok(e instanceof ProtoError, `${name} garbage ${k}: ${String(e)}`);
        }
      }
    }
    assert.throws(() => openServiceList(Buffer.from('{"kind":"ServiceList"}')), /magic/);
    assert.throws(() => openServiceList(fixture('endpointslices').pb), /kind "EndpointSliceList", not ServiceList/);
  });
});

/** A connection that answers every GET with `body` as `type`, and records the Accept headers. */
function fakeApi(body: Buffer, type: string, accepts: Array<string | undefined>): KubeConnection {
  return {
    server: 'http://fake',
    get(_path, _query, _signal, accept) {
      accepts.push(accept);
      const res = new PassThrough() as unknown as IncomingMessage & PassThrough;
      Object.assign(res, { statusCode: 200, headers: { 'content-type': type } });
      setImmediate(() => res.end(body));
      return Promise.resolve(res);
    },
  };
}

function listOnce(api: KubeConnection): Promise<{ items: ApiObject[]; error?: Error }> {
  return new Promise((resolve) => {
    const items: ApiObject[] = [];
    const r: Reflector<ApiObject> = new Reflector(api, { name: 'services', path: '/api/v1/services', query: {}, protobuf: openServiceList, minWatchTimeoutSeconds: 3600 }, {
      upsert: (o) => items.push(o), delete: () => undefined,
      listed: () => { void r.stop(); resolve({ items }); },
    }, { onError: (_n, error) => { void r.stop(); resolve({ items, error }); } });
    r.start();
  });
}

describe('reflector: LIST pages as protobuf', () => {
  it('asks for protobuf and decodes a protobuf answer', async () => {
    const accepts: Array<string | undefined> = [];
    const { items, error } = await listOnce(fakeApi(fixture('services').pb, PROTOBUF_CONTENT_TYPE, accepts));
    assert.equal(error, undefined);
    assert.equal(accepts[0], `${PROTOBUF_CONTENT_TYPE}, application/json`);
    assert.deepStrictEqual(items.map((o) => o.metadata?.name), (fixture('services').json.items as V1Service[]).map((s) => s.metadata?.name));
  });

  it('a JSON answer still works', async () => {
    const { items, error } = await listOnce(fakeApi(readFileSync(join(dir, 'services.json')), 'application/json', []));
    assert.equal(error, undefined);
    assert.equal(items.length, fixture('services').json.items.length);
  });

  it('a malformed protobuf page is an error naming the resource, then the normal backoff', async () => {
    const pb = fixture('services').pb;
    const { error } = await listOnce(fakeApi(pb.subarray(0, pb.length - 9), PROTOBUF_CONTENT_TYPE, []));
    assert.match(String(error?.message), /^list \/api\/v1\/services: malformed protobuf page: .*at byte \d+/);
  });
});

describe('built-in API: LIST as protobuf', () => {
  it('encodeList -> decoders: the captured objects round-trip (slim equal, every field read)', () => {
    const svcs = fixture('services').json.items as V1Service[];
    const slices = fixture('endpointslices').json.items as V1EndpointSlice[];
    const s = openServiceList(encodeList('v1', 'ServiceList', { resourceVersion: '42', continue: 'tok' }, svcs));
    assert.deepStrictEqual(s.metadata, { resourceVersion: '42', continue: 'tok' });
    const want = openServiceList(fixture('services').pb).items();
    assert.deepStrictEqual(s.items(), want.map((x) => ({ ...x, status: x.status ?? { loadBalancer: {} } })));
    const e = openEndpointSliceList(encodeList('discovery.k8s.io/v1', 'EndpointSliceList', { resourceVersion: '42' }, slices)).items();
    assert.deepStrictEqual(e, openEndpointSliceList(fixture('endpointslices').pb).items());
  });

  it('serves protobuf to a client that asks for it first, JSON otherwise (a real reflector over HTTP)', async () => {
    const api = await startApiServer({ port: 0 });
    const tmp = mkdtempSync(join(tmpdir(), 'sluice-proto-'));
    try {
      for (const svc of fixture('services').json.items as V1Service[]) {
        const { metadata, spec } = svc;
        api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: metadata!.name, namespace: 'default', labels: metadata!.labels, annotations: metadata!.annotations }, spec: { ...spec, clusterIP: spec?.clusterIP === 'None' ? 'None' : undefined, clusterIPs: undefined, ipFamilies: undefined, ipFamilyPolicy: undefined } } as never);
      }
      writeFileSync(join(tmp, 'kubeconfig'), api.kubeconfig());
      const conn = await connectToApi(join(tmp, 'kubeconfig'), undefined);
      const asked = async (accept: string | undefined) => {
        const res = await conn.get('/api/v1/services', { limit: '2' }, undefined, accept);
        const chunks: Buffer[] = [];
        for await (const c of res) chunks.push(c as Buffer);
        return { type: String(res.headers['content-type']), body: Buffer.concat(chunks) };
      };
      const json = await asked(undefined);
      assert.equal(json.type, 'application/json');
      const pb = await asked(`${PROTOBUF_CONTENT_TYPE}, application/json`);
      assert.equal(pb.type, PROTOBUF_CONTENT_TYPE);
      const page = openServiceList(pb.body);
      const jsonPage = JSON.parse(json.body.toString()) as { metadata: { continue: string; resourceVersion: string }; items: V1Service[] };
      assert.deepStrictEqual(page.metadata, jsonPage.metadata);
      const [pj, pp] = [new StringPool(), new StringPool()];
      assert.deepStrictEqual(page.items().map((x) => slimService(x, pp)), jsonPage.items.map((x) => slimService(x, pj)));
      assert.equal((await asked('application/json, application/vnd.kubernetes.protobuf')).type, 'application/json');
      // A stored object with a field of the wrong type: that page goes out as JSON, as it is.
      api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'zz-bad', namespace: 'default' }, spec: { ports: [{ port: 80, nodePort: 'x' }] } } as never, { raw: true } as never);
      const badPage = await (async () => {
        const res = await conn.get('/api/v1/namespaces/default/services', { fieldSelector: 'metadata.name=zz-bad' }, undefined, `${PROTOBUF_CONTENT_TYPE}, application/json`);
        const chunks: Buffer[] = [];
        for await (const c of res) chunks.push(c as Buffer);
        return { type: String(res.headers['content-type']), body: Buffer.concat(chunks).toString() };
      })();
      assert.equal(badPage.type, 'application/json');
      assert.match(badPage.body, /"nodePort":"x"/);
      // The whole list through the reflector, protobuf pages of 2.
      const names: string[] = [];
      await new Promise<void>((resolve, reject) => {
        const r: Reflector<ApiObject> = new Reflector(conn, { name: 'services', path: '/api/v1/services', query: {}, pageSize: 2, protobuf: openServiceList, minWatchTimeoutSeconds: 3600 }, {
          upsert: (x) => names.push(x.metadata!.name!), delete: () => undefined, listed: () => { void r.stop().then(resolve); },
        }, { onError: (_n, err) => { void r.stop(); reject(err); } });
        r.start();
      });
      assert.ok(names.length >= (fixture('services').json.items.length));
    } finally {
      await api.close();
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
