// The apply step against real pinned maps: ids, sharing, adoption after a
// restart, shrinking and pruning, and a full map reported per frontend
// without harming the others.
import { test, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import { installSockLb, uninstall } from '../../src/datapath/sockLb';
import { openSockLbMaps, type SockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';
import { LB_BACKEND_FLAG_TERMINATING, LB_SVC_FLAG_CLUSTER_IP, LB_SVC_FLAG_NODEPORT, SLUICE_MAP_SERVICES4, SLUICE_MAP_BACKENDS4, SLUICE_MAP_BACKENDS6, SLUICE_MAP_RANGES4, SLUICE_MAP_SVC_NAMES } from '../../src/abi/generated';
import { bytesToIp6, ip6ToBytes } from '../../src/datapath/addr';
import { decodeServiceName, encodeServiceName, readServiceNames } from '../../src/datapath/serviceNames';
import { cgroup2Root, bpffsRoot } from '../helpers/sandbox';

let bpffs: string;
let cgroup: string;
let maps: SockLbMaps;
let installed: ReturnType<typeof installSockLb>;

function install(maxEntries?: Record<string, number>): void {
  const id = randomBytes(4).toString('hex');
  bpffs = path.join(bpffsRoot(), `sluice-prog-${id}`);
  cgroup = path.join(cgroup2Root(), `sluice-prog-${id}`);
  fs.mkdirSync(cgroup);
  installed = installSockLb({ bpffs, cgroupPath: cgroup, maxEntries });
  maps = openSockLbMaps(bpffs);
}

beforeEach(() => install());

afterEach(() => {
  maps?.close();
  uninstall(bpffs);
  fs.rmdirSync(cgroup);
});

const backends = (...hosts: number[]) => hosts.map((h) => ({ address: `198.18.1.${h}`, port: 8080, proto: 'tcp' as const }));
const fe = (address: string, port: number, b: FrontendSpec['backends'], flags = LB_SVC_FLAG_CLUSTER_IP): FrontendSpec =>
  ({ address, port, proto: 'tcp', scope: 'external', flags, affinityTimeout: 0, backends: b });

function mapContents() {
  return {
    services: maps.services.readAll().length,
    backends: maps.backends.readAll().map(([id, b]) => [id, b.address & 0xff]).sort((a, b) => a[0]! - b[0]!),
    revNat: maps.revNat.readAll().length,
  };
}

test('frontends of one batch that share backends share their ids; every range entry names an existing backend', () => {
  const p = LbProgrammer.adopt(maps);
  const r = p.apply([fe('10.96.0.1', 80, backends(1, 2)), fe('198.18.0.1', 30080, backends(1, 2), LB_SVC_FLAG_NODEPORT)], { prune: true });
  assert.equal(r.failures.length, 0);
  assert.equal(r.backendsWritten, 2);
  const [a, b] = p.programmedFrontends();
  assert.deepEqual(a!.backendIds, b!.backendIds);
  for (const [, v] of maps.services.readAll()) {
    for (let i = 0; i < v.count; i++) {
      const id = maps.ranges.get(v.backend_id + i)!;
      assert.ok(maps.backends.get(id), `range entry ${v.backend_id + i} -> missing backend ${id}`);
    }
  }
  assert.deepEqual(mapContents(), { services: 2, backends: [[1, 1], [2, 2]], revNat: 2 });
});

test('a backend two frontends of one batch name with other flags and zones is one entry, one id: the later frontend\'s flags win, address, port and protocol as given', () => {
  const p = LbProgrammer.adopt(maps);
  const udp = [{ address: '198.18.1.7', port: 5353, proto: 'udp' as const }];
  const r = p.apply([
    fe('10.96.0.1', 80, [{ ...backends(1)[0]!, zone: 2 }]),
    fe('198.18.0.1', 30080, [{ ...backends(1)[0]!, terminating: true, zone: 3 }], LB_SVC_FLAG_NODEPORT),
    { ...fe('10.96.0.2', 53, udp), proto: 'udp' },
  ], { prune: true });
  assert.equal(r.failures.length, 0);
  assert.equal(r.backendsWritten, 2);
  const [a, b] = p.programmedFrontends();
  assert.deepEqual(a!.backendIds, b!.backendIds);
  const entry = maps.backends.get(a!.backendIds[0]!)!;
  assert.deepEqual(entry, { address: 0xc6120101, port: 8080, proto: 6, flags: LB_BACKEND_FLAG_TERMINATING, zone: 3 });
  assert.deepEqual(p.backendById(a!.backendIds[0]!), { id: a!.backendIds[0], address: '198.18.1.1', port: 8080, proto: 'tcp', flags: LB_BACKEND_FLAG_TERMINATING, zone: 3 });
  const u = p.programmedFrontends().find((f) => f.proto === 'udp')!;
  assert.deepEqual(maps.backends.get(u.backendIds[0]!), { address: 0xc6120107, port: 5353, proto: 17, flags: 0, zone: 0 });
  // An unsupported protocol is still a named failure of its frontend.
  const bad = p.apply([{ ...fe('10.96.0.3', 80, [{ address: '198.18.1.9', port: 80, proto: 'sctp' as never }]), proto: 'sctp' as never }], { prune: false });
  assert.match(bad.failures[0]?.error.message ?? '', /unsupported protocol "sctp"/);
});

test('the install names the maps it created (empty: adoption skips reading them); a second install on the same pins, or one finishing an interrupted migration, names none of those', () => {
  const tables = [maps.backends.name, maps.revNat.name, maps.services.name];
  for (const t of tables) assert.ok(installed.created?.includes(t), `${t} created by the first install`);
  const p = LbProgrammer.adopt(maps);
  assert.equal(p.apply([fe('10.96.0.1', 80, backends(1, 2))], { prune: true }).failures.length, 0);
  // Started again on full pins: nothing is "created", so everything is read and adopted.
  const again = installSockLb({ bpffs, cgroupPath: cgroup });
  assert.deepEqual(again.created, []);
  const adopted = LbProgrammer.adoptAndRepair(maps, { emptyMaps: new Set(again.created) }).programmer;
  assert.deepEqual(adopted.programmedFrontends().map((f) => f.backendIds), p.programmedFrontends().map((f) => f.backendIds));
  assert.equal(adopted.backendCount(), 2);
  // A pin moved aside by a migration a kill cut short is not a new map.
  fs.renameSync(path.join(bpffs, maps.backends.name), path.join(bpffs, `${maps.backends.name}_migrating`));
  assert.ok(!installSockLb({ bpffs, cgroupPath: cgroup }).created?.includes(maps.backends.name));
});

test('a restarted programmer adopts the maps: same ids, nothing rewritten, nothing flushed', () => {
  const first = LbProgrammer.adopt(maps);
  first.apply([fe('10.96.0.1', 80, backends(1, 2, 3)), fe('10.96.0.2', 53, backends(4))], { prune: true });
  const before = mapContents();
  const second = LbProgrammer.adopt(maps);
  const ids = (p: LbProgrammer) => p.programmedFrontends().map((f) => [f.id, f.backendIds] as const).sort((a, b) => a[0].localeCompare(b[0]));
  assert.deepEqual(ids(second), ids(first));
  const r = second.apply([fe('10.96.0.1', 80, backends(1, 2, 3)), fe('10.96.0.2', 53, backends(4))], { prune: true });
  assert.equal(r.unchanged, 2);
  assert.equal(r.frontendsWritten + r.backendsWritten + r.frontendsDeleted + r.backendsDeleted, 0);
  assert.deepEqual(mapContents(), before);
});

test('shrinking writes a new range, then the master; pruning removes frontends and orphaned backends', () => {
  const p = LbProgrammer.adopt(maps);
  p.apply([fe('10.96.0.1', 80, backends(1, 2, 3)), fe('10.96.0.2', 80, backends(3, 4))], { prune: true });
  const old = maps.services.get({ address: 0x0a600001, port: 80, proto: 6, scope: 0 })!;
  const oldIds = [0, 1, 2].map((i) => maps.ranges.get(old.backend_id + i));
  const r = p.apply([fe('10.96.0.1', 80, backends(1))], { prune: true });
  assert.equal(r.frontendsDeleted, 1);
  assert.deepEqual(r.deletedBackendIds.sort(), [2, 3, 4]);
  assert.deepEqual(mapContents(), { services: 1, backends: [[1, 1]], revNat: 1 });
  const master = maps.services.get({ address: 0x0a600001, port: 80, proto: 6, scope: 0 });
  assert.equal(master?.count, 1);
  assert.notEqual(master?.backend_id, old.backend_id, 'a new range: the old one may still be read through a copy of the old master');
  assert.deepEqual([0, 1, 2].map((i) => maps.ranges.get(old.backend_id + i)), oldIds, 'the old range is left intact');
});

test('with a backend grace period, removed backends stay readable until it ends (ARRAY entries change in place); one added again takes its id back', async () => {
  const p = LbProgrammer.adopt(maps);
  p.setBackendGrace(200);
  p.apply([fe('10.96.0.1', 80, backends(1, 2, 3))], { prune: true });
  const old = maps.services.get({ address: 0x0a600001, port: 80, proto: 6, scope: 0 })!;
  const oldIds = [0, 1, 2].map((i) => maps.ranges.get(old.backend_id + i)!);
  const r = p.apply([fe('10.96.0.1', 80, backends(1))], { prune: true });
  assert.deepEqual(r.deletedBackendIds.sort(), oldIds.slice(1).sort(), 'removed from the programmer at once');
  // A program that copied the old master reads the old range: every id it names is still a whole backend.
  for (const id of oldIds) assert.equal(maps.backends.get(id)?.port, 8080, `backend ${id} readable through the old range`);
  // Added again within the grace period: the same id, the entry never zeroed.
  p.apply([fe('10.96.0.1', 80, backends(1, 2))], { prune: true });
  const now = maps.services.get({ address: 0x0a600001, port: 80, proto: 6, scope: 0 })!;
  assert.equal(maps.ranges.get(now.backend_id + 1), oldIds[1], '198.18.1.2 got its id back');
  await new Promise((res) => setTimeout(res, 250));
  p.apply([fe('10.96.0.1', 80, backends(1, 2))], { prune: true }); // any apply retires what is due
  assert.equal(maps.backends.get(oldIds[2]!)?.proto ?? 0, 0, 'after the grace period the entry is zeroed');
  assert.equal(maps.backends.get(oldIds[1]!)?.port, 8080, 'the backend in use again is kept');
});

test('a full range array is an error for the frontends that do not fit, reported each by name; the rest are programmed', () => {
  maps.close();
  uninstall(bpffs);
  fs.rmdirSync(cgroup);
  install({ [SLUICE_MAP_SERVICES4]: 8, [SLUICE_MAP_RANGES4]: 4, [SLUICE_MAP_BACKENDS4]: 64 });
  const p = LbProgrammer.adopt(maps);
  const specs = [1, 2, 3, 4].map((i) => ({ ...fe(`10.96.0.${i}`, 80, backends(i * 10, i * 10 + 1)), owner: `Service default/s${i}` }));
  const r = p.apply(specs, { prune: true });
  // 4 range entries hold two frontends of 2 backends; the third and fourth do not fit.
  assert.equal(r.failures.length, 2, JSON.stringify(r.failures.map((f) => f.frontend)));
  for (const f of r.failures) {
    assert.match(f.error.message, /backend range array \(4 entries\) is full: no 2 contiguous free entries/);
    assert.equal(f.error.name, 'RangeArrayFull');
    assert.match(f.owner ?? '', /Service default\/s[34]/);
  }
  const programmed = p.programmedFrontends().map((f) => f.address).sort();
  assert.deepEqual(programmed, ['10.96.0.1', '10.96.0.2']);
  // Never a frontend without its range: every visible master's range names its backends.
  for (const [, v] of maps.services.readAll()) {
    for (let i = 0; i < v.count; i++) assert.ok(maps.backends.get(maps.ranges.get(v.backend_id + i)!), `range entry ${i} of a visible master`);
  }
  assert.equal(p.rangeStats().full, 3, 'the batch, then the third and the fourth alone');
});

test('the programmer keeps backends compactly: 20 000 distinct backends under 2 000 frontends cost < 200 bytes each (heap and array buffers), frontends included (issue 12 item 2; 316 with an object per backend)', () => {
  const v8 = require('node:v8') as typeof import('node:v8');
  const vm = require('node:vm') as typeof import('node:vm');
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  // The V8 heap and the typed arrays' memory outside it.
  const heap = () => {
    gc();
    gc();
    return v8.getHeapStatistics().used_heap_size + process.memoryUsage().arrayBuffers;
  };
  const FRONTENDS = 2000;
  const PER = 10;
  // Addresses as translate makes them (numberToIp4-like text built per backend, not literals).
  const specs = (): FrontendSpec[] => Array.from({ length: FRONTENDS }, (_, i) =>
    fe(`10.96.${i >> 8}.${i & 255}`, 80, Array.from({ length: PER }, (_, j) => {
      const n = i * PER + j;
      return { address: [198, 18, (n >> 8) & 255, n & 255].join('.'), port: 8080, proto: 'tcp' as const };
    })));
  const p = LbProgrammer.adopt(maps);
  const before = heap();
  const r = p.apply(specs(), { prune: true });
  assert.equal(r.failures.length, 0);
  assert.equal(p.backendCount(), FRONTENDS * PER);
  const perBackend = (heap() - before) / (FRONTENDS * PER);
  assert.ok(perBackend < 200, `${perBackend.toFixed(0)} bytes of heap per backend`);
  assert.equal(p.backendById(p.programmedFrontends()[5]!.backendIds[3]!)?.address, '198.18.0.53');
});

test('the Service names of one apply go to the names map in one batched update, not one syscall per frontend (issue 12: 20k updates at 10k Services)', () => {
  const names = maps.serviceNames!;
  const single: unknown[] = [];
  const batches: number[] = [];
  // Spied at the syscall wrappers: the writer encodes its batch itself.
  const update = names.map.update.bind(names.map);
  const updateBatch = names.map.updateBatch.bind(names.map);
  names.map.update = (k, v, flags) => {
    single.push(k);
    update(k, v, flags);
  };
  names.map.updateBatch = (keys, values, count, flags) => {
    batches.push(count);
    updateBatch(keys, values, count, flags);
  };
  const p = LbProgrammer.adopt(maps);
  const specs = Array.from({ length: 300 }, (_, i) => ({ ...fe(`10.96.${i >> 8}.${i & 0xff}`, 80, backends(1)), service: { namespace: 'default', name: `s${i}`, portName: 'http' } }));
  assert.equal(p.apply(specs, { prune: true }).failures.length, 0);
  assert.equal(single.length, 0, `${single.length} single updates`);
  assert.deepEqual(batches, [300]);
  assert.equal(names.readAll().length, 300);
  // Unchanged names are not written again; a changed one is, alone.
  batches.length = 0;
  specs[7] = { ...specs[7]!, service: { namespace: 'default', name: 's7', portName: 'https' } };
  p.apply(specs, { prune: true });
  assert.deepEqual(batches, [1]);
  assert.equal(single.length, 0);
});

test('a full names map costs only the names: every frontend is programmed, the error names the map, and the next pass does not send the same batch again', () => {
  maps.close();
  uninstall(bpffs);
  fs.rmdirSync(cgroup);
  install({ [SLUICE_MAP_SVC_NAMES]: 4 });
  const p = LbProgrammer.adopt(maps);
  const specs = Array.from({ length: 10 }, (_, i) => ({ ...fe(`10.96.7.${i + 1}`, 80, backends(1, 2)), service: { namespace: 'default', name: `s${i}`, portName: 'http' } }));
  const r = p.apply(specs, { prune: true });
  assert.equal(r.failures.length, 0);
  assert.equal(r.frontendsWritten, 10);
  assert.equal(maps.services.readAll().length, 10, 'every master written');
  assert.match(String(r.serviceNamesError?.message), /sluice_svcname/);
  assert.equal(readServiceNames(maps.serviceNames!).size, 4, 'the names that fit are there');
  const batches: number[] = [];
  const updateBatch = maps.serviceNames!.map.updateBatch.bind(maps.serviceNames!.map);
  maps.serviceNames!.map.updateBatch = (keys, values, count, flags) => {
    batches.push(count);
    updateBatch(keys, values, count, flags);
  };
  const again = p.apply(specs, { prune: true });
  assert.equal(again.serviceNamesError, undefined);
  assert.deepEqual(batches, [], 'names that did not fit are not retried on every pass');
});

test('names written in place equal the codec\'s: over-long fields cut at a character boundary, full-length fields kept, both scopes one entry', () => {
  const p = LbProgrammer.adopt(maps);
  const wanted = [
    { namespace: 'default', name: 'n'.repeat(64), portName: 'ééééééééé' }, // 64 bytes kept whole; 18 bytes cut to 16
    { namespace: 'ns', name: 'é'.repeat(40), portName: '' }, // 80 bytes cut to 64
  ];
  const specs: FrontendSpec[] = wanted.flatMap((service, i) => [
    { ...fe(`10.96.9.${i + 1}`, 80, backends(1)), scope: 'internal' as const, service },
    { ...fe(`10.96.9.${i + 1}`, 80, backends(1)), service },
  ]);
  const batches: number[] = [];
  const updateBatch = maps.serviceNames!.map.updateBatch.bind(maps.serviceNames!.map);
  maps.serviceNames!.map.updateBatch = (keys, values, count, flags) => {
    batches.push(count);
    updateBatch(keys, values, count, flags);
  };
  assert.equal(p.apply(specs, { prune: true }).failures.length, 0);
  assert.deepEqual(batches, [2], 'one entry per rev-NAT id and protocol');
  const read = readServiceNames(maps.serviceNames!);
  const byName = [...read.values()].sort((a, b) => a.namespace.localeCompare(b.namespace));
  assert.deepEqual(byName, wanted.map((n) => decodeServiceName(encodeServiceName(n))).sort((a, b) => a.namespace.localeCompare(b.namespace)));
  assert.equal(byName[0]!.name.length, 64);
  assert.equal(byName[0]!.portName, 'éééééééé');
  assert.equal(byName[1]!.name, 'é'.repeat(32));
});

test('IPv6 frontends get ranges of sluice_rng6 (make-before-break, a new range per backend-set change); an IPv6 id beyond a small sluice_be6 is refused naming the map, IPv4 unaffected', async () => {
  maps.close();
  uninstall(bpffs);
  fs.rmdirSync(cgroup);
  // A node whose IPv6 tables are small (mapSizing.ts): 8 IPv6 backend entries, ids shared with IPv4.
  install({ [SLUICE_MAP_BACKENDS6]: 8 });
  const p = LbProgrammer.adopt(maps);
  p.setBackendGrace(100);
  const backends6 = (...hosts: number[]) => hosts.map((h) => ({ address: `fd00:18::${h}`, port: 8080, proto: 'tcp' as const }));
  let r = p.apply([fe('fd00:96::1', 80, backends6(1, 2, 3))], { prune: true });
  assert.deepEqual(r.failures, []);
  const v6 = maps.v6!;
  const key = { address: ip6ToBytes('fd00:96::1'), port: 80, proto: 6, scope: 0 };
  const first = v6.services.get(key)!;
  const ids = [0, 1, 2].map((i) => v6.ranges.get(first.backend_id + i)!);
  assert.deepEqual(ids.map((id) => v6.backends.get(id)?.address && bytesToIp6(v6.backends.get(id)!.address)), ['fd00:18::1', 'fd00:18::2', 'fd00:18::3']);
  // Shrink: a new range, the old one intact for readers of the old master; the removed backend still readable.
  p.apply([fe('fd00:96::1', 80, backends6(1))], { prune: true });
  const second = v6.services.get(key)!;
  assert.notEqual(second.backend_id, first.backend_id, 'a new range');
  assert.equal(second.count, 1);
  assert.deepEqual([0, 1, 2].map((i) => v6.ranges.get(first.backend_id + i)), ids, 'the old range is not rewritten before its grace period');
  assert.equal(v6.backends.get(ids[2]!)?.port, 8080, 'a removed IPv6 backend stays readable during the grace period');
  await new Promise((res) => setTimeout(res, 150));
  p.apply([fe('fd00:96::1', 80, backends6(1))], { prune: true });
  assert.equal(v6.backends.get(ids[2]!), undefined, 'then its entry is zeroed');
  // IPv4 backends take ids 4..13; the next IPv6 backend's id is beyond sluice_be6's 8 entries.
  r = p.apply([fe('fd00:96::1', 80, backends6(1)), fe('10.96.0.1', 80, backends(...Array.from({ length: 10 }, (_, i) => i + 1))), fe('fd00:96::2', 80, backends6(9))], { prune: true });
  assert.deepEqual(r.failures.map((f) => f.frontend), ['[fd00:96::2]:80/tcp']);
  assert.match(r.failures[0]!.error.message, /IPv6 backend id \d+ is beyond sluice_be6 \(8 entries; ids are shared with IPv4\).*ipv6Maps: full/);
  assert.equal(p.frontend('10.96.0.1:80/tcp')?.backendIds.length, 10, 'IPv4 frontends are not limited by the small IPv6 table');
  assert.equal(v6.services.get({ ...key, address: ip6ToBytes('fd00:96::2') }), undefined, 'no master without its backends');
});
