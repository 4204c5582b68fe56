// Live map migration (issue 13 item 4, src/datapath/migrate.ts) on the socket
// path: a capacity change (maxEntries) on a running node replaces the pinned
// maps at the new size with every entry carried while long-lived TCP
// connections keep their Service address (getpeername) and a connect loop
// sees no failure; a layout change is translated by the map's policy; a pin
// from a newer layout, or a layout change nobody can translate, is refused
// with nothing touched.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Sandbox, sh, sluiceBin, labScript, waitFor } from '../helpers/sandbox';
import { BpfMap } from '../../src/bpf/map';
import { BpfLink } from '../../src/bpf/link';
import { MapType } from '../../src/bpf/constants';
import { installSockLb, linkDir, SOCK_LB_PROGRAMS } from '../../src/datapath/sockLb';
import { recordLayouts, readLayouts, LAYOUT_MAP } from '../../src/datapath/migrate';
import { assertSlotsMigrated, assertTrafficSurvived } from './slot_migration';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber as ip4 } from '../../src/datapath/addr';

const BACKEND_HOLD = '198.18.19.2';
const BACKEND_LOOP = '198.18.19.3';
const HOLD_VIP = '10.96.0.61';
const LOOP_VIPS = Array.from({ length: 8 }, (_, i) => `10.96.1.${i + 1}`);

/** Every entry of a pinned map, as sorted hex pairs (ARRAYs: the entries in use, not all-zero). */
function dump(bpffs: string, name: string): string[] {
  const m = BpfMap.fromPinned(path.join(bpffs, name));
  try {
    const zero = Buffer.alloc(m.valueSize);
    return [...m.entries()].filter(([, v]) => m.type !== MapType.ARRAY || !v.equals(zero)).map(([k, v]) => `${k.toString('hex')}=${v.toString('hex')}`).sort();
  } finally {
    m.close();
  }
}

function pinned(bpffs: string, name: string): BpfMap {
  return BpfMap.fromPinned(path.join(bpffs, name));
}

function linkProgIds(bpffs: string): number[] {
  return fs.readdirSync(linkDir(bpffs)).sort().map((n) => {
    const l = BpfLink.fromPinned(path.join(linkDir(bpffs), n));
    try {
      return l.info().progId;
    } finally {
      l.close();
    }
  });
}

async function startHoldBackends(sb: Sandbox): Promise<void> {
  for (const a of [BACKEND_HOLD, BACKEND_LOOP]) sb.ip(['addr', 'add', `${a}/32`, 'dev', 'lo']);
  const server = sb.spawnInNetns(['node', labScript('backendServer'), `${BACKEND_HOLD}:8080/hold`, `${BACKEND_LOOP}:8080`]);
  let ready = false;
  server.stdout!.on('data', (d) => { if (String(d).includes('ready')) ready = true; });
  await waitFor('backend servers', () => ready);
}

