// Drift repair against real pinned maps: entries changed, deleted or added
// behind the agent are found by comparing encoded bytes with the
// programmer's state and set right; nothing the programmer wrote is touched
// when the maps match.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { SockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, frontendKeyOf, service6KeyOf, type FrontendSpec } from '../../src/datapath/programmer';
import { repairDrift } from '../../src/datapath/drift';
import { ip4ToNumber, ip6ToBytes } from '../../src/datapath/addr';
import { LB_SVC_FLAG_CLUSTER_IP, LB_PROTO_TCP, LB_SCOPE_EXTERNAL, LB_ALG_MAGLEV, SLUICE_MAP_MAGLEV4 } from '../../src/abi/generated';
import { execFileSync } from 'node:child_process';
import { maglevKeyOf, readMaglevTable, type MaglevFrontend } from '../../src/datapath/maglev';
import { sockLbEachTest } from '../helpers/sockLbEachTest';

let maps: SockLbMaps;
let bpffs = '';
sockLbEachTest('sluice-drift', (dir, m) => {
  bpffs = dir;
  maps = m;
});

const fe = (address: string, hosts: number[]): FrontendSpec => ({
  address, port: 80, proto: 'tcp', scope: 'external', flags: LB_SVC_FLAG_CLUSTER_IP, affinityTimeout: 0,
  backends: hosts.map((h) => ({ address: `198.18.1.${h}`, port: 8080, proto: 'tcp' as const })),
});

const dump = () => ({
  services: maps.services.readAll().map(([k, v]) => JSON.stringify([k, v])).sort(),
  // Each master's range, as the programs read it.
  ranges: maps.services.readAll().map(([k, v]) => JSON.stringify([k, Array.from({ length: v.count }, (_, i) => maps.ranges.get(v.backend_id + i))])).sort(),
  backends: maps.backends.readAll().map(([k, v]) => JSON.stringify([k, v])).sort(),
  revNat: maps.revNat.readAll().map(([k, v]) => JSON.stringify([k, v])).sort(),
});

test('maps that match are left alone', async () => {
  const p = LbProgrammer.adopt(maps);
  p.apply([fe('10.96.0.1', [1, 2]), fe('10.96.0.2', [2, 3])], { prune: true });
  const r = await repairDrift(maps, () => p, 1);
  assert.deepEqual({ frontends: r.frontends, backends: r.backends, revNats: r.revNats, extra: r.extra }, { frontends: 0, backends: 0, revNats: 0, extra: 0 });
  assert.equal(r.checked, 2 * 3 + 3 + 2);
});

test('changed, deleted and foreign entries are set right', async () => {
  const p = LbProgrammer.adopt(maps);
  p.apply([fe('10.96.0.1', [1, 2]), fe('10.96.0.2', [2, 3])], { prune: true });
  const want = dump();
  const f1 = p.frontend('10.96.0.1:80/tcp')!;
  const f2 = p.frontend('10.96.0.2:80/tcp')!;
  // A master with a wrong count, a range entry overwritten, a backend rewritten, a rev-NAT entry gone, and entries nobody asked for.
  maps.services.set(frontendKeyOf(f1), { ...maps.services.get(frontendKeyOf(f1))!, count: 1 });
  maps.ranges.set(f2.rangeStart! + 1, 0);
  const b = f2.backendIds[1]!;
  maps.backends.set(b, { ...maps.backends.get(b)!, port: 9999 });
  maps.revNat.delete(f2.revNatId);
  maps.services.set({ address: ip4ToNumber('10.96.9.9'), port: 53, proto: LB_PROTO_TCP, scope: LB_SCOPE_EXTERNAL },
    { backend_id: 0, count: 0, flags: LB_SVC_FLAG_CLUSTER_IP, rev_nat_id: 0, affinity_timeout: 0, algorithm: 0 });
  maps.backends.set(999, { address: ip4ToNumber('198.18.9.9'), port: 1, proto: LB_PROTO_TCP, flags: 0, zone: 0 });

  const r = await repairDrift(maps, () => p, 1);
  assert.deepEqual({ frontends: r.frontends, backends: r.backends, revNats: r.revNats, extra: r.extra }, { frontends: 2, backends: 1, revNats: 1, extra: 2 });
  assert.deepEqual(dump(), want);
});

