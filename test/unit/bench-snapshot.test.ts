// The upstream bench's cached etcd snapshot (bench/snapshot.ts): the key
// changes with every input the stored objects depend on, a complete entry is
// reused without building, an interrupted or failed build leaves nothing that
// counts as a snapshot, and a new key for the same S replaces the old entry.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ensureSnapshot, findSnapshot, generatorHash, snapshotKey, staleEntries, type SnapshotKeyInput } from '../../bench/snapshot';
import { upstreamGeneratorHash, upstreamSlice } from '../../bench/upstreamObjects';
import { writeUpstreamResults } from '../../bench/upstreamResults';

const BASE: SnapshotKeyInput = { kubernetes: 'v1.34.4', etcd: 'v3.6.16', services: 10000, endpointsPerService: 10, serviceCidr: '10.96.0.0/14', generator: 'abc' };

function tmpRoot(t: { after(fn: () => void): void }): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-snap-test-'));
  t.after(() => fs.rmSync(root, { recursive: true, force: true }));
  return root;
}

/** A stand-in for the real build: an etcd-shaped directory. */
const fakeBuild = (calls: string[]) => async (etcdDir: string) => {
  calls.push(etcdDir);
  fs.mkdirSync(path.join(etcdDir, 'member', 'snap'), { recursive: true });
  fs.writeFileSync(path.join(etcdDir, 'member', 'snap', 'db'), 'x');
  return ['10.96.0.10', '10.96.0.11'];
};

test('the snapshot key changes with every input and is stable otherwise', () => {
  const k = snapshotKey(BASE);
  assert.equal(snapshotKey({ ...BASE }), k);
  assert.match(k, /^up-10000x10-k8sv1\.34\.4-etcdv3\.6\.16-[0-9a-f]{16}$/);
  const variants: Partial<SnapshotKeyInput>[] = [
    { kubernetes: 'v1.34.5' }, { etcd: 'v3.6.17' }, { services: 100000 }, { endpointsPerService: 9 }, { serviceCidr: '10.96.0.0/16' }, { generator: 'abd' },
  ];
  const keys = new Set([k, ...variants.map((v) => snapshotKey({ ...BASE, ...v }))]);
  assert.equal(keys.size, variants.length + 1);
});

test('the generator hash follows the generator source and its output', () => {
  const f = (i: number) => ({ i });
  const g = (i: number) => ({ i, j: 1 });
  assert.equal(generatorHash([f], [1]), generatorHash([f], [1]));
  assert.notEqual(generatorHash([f], [1]), generatorHash([g], [1]));
  assert.notEqual(generatorHash([f], [1]), generatorHash([f], [2]));
  assert.equal(upstreamGeneratorHash(), upstreamGeneratorHash());
  const s = upstreamSlice(3, 10, 'u') as { endpoints: Array<Record<string, unknown>> };
  assert.equal(s.endpoints.length, 10);
  for (const e of s.endpoints) for (const field of ['addresses', 'conditions', 'nodeName', 'zone', 'targetRef']) assert.ok(field in e, field);
});

test('a cached snapshot is reused without building; a new key for the same S replaces it', async (t) => {
  const root = tmpRoot(t);
  const calls: string[] = [];
  const first = await ensureSnapshot(root, BASE, fakeBuild(calls));
  assert.equal(first.cached, false);
  assert.equal(calls.length, 1);
  assert.deepEqual(first.meta.clusterIPs, ['10.96.0.10', '10.96.0.11']);
  assert.ok(fs.existsSync(path.join(first.etcdDir, 'member')));

  const again = await ensureSnapshot(root, BASE, fakeBuild(calls));
  assert.equal(again.cached, true);
  assert.equal(calls.length, 1, 'built again although the key had a complete entry');
  assert.equal(again.dir, first.dir);

  // Another S is kept; another generator for the same S replaces the old entry.
  const other = await ensureSnapshot(root, { ...BASE, services: 300 }, fakeBuild(calls));
  const changed = await ensureSnapshot(root, { ...BASE, generator: 'new' }, fakeBuild(calls));
  assert.equal(changed.cached, false);
  assert.equal(calls.length, 3);
  assert.deepEqual(fs.readdirSync(root).sort(), [path.basename(other.dir), path.basename(changed.dir)].sort());
});

