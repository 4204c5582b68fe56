// /healthz and /livez as kube-proxy's proxy health server: /healthz is 503
// when the Node is being deleted or tainted ToBeDeletedByClusterAutoscaler
// (nodeEligible), /livez keeps the staleness-only rule; both count their
// answers by code. Served on loopback only.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type * as http from 'node:http';
import type { V1Node } from '@kubernetes/client-node';
import { ProxyHealth, startHealthServer, TO_BE_DELETED_TAINT } from '../../src/agent/health';

const node = (extra: Partial<V1Node>): V1Node => ({ metadata: { name: 'n1' }, ...extra });

test('nodeEligible: deletionTimestamp or the autoscaler taint make /healthz unhealthy, not /livez', () => {
  const h = new ProxyHealth(60_000);
  assert.equal(h.healthzOk(), true, 'eligible while starting');
  h.syncNode(node({ spec: { taints: [{ key: TO_BE_DELETED_TAINT, effect: 'NoSchedule' }] } }));
  assert.equal(h.healthzOk(), false);
  assert.equal(h.healthy(), true, '/livez ignores the Node');
  h.syncNode(node({ spec: { taints: [{ key: 'other', effect: 'NoSchedule' }] } }));
  assert.equal(h.healthzOk(), true);
  h.syncNode(node({ metadata: { name: 'n1', deletionTimestamp: new Date() } }));
  assert.equal(h.healthzOk(), false);
  h.syncNode(undefined);
  assert.equal(h.healthzOk(), false, 'a Node that disappears from the watch leaves the last verdict');
});

test('staleness: both endpoints 503 once a change waits longer than the timeout', () => {
  let now = 1000;
  const h = new ProxyHealth(100, () => now);
  h.queued();
  now += 99;
  assert.equal(h.healthy(), true);
  now += 1;
  assert.equal(h.healthy(), false);
  assert.equal(h.healthzOk(), false);
  h.updated();
  assert.equal(h.healthy(), true);
});

test('HTTP: codes, kube-proxy bodies and the per-code counters', async () => {
  const h = new ProxyHealth(60_000);
  const seen: string[] = [];
  const server: http.Server = await startHealthServer(h, '127.0.0.1', 0, {
    healthz: (c) => seen.push(`healthz ${c}`),
    livez: (c) => seen.push(`livez ${c}`),
  });
  try {
    const a = server.address() as { port: number };
    const get = async (p: string) => {
      const r = await fetch(`http://127.0.0.1:${a.port}${p}`);
      return { status: r.status, body: (await r.json()) as Record<string, unknown> };
    };
    let r = await get('/healthz');
    assert.equal(r.status, 200);
    assert.deepEqual(Object.keys(r.body).sort(), ['currentTime', 'lastUpdated', 'nodeEligible']);
    h.syncNode(node({ spec: { taints: [{ key: TO_BE_DELETED_TAINT, effect: 'NoSchedule' }] } }));
    r = await get('/healthz');
    assert.equal(r.status, 503);
    assert.equal(r.body.nodeEligible, false);
    r = await get('/livez');
    assert.equal(r.status, 200);
    assert.deepEqual(Object.keys(r.body).sort(), ['currentTime', 'lastUpdated'], 'kube-proxy\'s /livez has no nodeEligible');
    assert.deepEqual(seen, ['healthz 200', 'healthz 503', 'livez 200']);
  } finally {
    await new Promise((r) => server.close(r));
  }
});