test('maxEntries raised on a running node: maps replaced at the new size, every entry carried, open connections keep their Service address, no connect fails', async () => {
  const sb = Sandbox.create('sluice-migr');
  try {
    installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
    const upsert = (vip: string, backend: string) => sh(sluiceBin, ['service', 'upsert', '--frontend', `${vip}:80/tcp`, '--backends', `${backend}:8080`, '--bpffs', sb.bpffs]);
    upsert(HOLD_VIP, BACKEND_HOLD);
    for (const vip of LOOP_VIPS) upsert(vip, BACKEND_LOOP);
    await startHoldBackends(sb);
    const carried = [abi.SLUICE_MAP_SERVICES4, abi.SLUICE_MAP_BACKENDS4, abi.SLUICE_MAP_REVNAT4];
    const before = Object.fromEntries(carried.map((n) => [n, dump(sb.bpffs, n)]));
    const oldIds = Object.fromEntries(carried.map((n) => { const m = pinned(sb.bpffs, n); const id = m.id; m.close(); return [n, id]; }));

    const hold = sb.runInCgroup(['node', labScript('lbClient'), 'hold', HOLD_VIP, '80', '3000', '3'], 20000);
    const loop = sb.runInCgroup(['node', labScript('lbClient'), 'loop', LOOP_VIPS[0]!, '80', '3000'], 20000);
    await new Promise((r) => setTimeout(r, 1000));

    const bigger: Record<string, number> = {
      [abi.SLUICE_MAP_SERVICES4]: abi.SLUICE_MAX_SERVICE_ENTRIES * 2,
      [abi.SLUICE_MAP_BACKENDS4]: abi.SLUICE_MAX_BACKENDS * 2,
      [abi.SLUICE_MAP_REVNAT4]: abi.SLUICE_MAX_REVNAT * 2,
    };
    const result = installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, maxEntries: bigger });

    for (const name of carried) {
      const m = pinned(sb.bpffs, name);
      try {
        assert.equal(m.maxEntries, bigger[name], `${name}: max_entries after the restart with maxEntries ${bigger[name]}`);
        assert.notEqual(m.id, oldIds[name], `${name} is a new map`);
      } finally {
        m.close();
      }
      assert.deepEqual(dump(sb.bpffs, name), before[name], `${name}: every entry carried`);
    }
    assert.deepEqual(result.migrated.map((m) => [m.map, m.why, m.policy]).sort(), carried.map((n) => [n, 'capacity', 'carry']).sort());
    assert.deepEqual(result.replaced.sort(), Object.values(SOCK_LB_PROGRAMS).map((p) => p.hook).sort(), 'every socket hook swapped in place');
    assert.ok(!fs.readdirSync(sb.bpffs).some((f) => f.endsWith('_migrating')), 'old pins removed');

    const { held, ok } = await assertTrafficSurvived(hold, loop, BACKEND_HOLD, HOLD_VIP);

    // The same config again: nothing to migrate.
    assert.deepEqual(installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, maxEntries: bigger }).migrated, []);
    process.stdout.write(`# capacity migration: ${carried.map((n) => `${n} ${before[n]!.length} entries`).join(', ')} carried; ${held.length} held connections (${held.map((c) => c.echoed).join('/')} lines echoed), ${ok} connects, 0 failed\n`);
  } finally {
    sb.close();
  }
});

test('a pin from a newer layout is refused naming the map and both versions; nothing is touched', () => {
  const sb = Sandbox.create('sluice-migr');
  try {
    installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
    recordLayouts(sb.bpffs, [[abi.SLUICE_MAP_BACKENDS4, 7]]);
    const files = fs.readdirSync(sb.bpffs).sort();
    const m = pinned(sb.bpffs, abi.SLUICE_MAP_BACKENDS4);
    const id = m.id;
    m.close();
    const progs = linkProgIds(sb.bpffs);
    assert.throws(
      () => installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, maxEntries: { [abi.SLUICE_MAP_SERVICES4]: 1024 } }),
      /map sluice_be4 .* has layout version 7, newer than this agent's 2 .*downgrading it is not supported.*|refusing to migrate .*nothing was changed.*sluice_be4 .*layout version 7, newer than this agent's 2/,
    );
    assert.deepEqual(fs.readdirSync(sb.bpffs).sort(), files);
    const again = pinned(sb.bpffs, abi.SLUICE_MAP_BACKENDS4);
    assert.equal(again.id, id);
    again.close();
    const svc = pinned(sb.bpffs, abi.SLUICE_MAP_SERVICES4);
    assert.equal(svc.maxEntries, abi.SLUICE_MAX_SERVICE_ENTRIES, 'the capacity change asked for in the same start was not applied');
    svc.close();
    assert.deepEqual(linkProgIds(sb.bpffs), progs, 'the attached programs were not swapped');
    assert.equal(readLayouts(sb.bpffs).get(abi.SLUICE_MAP_BACKENDS4), 7);
  } finally {
    sb.close();
  }
});

