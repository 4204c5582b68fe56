// The two migration paths of the map-in-map sluice_maglev4 (ARRAY_OF_MAPS,
// layout 2) that maglev_migrate.test.ts (a layout change) does not drive:
//   - a capacity change on a running node (maxEntries raised): the new outer
//     map is refilled by the policy's refill (refillMaglevOuter), which writes
//     inner map fds; copyEntries would write the ids the old map reads back;
//   - a migration (that capacity change, or the layout 1 -> 2 upgrade from a
//     HASH_OF_MAPS) cut short by a kill after the new outer map was pinned
//     (sluice_maglev4_migrating left behind): the next start must refill the
//     new map from the old tables if the fill had not run, so every Maglev
//     frontend keeps its table across the interrupted upgrade.
// Both check, per frontend, that its outer entry names the same inner table
// with the same rows, and that connects pick from it (maglev_picked counts
// every connect, maglev_fallback none).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { BpfMap } from '../../src/bpf/map';
import { MapType } from '../../src/bpf/constants';
import { bpfObjectPath, installSockLb } from '../../src/datapath/sockLb';
import { MapMigration, oldPinName } from '../../src/datapath/migrate';
import { openSockLbMaps, readCounter } from '../../src/datapath/maps';
import { LbProgrammer } from '../../src/datapath/programmer';
import { readMaglevTable, type MaglevFrontend } from '../../src/datapath/maglev';
import { Sandbox, sh, sluiceBin, labScript } from '../helpers/sandbox';
import { pinLayout1Maglev } from '../helpers/maglevPins';

const VIPS = ['10.96.0.41', '10.96.0.42'];
const BACKENDS = ['198.18.41.2', '198.18.41.3', '198.18.41.4'];
const CONNECTS = 10;

interface Table { frontend: MaglevFrontend; vip: string; mapId: number; ids: Uint32Array }

/** A sandbox with the socket LB attached and one Maglev frontend per VIP; their tables as programmed. */
async function maglevSandbox(prefix: string): Promise<{ sb: Sandbox; tables: Table[] }> {
  const sb = Sandbox.create(prefix);
  try {
    await sb.startBackends(BACKENDS, [8080]);
    const sluice = (args: string[]) => sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
    sluice(['attach', '--cgroup', sb.cgroup]);
    for (const vip of VIPS) sluice(['service', 'upsert', '--frontend', `${vip}:80/tcp`, '--backends', BACKENDS.map((b) => `${b}:8080`).join(','), '--algorithm', 'maglev']);
    const maps = openSockLbMaps(sb.bpffs);
    try {
      const programmed = LbProgrammer.adopt(maps).programmedFrontends();
      const tables = VIPS.map((vip) => {
        const f = programmed.find((x) => x.address === vip)!;
        const frontend: MaglevFrontend = { revNatId: f.revNatId, proto: 'tcp', scope: 'external' };
        const t = readMaglevTable(maps.maglev!, frontend);
        assert.ok(t, `${vip} has a Maglev table`);
        return { frontend, vip, mapId: t.mapId, ids: t.ids };
      });
      assert.notEqual(tables[0]!.mapId, tables[1]!.mapId, 'one table per frontend');
      return { sb, tables };
    } finally {
      maps.close();
    }
  } catch (err) {
    sb.close();
    throw err;
  }
}

function pinnedMap(bpffs: string, name: string): { id: number; maxEntries: number; type: number } {
  const m = BpfMap.fromPinned(path.join(bpffs, name));
  try {
    return { id: m.id, maxEntries: m.maxEntries, type: m.type };
  } finally {
    m.close();
  }
}

/** Every frontend's outer entry names its old table (same rows), and connects to each pick from it. */
async function assertTablesKept(sb: Sandbox, tables: Table[]): Promise<void> {
  const maps = openSockLbMaps(sb.bpffs);
  try {
    for (const t of tables) {
      const after = readMaglevTable(maps.maglev!, t.frontend);
      assert.ok(after, `${t.vip}: the outer entry at its index names a table after the migration`);
      assert.equal(after.mapId, t.mapId, `${t.vip}: the same inner table`);
      assert.deepEqual(after.ids, t.ids, `${t.vip}: the same rows`);
    }
    const picked0 = readCounter(maps.counters, abi.LB_CNT_MAGLEV_PICKED);
    const fallback0 = readCounter(maps.counters, abi.LB_CNT_MAGLEV_FALLBACK);
    for (const t of tables) {
      const out = await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', t.vip, '80', String(CONNECTS)], 30000, sb.netns);
      const { results } = JSON.parse(out) as { results: Array<{ backend?: string; error?: string }> };
      assert.deepEqual(results.filter((r) => r.error), [], `${t.vip}: every connect reached a backend`);
    }
    assert.equal(readCounter(maps.counters, abi.LB_CNT_MAGLEV_PICKED) - picked0, BigInt(CONNECTS * tables.length), 'every connect took its backend from a carried table');
    assert.equal(readCounter(maps.counters, abi.LB_CNT_MAGLEV_FALLBACK) - fallback0, 0n, 'no connect fell back to a random slot');
  } finally {
    maps.close();
  }
}

