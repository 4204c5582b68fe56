// Maglev on the socket path, real connect() calls from a throwaway cgroup and
// netns. At connect() the source port is not bound yet, so there is no
// 5-tuple: the socket path hashes the socket cookie (each socket is one flow;
// it keeps its backend for its life). What must hold: every connection goes
// to a backend through the table (maglev_picked counts each, no fallback),
// new sockets spread over the backends, and the frontend's table is in the
// pinned map, written by `sluice service upsert --algorithm maglev` through
// the same programmer the agent uses.
import { test, before, after } from 'node:test';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { openSockLbMaps, readCounter } from '../../src/datapath/maps';
import { LbProgrammer } from '../../src/datapath/programmer';
import { MaglevTables, readMaglevTable } from '../../src/datapath/maglev';
import { Sandbox, sh, sluiceBin, labScript } from '../helpers/sandbox';
import { markAlgorithm } from '../../bench/algorithms';

const execFileAsync = promisify(execFile);

const VIP = '10.96.0.21';
const BACKENDS = ['198.18.21.2', '198.18.21.3', '198.18.21.4', '198.18.21.5'];

let sb: Sandbox;

const sluice = (args: string[]) => sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
/**
 * The same CLI call without blocking the event loop: while a client runs,
 * six synchronous calls (3-8 s each on a loaded machine: this test ran
 * 30-55 s with 6 busy loops on 2 CPUs) held the loop past the client's 30 s
 * timer, which then raced the client's exit.
 */
const sluiceAsync = async (args: string[]) => (await execFileAsync(sluiceBin, [...args, '--bpffs', sb.bpffs], { encoding: 'utf8' })).stdout;

async function connect(port: number, count: number): Promise<string[]> {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', VIP, String(port), String(count)], 30000, sb.netns);
  const { results } = JSON.parse(out) as { results: Array<{ backend?: string; error?: string }> };
  assert.deepEqual(results.filter((r) => r.error), []);
  return results.map((r) => r.backend ?? 'none');
}

before(async () => {
  sb = Sandbox.create('sluice-sockmaglev');
  await sb.startBackends(BACKENDS, [8080]);
  sluice(['attach', '--cgroup', sb.cgroup]);
});
after(() => sb?.close());

test('socket path: connections go through the Maglev table, spread over every backend; sluice services shows maglev', async () => {
  sluice(['service', 'upsert', '--frontend', `${VIP}:80/tcp`, '--backends', BACKENDS.map((b) => `${b}:8080`).join(','), '--algorithm', 'mh']);
  const maps = openSockLbMaps(sb.bpffs);
  try {
    const f = LbProgrammer.adopt(maps).programmedFrontends().find((x) => x.address === VIP)!;
    assert.equal(f.algorithm, abi.LB_ALG_MAGLEV);
    const table = readMaglevTable(maps.maglev!, { revNatId: f.revNatId, proto: 'tcp', scope: 'external' });
    assert.ok(table, 'the frontend has a table in sluice_maglev4');
    assert.equal(new Set(table.ids).size, BACKENDS.length);
    const picked0 = readCounter(maps.counters, abi.LB_CNT_MAGLEV_PICKED);
    const fallback0 = readCounter(maps.counters, abi.LB_CNT_MAGLEV_FALLBACK);
    const picks = await connect(80, 40);
    assert.equal(readCounter(maps.counters, abi.LB_CNT_MAGLEV_PICKED) - picked0, 40n, 'each connect took its backend from the table');
    assert.equal(readCounter(maps.counters, abi.LB_CNT_MAGLEV_FALLBACK) - fallback0, 0n);
    // 40 sockets (40 cookies, hashed) over 4 backends: all reached unless the
    // hash is broken (P(one missed) < 4 * 0.75^40 ~ 4e-5).
    assert.equal(new Set(picks).size, BACKENDS.length, JSON.stringify(picks));
  } finally {
    maps.close();
  }
  const listed = JSON.parse(sluice(['services', '-o', 'json'])) as Array<{ frontend: string; algorithm: string }>;
  assert.equal(listed.find((s) => s.frontend === `${VIP}:80/tcp`)?.algorithm, 'maglev');
});

test('switching the frontend away from maglev removes its table; deleting it removes it too', () => {
  const maps = openSockLbMaps(sb.bpffs);
  try {
    sluice(['service', 'upsert', '--frontend', `${VIP}:82/tcp`, '--backends', `${BACKENDS[0]}:8080`, '--algorithm', 'maglev']);
    const revNatId = LbProgrammer.adopt(maps).programmedFrontends().find((x) => x.port === 82)!.revNatId;
    const key = { revNatId, proto: 'tcp', scope: 'external' as const };
    assert.ok(readMaglevTable(maps.maglev!, key));
    sluice(['service', 'upsert', '--frontend', `${VIP}:82/tcp`, '--backends', `${BACKENDS[0]}:8080`, '--algorithm', 'random']);
    assert.equal(readMaglevTable(maps.maglev!, key), undefined, 'random: table gone');
    sluice(['service', 'upsert', '--frontend', `${VIP}:82/tcp`, '--backends', `${BACKENDS[0]}:8080`, '--algorithm', 'maglev']);
    assert.ok(readMaglevTable(maps.maglev!, key));
    sluice(['service', 'delete', '--frontend', `${VIP}:82/tcp`]);
    assert.equal(readMaglevTable(maps.maglev!, key), undefined, 'deleted: table gone');
  } finally {
    maps.close();
  }
});