test('pins of the slot layout (sluice_svc4 layout 1: a master and one entry per backend slot; hash backends and rev-NAT) are rewritten into masters + ranges, and connects work after the swap', async () => {
  const sb = Sandbox.create('sluice-migr');
  try {
    fs.mkdirSync(sb.bpffs, { recursive: true });
    // What an older Sluice pinned: sluice_svc4 keyed {address, port, proto,
    // scope, backend_slot, pad} (12 bytes), sluice_be4 and sluice_revnat4 hashes.
    const svc = BpfMap.create({ type: MapType.HASH, name: abi.SLUICE_MAP_SERVICES4, keySize: 12, valueSize: 20, maxEntries: 1024, flags: 1 });
    const be = BpfMap.create({ type: MapType.HASH, name: abi.SLUICE_MAP_BACKENDS4, keySize: 4, valueSize: 12, maxEntries: 1024, flags: 1 });
    const rn = BpfMap.create({ type: MapType.HASH, name: abi.SLUICE_MAP_REVNAT4, keySize: 4, valueSize: 8, maxEntries: 1024, flags: 1 });
    const u32 = (n: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(n, 0); return b; };
    // Backends 5 (BACKEND_LOOP:8080) and 6 (BACKEND_HOLD:8080).
    be.update(u32(5), abi.encodeLb4Backend({ address: ip4(BACKEND_LOOP), port: 8080, proto: abi.LB_PROTO_TCP, flags: 0, zone: 0 }));
    be.update(u32(6), abi.encodeLb4Backend({ address: ip4(BACKEND_HOLD), port: 8080, proto: abi.LB_PROTO_TCP, flags: 0, zone: 0 }));
    const frontends: Array<[string, number, number[]]> = [[LOOP_VIPS[0]!, 1, [5]], [LOOP_VIPS[1]!, 2, [6, 5]]];
    for (const [vip, revNat, ids] of frontends) {
      rn.update(u32(revNat), abi.encodeLb4ReverseNat({ address: ip4(vip), port: 80 }));
      const key = (slot: number) => { const k = Buffer.alloc(12); k.writeUInt32BE(ip4(vip), 0); k.writeUInt16BE(80, 4); k.writeUInt8(abi.LB_PROTO_TCP, 6); k.writeUInt16LE(slot, 8); return k; };
      ids.forEach((id, i) => svc.update(key(i + 1), abi.encodeLb4Service({ backend_id: id, count: 0, flags: 0, rev_nat_id: 0, affinity_timeout: 0, algorithm: 0 })));
      svc.update(key(0), abi.encodeLb4Service({ backend_id: 0, count: ids.length, flags: abi.LB_SVC_FLAG_CLUSTER_IP, rev_nat_id: revNat, affinity_timeout: 0, algorithm: 0 }));
    }
    for (const m of [svc, be, rn]) {
      m.pin(path.join(sb.bpffs, m.name));
      m.close();
    }

    const result = installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
    assertSlotsMigrated(sb.bpffs, result.migrated, [abi.SLUICE_MAP_SERVICES4, abi.SLUICE_MAP_BACKENDS4, abi.SLUICE_MAP_REVNAT4], frontends,
      { address: '10.96.2.1', port: 80, proto: 'tcp', scope: 'external', flags: abi.LB_SVC_FLAG_CLUSTER_IP, affinityTimeout: 0, backends: [{ address: BACKEND_LOOP, port: 8080, proto: 'tcp' }] });
    await startHoldBackends(sb);
    const loop = JSON.parse(await sb.runInCgroup(['node', labScript('lbClient'), 'loop', LOOP_VIPS[0]!, '80', '1500'], 20000)) as { ok: number; errors: Record<string, number> };
    assert.deepEqual(loop.errors, {}, 'connects through the migrated frontend');
    assert.ok(loop.ok > 10, `${loop.ok} connects`);
  } finally {
    sb.close();
  }
});

test('a layout change: translated by the map policy; without a translation a carried map is refused, untouched', () => {
  const sb = Sandbox.create('sluice-migr');
  try {
    fs.mkdirSync(sb.bpffs, { recursive: true });
    // A hypothetical older lb_affinity of 12 bytes: backend_id, then last_used_ns.
    const old = BpfMap.create({ type: MapType.LRU_HASH, name: abi.SLUICE_MAP_AFFINITY4, keySize: 16, valueSize: 12, maxEntries: 1024 });
    const keys = [1, 2, 3].map((i) => { const k = Buffer.alloc(16); k.writeBigUInt64LE(BigInt(1000 + i), 0); k.writeUInt32LE(i, 8); return k; });
    keys.forEach((k, i) => { const v = Buffer.alloc(12); v.writeUInt32LE(50 + i, 0); v.writeBigUInt64LE(BigInt(9e9) + BigInt(i), 4); old.update(k, v); });
    old.pin(path.join(sb.bpffs, abi.SLUICE_MAP_AFFINITY4));
    const oldId = old.id;
    old.close();

    assert.throws(() => installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup }), /map sluice_affin4 .*changed layout \(pinned: LRU_HASH key 16 value 12 .*new: LRU_HASH key 16 value 16.*without a translation/i);
    const still = pinned(sb.bpffs, abi.SLUICE_MAP_AFFINITY4);
    assert.equal(still.id, oldId);
    still.close();
    assert.ok(!fs.existsSync(path.join(sb.bpffs, LAYOUT_MAP)) && !fs.existsSync(linkDir(sb.bpffs)) || fs.readdirSync(linkDir(sb.bpffs)).length === 0, 'nothing attached');

    const result = installSockLb({
      bpffs: sb.bpffs,
      cgroupPath: sb.cgroup,
      policies: {
        [abi.SLUICE_MAP_AFFINITY4]: {
          kind: 'carry',
          translate: (key, value, from) => {
            if (from.valueSize !== 12) return [key, value];
            const v = Buffer.alloc(16);
            v.writeBigUInt64LE(value.readBigUInt64LE(4), 0);
            v.writeUInt32LE(value.readUInt32LE(0), 8);
            return [key, v];
          },
        },
      },
    });
    assert.deepEqual(result.migrated.map((m) => [m.map, m.why, m.carried, m.dropped]), [[abi.SLUICE_MAP_AFFINITY4, 'layout', 3, 0]]);
    const m = pinned(sb.bpffs, abi.SLUICE_MAP_AFFINITY4);
    try {
      assert.equal(m.valueSize, 16);
      keys.forEach((k, i) => {
        const v = m.lookup(k)!;
        assert.ok(v, `entry ${i} carried`);
        assert.equal(v.readBigUInt64LE(0), BigInt(9e9) + BigInt(i));
        assert.equal(v.readUInt32LE(8), 50 + i);
      });
    } finally {
      m.close();
    }
    assert.equal(readLayouts(sb.bpffs).get(abi.SLUICE_MAP_AFFINITY4), 1);
  } finally {
    sb.close();
  }
});

