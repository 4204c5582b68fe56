// Live map migration of the IPv6 service table (src/datapath/migrate.ts):
// pins of the slot layout (sluice_svc6 layout 1: a master and one entry per
// backend slot; sluice_be6 and sluice_revnat6 hashes) become the range
// layout (one master per frontend naming a range of sluice_rng6; ARRAYs
// indexed by the ids). Once from hand-made pins, and once from the socket
// programs of the last commit with the slot layout, built from git and
// running, while IPv6 clients connect and hold connections through the swap.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Sandbox, sh, labScript, waitFor, repoRoot } from '../helpers/sandbox';
import { BpfMap } from '../../src/bpf/map';
import { MapType } from '../../src/bpf/constants';
import { installSockLb, SOCK_LB_PROGRAMS } from '../../src/datapath/sockLb';
import { assertSlotsMigrated, assertTrafficSurvived } from './slot_migration';
import * as abi from '../../src/abi/generated';
import { openSockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer } from '../../src/datapath/programmer';
import { ip6ToBytes } from '../../src/datapath/addr';

/** The last commit whose IPv6 table is the slot layout (UPGRADE6_FROM overrides it). */
const SLOTS6_REVISION = process.env.UPGRADE6_FROM ?? 'e64ad80';

const BACKEND_HOLD = 'fd00:18:19::2';
const BACKEND_LOOP = 'fd00:18:19::3';
const HOLD_VIP = 'fd00:96::61';
const LOOP_VIPS = ['fd00:96:1::1', 'fd00:96:1::2'];

async function startBackends(sb: Sandbox): Promise<void> {
  for (const a of [BACKEND_HOLD, BACKEND_LOOP]) sb.ip(['addr', 'add', `${a}/128`, 'dev', 'lo', 'nodad']);
  const server = sb.spawnInNetns(['node', labScript('backendServer'), `${BACKEND_HOLD}:8080/hold`, `${BACKEND_LOOP}:8080`]);
  let ready = false;
  server.stdout!.on('data', (d) => { if (String(d).includes('ready')) ready = true; });
  await waitFor('backend servers', () => ready);
}

const u32 = (n: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(n, 0); return b; };

/** A layout-1 sluice_svc6 key: lb6_frontend_key, then backend_slot u16 and 2 bytes of pad (24 bytes). */
function slotKey(vip: string, slot: number): Buffer {
  const k = Buffer.alloc(24);
  ip6ToBytes(vip).copy(k, 0);
  k.writeUInt16BE(80, 16);
  k.writeUInt8(abi.LB_PROTO_TCP, 18);
  k.writeUInt16LE(slot, 20);
  return k;
}

test('pins of the IPv6 slot layout (sluice_svc6 layout 1; hash backends and rev-NAT) are rewritten into masters + ranges of sluice_rng6, and IPv6 connects work after the swap', async () => {
  const sb = Sandbox.create('sluice-migr6');
  try {
    fs.mkdirSync(sb.bpffs, { recursive: true });
    const svc = BpfMap.create({ type: MapType.HASH, name: abi.SLUICE_MAP_SERVICES6, keySize: 24, valueSize: 20, maxEntries: 1024, flags: 1 });
    const be = BpfMap.create({ type: MapType.HASH, name: abi.SLUICE_MAP_BACKENDS6, keySize: 4, valueSize: 24, maxEntries: 1024, flags: 1 });
    const rn = BpfMap.create({ type: MapType.HASH, name: abi.SLUICE_MAP_REVNAT6, keySize: 4, valueSize: 20, maxEntries: 1024, flags: 1 });
    // Backends 5 (BACKEND_LOOP:8080) and 6 (BACKEND_HOLD:8080); a stray slot
    // beyond a master's count (a shrink an old agent did not finish) is not carried.
    be.update(u32(5), abi.encodeLb6Backend({ address: ip6ToBytes(BACKEND_LOOP), port: 8080, proto: abi.LB_PROTO_TCP, flags: 0, zone: 0 }));
    be.update(u32(6), abi.encodeLb6Backend({ address: ip6ToBytes(BACKEND_HOLD), port: 8080, proto: abi.LB_PROTO_TCP, flags: 0, zone: 0 }));
    const frontends: Array<[string, number, number[]]> = [[LOOP_VIPS[0]!, 1, [5]], [LOOP_VIPS[1]!, 2, [6, 5]]];
    for (const [vip, revNat, ids] of frontends) {
      rn.update(u32(revNat), abi.encodeLb6ReverseNat({ address: ip6ToBytes(vip), port: 80 }));
      ids.forEach((id, i) => svc.update(slotKey(vip, i + 1), abi.encodeLb4Service({ backend_id: id, count: 0, flags: 0, rev_nat_id: 0, affinity_timeout: 0, algorithm: 0 })));
      svc.update(slotKey(vip, 0), abi.encodeLb4Service({ backend_id: 0, count: ids.length, flags: abi.LB_SVC_FLAG_CLUSTER_IP, rev_nat_id: revNat, affinity_timeout: 0, algorithm: 0 }));
    }
    svc.update(slotKey(LOOP_VIPS[0]!, 7), abi.encodeLb4Service({ backend_id: 6, count: 0, flags: 0, rev_nat_id: 0, affinity_timeout: 0, algorithm: 0 }));
    for (const m of [svc, be, rn]) {
      m.pin(path.join(sb.bpffs, m.name));
      m.close();
    }

    const result = installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
    const v6Maps = [abi.SLUICE_MAP_SERVICES6, abi.SLUICE_MAP_BACKENDS6, abi.SLUICE_MAP_REVNAT6];
    const types = Object.fromEntries(v6Maps.map((n) => {
      const m = BpfMap.fromPinned(path.join(sb.bpffs, n));
      try { return [n, [m.type, m.keySize]]; } finally { m.close(); }
    }));
    assert.deepEqual(types, { [abi.SLUICE_MAP_SERVICES6]: [MapType.HASH, 20], [abi.SLUICE_MAP_BACKENDS6]: [MapType.ARRAY, 4], [abi.SLUICE_MAP_REVNAT6]: [MapType.ARRAY, 4] });
    assertSlotsMigrated(sb.bpffs, result.migrated, v6Maps, frontends,
      { address: 'fd00:96:2::1', port: 80, proto: 'tcp', scope: 'external', flags: abi.LB_SVC_FLAG_CLUSTER_IP, affinityTimeout: 0, backends: [{ address: BACKEND_LOOP, port: 8080, proto: 'tcp' }] });
    await sb.startBackends([BACKEND_HOLD, BACKEND_LOOP], [8080]); // both plain: each connect gets its line and ends
    for (const vip of LOOP_VIPS) {
      const loop = JSON.parse(await sb.runInCgroup(['node', labScript('lbClient'), 'loop', vip, '80', '1000'], 20000)) as { ok: number; errors: Record<string, number> };
      assert.deepEqual(loop.errors, {}, `connects through the migrated frontend [${vip}]:80`);
      assert.ok(loop.ok > 10, `${loop.ok} connects`);
    }
  } finally {
    sb.close();
  }
});