test('a frontend the programmer changed between the chunks is not rewritten with the old state', async () => {
  const p = LbProgrammer.adopt(maps);
  p.apply([fe('10.96.0.1', [1, 2]), fe('10.96.0.2', [2, 3])], { prune: true });
  maps.services.delete(frontendKeyOf(p.frontend('10.96.0.1:80/tcp')!));
  let reads = 0;
  // The sync that runs during the first yield replaces 10.96.0.1's backends.
  const r = await repairDrift(maps, () => {
    if (reads++ === 1) p.apply([fe('10.96.0.1', [4]), fe('10.96.0.2', [2, 3])], { prune: true });
    return p;
  }, 1);
  assert.equal(r.frontends, 0, 'the sync itself rewrote it');
  assert.equal(maps.services.get(frontendKeyOf(p.frontend('10.96.0.1:80/tcp')!))?.count, 1);
});

test('IPv6 maps: changed, deleted and foreign entries are set right; IPv4 ones beside them are untouched', async () => {
  const fe6 = (address: string, hosts: number[]): FrontendSpec => ({
    ...fe(address, []), backends: hosts.map((h) => ({ address: `fd00:18::${h}`, port: 8080, proto: 'tcp' as const })),
  });
  const v6 = maps.v6!;
  const dump6 = () => ({
    services: v6.services.readAll().map(([k, v]) => JSON.stringify([k, v])).sort(),
    backends: v6.backends.readAll().map(([k, v]) => JSON.stringify([k, v])).sort(),
    revNat: v6.revNat.readAll().map(([k, v]) => JSON.stringify([k, v])).sort(),
    ranges: p.programmedFrontends().filter((f) => f.address.includes(':')).map((f) => f.backendIds.map((_, i) => v6.ranges.get(f.rangeStart! + i))),
  });
  const p = LbProgrammer.adopt(maps);
  p.apply([fe('10.96.0.1', [1, 2]), fe6('fd00:96::1', [1, 2]), fe6('fd00:96::2', [2, 3])], { prune: true });
  const clean = await repairDrift(maps, () => p, 1);
  assert.deepEqual({ frontends: clean.frontends, backends: clean.backends, revNats: clean.revNats, extra: clean.extra }, { frontends: 0, backends: 0, revNats: 0, extra: 0 });
  const want4 = dump();
  const want6 = dump6();
  const f1 = p.frontend('[fd00:96::1]:80/tcp')!;
  const f2 = p.frontend('[fd00:96::2]:80/tcp')!;
  v6.services.set(service6KeyOf(f1), { ...v6.services.get(service6KeyOf(f1))!, count: 1 });
  v6.ranges.set(f2.rangeStart! + 1, 0);
  const b = f2.backendIds[1]!;
  v6.backends.set(b, { ...v6.backends.get(b)!, port: 9999 });
  v6.revNat.delete(f2.revNatId);
  v6.services.set({ address: ip6ToBytes('fd00:96::99'), port: 53, proto: LB_PROTO_TCP, scope: LB_SCOPE_EXTERNAL },
    { backend_id: 0, count: 0, flags: LB_SVC_FLAG_CLUSTER_IP, rev_nat_id: 0, affinity_timeout: 0, algorithm: 0 });
  v6.backends.set(999, { address: ip6ToBytes('fd00:18::99'), port: 1, proto: LB_PROTO_TCP, flags: 0, zone: 0 });

  const r = await repairDrift(maps, () => p, 1);
  assert.deepEqual({ frontends: r.frontends, backends: r.backends, revNats: r.revNats, extra: r.extra }, { frontends: 2, backends: 1, revNats: 1, extra: 2 });
  assert.deepEqual(dump6(), want6);
  assert.deepEqual(dump(), want4);
});

