// Restart adoption after a crash (issue 11.6): an agent killed mid-apply can
// leave a backend range no master names (free space: the allocator treats
// what no master names as free), rev-NAT ids and backends nobody references, and affinity entries naming ids that are gone.
// The next agent removes exactly those and leaves the good entries alone; ids
// freed by a sync are not handed out again before the entries that named
// them (conntrack, affinity) have been purged.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { SockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';
import { ip4ToNumber } from '../../src/datapath/addr';
import * as abi from '../../src/abi/generated';
import { sockLbEachTest } from '../helpers/sockLbEachTest';

let maps: SockLbMaps;
sockLbEachTest('sluice-adopt', (_bpffs, m) => {
  maps = m;
});

const be = (...hosts: number[]) => hosts.map((h) => ({ address: `198.18.1.${h}`, port: 8080, proto: 'tcp' as const }));
const fe = (address: string, b: FrontendSpec['backends'], flags = abi.LB_SVC_FLAG_CLUSTER_IP, affinityTimeout = 0): FrontendSpec =>
  ({ address, port: 80, proto: 'tcp', scope: 'external', flags, affinityTimeout, backends: b });

function snapshot() {
  const sort = <T>(xs: T[]) => xs.map((x) => JSON.stringify(x, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))).sort();
  return {
    services: sort(maps.services.readAll()),
    backends: sort(maps.backends.readAll()),
    revNat: sort(maps.revNat.readAll()),
    affinity: sort(maps.affinity.readAll()),
  };
}

test('adoption removes what a crash left (a range without a master, unreferenced rev-NAT ids, backends, affinity entries) and nothing else', () => {
  const first = LbProgrammer.adopt(maps);
  first.apply([fe('10.96.50.1', be(1, 2), abi.LB_SVC_FLAG_CLUSTER_IP | abi.LB_SVC_FLAG_AFFINITY, 600), fe('10.96.50.2', be(2, 3))], { prune: true });
  const good = first.programmedFrontends().find((f) => f.address === '10.96.50.1')!;
  // A live affinity entry: it names a current backend of its frontend.
  maps.affinity.set({ client_id: 1n, rev_nat_id: good.revNatId, netns_cookie: 1 }, { last_used_ns: 1n, backend_id: good.backendIds[0]! });
  const before = snapshot();

  // What a SIGKILL mid-apply leaves:
  maps.backends.set(777, { address: ip4ToNumber('198.18.1.77'), port: 8080, proto: abi.LB_PROTO_TCP, flags: 0, zone: 0 }); // backend written, its frontend never was
  maps.revNat.set(999, { address: ip4ToNumber('10.96.50.9'), port: 80 }); // rev-NAT written, master never was
  maps.ranges.set(4000, 777); // the range of that frontend, no master
  maps.ranges.set(4001, good.backendIds[0]!);
  maps.affinity.set({ client_id: 2n, rev_nat_id: good.revNatId, netns_cookie: 1 }, { last_used_ns: 1n, backend_id: 555 }); // names a deleted backend
  maps.affinity.set({ client_id: 3n, rev_nat_id: 999, netns_cookie: 1 }, { last_used_ns: 1n, backend_id: good.backendIds[0]! }); // names a deleted frontend

  const { programmer, repaired } = LbProgrammer.adoptAndRepair(maps);
  assert.deepEqual(snapshot(), before, 'exactly the leftovers are gone; every good entry is untouched');
  assert.deepEqual(repaired, { revNats: 1, backends: 1, affinity: 2 });
  assert.equal(programmer.rangeStats().used, 4, 'the two masters\' ranges are in use; the orphan range is free space');
  assert.equal(programmer.programmedFrontends().length, 2);
  // Adopted state is consistent: re-applying the same desired state writes nothing.
  const again = programmer.apply([fe('10.96.50.1', be(1, 2), abi.LB_SVC_FLAG_CLUSTER_IP | abi.LB_SVC_FLAG_AFFINITY, 600), fe('10.96.50.2', be(2, 3))], { prune: true });
  assert.equal(again.unchanged, 2);
  assert.equal(again.backendsWritten + again.backendsDeleted + again.frontendsWritten, 0);
});

test('plain adoption (the CLI\'s read-only views) writes nothing', () => {
  const first = LbProgrammer.adopt(maps);
  first.apply([fe('10.96.51.1', be(1))], { prune: true });
  maps.revNat.set(999, { address: ip4ToNumber('10.96.51.9'), port: 80 });
  const before = snapshot();
  LbProgrammer.adopt(maps);
  assert.deepEqual(snapshot(), before);
});

test('an id freed by a sync is not handed out again before the sync\'s purges ran (recycleIds)', () => {
  const p = LbProgrammer.adopt(maps);
  p.apply([fe('10.96.52.1', be(1)), fe('10.96.52.2', be(2))], { prune: true });
  const goneBackend = p.programmedFrontends().find((f) => f.address === '10.96.52.1')!.backendIds[0]!;
  const goneRevNat = p.programmedFrontends().find((f) => f.address === '10.96.52.1')!.revNatId;
  // One sync: the frontend and its backend go, another Service with a new backend comes.
  const removed = p.remove('10.96.52.1', 80, 'tcp');
  assert.deepEqual(removed.deletedBackendIds, [goneBackend]);
  p.apply([fe('10.96.52.3', be(3))], { prune: false });
  const fresh = p.programmedFrontends().find((f) => f.address === '10.96.52.3')!;
  assert.notEqual(fresh.backendIds[0], goneBackend, 'conntrack and affinity entries may still name the freed backend id');
  assert.notEqual(fresh.revNatId, goneRevNat, 'affinity entries are keyed by the freed rev-NAT id');
  // After the owner purged what named them, the ids are handed out again (oldest freed first).
  p.recycleIds();
  p.apply([fe('10.96.52.4', be(4))], { prune: false });
  const later = p.programmedFrontends().find((f) => f.address === '10.96.52.4')!;
  assert.equal(later.backendIds[0], goneBackend);
  assert.equal(later.revNatId, goneRevNat);
});
