// Maglev on the TC north-south path (BPF_PROG_TEST_RUN) over a table the
// agent's writer (src/datapath/maglev.ts) built into the real pinned map:
// every new flow goes to table[hash(5-tuple) % M], where the hash is computed
// in TypeScript independently (maglevFlowHash); the same flow always lands on
// the same backend; the table read back from the map has the distribution
// and disruption properties; a table swap under traffic never yields a
// missing backend; affinity still wins; no table falls back to random.
import { after, before, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { MaglevTables, maglevEntry, maglevFlowHash, readMaglevTable } from '../../src/datapath/maglev';
import { buildMaglevTable, maglevShares } from '../../src/datapath/maglevTable';
import { TcHarness, type TcBackend } from './tc_harness';
import { TC_ACT_OK, TCP_SYN, frame, type L4Spec } from './tc_packet';

const NODE = '198.18.0.1';
const NODE_PORT = 30080;
const M = 4093;
const FLAGS = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;
const backendsOf = (n: number): TcBackend[] => Array.from({ length: n }, (_, i) => ({ id: i + 1, address: `198.18.1.${10 + i}`, port: 8080, local: true }));
const FRONTEND = { revNatId: 9, proto: 'tcp', scope: 'external' as const };

let h: TcHarness;
let tables: MaglevTables;

before(() => {
  h = TcHarness.create('sluice-maglev');
});
after(() => {
  tables?.close();
  h?.close();
});
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: NODE });
  const outer = h.obj.map(abi.SLUICE_MAP_MAGLEV4);
  for (const k of [...outer.keys()]) outer.delete(k);
  tables?.close();
  tables = new MaglevTables(outer, M);
});

function program(backends: TcBackend[], opts: { table?: boolean; affinityTimeout?: number } = {}): void {
  if (opts.table !== false) tables.sync(FRONTEND, backends);
  const flags = FLAGS | (opts.affinityTimeout ? abi.LB_SVC_FLAG_AFFINITY : 0);
  h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags, revNatId: 9, backends, algorithm: abi.LB_ALG_MAGLEV, affinityTimeout: opts.affinityTimeout });
}

/** One new flow: the backend address its SYN was DNATed to. */
function newFlow(backends: TcBackend[], saddr: string, sport: number): string {
  const syn: L4Spec = { proto: 'tcp', src: saddr, dst: NODE, sport, dport: NODE_PORT, tcpFlags: TCP_SYN };
  const { verdict, out } = h.run('ingress', frame(syn));
  assert.equal(verdict, TC_ACT_OK);
  const b = backends.find((x) => frame({ ...syn, dst: x.address, dport: x.port }).equals(out));
  assert.ok(b, `flow ${saddr}:${sport}: output is no backend's DNAT of the SYN`);
  return b.address;
}

/** The backend the table predicts for a flow, computed in TypeScript. */
function predicted(backends: TcBackend[], saddr: string, sport: number): string {
  const t = readMaglevTable(h.obj.map(abi.SLUICE_MAP_MAGLEV4), FRONTEND)!;
  const id = t.ids[maglevEntry(maglevFlowHash({ saddr, daddr: NODE, sport, dport: NODE_PORT, proto: 'tcp' }), t.m)]!;
  return backends.find((b) => b.id === id)!.address;
}

test('a new flow goes to table[hash(5-tuple) % M], and the same 5-tuple again to the same backend', () => {
  const backends = backendsOf(7);
  program(backends);
  const picked0 = h.counter(abi.LB_CNT_MAGLEV_PICKED);
  const seen = new Set<string>();
  for (let i = 0; i < 200; i++) {
    const saddr = `198.18.2.${i % 50}`;
    const sport = 40000 + i * 7;
    const b = newFlow(backends, saddr, sport);
    assert.equal(b, predicted(backends, saddr, sport), `flow ${saddr}:${sport}`);
    seen.add(b);
    h.reset(); // forget the flow (conntrack): the next run picks again
    writeTcConfig(h.tc.config, { snatAddress: NODE });
    program(backends, { table: false });
    assert.equal(newFlow(backends, saddr, sport), b, `flow ${saddr}:${sport} again`);
  }
  assert.equal(seen.size, backends.length, `200 flows over 7 backends reach all: ${[...seen]}`);
  assert.equal(h.counter(abi.LB_CNT_MAGLEV_PICKED) - picked0, 400n);
});

