// The slot -> range migration of the service maps (sluice_svc4 / sluice_svc6
// layout 1 -> 2, with sluice_be*/sluice_revnat* hash -> array; see
// map_migrate.test.ts and map_migrate6.test.ts) cut short by a kill, as the
// next start finds it on disk:
//   - before the fill: every changed map moved aside (<name>_migrating) and
//     the load's new maps pinned, empty (sluice_rng* too);
//   - during the load: libbpf creates and pins the maps in the object's
//     order, so only the new services map is pinned; the range array, the
//     backends and rev-NAT maps are not (theirs are still aside);
//   - after the fill (nothing left to do but the swap and the finish).
// The next start must have every frontend back with its rev-NAT id and its
// backends in order *before* it swaps the programs (connects to each Service
// work with no sync), then the agent's sync adopts them (same ids), no pin is
// left aside, the layout records say 2, and the start after migrates nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Sandbox, labScript } from '../helpers/sandbox';
import { BpfMap } from '../../src/bpf/map';
import { MapType } from '../../src/bpf/constants';
import { bpfObjectPath, installSockLb } from '../../src/datapath/sockLb';
import { MapMigration, oldPinName, readLayouts, recordLayouts } from '../../src/datapath/migrate';
import { openSockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber, ip6ToBytes } from '../../src/datapath/addr';

interface Family {
  name: string;
  svc: string;
  rng: string;
  be: string;
  revnat: string;
  vips: string[];
  backends: [string, string];
  /** Layout 1's services key: the frontend, then backend_slot u16 and pad. */
  slotKey: (vip: string, slot: number) => Buffer;
  keySize: number;
  beValue: (address: string) => Buffer;
  beValueSize: number;
  rnValue: (vip: string) => Buffer;
  rnValueSize: number;
  prefix: number;
}

const FAMILIES: Family[] = [
  {
    name: 'IPv4', svc: abi.SLUICE_MAP_SERVICES4, rng: abi.SLUICE_MAP_RANGES4, be: abi.SLUICE_MAP_BACKENDS4, revnat: abi.SLUICE_MAP_REVNAT4,
    vips: ['10.96.7.1', '10.96.7.2'], backends: ['198.18.27.2', '198.18.27.3'], prefix: 32,
    keySize: 12,
    slotKey: (vip, slot) => { const k = Buffer.alloc(12); k.writeUInt32BE(ip4ToNumber(vip), 0); k.writeUInt16BE(80, 4); k.writeUInt8(abi.LB_PROTO_TCP, 6); k.writeUInt16LE(slot, 8); return k; },
    beValue: (a) => abi.encodeLb4Backend({ address: ip4ToNumber(a), port: 8080, proto: abi.LB_PROTO_TCP, flags: 0, zone: 0 }), beValueSize: 12,
    rnValue: (vip) => abi.encodeLb4ReverseNat({ address: ip4ToNumber(vip), port: 80 }), rnValueSize: 8,
  },
  {
    name: 'IPv6', svc: abi.SLUICE_MAP_SERVICES6, rng: abi.SLUICE_MAP_RANGES6, be: abi.SLUICE_MAP_BACKENDS6, revnat: abi.SLUICE_MAP_REVNAT6,
    vips: ['fd00:96:7::1', 'fd00:96:7::2'], backends: ['fd00:18:27::2', 'fd00:18:27::3'], prefix: 128,
    keySize: 24,
    slotKey: (vip, slot) => { const k = Buffer.alloc(24); ip6ToBytes(vip).copy(k, 0); k.writeUInt16BE(80, 16); k.writeUInt8(abi.LB_PROTO_TCP, 18); k.writeUInt16LE(slot, 20); return k; },
    beValue: (a) => abi.encodeLb6Backend({ address: ip6ToBytes(a), port: 8080, proto: abi.LB_PROTO_TCP, flags: 0, zone: 0 }), beValueSize: 24,
    rnValue: (vip) => abi.encodeLb6ReverseNat({ address: ip6ToBytes(vip), port: 80 }), rnValueSize: 20,
  },
];

const u32 = (n: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(n, 0); return b; };

/** [vip index, rev-NAT id, backend ids in slot order]; backend 5 is backends[0], 6 backends[1]. */
const FRONTENDS: Array<[number, number, number[]]> = [[0, 1, [5]], [1, 2, [6, 5]]];

/**
 * The three maps as an older Sluice pinned them (layout 1, recorded). The
 * backends and rev-NAT hashes at the capacities the arrays have now: an
 * array's size is its largest id, so a layout change keeps the pinned size
 * and a smaller hash would make the start after grow the array (a capacity
 * migration of its own).
 */
function pinSlotLayout(f: Family, bpffs: string): void {
  fs.mkdirSync(bpffs, { recursive: true });
  const svc = BpfMap.create({ type: MapType.HASH, name: f.svc, keySize: f.keySize, valueSize: 20, maxEntries: 1024, flags: 1 });
  const be = BpfMap.create({ type: MapType.HASH, name: f.be, keySize: 4, valueSize: f.beValueSize, maxEntries: abi.SLUICE_MAX_BACKENDS, flags: 1 });
  const rn = BpfMap.create({ type: MapType.HASH, name: f.revnat, keySize: 4, valueSize: f.rnValueSize, maxEntries: abi.SLUICE_MAX_REVNAT, flags: 1 });
  be.update(u32(5), f.beValue(f.backends[0]));
  be.update(u32(6), f.beValue(f.backends[1]));
  for (const [vi, revNat, ids] of FRONTENDS) {
    const vip = f.vips[vi]!;
    rn.update(u32(revNat), f.rnValue(vip));
    ids.forEach((id, i) => svc.update(f.slotKey(vip, i + 1), abi.encodeLb4Service({ backend_id: id, count: 0, flags: 0, rev_nat_id: 0, affinity_timeout: 0, algorithm: 0 })));
    svc.update(f.slotKey(vip, 0), abi.encodeLb4Service({ backend_id: 0, count: ids.length, flags: abi.LB_SVC_FLAG_CLUSTER_IP, rev_nat_id: revNat, affinity_timeout: 0, algorithm: 0 }));
  }
  for (const m of [svc, be, rn]) {
    m.pin(path.join(bpffs, m.name));
    m.close();
  }
  recordLayouts(bpffs, [[f.svc, 1], [f.be, 1], [f.revnat, 1]]);
}