test('a migration cut short by a kill is finished by the next start: a moved-aside pin is put back, or its entries copied into the new map', () => {
  const sb = Sandbox.create('sluice-migr');
  try {
    installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
    sh(sluiceBin, ['service', 'upsert', '--frontend', `${HOLD_VIP}:80/tcp`, '--backends', `${BACKEND_HOLD}:8080`, '--bpffs', sb.bpffs]);
    const pin = (n: string) => path.join(sb.bpffs, n);
    const entries = dump(sb.bpffs, abi.SLUICE_MAP_SERVICES4);
    const m = pinned(sb.bpffs, abi.SLUICE_MAP_SERVICES4);
    const id = m.id;
    const spec = { type: m.type, keySize: m.keySize, valueSize: m.valueSize, flags: m.flags };
    m.close();

    // Killed after moving the pin aside, before the new map was pinned.
    fs.renameSync(pin(abi.SLUICE_MAP_SERVICES4), pin(`${abi.SLUICE_MAP_SERVICES4}_migrating`));
    installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
    const back = pinned(sb.bpffs, abi.SLUICE_MAP_SERVICES4);
    assert.equal(back.id, id, 'the old map is back under its name');
    back.close();

    // Killed after the new (bigger, still empty) map was pinned.
    fs.renameSync(pin(abi.SLUICE_MAP_SERVICES4), pin(`${abi.SLUICE_MAP_SERVICES4}_migrating`));
    const fresh = BpfMap.create({ ...spec, name: abi.SLUICE_MAP_SERVICES4, maxEntries: 4096 });
    fresh.pin(pin(abi.SLUICE_MAP_SERVICES4));
    fresh.close();
    installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, maxEntries: { [abi.SLUICE_MAP_SERVICES4]: 4096 } });
    assert.deepEqual(dump(sb.bpffs, abi.SLUICE_MAP_SERVICES4), entries, 'the entries reached the new map');
    assert.ok(!fs.readdirSync(sb.bpffs).some((f) => f.endsWith('_migrating')), 'nothing left aside');
  } finally {
    sb.close();
  }
});

test('the IPv4-only event ring of an older Sluice (sluice_events, 72-byte records) is unpinned at the upgrade; the new ring has its own name', () => {
  const sb = Sandbox.create('sluice-migr');
  try {
    fs.mkdirSync(sb.bpffs, { recursive: true });
    const old = BpfMap.create({ type: MapType.RINGBUF, name: 'sluice_events', keySize: 0, valueSize: 0, maxEntries: abi.SLUICE_EVENTS_RING_BYTES });
    old.pin(path.join(sb.bpffs, 'sluice_events'));
    old.close();
    installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
    assert.ok(!fs.existsSync(path.join(sb.bpffs, 'sluice_events')), 'the old ring is unpinned: an older `sluice monitor` finds no ring instead of misreading records');
    assert.equal(abi.SLUICE_MAP_EVENTS, 'sluice_ev_v2');
    const ring = pinned(sb.bpffs, abi.SLUICE_MAP_EVENTS);
    assert.equal(ring.type, MapType.RINGBUF);
    ring.close();
  } finally {
    sb.close();
  }
});