test('table swaps while a client connects in a loop: no failed connection, no fallback (make-before-break)', async () => {
  const setA = BACKENDS.slice(0, 3).map((b) => `${b}:8080`).join(',');
  const setB = BACKENDS.slice(1).map((b) => `${b}:8080`).join(',');
  sluice(['service', 'upsert', '--frontend', `${VIP}:83/tcp`, '--backends', setA, '--algorithm', 'maglev']);
  const maps = openSockLbMaps(sb.bpffs);
  try {
    const fallback0 = readCounter(maps.counters, abi.LB_CNT_MAGLEV_FALLBACK);
    const picked0 = readCounter(maps.counters, abi.LB_CNT_MAGLEV_PICKED);
    const loop = sb.runInCgroup(['node', labScript('lbClient'), 'loop', VIP, '83', '7000'], 30000, sb.netns);
    // Each upsert builds a new table and swaps it in while connects run.
    for (let i = 0; i < 6; i++) await sluiceAsync(['service', 'upsert', '--frontend', `${VIP}:83/tcp`, '--backends', i % 2 ? setA : setB, '--algorithm', 'maglev']);
    const { ok, errors } = JSON.parse(await loop) as { ok: number; errors: Record<string, number> };
    assert.deepEqual(errors, {}, 'connections failed during table swaps');
    assert.ok(ok > 20, `only ${ok} connections`);
    assert.equal(readCounter(maps.counters, abi.LB_CNT_MAGLEV_FALLBACK) - fallback0, 0n, 'a connect found no usable table');
    assert.ok(readCounter(maps.counters, abi.LB_CNT_MAGLEV_PICKED) - picked0 >= BigInt(ok));
  } finally {
    maps.close();
  }
});

test('agent start (adoptAndRepair): a table no maglev frontend owns is deleted; owned tables stay and are counted', () => {
  sluice(['service', 'upsert', '--frontend', `${VIP}:84/tcp`, '--backends', `${BACKENDS[0]}:8080,${BACKENDS[1]}:8080`, '--algorithm', 'maglev']);
  const maps = openSockLbMaps(sb.bpffs);
  try {
    // As a crash between a table write and its master would leave it.
    const orphan = { revNatId: 60000, proto: 'tcp', scope: 'external' as const };
    const writer = new MaglevTables(maps.maglev!);
    writer.sync(orphan, [{ id: 1, address: BACKENDS[0]!, port: 8080 }]);
    writer.close();
    assert.ok(readMaglevTable(maps.maglev!, orphan));
    const { programmer, repaired } = LbProgrammer.adoptAndRepair(maps);
    assert.equal(repaired.maglevTables, 1);
    assert.equal(readMaglevTable(maps.maglev!, orphan), undefined, 'the orphan table is gone');
    const owned = programmer.programmedFrontends().find((x) => x.port === 84)!;
    assert.ok(readMaglevTable(maps.maglev!, { revNatId: owned.revNatId, proto: 'tcp', scope: 'external' }), 'an owned table stays');
    const st = programmer.maglevTables()!.stats();
    assert.ok(st.frontends >= 1 && st.bytes > 4093 * 4, JSON.stringify(st));
  } finally {
    maps.close();
  }
});

test('bench: markAlgorithm re-marks every master and, for maglev, writes each frontend its table first', () => {
  markAlgorithm(sb.bpffs, abi.LB_ALG_MAGLEV);
  const maps = openSockLbMaps(sb.bpffs);
  try {
    const fronts = LbProgrammer.adopt(maps).programmedFrontends();
    assert.ok(fronts.length >= 2);
    for (const f of fronts) {
      assert.equal(f.algorithm, abi.LB_ALG_MAGLEV, f.id);
      assert.ok(readMaglevTable(maps.maglev!, { revNatId: f.revNatId, proto: f.proto, scope: f.scope }), `${f.id}: no table`);
    }
  } finally {
    maps.close();
  }
  markAlgorithm(sb.bpffs, abi.LB_ALG_ROUND_ROBIN);
  const again = openSockLbMaps(sb.bpffs);
  try {
    assert.ok(LbProgrammer.adopt(again).programmedFrontends().every((f) => f.algorithm === abi.LB_ALG_ROUND_ROBIN));
  } finally {
    again.close();
  }
});
