// The agent's watch (src/agent/reflector.ts, kubeClient.ts) against the
// built-in API server over real HTTP: paginated lists, watches that resume
// from their resourceVersion instead of relisting, 410 Gone relists that drop
// what went away, and a backoff that one good list does not reset.
import { strict as assert } from 'node:assert';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import * as http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { connectToApi, type KubeConnection } from '../../src/agent/kubeClient';
import { Backoff, Reflector, type ApiObject } from '../../src/agent/reflector';

async function waitFor(what: string, check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const key = (o: ApiObject) => `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;

/** A sink that keeps names, like ClusterState keeps slim records. */
function mirror() {
  const objects = new Map<string, ApiObject>();
  const log: string[] = [];
  return {
    objects,
    log,
    sink: {
      upsert: (o: ApiObject) => { objects.set(key(o), o); log.push(`upsert ${key(o)}`); },
      delete: (o: ApiObject) => { objects.delete(key(o)); log.push(`delete ${key(o)}`); },
      listed: (seen: Set<string>) => {
        for (const k of [...objects.keys()]) if (!seen.has(k)) objects.delete(k);
        log.push(`listed ${seen.size}`);
      },
    },
  };
}

const FAST_BACKOFF = { initialMs: 10, maxMs: 50, resetAfterMs: 60_000, jitter: 0.5 };

describe('built-in API server: paginated lists', () => {
  let api: ApiServerHandle;
  before(async () => {
    api = await startApiServer({ port: 0 });
    for (let i = 0; i < 7; i++) api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: `s${i}`, namespace: 'default' }, spec: { ports: [{ port: 80 }] } });
  });
  after(() => api.close());

  async function get(query: string): Promise<{ status: number; body: { metadata: { resourceVersion: string; continue?: string }; items: ApiObject[]; reason?: string; code?: number } }> {
    const res = await fetch(`${api.url}/api/v1/namespaces/default/services?${query}`);
    return { status: res.status, body: (await res.json()) as never };
  }

  it('limit/continue return every object once, in pages, at the first page\'s resourceVersion', async () => {
    const names: string[] = [];
    let token: string | undefined;
    let pages = 0;
    let rv: string | undefined;
    do {
      const { status, body } = await get(`limit=3${token ? `&continue=${encodeURIComponent(token)}` : ''}`);
      assert.equal(status, 200, JSON.stringify(body));
      assert.ok(body.items.length <= 3);
      rv ??= body.metadata.resourceVersion;
      assert.equal(body.metadata.resourceVersion, rv);
      names.push(...body.items.map((o) => o.metadata!.name!));
      token = body.metadata.continue;
      pages++;
      // A write between pages does not break the list.
      if (pages === 1) api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'late', namespace: 'kube-system' }, spec: { ports: [{ port: 80 }] } });
    } while (token);
    assert.deepEqual(names.slice().sort(), ['s0', 's1', 's2', 's3', 's4', 's5', 's6']);
    assert.equal(pages, 3);
  });

  it('a continue token from before a compaction is 410 Expired', async () => {
    const { body } = await get('limit=2');
    assert.ok(body.metadata.continue);
    api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'after', namespace: 'default' }, spec: { ports: [{ port: 80 }] } });
    api.compactHistory();
    const next = await get(`limit=2&continue=${encodeURIComponent(body.metadata.continue!)}`);
    assert.equal(next.status, 410);
    assert.equal(next.body.reason, 'Expired');
  });
});

describe('reflector', () => {
  let api: ApiServerHandle;
  let conn: KubeConnection;
  let dir: string;
  const running: Array<Reflector<ApiObject>> = [];

  before(async () => {
    api = await startApiServer({ port: 0, bookmarkIntervalMs: 50 });
    dir = await mkdtemp(join(tmpdir(), 'sluice-reflector-'));
    await api.writeKubeconfig(join(dir, 'kubeconfig'));
    conn = await connectToApi(join(dir, 'kubeconfig'), undefined);
  });
  after(async () => {
    for (const r of running) await r.stop();
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });

  function start(name: string, path: string, pageSize: number) {
    const m = mirror();
    const r = new Reflector<ApiObject>(conn, { name, path, query: {}, pageSize, backoff: FAST_BACKOFF }, m.sink, { onError: () => undefined });
    running.push(r);
    r.start();
    return { r, m };
  }

  const svc = (ns: string, name: string) =>
    api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: ns }, spec: { ports: [{ port: 80 }] } });
  const ns = (name: string) => api.store.create('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });

  it('lists in pages, then follows the watch', async () => {
    ns('r1');
    for (let i = 0; i < 25; i++) svc('r1', `s${i}`);
    const { r, m } = start('services', '/api/v1/namespaces/r1/services', 10);
    await waitFor('the list', () => r.hasSynced);
    assert.equal(m.objects.size, 25);
    assert.equal(r.stats.pages, 3);
    svc('r1', 'new');
    await waitFor('the watch event', () => m.objects.has('r1/new'));
  });

  it('a dropped watch resumes from its resourceVersion: no relist, no event lost', async () => {
    ns('r2');
    svc('r2', 'a');
    const { r, m } = start('services', '/api/v1/namespaces/r2/services', 500);
    await waitFor('the list', () => r.hasSynced && r.stats.watches === 1);
    await new Promise((res) => setTimeout(res, 100)); // a bookmark or two
    api.closeAllWatches('drop');
    svc('r2', 'while-down');
    api.store.delete('services', 'a', 'r2');
    await waitFor('the change made while the watch was down', () => m.objects.has('r2/while-down') && !m.objects.has('r2/a'));
    assert.equal(r.stats.lists, 1, 'resumed the watch instead of listing again');
    assert.ok(r.stats.watches >= 2);
    assert.deepEqual(m.log.filter((l) => l.startsWith('listed')), ['listed 1']);
  });

  it('410 Gone relists, and the relist drops objects deleted meanwhile', async () => {
    ns('r3');
    svc('r3', 'keep');
    svc('r3', 'gone');
    const m = mirror();
    const first = new Reflector<ApiObject>(conn, { name: 'services', path: '/api/v1/namespaces/r3/services', query: {}, backoff: FAST_BACKOFF }, m.sink, { onError: () => undefined });
    first.start();
    await waitFor('the list', () => first.hasSynced && m.objects.has('r3/gone'));
    await first.stop();
    // While no watch runs: a delete, and the server forgets its history.
    api.store.delete('services', 'gone', 'r3');
    api.compactHistory();
    const errors: string[] = [];
    const again = new Reflector<ApiObject>(conn, { name: 'services', path: '/api/v1/namespaces/r3/services', query: {}, backoff: FAST_BACKOFF }, m.sink, { onError: (_n, e) => errors.push(e.message) });
    running.push(again);
    again.resourceVersion = first.resourceVersion; // resumes where the first one stopped
    again.start();
    await waitFor('a relist', () => again.stats.lists === 1 && !m.objects.has('r3/gone'));
    assert.equal(again.stats.relists, 1);
    assert.match(errors[0] ?? '', /410|too old|Expired/i);
    assert.ok(m.objects.has('r3/keep'));
  });
});

describe('reflector against a server that ends every watch at once', () => {
  it('backs off instead of asking again in a tight loop', async () => {
    let watches = 0;
    const server = http.createServer((req, res) => {
      if (req.url?.includes('watch=true')) {
        watches++;
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end();
        return;
      }
      res.end(JSON.stringify({ kind: 'ServiceList', metadata: { resourceVersion: '5' }, items: [] }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const dir = await mkdtemp(join(tmpdir(), 'sluice-reflector-'));
    try {
      const kc = join(dir, 'kubeconfig');
      const { port } = server.address() as { port: number };
      await writeFile(kc, `apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: "http://127.0.0.1:${port}"}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n`);
      const r = new Reflector<ApiObject>(await connectToApi(kc, undefined), { name: 'services', path: '/api/v1/services', query: {}, backoff: { initialMs: 200, maxMs: 1000, resetAfterMs: 60_000, jitter: 0.5 } }, mirror().sink, { onError: () => undefined });
      r.start();
      await new Promise((res) => setTimeout(res, 600));
      await r.stop();
      assert.ok(watches >= 1 && watches <= 3, `${watches} watch requests in 0.6 s`);
    } finally {
      server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('backoff', () => {
  it('grows with jitter and is not reset by one success; a quiet period resets it', () => {
    let now = 0;
    let rnd = 0;
    const b = new Backoff({ initialMs: 800, maxMs: 30_000, resetAfterMs: 120_000, jitter: 1.0 }, () => now, () => rnd);
    const delays: number[] = [];
    for (let i = 0; i < 7; i++) {
      delays.push(b.next());
      now += 1000; // a good list in between changes nothing
    }
    assert.deepEqual(delays, [800, 1600, 3200, 6400, 12800, 25600, 30000]);
    rnd = 0.999;
    now += 1000;
    assert.ok(b.next() > 59_000, 'jitter up to 2x the capped delay');
    now += 121_000;
    rnd = 0.5;
    assert.equal(b.next(), 1200, 'after two quiet minutes it starts over');
  });

  it('spreads agents: the same failure gives different delays', () => {
    const delays = new Set<number>();
    for (let i = 0; i < 20; i++) delays.add(new Backoff().next());
    assert.ok(delays.size > 10, `${delays.size} distinct first delays of 20`);
  });
});