test('a failed or interrupted build leaves no usable entry, and is cleaned up by the next build', async (t) => {
  const root = tmpRoot(t);
  await assert.rejects(ensureSnapshot(root, BASE, async () => { throw new Error('apiserver died'); }), /apiserver died/);
  assert.deepEqual(fs.readdirSync(root), []);
  // A build that made no etcd directory is a failure too.
  await assert.rejects(ensureSnapshot(root, BASE, async () => []), /no etcd data directory/);
  assert.equal(findSnapshot(root, snapshotKey(BASE)), undefined);

  // What a killed build leaves (its pid is gone), and an entry without its meta file.
  const dead = `.building-${snapshotKey(BASE)}-999999999`;
  fs.mkdirSync(path.join(root, dead, 'etcd', 'member'), { recursive: true });
  fs.mkdirSync(path.join(root, snapshotKey(BASE), 'etcd', 'member'), { recursive: true });
  assert.equal(findSnapshot(root, snapshotKey(BASE)), undefined, 'an entry without meta.json counts as a snapshot');
  assert.deepEqual(staleEntries(root, 'up-1x10-other', 10000).sort(), [dead, snapshotKey(BASE)].sort());
  // A build in progress (this pid) is not stale.
  const live = `.building-x-${process.pid}`;
  fs.mkdirSync(path.join(root, live));
  assert.ok(!staleEntries(root, 'k', 10000).includes(live));
  fs.rmSync(path.join(root, live), { recursive: true });

  const calls: string[] = [];
  const s = await ensureSnapshot(root, BASE, fakeBuild(calls));
  assert.equal(s.cached, false);
  assert.deepEqual(fs.readdirSync(root), [snapshotKey(BASE)]);
});

test('the results file keeps the latest run per Service count, with its commit and ratios', (t) => {
  const docs = tmpRoot(t);
  const machine = { hostname: 'h', cpuModel: 'Xeon', nproc: 2, memoryMiB: 1, kernel: 'Linux', tools: {}, date: '' };
  const row = (id: string, cold: number, rss: number) => ({ id, label: id, changeMs: [10], timeouts: 0, coldStartMs: cold, rssMiB: rss });
  const run = (services: number, commit: string) => ({
    commit, machine, startedAt: 'then', durationS: 1, loadavg: { start: [1, 2, 3], end: [1, 2, 3] },
    result: { services, endpointsPerService: 10, rows: [row('kube-proxy-nftables', 4000, 200), row('sluice', 1000, 100)], notes: [] },
  });
  writeUpstreamResults(docs, run(10000, 'aaa'));
  writeUpstreamResults(docs, run(100000, 'bbb'));
  writeUpstreamResults(docs, run(10000, 'ccc'));
  const all = JSON.parse(fs.readFileSync(path.join(docs, 'bench-kubeproxy-results.json'), 'utf8'));
  assert.deepEqual(Object.keys(all).sort(), ['10000', '100000']);
  assert.equal(all['10000'].commit, 'ccc');
  const md = fs.readFileSync(path.join(docs, 'bench-kubeproxy-results.md'), 'utf8');
  assert.match(md, /## 10000 Services[\s\S]*commit: ccc[\s\S]*## 100000 Services[\s\S]*commit: bbb/);
  assert.match(md, /\| kube-proxy-nftables \| 0\.25x \| – \| – \| 1\.00x \| 0\.50x \|/);
});

test('a build that runs out of budget hands what it made to the next build, which removes it when done', async (t) => {
  const root = tmpRoot(t);
  const seen: string[] = [];
  await assert.rejects(ensureSnapshot(root, BASE, async (_etcd, partial) => {
    seen.push(partial);
    fs.mkdirSync(path.join(partial, 'member'), { recursive: true });
    throw new Error('budget ran out');
  }), /budget ran out/);
  assert.equal(findSnapshot(root, snapshotKey(BASE)), undefined);
  assert.ok(fs.existsSync(path.join(seen[0]!, 'member')), 'the partial build was not kept');
  // The next build gets the same partial directory, and it is gone after success.
  const s = await ensureSnapshot(root, BASE, async (etcd, partial) => {
    assert.equal(partial, seen[0]);
    assert.ok(fs.existsSync(path.join(partial, 'member')));
    return fakeBuild([])(etcd);
  });
  assert.equal(s.cached, false);
  assert.deepEqual(fs.readdirSync(root), [snapshotKey(BASE)]);
  // A partial of another key for the same S is stale; one of another S is not.
  fs.mkdirSync(path.join(root, `.partial-${snapshotKey({ ...BASE, generator: 'old' })}`));
  fs.mkdirSync(path.join(root, `.partial-${snapshotKey({ ...BASE, services: 5 })}`));
  assert.deepEqual(staleEntries(root, snapshotKey(BASE), BASE.services), [`.partial-${snapshotKey({ ...BASE, generator: 'old' })}`]);
});