test('the table in the map: distribution <= 1.1, it equals the builder output, and a removal moves few survivors', () => {
  const map = h.obj.map(abi.SLUICE_MAP_MAGLEV4);
  const backends = backendsOf(100);
  program(backends);
  const t = readMaglevTable(map, FRONTEND)!;
  assert.equal(t.m, M);
  assert.equal(t.backends, 100);
  const idx = new Map(backends.map((b, i) => [b.id, i]));
  const shares = maglevShares(Uint32Array.from(t.ids, (id) => idx.get(id)!), 100);
  assert.ok(Math.max(...shares) / Math.min(...shares) <= 1.1, `shares ${Math.min(...shares)}..${Math.max(...shares)}`);
  const built = buildMaglevTable(backends.map((b) => `${b.address}:${b.port}`), M);
  assert.deepEqual([...t.ids], [...built].map((i) => backends[i]!.id));

  const survivors = backends.filter((b) => b.id !== 42);
  program(survivors);
  const t2 = readMaglevTable(map, FRONTEND)!;
  assert.notEqual(t2.mapId, t.mapId, 'a new inner array replaced the old one');
  let moved = 0;
  let survivorMoved = 0;
  for (let e = 0; e < M; e++) {
    if (t.ids[e] !== t2.ids[e]) moved++;
    if (t.ids[e] !== 42 && t.ids[e] !== t2.ids[e]) survivorMoved++;
    assert.notEqual(t2.ids[e], 42, `entry ${e} still names the removed backend`);
  }
  assert.ok(survivorMoved / M <= 0.04, `survivors moved ${survivorMoved} of ${M}`);
  assert.ok(moved / M <= 1 / 100 + 0.04, `moved ${moved} of ${M}`);
});

test('an unchanged backend set is not rebuilt; frontends with one set share one inner array', () => {
  const backends = backendsOf(5);
  program(backends);
  const builds = tables.stats().builds;
  assert.equal(tables.sync(FRONTEND, [...backends].reverse()), false, 'same set, other order: no rebuild');
  tables.sync({ ...FRONTEND, revNatId: 10 }, backends);
  assert.equal(tables.stats().builds, builds, 'second frontend reused the table');
  const map = h.obj.map(abi.SLUICE_MAP_MAGLEV4);
  assert.equal(readMaglevTable(map, { ...FRONTEND, revNatId: 10 })!.mapId, readMaglevTable(map, FRONTEND)!.mapId);
  assert.equal(tables.stats().tables, 1);
  assert.ok(tables.stats().bytes >= M * 4, `bytes ${tables.stats().bytes}`);
});

test('table swaps between flows: every flow gets a backend of the old or the new set, never a fallback', () => {
  const a = backendsOf(6);
  const b = backendsOf(8).slice(2); // 198.18.1.12..17: overlaps a in 4 backends
  const all = [...a, ...b.filter((x) => !a.some((y) => y.id === x.id))];
  program(a);
  const fallback0 = h.counter(abi.LB_CNT_MAGLEV_FALLBACK);
  for (let i = 0; i < 60; i++) {
    // Backends of both sets stay in the backends map; the table flips.
    tables.sync(FRONTEND, i % 2 ? a : b);
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: FLAGS, revNatId: 9, backends: all, algorithm: abi.LB_ALG_MAGLEV });
    const got = newFlow(all, '198.18.3.1', 20000 + i);
    assert.ok((i % 2 ? a : b).some((x) => x.address === got), `flow ${i}: ${got} is not in the table just installed`);
  }
  assert.equal(h.counter(abi.LB_CNT_MAGLEV_FALLBACK) - fallback0, 0n);
});

test('no table yet (or a removed one): a random slot, counted as maglev_fallback', () => {
  const backends = backendsOf(4);
  program(backends, { table: false });
  const before = h.counter(abi.LB_CNT_MAGLEV_FALLBACK);
  const seen = new Set(Array.from({ length: 60 }, (_, i) => newFlow(backends, '198.18.3.2', 30000 + i)));
  assert.equal(h.counter(abi.LB_CNT_MAGLEV_FALLBACK) - before, 60n);
  assert.ok(seen.size >= 2, `random fallback spread: ${[...seen]}`);
});

test('sessionAffinity ClientIP wins over maglev: one client, one backend, whatever its ports', () => {
  const backends = backendsOf(8);
  program(backends, { affinityTimeout: 60 });
  const first = newFlow(backends, '198.18.3.3', 1000);
  for (let i = 1; i < 20; i++) assert.equal(newFlow(backends, '198.18.3.3', 1000 + i * 13), first, `flow ${i}`);
});

test('bpftool reads a table with its BTF: rows with named backend_id fields', () => {
  const backends = backendsOf(3);
  program(backends);
  const t = readMaglevTable(h.obj.map(abi.SLUICE_MAP_MAGLEV4), FRONTEND)!;
  const r = spawnSync('bpftool', ['-j', 'map', 'dump', 'id', String(t.mapId)], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  // With BTF, bpftool adds a "formatted" view with the field names.
  const rows = JSON.parse(r.stdout) as Array<{ formatted?: { key: number; value: { backend_id: number[] } } }>;
  assert.ok(rows[0]?.formatted, `no BTF-formatted rows: ${r.stdout.slice(0, 300)}`);
  assert.equal(rows[0]!.formatted!.value.backend_id[0], M, 'row 0 holds M');
  assert.deepEqual(rows[1]!.formatted!.value.backend_id, [...t.ids.slice(0, 8)]);
});
