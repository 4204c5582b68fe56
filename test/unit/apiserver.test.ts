// The built-in API server against the real @kubernetes/client-node 1.4.0:
// typed API clients, and the informers (ListWatch) Sluice's agent uses, with
// kube-proxy's label selector, dropped connections and 410 relists.

import { strict as assert } from 'node:assert';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { after, afterEach, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { startApiServer, ApiServerHandle } from '../../src/k8s/apiserver';

const KUBE_PROXY_SELECTOR = '!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name';

async function waitFor(what: string, check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function kubeConfigFor(server: ApiServerHandle): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromString(server.kubeconfig());
  return kc;
}

type Named = { metadata?: { name?: string; namespace?: string } };
const id = (o: Named) => `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;

/** Records an informer's callbacks as "verb ns/name" strings. */
function record<T extends k8s.KubernetesObject>(informer: k8s.Informer<T>): { events: string[]; errors: unknown[] } {
  const log = { events: [] as string[], errors: [] as unknown[] };
  informer.on('add', (o) => log.events.push(`add ${id(o)}`));
  informer.on('update', (o) => log.events.push(`update ${id(o)}`));
  informer.on('delete', (o) => log.events.push(`delete ${id(o)}`));
  informer.on('error', (err) => log.errors.push(err));
  return log;
}

const service = (name: string, labels?: Record<string, string>, spec: Partial<k8s.V1ServiceSpec> = {}): k8s.V1Service => ({
  metadata: { name, ...(labels ? { labels } : {}) },
  spec: { ports: [{ port: 80 }], ...spec },
});

describe('built-in API server with @kubernetes/client-node', () => {
  let server: ApiServerHandle;
  let kc: k8s.KubeConfig;
  let core: k8s.CoreV1Api;
  let discovery: k8s.DiscoveryV1Api;
  const informers: k8s.Informer<k8s.KubernetesObject>[] = [];
  const stopped = new WeakSet<k8s.Informer<k8s.KubernetesObject>>();

  /**
   * The documented client-node pattern: an informer stops on a watch error, so
   * restart it. stop() itself aborts the watch and fires 'error', so the
   * handler must know the informer was stopped on purpose.
   */
  function restartOnError(informer: k8s.Informer<k8s.KubernetesObject>): void {
    informer.on('error', () => setTimeout(() => {
      if (!stopped.has(informer)) void informer.start();
    }, 20));
  }

  before(async () => {
    server = await startApiServer({ bookmarkIntervalMs: 100 });
    kc = kubeConfigFor(server);
    core = kc.makeApiClient(k8s.CoreV1Api);
    discovery = kc.makeApiClient(k8s.DiscoveryV1Api);
  });
  afterEach(async () => {
    for (const informer of informers.splice(0)) {
      stopped.add(informer);
      await informer.stop();
    }
    await waitFor('all watches closed', () => server.activeWatches === 0);
  });
  after(async () => {
    await server.close();
  });

  it('serves a kubeconfig that KubeConfig.loadFromFile accepts, discovery and health', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-apiserver-'));
    try {
      await server.writeKubeconfig(join(dir, 'config'));
      const fromFile = new k8s.KubeConfig();
      fromFile.loadFromFile(join(dir, 'config'));
      assert.equal(fromFile.getCurrentCluster()?.server, server.url);
      const version = await fromFile.makeApiClient(k8s.VersionApi).getCode();
      assert.equal(version.major, '1');
      const namespaces = await fromFile.makeApiClient(k8s.CoreV1Api).listNamespace();
      assert.deepEqual(namespaces.items.map((n) => n.metadata?.name).sort(), ['default', 'kube-system']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    for (const path of ['/healthz', '/readyz', '/livez']) {
      const res = await fetch(server.url + path);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), 'ok');
    }
    const groups = await kc.makeApiClient(k8s.ApisApi).getAPIVersions();
    assert.deepEqual(groups.groups.map((g) => g.name), ['discovery.k8s.io']);
    const coreResources = await core.getAPIResources();
    assert.ok(coreResources.resources.some((r) => r.name === 'services' && r.namespaced));
  });

  it('CoreV1Api: create, read, list, replace (409 when stale), patch, delete a Service', async () => {
    const created = await core.createNamespacedService({ namespace: 'default', body: service('crud', { app: 'crud' }, { type: 'NodePort' }) });
    assert.match(created.spec?.clusterIP ?? '', /^10\.(9[6-9]|10[0-9]|11[01])\./);
    assert.ok((created.spec?.ports?.[0]?.nodePort ?? 0) >= 30000);
    const read = await core.readNamespacedService({ name: 'crud', namespace: 'default' });
    assert.equal(read.metadata?.resourceVersion, created.metadata?.resourceVersion);
    const listed = await core.listNamespacedService({ namespace: 'default', labelSelector: 'app=crud' });
    assert.deepEqual(listed.items.map((s) => s.metadata?.name), ['crud']);
    assert.equal(listed.kind, 'ServiceList');

    read.metadata = { ...read.metadata, labels: { app: 'crud', v: '2' } };
    const replaced = await core.replaceNamespacedService({ name: 'crud', namespace: 'default', body: read });
    assert.notEqual(replaced.metadata?.resourceVersion, read.metadata.resourceVersion);
    await assert.rejects(core.replaceNamespacedService({ name: 'crud', namespace: 'default', body: read }), (err: unknown) => {
      assert.ok(err instanceof k8s.ApiException);
      assert.equal(err.code, 409);
      assert.match(String(err.body), /"reason":"Conflict"/);
      return true;
    });

    // client-node's default patch type is JSON patch; merge patch on request.
    const jsonPatched = await core.patchNamespacedService({ name: 'crud', namespace: 'default', body: [{ op: 'add', path: '/metadata/labels/patched', value: 'json' }] });
    assert.equal(jsonPatched.metadata?.labels?.['patched'], 'json');
    const mergePatched = await core.patchNamespacedService(
      { name: 'crud', namespace: 'default', body: { metadata: { labels: { patched: 'merge' } } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    assert.equal(mergePatched.metadata?.labels?.['patched'], 'merge');
    assert.equal(mergePatched.spec?.clusterIP, created.spec?.clusterIP);

    const status = await core.replaceNamespacedServiceStatus({
      name: 'crud',
      namespace: 'default',
      body: { ...mergePatched, status: { loadBalancer: { ingress: [{ ip: '192.0.2.50' }] } } },
    });
    assert.equal(status.status?.loadBalancer?.ingress?.[0]?.ip, '192.0.2.50');

    const deleted = await core.deleteNamespacedService({ name: 'crud', namespace: 'default' });
    assert.equal(deleted.metadata?.name, 'crud');
    await assert.rejects(core.readNamespacedService({ name: 'crud', namespace: 'default' }), (err: unknown) => {
      assert.ok(err instanceof k8s.ApiException);
      assert.equal(err.code, 404);
      return true;
    });
  });

  it('KubernetesObjectApi finds resources through discovery: create, strategic-merge patch, list, delete', async () => {
    const api = k8s.KubernetesObjectApi.makeApiClient(kc);
    const created = await api.create({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'generic', namespace: 'default' }, spec: { ports: [{ port: 80 }] } } as k8s.V1Service);
    assert.ok(created.spec?.clusterIP);
    await api.create({ apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'generic-1', namespace: 'default' }, addressType: 'IPv4', endpoints: [] } as k8s.V1EndpointSlice);
    const patched = await api.patch(
      { apiVersion: 'v1', kind: 'Service', metadata: { name: 'generic', namespace: 'default', labels: { a: 'b' } } },
      undefined, undefined, undefined, undefined, k8s.PatchStrategy.StrategicMergePatch,
    );
    assert.deepEqual(patched.metadata?.labels, { a: 'b' });
    assert.equal((await api.list('discovery.k8s.io/v1', 'EndpointSlice', 'default')).items.length, 1);
    await api.delete({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'generic', namespace: 'default' } });
    await api.delete({ apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'generic-1', namespace: 'default' } });
  });

  it('DiscoveryV1Api: EndpointSlices create, list by service, replace, delete', async () => {
    const body: k8s.V1EndpointSlice = {
      metadata: { name: 'web-abc12', labels: { 'kubernetes.io/service-name': 'web' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['198.18.0.10'], conditions: { ready: true } }],
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    };
    await discovery.createNamespacedEndpointSlice({ namespace: 'default', body });
    await discovery.createNamespacedEndpointSlice({ namespace: 'default', body: { ...body, metadata: { name: 'other-1', labels: { 'kubernetes.io/service-name': 'other' } } } });
    const forWeb = await discovery.listEndpointSliceForAllNamespaces({ labelSelector: 'kubernetes.io/service-name=web' });
    assert.deepEqual(forWeb.items.map((s) => s.metadata?.name), ['web-abc12']);
    assert.equal(forWeb.items[0]?.endpoints[0]?.addresses[0], '198.18.0.10');
    const current = forWeb.items[0] as k8s.V1EndpointSlice;
    current.endpoints.push({ addresses: ['198.18.0.11'], conditions: { ready: false, serving: true, terminating: true } });
    const replaced = await discovery.replaceNamespacedEndpointSlice({ name: 'web-abc12', namespace: 'default', body: current });
    assert.equal(replaced.endpoints.length, 2);
    const status = await discovery.deleteNamespacedEndpointSlice({ name: 'web-abc12', namespace: 'default' });
    assert.equal(status.status, 'Success');
    await discovery.deleteNamespacedEndpointSlice({ name: 'other-1', namespace: 'default' });
    assert.equal((await discovery.listNamespacedEndpointSlice({ namespace: 'default' })).items.length, 0);
  });

  it('allocates distinct ClusterIPs and NodePorts for 200 Services, and frees them on delete', async () => {
    const created = [];
    for (let i = 0; i < 200; i++) {
      created.push(await core.createNamespacedService({ namespace: 'alloc', body: service(`s${i}`, undefined, { type: i % 2 ? 'NodePort' : 'LoadBalancer', externalTrafficPolicy: 'Local' }) }));
    }
    const ips = created.map((s) => s.spec?.clusterIP);
    const nodePorts = created.flatMap((s) => [...(s.spec?.ports ?? []).map((p) => p.nodePort), ...(s.spec?.healthCheckNodePort ? [s.spec.healthCheckNodePort] : [])]);
    assert.equal(new Set(ips).size, 200);
    assert.equal(new Set(nodePorts).size, 300, '200 nodePorts + 100 healthCheckNodePorts');
    assert.ok(nodePorts.every((p) => p !== undefined && p >= 30000 && p <= 32767));
    await assert.rejects(
      core.createNamespacedService({ namespace: 'alloc', body: service('dup', undefined, { clusterIP: ips[0] as string }) }),
      (err: unknown) => err instanceof k8s.ApiException && err.code === 422,
    );
    await core.deleteNamespacedService({ name: 's0', namespace: 'alloc' });
    const reuse = await core.createNamespacedService({ namespace: 'alloc', body: service('dup', undefined, { clusterIP: ips[0] as string }) });
    assert.equal(reuse.spec?.clusterIP, ips[0]);
    await core.deleteNamespace({ name: 'alloc' });
  });

  it('a Service informer with kube-proxy\'s selector sees add/update/delete and skips headless and foreign services', async () => {
    server.store.create('services', { metadata: { name: 'before', namespace: 'default' }, spec: { ports: [{ port: 1 }] } });
    const informer = k8s.makeInformer(
      kc,
      '/api/v1/services',
      () => core.listServiceForAllNamespaces({ labelSelector: KUBE_PROXY_SELECTOR }),
      KUBE_PROXY_SELECTOR,
    );
    informers.push(informer);
    const log = record(informer);
    await informer.start();
    assert.deepEqual(log.events, ['add default/before']);

    await core.createNamespacedService({ namespace: 'default', body: service('web') });
    await core.createNamespacedService({ namespace: 'default', body: service('headless', { 'service.kubernetes.io/headless': '' }, { clusterIP: 'None' }) });
    await core.createNamespacedService({ namespace: 'default', body: service('foreign', { 'service.kubernetes.io/service-proxy-name': 'other-proxy' }) });
    await waitFor('add web', () => log.events.includes('add default/web'));
    await core.patchNamespacedService({ name: 'web', namespace: 'default', body: [{ op: 'replace', path: '/spec/ports/0/port', value: 8080 }] });
    await waitFor('update web', () => log.events.includes('update default/web'));
    assert.equal((informer.get('web', 'default') as k8s.V1Service).spec?.ports?.[0]?.port, 8080);

    // Moving a Service out of the selection is a delete for this watcher, moving it back an add.
    server.store.patch('services', 'web', { metadata: { labels: { 'service.kubernetes.io/service-proxy-name': 'other-proxy' } } });
    await waitFor('delete web', () => log.events.includes('delete default/web'));
    server.store.patch('services', 'web', { metadata: { labels: { 'service.kubernetes.io/service-proxy-name': null } } });
    await waitFor('re-add web', () => log.events.filter((e) => e === 'add default/web').length === 2);

    await core.deleteNamespacedService({ name: 'web', namespace: 'default' });
    await core.deleteNamespacedService({ name: 'before', namespace: 'default' });
    await waitFor('deletes', () => log.events.includes('delete default/before') && log.events.filter((e) => e === 'delete default/web').length === 2);
    assert.ok(!log.events.some((e) => /headless|foreign/.test(e)), `unexpected events: ${log.events.join(', ')}`);
    assert.deepEqual(informer.list(), []);
    assert.deepEqual(log.errors, []);
    await core.deleteNamespacedService({ name: 'headless', namespace: 'default' });
    await core.deleteNamespacedService({ name: 'foreign', namespace: 'default' });
  });

  it('an EndpointSlice informer sees add/update/delete', async () => {
    const informer = k8s.makeInformer(kc, '/apis/discovery.k8s.io/v1/endpointslices', () => discovery.listEndpointSliceForAllNamespaces());
    informers.push(informer);
    const log = record(informer);
    await informer.start();
    const slice = {
      metadata: { name: 'web-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['198.18.0.20'] }],
      ports: [{ port: 80 }],
    };
    server.store.create('endpointslices', slice);
    await waitFor('add', () => log.events.includes('add default/web-1'));
    server.store.patch('endpointslices', 'web-1', { endpoints: [{ addresses: ['198.18.0.21'] }] });
    await waitFor('update', () => log.events.includes('update default/web-1'));
    assert.equal((informer.get('web-1', 'default') as k8s.V1EndpointSlice).endpoints[0]?.addresses[0], '198.18.0.21');
    server.store.delete('endpointslices', 'web-1');
    await waitFor('delete', () => log.events.includes('delete default/web-1'));
  });

  it('informers survive dropped and closed watches: they re-watch from their resourceVersion', async () => {
    let lists = 0;
    const informer = k8s.makeInformer(kc, '/api/v1/nodes', () => {
      lists++;
      return core.listNode();
    });
    informers.push(informer);
    const log = record(informer);
    restartOnError(informer);
    await informer.start();
    await waitFor('watch open', () => server.activeWatches === 1);

    assert.equal(server.closeAllWatches('graceful'), 1);
    await waitFor('re-watch after a clean end', () => server.activeWatches === 1);
    server.store.create('nodes', { metadata: { name: 'node-a' } });
    await waitFor('add node-a', () => log.events.includes('add /node-a'));

    assert.equal(server.closeAllWatches('drop'), 1);
    await waitFor('re-watch after a drop', () => server.activeWatches === 1);
    server.store.create('nodes', { metadata: { name: 'node-b' } });
    await waitFor('add node-b', () => log.events.includes('add /node-b'));
    assert.equal(lists, 1, 'resuming from a current resourceVersion needs no relist');
    server.store.delete('nodes', 'node-a');
    server.store.delete('nodes', 'node-b');
    await waitFor('deletes', () => log.events.includes('delete /node-b'));
  });

  it('after compactHistory() and a dropped watch the informer gets 410, relists and converges', async () => {
    let lists = 0;
    server.store.create('nodes', { metadata: { name: 'stays' } });
    server.store.create('nodes', { metadata: { name: 'goes' } });
    server.store.create('nodes', { metadata: { name: 'changes' } });
    const informer = k8s.makeInformer(kc, '/api/v1/nodes', () => {
      lists++;
      return core.listNode();
    });
    informers.push(informer);
    const log = record(informer);
    restartOnError(informer);
    await informer.start();
    await waitFor('watch open', () => server.activeWatches === 1);
    assert.equal(lists, 1);

    // All in one tick: the client cannot re-watch before the history is gone.
    server.closeAllWatches('drop');
    server.store.delete('nodes', 'goes');
    server.store.patch('nodes', 'changes', { metadata: { labels: { changed: 'yes' } } });
    server.store.create('nodes', { metadata: { name: 'new' } });
    server.compactHistory();

    await waitFor('relist and converge', () => lists === 2 && informer.list().length === 3 && server.activeWatches === 1).catch((err) => {
      throw new Error(`${(err as Error).message}: lists=${lists} cache=${informer.list().map((n) => n.metadata?.name).join(',')} watches=${server.activeWatches} events=${log.events.join(',')} errors=${log.errors.map(String).join(',')}`);
    });
    assert.deepEqual(informer.list().map((n) => n.metadata?.name).sort(), ['changes', 'new', 'stays']);
    assert.equal((informer.get('changes') as k8s.V1Node).metadata?.labels?.['changed'], 'yes');
    assert.ok(log.events.includes('delete /goes'));
    assert.ok(log.events.includes('add /new'));
    assert.ok(log.events.includes('update /changes'));

    server.store.create('nodes', { metadata: { name: 'after' } });
    await waitFor('sees changes after the relist', () => log.events.includes('add /after'));
    for (const name of ['stays', 'changes', 'new', 'after']) server.store.delete('nodes', name);
  });
});

describe('built-in API server: the watch protocol on the wire', () => {
  let server: ApiServerHandle;
  before(async () => {
    server = await startApiServer({ bookmarkIntervalMs: 50, historySize: 5 });
  });
  after(async () => {
    await server.close();
  });

  async function readStream(path: string, untilLines: number, timeoutMs = 3000): Promise<{ headers: Headers; events: { type: string; object: Record<string, any> }[] }> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), timeoutMs);
    const res = await fetch(server.url + path, { signal: controller.signal });
    const events: { type: string; object: Record<string, any> }[] = [];
    let buffer = '';
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buffer += Buffer.from(chunk).toString('utf8');
        let nl;
        while ((nl = buffer.indexOf('\n')) >= 0) {
          events.push(JSON.parse(buffer.slice(0, nl)));
          buffer = buffer.slice(nl + 1);
        }
        if (events.length >= untilLines) break;
      }
    } catch (err) {
      if (!controller.signal.aborted) throw err;
    } finally {
      clearTimeout(timer);
      controller.abort();
    }
    return { headers: res.headers, events };
  }

  it('starts with synthetic ADDED events, streams changes, sends BOOKMARKs, honours a field selector', async () => {
    server.store.create('nodes', { metadata: { name: 'n1' } });
    server.store.create('nodes', { metadata: { name: 'n2' } });
    const pending = readStream('/api/v1/nodes?watch=1&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dn1', 4);
    await waitFor('watch open', () => server.activeWatches === 1);
    server.store.patch('nodes', 'n2', { metadata: { labels: { x: '1' } } });
    server.store.patch('nodes', 'n1', { metadata: { labels: { x: '1' } } });
    const { headers, events } = await pending;
    assert.equal(headers.get('transfer-encoding'), 'chunked');
    assert.equal(headers.get('content-type'), 'application/json');
    assert.deepEqual(events.slice(0, 2).map((e) => `${e.type} ${e.object['metadata'].name}`), ['ADDED n1', 'MODIFIED n1']);
    const bookmark = events.find((e) => e.type === 'BOOKMARK');
    assert.ok(bookmark, `no BOOKMARK in ${JSON.stringify(events)}`);
    assert.equal(bookmark.object['kind'], 'Node');
    assert.equal(bookmark.object['metadata'].resourceVersion, String(server.store.revision));
  });

  it('replays from a resourceVersion; too old gives one ERROR 410 event; timeoutSeconds ends the stream', async () => {
    const from = server.store.revision;
    server.store.create('nodes', { metadata: { name: 'r1' } });
    server.store.delete('nodes', 'r1');
    const replay = await readStream(`/api/v1/nodes?watch=true&resourceVersion=${from}`, 2);
    assert.deepEqual(replay.events.map((e) => `${e.type} ${e.object['metadata'].name} ${e.object['metadata'].resourceVersion}`), [
      `ADDED r1 ${from + 1}`,
      `DELETED r1 ${from + 2}`,
    ]);
    for (let i = 0; i < 10; i++) server.store.createOrReplace('nodes', { metadata: { name: 'churn', labels: { i: String(i) } } });
    const expired = await readStream(`/api/v1/nodes?watch=true&resourceVersion=${from}`, 2);
    assert.equal(expired.events.length, 1);
    assert.equal(expired.events[0]?.type, 'ERROR');
    assert.deepEqual({ ...expired.events[0]?.object, message: undefined }, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: undefined, reason: 'Expired', code: 410 });
    const list = await fetch(`${server.url}/api/v1/nodes?resourceVersion=${from}&resourceVersionMatch=NotOlderThan`);
    assert.equal(list.status, 410);
    // A resourceVersion from a previous incarnation of the server (restarted, fresh store) also makes clients relist.
    const future = await readStream(`/api/v1/nodes?watch=true&resourceVersion=${server.store.revision + 100}`, 2);
    assert.deepEqual(future.events.map((e) => `${e.type} ${e.object['code']}`), ['ERROR 410']);

    const started = Date.now();
    const timed = await readStream(`/api/v1/nodes?watch=true&resourceVersion=${server.store.revision}&timeoutSeconds=1`, 1000, 4000);
    assert.deepEqual(timed.events, []);
    const elapsed = Date.now() - started;
    assert.ok(elapsed >= 900 && elapsed < 3000, `stream ended after ${elapsed} ms`);
  });

  it('answers errors with Status objects', async () => {
    const cases: [string, RequestInit, number, string][] = [
      ['/api/v1/namespaces/default/services/missing', {}, 404, 'NotFound'],
      ['/api/v1/namespaces/default/services', { method: 'POST', body: '{not json', headers: { 'content-type': 'application/json' } }, 400, 'BadRequest'],
      ['/api/v1/namespaces/default/services', { method: 'POST', body: '{"kind":"Node","metadata":{"name":"x"}}', headers: { 'content-type': 'application/json' } }, 400, 'BadRequest'],
      ['/api/v1/services?labelSelector=a%20b%20c', {}, 400, 'BadRequest'],
      ['/api/v1/namespaces/default/services/x', { method: 'PATCH', body: '{}', headers: { 'content-type': 'application/apply-patch+yaml' } }, 415, 'UnsupportedMediaType'],
      ['/apis/discovery.k8s.io/v1/services', {}, 404, 'NotFound'],
    ];
    for (const [path, init, code, reason] of cases) {
      const res = await fetch(server.url + path, init);
      const body = (await res.json()) as { kind: string; code: number; reason: string };
      assert.equal(res.status, code, path);
      assert.deepEqual([body.kind, body.code, body.reason], ['Status', code, reason], path);
    }
  });
});

describe('built-in API server: options', () => {
  it('creates default/kubernetes on the first service address when asked, listens on IPv6, serves dual-stack CIDRs', async () => {
    const server = await startApiServer({
      host: '::1',
      serviceCIDR: '198.18.128.0/24,fd00:96::/112',
      createKubernetesService: { address: '192.0.2.1', port: 6443 },
    });
    try {
      assert.match(server.url, /^http:\/\/\[::1\]:\d+$/);
      const core = kubeConfigFor(server).makeApiClient(k8s.CoreV1Api);
      const kubernetes = await core.readNamespacedService({ name: 'kubernetes', namespace: 'default' });
      assert.equal(kubernetes.spec?.clusterIP, '198.18.128.1');
      assert.equal(kubernetes.spec?.ports?.[0]?.port, 443);
      const slices = await kubeConfigFor(server).makeApiClient(k8s.DiscoveryV1Api).listNamespacedEndpointSlice({
        namespace: 'default',
        labelSelector: 'kubernetes.io/service-name=kubernetes',
      });
      assert.deepEqual(slices.items[0]?.endpoints.map((e) => e.addresses[0]), ['192.0.2.1']);
      assert.equal(slices.items[0]?.ports?.[0]?.port, 6443);
      const dual = await core.createNamespacedService({ namespace: 'default', body: service('dual', undefined, { ipFamilyPolicy: 'RequireDualStack' }) });
      assert.deepEqual(dual.spec?.clusterIPs, ['198.18.128.2', 'fd00:96::2']);
    } finally {
      await server.close();
    }
  });
});

describe('built-in API server: listen address (no authentication, so loopback unless asked)', () => {
  it('refuses a non-loopback address without allowNonLoopback / --allow-non-loopback; loopback needs nothing', async () => {
    // Refused before binding anything: nothing listens on these addresses.
    for (const host of ['0.0.0.0', '::', '198.18.0.1']) {
      await assert.rejects(startApiServer({ host }), new RegExp(`refusing to listen on ${host.replace(/\./g, '\\.')}: .*allow-non-loopback`));
    }
    for (const host of ['127.0.0.1', '127.0.0.2', '::1', 'localhost']) {
      const server = await startApiServer({ host });
      await server.close();
    }
    const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'sluice');
    const r = spawnSync(bin, ['apiserver', '--listen', '0.0.0.0:0'], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 1);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /^sluice apiserver: refusing to listen on 0\.0\.0\.0: .*--allow-non-loopback/);
  });
});