test('sluice_maglev4 capacity raised on a running node: a new outer map, each frontend\'s entry names the same inner table, connects pick from it', async () => {
  const { sb, tables } = await maglevSandbox('h-mgmim-cap');
  try {
    const old = pinnedMap(sb.bpffs, abi.SLUICE_MAP_MAGLEV4);
    assert.equal(old.type, MapType.ARRAY_OF_MAPS);
    const bigger = old.maxEntries * 2;

    const result = installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, maxEntries: { [abi.SLUICE_MAP_MAGLEV4]: bigger } });
    const migrated = result.migrated.find((m) => m.map === abi.SLUICE_MAP_MAGLEV4);
    assert.deepEqual(migrated && [migrated.why, migrated.policy, migrated.carried, migrated.dropped], ['capacity', 'carry', tables.length, 0]);
    const now = pinnedMap(sb.bpffs, abi.SLUICE_MAP_MAGLEV4);
    assert.notEqual(now.id, old.id, 'a new outer map');
    assert.equal(now.maxEntries, bigger);
    assert.ok(!fs.readdirSync(sb.bpffs).some((f) => f.endsWith('_migrating')), 'old pins removed');

    await assertTablesKept(sb, tables);
  } finally {
    sb.close();
  }
});

const KILLS = [
  { change: 'capacity', killed: 'before' },
  { change: 'capacity', killed: 'after' },
  { change: 'layout', killed: 'before' },
] as const;

for (const { change, killed } of KILLS) {
  test(`a ${change} migration of sluice_maglev4 killed after the new outer map was pinned, ${killed} its fill: the next start ${killed === 'before' ? 'refills it from the old tables' : 'keeps what the fill wrote'}`, async () => {
    const { sb, tables } = await maglevSandbox('h-mgmim-kill');
    try {
      // capacity: twice the size; layout: the same tables behind an older
      // Sluice's hash of maps (the new array keeps its capacity).
      if (change === 'layout') pinLayout1Maglev(sb.bpffs, tables.map((t) => ({ revNatId: t.frontend.revNatId, scope: abi.LB_SCOPE_EXTERNAL, innerMapId: t.mapId })));
      const old = pinnedMap(sb.bpffs, abi.SLUICE_MAP_MAGLEV4);
      const maxEntries = change === 'capacity' ? { [abi.SLUICE_MAP_MAGLEV4]: old.maxEntries * 2 } : undefined;

      // The real sequence up to the kill: plan, open (the old pin moved aside),
      // load (the new, empty outer map pinned), fill or not; no link swap, no finish.
      const migration = MapMigration.plan(bpfObjectPath('sock_lb.bpf.o'), { bpffs: sb.bpffs, maxEntries });
      assert.deepEqual(migration.changes.map((c) => [c.map, c.why]), [[abi.SLUICE_MAP_MAGLEV4, change]]);
      const obj = migration.open();
      try {
        obj.load();
        if (killed === 'after') migration.fill(obj);
      } finally {
        obj.close();
      }
      assert.ok(fs.existsSync(path.join(sb.bpffs, oldPinName(abi.SLUICE_MAP_MAGLEV4))), 'the old outer map left aside, as a kill leaves it');
      const fresh = pinnedMap(sb.bpffs, abi.SLUICE_MAP_MAGLEV4);
      assert.notEqual(fresh.id, old.id, 'the new outer map is pinned');
      assert.equal(fresh.type, MapType.ARRAY_OF_MAPS);
      assert.equal(fresh.maxEntries, maxEntries?.[abi.SLUICE_MAP_MAGLEV4] ?? old.maxEntries);

      // The next start, with the same config.
      installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, maxEntries });
      assert.ok(!fs.readdirSync(sb.bpffs).some((f) => f.endsWith('_migrating')), 'nothing left aside');
      assert.equal(pinnedMap(sb.bpffs, abi.SLUICE_MAP_MAGLEV4).id, fresh.id, 'the new outer map is kept');

      await assertTablesKept(sb, tables);
    } finally {
      sb.close();
    }
  });
}