const KILLS = ['before the fill', 'during the load', 'after the fill'] as const;

/** The upgrade up to the kill: plan, open (pins moved aside), load (new maps pinned), fill or not; no swap, no finish. */
function killedUpgrade(f: Family, bpffs: string, killed: (typeof KILLS)[number]): void {
  const migration = MapMigration.plan(bpfObjectPath('sock_lb.bpf.o'), { bpffs });
  assert.deepEqual(migration.changes.map((c) => [c.map, c.why]).sort(), [f.svc, f.be, f.revnat].map((n) => [n, 'layout']).sort());
  const obj = migration.open();
  try {
    obj.load();
    if (killed === 'after the fill') migration.fill(obj);
  } finally {
    obj.close();
  }
  for (const n of [f.svc, f.be, f.revnat]) assert.ok(fs.existsSync(path.join(bpffs, oldPinName(n))), `${n} left aside, as a kill leaves it`);
  if (killed === 'during the load') {
    // libbpf had pinned the services map (first in the object) and no other.
    for (const n of [f.rng, f.be, f.revnat]) fs.rmSync(path.join(bpffs, n));
  }
}

function frontendsOf(f: Family, bpffs: string): { frontends: Array<[string, number, number[]]>; backends: Array<[number, string]> } {
  const maps = openSockLbMaps(bpffs);
  try {
    const p = LbProgrammer.adopt(maps);
    return {
      frontends: p.programmedFrontends().filter((x) => f.vips.includes(x.address)).map((x) => [x.address, x.revNatId, x.backendIds] as [string, number, number[]]).sort(),
      backends: p.programmedBackends().filter((b) => f.backends.includes(b.address)).map((b) => [b.id, b.address] as [number, string]).sort(),
    };
  } finally {
    maps.close();
  }
}

async function assertConnects(sb: Sandbox, f: Family, what: string): Promise<void> {
  for (const vip of f.vips) {
    const loop = JSON.parse(await sb.runInCgroup(['node', labScript('lbClient'), 'loop', vip, '80', '600'], 20000)) as { ok: number; errors: Record<string, number> };
    assert.deepEqual(loop.errors, {}, `${what}: connects to ${vip}:80`);
    assert.ok(loop.ok > 5, `${what}: ${loop.ok} connects to ${vip}:80`);
  }
}

for (const f of FAMILIES) {
  for (const killed of KILLS) {
    test(`${f.name}: the slot -> range migration of ${f.svc} killed ${killed}: the next start has every frontend and backend back before its swap, the sync adopts them, no pin aside, no stale layout record`, async () => {
      const sb = Sandbox.create('h-migslot');
      try {
        pinSlotLayout(f, sb.bpffs);
        killedUpgrade(f, sb.bpffs, killed);
        await sb.startBackends(f.backends, [8080]);

        const expected = {
          frontends: FRONTENDS.map(([vi, revNat, ids]) => [f.vips[vi]!, revNat, ids] as [string, number, number[]]).sort(),
          backends: [[5, f.backends[0]], [6, f.backends[1]]] as Array<[number, string]>,
        };

        // The next start (the socket LB; its swap puts the new programs on every hook).
        installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
        assert.deepEqual(fs.readdirSync(sb.bpffs).filter((n) => n.endsWith('_migrating')), [], 'nothing left aside');
        for (const n of [f.svc, f.be, f.revnat]) assert.equal(readLayouts(sb.bpffs).get(n), 2, `${n}: layout 2 recorded`);
        await assertConnects(sb, f, 'after the restart, before the sync');
        assert.deepEqual(frontendsOf(f, sb.bpffs), expected, 'before any sync: every frontend with its rev-NAT id and backends in slot order');

        // The agent's first sync: the same Services.
        const specs: FrontendSpec[] = FRONTENDS.map(([vi, , ids]) => ({
          address: f.vips[vi]!, port: 80, proto: 'tcp', scope: 'external', flags: abi.LB_SVC_FLAG_CLUSTER_IP, affinityTimeout: 0,
          backends: ids.map((id) => ({ address: f.backends[id - 5]!, port: 8080, proto: 'tcp' as const })),
        }));
        const maps = openSockLbMaps(sb.bpffs);
        try {
          LbProgrammer.adopt(maps).apply(specs, { prune: true });
        } finally {
          maps.close();
        }
        assert.deepEqual(frontendsOf(f, sb.bpffs), expected, 'after the sync: the same frontends, rev-NAT ids and backends (adopted, not rewritten)');
        await assertConnects(sb, f, 'after the sync');

        // The start after: nothing to migrate (no stale record, no pin aside).
        assert.deepEqual(installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup }).migrated, []);
        assert.deepEqual(frontendsOf(f, sb.bpffs), expected);
      } finally {
        sb.close();
      }
    });
  }
}
