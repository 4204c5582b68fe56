// A LIST page decoded item by item (src/agent/listDecode.ts, issue 12 item
// 3): the same objects JSON.parse gives, one parsed item alive at a time, and
// JSON.parse's own error for a page the scan cannot follow.
import { strict as assert } from 'node:assert';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import * as http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { decodeListPage } from '../../src/agent/listDecode';
import { connectToApi } from '../../src/agent/kubeClient';
import { Reflector, type ApiObject } from '../../src/agent/reflector';

const decode = (text: string) => {
  const page = decodeListPage<unknown>(Buffer.from(text, 'utf8'));
  return { head: page.head, items: [...page.items], count: page.count };
};

describe('decodeListPage', () => {
  it('gives the objects JSON.parse gives, for pages with escapes, nesting, unicode and odd spacing', () => {
    const items = [
      { metadata: { name: 'a', annotations: { q: 'say "hi" \\ ] } [ {', path: 'C:\\dir\\' } }, spec: { ports: [{ port: 80 }, { port: 443, name: 'h}t]t{p[s' }] } },
      { metadata: { name: 'ünïcødé ✓ 🚀', labels: { 'x/y': '\u0000\u001f' } }, n: -1.5e3, t: true, f: false, z: null, e: [], o: {} },
      { metadata: { name: 'trailing-backslash\\' }, s: '\\\\"' },
      'a string item', 42, null, [[1, [2]], { a: [{}] }],
    ];
    const whole = { kind: 'ServiceList', apiVersion: 'v1', metadata: { resourceVersion: '17', continue: 'tok"en' }, items };
    for (const text of [JSON.stringify(whole), JSON.stringify(whole, null, 2), ` \n${JSON.stringify({ items, metadata: whole.metadata })}\r\n`]) {
      const got = decode(text);
      const want = JSON.parse(text) as { items: unknown[] };
      assert.deepEqual(got.items, want.items);
      assert.equal(got.count, items.length);
      assert.deepEqual(got.head.metadata, whole.metadata);
    }
    assert.deepEqual(decode('{"metadata":{"resourceVersion":"1"},"items":[]}').items, []);
  });

  it('parses an item only when the iteration reaches it', () => {
    const page = decodeListPage<{ n: number }>(Buffer.from('{"metadata":{},"items":[{"n":1},{"n":2},{"n":tru}]}'));
    const it = page.items[Symbol.iterator]();
    assert.deepEqual(it.next().value, { n: 1 });
    assert.deepEqual(it.next().value, { n: 2 });
    assert.throws(() => it.next(), SyntaxError);
  });

  it('a page it cannot follow is parsed whole: JSON.parse\'s result or its error', () => {
    assert.deepEqual(decode('{"metadata":{"resourceVersion":"3"},"items":null}').items, []);
    assert.deepEqual(decode('{"kind":"Status","code":410}').head, { kind: 'Status', code: 410 });
    for (const bad of ['', 'nope', '{"items":[{"a":1}', '{"items":[{"a":1}]} x', '[1,2]x']) {
      let want: Error | undefined;
      try {
        JSON.parse(bad);
      } catch (err) {
        want = err as Error;
      }
      assert.throws(() => decode(bad), (err: Error) => err instanceof SyntaxError && err.message === want?.message, bad);
    }
  });
});

describe('reflector: list pages decoded item by item', () => {
  it('hands the items before a malformed one to the sink, then fails the list as "not JSON"', async () => {
    // Before listDecode.ts the whole page was one JSON.parse: nothing reached
    // the sink, and every item of the page was alive at once.
    const server = http.createServer((req, res) => {
      if (req.url?.includes('watch=true')) {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        return; // held open until the test ends
      }
      res.end('{"kind":"ServiceList","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a","namespace":"d"}},{"metadata":{"name":"b","namespace":"d"}},{"metadata":{"name":tru}}]}');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const dir = await mkdtemp(join(tmpdir(), 'sluice-list-decode-'));
    try {
      const kc = join(dir, 'kubeconfig');
      const { port } = server.address() as { port: number };
      await writeFile(kc, `apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: "http://127.0.0.1:${port}"}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n`);
      const upserts: string[] = [];
      const errors: string[] = [];
      const r = new Reflector<ApiObject>(await connectToApi(kc, undefined), { name: 'services', path: '/api/v1/services', query: {}, backoff: { initialMs: 5000, maxMs: 5000, resetAfterMs: 60_000, jitter: 0 } }, {
        upsert: (o) => upserts.push(`${o.metadata?.namespace}/${o.metadata?.name}`),
        delete: () => undefined,
        listed: () => undefined,
      }, { onError: (_n, err) => errors.push(err.message) });
      r.start();
      const deadline = Date.now() + 5000;
      while (errors.length === 0 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 5));
      await r.stop();
      assert.deepEqual(upserts, ['d/a', 'd/b']);
      assert.match(errors[0] ?? '', /list \/api\/v1\/services: response is not JSON/);
      assert.equal(r.hasSynced, false, 'a failed page never completes the list');
    } finally {
      server.closeAllConnections();
      server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