test(`upgrade from ${SLOTS6_REVISION}'s running socket programs (IPv6 slot layout, built from git) under IPv6 traffic: 0 failed connects, held connections keep their Service in getpeername`, async () => {
  const old = execFileSync(path.join(repoRoot, 'scripts', 'build-revision.sh'), [SLOTS6_REVISION], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
  const oldSluice = path.join(old, 'bin', 'sluice');
  const sb = Sandbox.create('sluice-migr6');
  try {
    sh(oldSluice, ['attach', '--cgroup', sb.cgroup, '--bpffs', sb.bpffs]);
    const upsert = (vip: string, backend: string) => sh(oldSluice, ['service', 'upsert', '--frontend', `[${vip}]:80/tcp`, '--backends', `[${backend}]:8080`, '--bpffs', sb.bpffs]);
    upsert(HOLD_VIP, BACKEND_HOLD);
    for (const vip of LOOP_VIPS) upsert(vip, BACKEND_LOOP);
    const svc6 = BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SERVICES6));
    const oldKeySize = svc6.keySize;
    svc6.close();
    assert.equal(oldKeySize, 24, `${SLOTS6_REVISION} pinned the slot layout`);
    await startBackends(sb);

    const hold = sb.runInCgroup(['node', labScript('lbClient'), 'hold', HOLD_VIP, '80', '3000', '3'], 20000);
    const loop = sb.runInCgroup(['node', labScript('lbClient'), 'loop', LOOP_VIPS[0]!, '80', '3000'], 20000);
    await new Promise((r) => setTimeout(r, 1000));
    const result = installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
    const migrated = Object.fromEntries(result.migrated.filter((m) => m.map.endsWith('6')).map((m) => [m.map, [m.why, m.carried]]));
    assert.deepEqual(migrated, {
      [abi.SLUICE_MAP_SERVICES6]: ['layout', 3],
      [abi.SLUICE_MAP_BACKENDS6]: ['layout', 2],
      [abi.SLUICE_MAP_REVNAT6]: ['layout', 3],
    });
    assert.deepEqual(result.replaced.sort(), Object.values(SOCK_LB_PROGRAMS).map((p) => p.hook).sort(), 'every socket hook swapped in place');

    const { held, ok } = await assertTrafficSurvived(hold, loop, BACKEND_HOLD, HOLD_VIP);
    assert.equal(held.length, 3);
    // New connects and this tree's CLI on the migrated maps.
    const after = JSON.parse(await sb.runInCgroup(['node', labScript('lbClient'), 'loop', LOOP_VIPS[1]!, '80', '1000'], 20000)) as { ok: number; errors: Record<string, number> };
    assert.deepEqual(after.errors, {});
    const maps = openSockLbMaps(sb.bpffs);
    try {
      const p = LbProgrammer.adopt(maps);
      assert.deepEqual(p.programmedFrontends().map((f) => f.address).sort(), [HOLD_VIP, ...LOOP_VIPS].sort());
    } finally {
      maps.close();
    }
    process.stdout.write(`# IPv6 slot -> range migration under traffic: ${held.length} held connections (${held.map((c) => c.echoed).join('/')} lines echoed), ${ok} connects during the swap, 0 failed\n`);
  } finally {
    sb.close();
  }
});