// Issue 15: the per-frontend Maglev tables (inner arrays of sluice_maglev4)
// changed behind the agent with bpftool are found and set right.
test('Maglev: a table rewritten, an outer entry deleted or re-pointed, and a foreign outer entry, all by bpftool, are set right', async () => {
  const bpftool = (...args: string[]) => execFileSync('bpftool', args, { encoding: 'utf8' });
  const hex = (b: Buffer) => ['hex', ...[...b].map((x) => x.toString(16).padStart(2, '0'))];
  const p = LbProgrammer.adopt(maps);
  const mg = (address: string, hosts: number[], port = 80): FrontendSpec => ({ ...fe(address, hosts), port, algorithm: LB_ALG_MAGLEV });
  p.apply([mg('10.96.0.1', [1, 2, 3]), mg('10.96.0.2', [4, 5]), mg('10.96.0.3', [6, 7])], { prune: true });
  const key = (addr: string): MaglevFrontend => ({ revNatId: p.frontend(`${addr}:80/tcp`)!.revNatId, proto: 'tcp', scope: 'external' });
  const outerPin = `${bpffs}/${SLUICE_MAP_MAGLEV4}`;
  const table = (addr: string) => readMaglevTable(maps.maglev!, key(addr));
  const want = ['10.96.0.1', '10.96.0.2', '10.96.0.3'].map((a) => ({ ...table(a)!, mapId: 0 }));
  const clean = await repairDrift(maps, () => p, 1);
  assert.equal(clean.maglev, 0, 'nothing to repair');

  // 1. Entries 8..15 of 10.96.0.1's table point at backend id 999 (row 2), row 0 says M = 7.
  const t1 = table('10.96.0.1')!;
  bpftool('map', 'update', 'id', String(t1.mapId), 'key', '2', '0', '0', '0', 'value', ...hex(Buffer.alloc(32, 0xe7)));
  bpftool('map', 'update', 'id', String(t1.mapId), 'key', '0', '0', '0', '0', 'value', ...hex(Buffer.from([7, 0, 0, 0, 3, 0, 0, 0, ...new Array(24).fill(0)])));
  // 2. 10.96.0.2's outer entry is deleted: its picks would fall back to random.
  bpftool('map', 'delete', 'pinned', outerPin, 'key', ...hex(maglevKeyOf(key('10.96.0.2'))));
  // 3. 10.96.0.3's outer entry names 10.96.0.1's table.
  bpftool('map', 'update', 'pinned', outerPin, 'key', ...hex(maglevKeyOf(key('10.96.0.3'))), 'value', 'id', String(t1.mapId));
  // 4. An outer entry no frontend owns.
  bpftool('map', 'update', 'pinned', outerPin, 'key', ...hex(maglevKeyOf({ revNatId: 60000, scope: 'external' })), 'value', 'id', String(t1.mapId));
  assert.notDeepEqual(table('10.96.0.1')!.ids, want[0]!.ids);
  assert.equal(table('10.96.0.2'), undefined);

  const r = await repairDrift(maps, () => p, 1);
  assert.deepEqual(r.maglevDetail, { tables: 1, outer: 2, extra: 1, adopted: 0 });
  assert.equal(r.maglev, 4);
  ['10.96.0.1', '10.96.0.2', '10.96.0.3'].forEach((a, i) => {
    const t = table(a)!;
    assert.deepEqual({ m: t.m, backends: t.backends, ids: [...t.ids] }, { m: want[i]!.m, backends: want[i]!.backends, ids: [...want[i]!.ids] }, a);
  });
  assert.equal(readMaglevTable(maps.maglev!, { revNatId: 60000, proto: 'tcp', scope: 'external' }), undefined);
  assert.equal((await repairDrift(maps, () => p, 1)).maglev, 0, 'a second pass finds nothing');
});

test('Maglev: tables adopted from the pins (content unknown to a new agent) are rebuilt once, then checked like the others', async () => {
  const p0 = LbProgrammer.adopt(maps);
  p0.apply([{ ...fe('10.96.0.1', [1, 2, 3]), algorithm: LB_ALG_MAGLEV }], { prune: true });
  const f = p0.frontend('10.96.0.1:80/tcp')!;
  const mk: MaglevFrontend = { revNatId: f.revNatId, proto: 'tcp', scope: 'external' };
  const want = [...readMaglevTable(maps.maglev!, mk)!.ids];
  p0.maglevTables()!.close();
  const { programmer: p } = LbProgrammer.adoptAndRepair(maps);
  const adopted = readMaglevTable(maps.maglev!, mk)!;
  execFileSync('bpftool', ['map', 'update', 'id', String(adopted.mapId), 'key', '1', '0', '0', '0', 'value', ...new Array(32).fill('0')]);
  const r = await repairDrift(maps, () => p, 1);
  assert.equal(r.maglevDetail.adopted, 1);
  const t = readMaglevTable(maps.maglev!, mk)!;
  assert.notEqual(t.mapId, adopted.mapId, 'a new table, swapped in whole');
  assert.deepEqual([...t.ids], want);
  assert.equal((await repairDrift(maps, () => p, 1)).maglev, 0);
});
