// An interrupted migration of the TC object's own maps (src/datapath/migrate.ts):
// a capacity change of the conntrack map sluice_ct4 (carry; the TC-only maps
// have no layout change yet, so a capacity change is the migration they can
// see) cut short by a kill after the new map was pinned, before or after its
// fill. Until the next start swaps the links, the old programs still run on
// the old map (now pinned as sluice_ct4_migrating) and keep creating flows.
// The next start must: carry every flow (those from before the kill and those
// the old programs created while it was starting, up to the swap), leave no
// pin aside, leave no layout record that makes a later start migrate again,
// and translate the replies of every flow with the new programs.
//
// The old programs are an object this test keeps loaded on the original pins
// (what a pinned tcx link keeps alive), run by BPF_PROG_TEST_RUN; "while it
// was starting" is the restart's swap callback, which runs them before it
// swaps (no packet leaves the test process).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import * as abi from '../../src/abi/generated';
import { BpfObject, ensureBpffsDir, progTestRun } from '../../src/bpf';
import { BpfMap } from '../../src/bpf/map';
import { MapMigration, loadMigrated, oldPinName, readLayouts } from '../../src/datapath/migrate';
import { bpfObjectPath } from '../../src/datapath/sockLb';
import { swapPinnedTcLinks } from '../../src/datapath/tc/attachMain';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { openTcMaps } from '../../src/datapath/tc/maps';
import { listConntrack } from '../../src/datapath/tc/conntrack';
import { idTable, TypedMap, u32Codec } from '../../src/datapath/typedMap';
import { ip4ToNumber } from '../../src/datapath/addr';
import { TC_OBJECT } from './tc_harness';
import { TC_ACT_OK, TCP_ACK, TCP_SYN, diffHex, frame, type L4Spec } from './tc_packet';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1';
const BACKEND = { id: 1, address: '198.18.1.10', port: 8080 };

const syn = (sport: number): L4Spec => ({ proto: 'tcp', src: CLIENT, dst: NODE, sport, dport: 30080, tcpFlags: TCP_SYN });
const toBackend = (s: L4Spec): L4Spec => ({ ...s, dst: BACKEND.address, dport: BACKEND.port });
const synAck = (sport: number): L4Spec => ({ proto: 'tcp', src: BACKEND.address, dst: CLIENT, sport: BACKEND.port, dport: sport, tcpFlags: TCP_SYN | TCP_ACK });
const toClient = (s: L4Spec): L4Spec => ({ ...s, src: NODE, sport: 30080 });

function run(obj: BpfObject, direction: 'ingress' | 'egress', input: L4Spec, expected: L4Spec, what: string): void {
  const r = progTestRun(obj.program(direction === 'ingress' ? 'sluice_tc_ingress' : 'sluice_tc_egress').fd, { dataIn: frame(input) });
  assert.equal(r.retval, TC_ACT_OK, `${what}: verdict`);
  const want = frame(expected);
  assert.ok(r.dataOut.equals(want), `${what}: output differs from the expected packet\n${diffHex(r.dataOut, want)}`);
}

/** tc_lb loaded on the pins of `pinDir` (the first start), with a NodePort frontend to a local backend (DNAT only). */
function firstStart(pinDir: string): BpfObject {
  const obj = BpfObject.open(TC_OBJECT, { pinDir });
  obj.load();
  const tc = openTcMaps(pinDir);
  try {
    writeTcConfig(tc.config, { snatAddress: NODE, tcpSynTimeout: 60, tcpEstablishedTimeout: 1000, tcpClosingTimeout: 7 });
  } finally {
    tc.close();
  }
  const services = new TypedMap(obj.map(abi.SLUICE_MAP_SERVICES4), abi.lb4_frontend_keyCodec, abi.lb4_serviceCodec);
  const ranges = new TypedMap(obj.map(abi.SLUICE_MAP_RANGES4), u32Codec, u32Codec);
  idTable(obj.map(abi.SLUICE_MAP_BACKENDS4), abi.lb4_backendCodec).set(BACKEND.id, { address: ip4ToNumber(BACKEND.address), port: BACKEND.port, proto: abi.LB_PROTO_TCP, flags: abi.LB_BACKEND_FLAG_LOCAL, zone: 0 });
  idTable(obj.map(abi.SLUICE_MAP_REVNAT4), abi.lb4_reverse_natCodec).set(30, { address: ip4ToNumber(NODE), port: 30080 });
  ranges.set(0, BACKEND.id);
  services.set({ address: ip4ToNumber(NODE), port: 30080, proto: abi.LB_PROTO_TCP, scope: abi.LB_SCOPE_EXTERNAL }, {
    backend_id: 0, count: 1, flags: abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES, rev_nat_id: 30, affinity_timeout: 0, algorithm: abi.LB_ALG_RANDOM,
  });
  return obj;
}

