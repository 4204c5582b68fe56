// Upgrade over pinned maps of the HASH_OF_MAPS Maglev layout (sluice_maglev4
// layout 1, keyed by {rev-NAT id, protocol, scope}) to the ARRAY_OF_MAPS one
// indexed by rev-NAT id and scope (layout 2, issue 12): the migration points
// the new outer map at the same inner tables, so a Maglev frontend keeps its
// table (its flows keep their backends) and connects after the swap take
// their backend from it, not from the random fallback.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { MapType } from '../../src/bpf/constants';
import { installSockLb } from '../../src/datapath/sockLb';
import { readLayouts } from '../../src/datapath/migrate';
import { openSockLbMaps, readCounter } from '../../src/datapath/maps';
import { LbProgrammer } from '../../src/datapath/programmer';
import { maglevIndexOf, readMaglevTable } from '../../src/datapath/maglev';
import { Sandbox, sh, sluiceBin, labScript } from '../helpers/sandbox';
import { pinLayout1Maglev } from '../helpers/maglevPins';

const VIP = '10.96.0.31';
const BACKENDS = ['198.18.31.2', '198.18.31.3', '198.18.31.4'];

test('an upgrade over a HASH_OF_MAPS sluice_maglev4 (layout 1) carries every table into the ARRAY_OF_MAPS layout; connects pick from the same table after the swap', async () => {
  const sb = Sandbox.create('h-connect4-mgmig');
  try {
    await sb.startBackends(BACKENDS, [8080]);
    const sluice = (args: string[]) => sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
    sluice(['attach', '--cgroup', sb.cgroup]);
    sluice(['service', 'upsert', '--frontend', `${VIP}:80/tcp`, '--backends', BACKENDS.map((b) => `${b}:8080`).join(','), '--algorithm', 'maglev']);
    let maps = openSockLbMaps(sb.bpffs);
    const f = LbProgrammer.adopt(maps).programmedFrontends().find((x) => x.address === VIP)!;
    const frontend = { revNatId: f.revNatId, proto: 'tcp' as const, scope: 'external' as const };
    const before = readMaglevTable(maps.maglev!, frontend)!;
    maps.close();
    assert.ok(before, 'the frontend has a table');

    // Re-pin sluice_maglev4 as an older Sluice left it: a hash of maps keyed
    // by the frontend, naming the same inner table (and a second, internal-scope
    // entry of another rev-NAT id, to check the index of each scope).
    const otherRevNat = 77;
    pinLayout1Maglev(sb.bpffs, [
      { revNatId: f.revNatId, scope: abi.LB_SCOPE_EXTERNAL, innerMapId: before.mapId },
      { revNatId: otherRevNat, scope: abi.LB_SCOPE_INTERNAL, innerMapId: before.mapId },
    ]);

    const result = installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
    const migrated = result.migrated.find((m) => m.map === abi.SLUICE_MAP_MAGLEV4);
    assert.deepEqual(migrated && [migrated.why, migrated.policy, migrated.carried, migrated.dropped], ['layout', 'carry', 2, 0]);
    assert.equal(readLayouts(sb.bpffs).get(abi.SLUICE_MAP_MAGLEV4), 2);

    maps = openSockLbMaps(sb.bpffs);
    try {
      assert.equal(maps.maglev!.type, MapType.ARRAY_OF_MAPS);
      const after = readMaglevTable(maps.maglev!, frontend)!;
      assert.equal(after?.mapId, before.mapId, 'the same inner table, at the frontend\'s index');
      assert.deepEqual(after.ids, before.ids);
      assert.equal(readMaglevTable(maps.maglev!, { revNatId: otherRevNat, proto: 'tcp', scope: 'internal' })?.mapId, before.mapId, `internal scope at index ${maglevIndexOf({ revNatId: otherRevNat, scope: 'internal' })}`);
      assert.equal(readMaglevTable(maps.maglev!, { revNatId: otherRevNat, proto: 'tcp', scope: 'external' }), undefined);

      const picked0 = readCounter(maps.counters, abi.LB_CNT_MAGLEV_PICKED);
      const fallback0 = readCounter(maps.counters, abi.LB_CNT_MAGLEV_FALLBACK);
      const out = await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', VIP, '80', '20'], 30000, sb.netns);
      const { results } = JSON.parse(out) as { results: Array<{ backend?: string; error?: string }> };
      assert.deepEqual(results.filter((r) => r.error), []);
      assert.equal(readCounter(maps.counters, abi.LB_CNT_MAGLEV_PICKED) - picked0, 20n, 'every connect took its backend from the carried table');
      assert.equal(readCounter(maps.counters, abi.LB_CNT_MAGLEV_FALLBACK) - fallback0, 0n);
    } finally {
      maps.close();
    }
  } finally {
    sb.close();
  }
});