function clients(pinDir: string): string[] {
  const tc = openTcMaps(pinDir);
  try {
    return listConntrack(tc.conntrack).map((r) => r.client).sort();
  } finally {
    tc.close();
  }
}

for (const killed of ['before', 'after'] as const) {
  test(`a capacity migration of sluice_ct4 killed ${killed} its fill: the next start carries every flow, also those the old programs opened until the swap, and the new programs translate their replies`, () => {
    const pinDir = ensureBpffsDir(`/sys/fs/bpf/h-migtc-${randomBytes(4).toString('hex')}`);
    let old: BpfObject | undefined;
    let fresh: BpfObject | undefined;
    try {
      old = firstStart(pinDir);
      const ct = BpfMap.fromPinned(path.join(pinDir, abi.SLUICE_MAP_CT4));
      const bigger = ct.maxEntries * 2;
      const oldId = ct.id;
      ct.close();
      run(old, 'ingress', syn(41000), toBackend(syn(41000)), 'a flow opened before the upgrade');
      const maxEntries = { [abi.SLUICE_MAP_CT4]: bigger };

      // The upgrade up to the kill: plan, open (the old pin moved aside),
      // load (the new, empty map pinned), fill or not; no swap, no finish.
      const migration = MapMigration.plan(TC_OBJECT, { bpffs: pinDir, maxEntries });
      assert.deepEqual(migration.changes.map((c) => [c.map, c.why]), [[abi.SLUICE_MAP_CT4, 'capacity']]);
      const killedObj = migration.open();
      try {
        killedObj.load();
        if (killed === 'after') migration.fill(killedObj);
      } finally {
        killedObj.close();
      }
      assert.ok(fs.existsSync(path.join(pinDir, oldPinName(abi.SLUICE_MAP_CT4))), 'the old map left aside, as a kill leaves it');
      // The next start loads the socket LB first (installSockLb: its plan
      // finishes interrupted migrations too); the old TC programs keep
      // running on the old map meanwhile.
      assert.deepEqual(MapMigration.plan(bpfObjectPath('sock_lb.bpf.o'), { bpffs: pinDir }).changes, [], 'nothing of sock_lb to migrate');
      run(old, 'ingress', syn(41001), toBackend(syn(41001)), 'a flow opened after the kill, after the socket LB\'s plan');

      // Then tc_lb with the same config; the old programs open one more flow
      // while it loads, before its swap.
      let swapped = false;
      fresh = loadMigrated(TC_OBJECT, pinDir, { maxEntries }, (obj) => {
        run(old!, 'ingress', syn(41002), toBackend(syn(41002)), 'a flow opened by the old programs while the next start loads');
        swapPinnedTcLinks(obj, pinDir);
        swapped = true;
      });
      assert.ok(swapped);
      old.close(); // the swapped links would drop the old programs here
      old = undefined;

      assert.deepEqual(fs.readdirSync(pinDir).filter((f) => f.endsWith('_migrating')), [], 'nothing left aside');
      const now = BpfMap.fromPinned(path.join(pinDir, abi.SLUICE_MAP_CT4));
      try {
        assert.notEqual(now.id, oldId, 'a new conntrack map');
        assert.equal(now.maxEntries, bigger);
      } finally {
        now.close();
      }
      assert.deepEqual(clients(pinDir), [`${CLIENT}:41000`, `${CLIENT}:41001`, `${CLIENT}:41002`], 'every flow carried into the new map');
      for (const sport of [41000, 41001, 41002]) run(fresh, 'egress', synAck(sport), toClient(synAck(sport)), `the reply of flow ${sport} after the restart`);
      run(fresh, 'ingress', { ...syn(41003) }, toBackend(syn(41003)), 'a new flow after the restart');
      run(fresh, 'ingress', { ...syn(41000), tcpFlags: TCP_ACK }, toBackend({ ...syn(41000), tcpFlags: TCP_ACK }), 'the client ACK of a carried flow');

      // No stale layout record: the start after makes no migration.
      assert.equal(readLayouts(pinDir).get(abi.SLUICE_MAP_CT4), 1);
      fresh.close();
      fresh = undefined;
      let migratedAgain: unknown[] = [];
      const again = loadMigrated(TC_OBJECT, pinDir, { maxEntries, onMigrated: (m) => { migratedAgain = m; } }, (obj) => swapPinnedTcLinks(obj, pinDir));
      again.close();
      assert.deepEqual(migratedAgain, [], 'the next start with the same config migrates nothing');
    } finally {
      old?.close();
      fresh?.close();
      fs.rmSync(pinDir, { recursive: true, force: true });
    }
  });
}
