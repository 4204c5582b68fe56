// Loading xdp_lb again over its own pins (an agent restart, a second
// attachMain) reuses every pinned map: the redirect targets (sluice_xdp_tx, a
// DEVMAP_HASH) survive. The kernel reports a devmap's map_flags with
// BPF_F_RDONLY_PROG added (kernel/bpf/devmap.c: programs may only read a
// devmap), which the object never declares; that flag alone is no layout
// change, while any other difference still is.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { BpfMap } from '../../src/bpf/map';
import { MapFlags, MapType } from '../../src/bpf/constants';
import * as abi from '../../src/abi/generated';
import { MapMigration, type MigratedMap } from '../../src/datapath/migrate';
import { loadXdpObject, openXdpMaps } from '../../src/datapath/xdp/xdp';
import { ensureBpffsDir } from '../../src/bpf';
import { TcHarness } from './tc_harness';
import { XDP_OBJECT, xdpAttachInNetns } from './xdp_harness';

function mapId(bpffs: string, name: string): number {
  const m = BpfMap.fromPinned(path.join(bpffs, name));
  try {
    return m.id;
  } finally {
    m.close();
  }
}

function targets(bpffs: string): number[] {
  const maps = openXdpMaps(bpffs);
  try {
    return [...maps.targets.entries()].map(([k]) => k).sort((a, b) => a - b);
  } finally {
    maps.close();
  }
}

test('a second load and attach of xdp_lb keeps sluice_xdp_tx (same map, same redirect targets): no migration is planned', () => {
  const tc = TcHarness.create('sluice-xdpreload');
  const netns = `slxr-${randomBytes(3).toString('hex')}`;
  try {
    execFileSync('ip', ['netns', 'add', netns]);
    const ip = (...args: string[]) => execFileSync('ip', ['-n', netns, ...args]);
    ip('link', 'add', 'xa0', 'type', 'veth', 'peer', 'name', 'xb0');
    ip('link', 'set', 'xa0', 'up');
    ip('link', 'set', 'xb0', 'up');
    const first = xdpAttachInNetns(`/run/netns/${netns}`, tc.pinDir, ['xa0', 'xb0'], ['--mode', 'generic']);
    assert.equal(first.status, 0, first.stderr);
    const listed = targets(tc.pinDir);
    assert.equal(listed.length, 2, 'both devices are redirect targets');
    const id = mapId(tc.pinDir, abi.SLUICE_MAP_XDP_TX);

    const plan = MapMigration.plan(XDP_OBJECT, { bpffs: tc.pinDir });
    assert.deepEqual(plan.changes.map((c) => `${c.map} (${c.why}: flags 0x${c.from.flags.toString(16)} -> 0x${c.to.flags.toString(16)})`), [], 'nothing to migrate');

    const migrated: MigratedMap[] = [];
    loadXdpObject(XDP_OBJECT, tc.pinDir, { onMigrated: (m) => migrated.push(...m) }).close();
    assert.deepEqual(migrated.map((m) => m.map), [], 'the agent would log no "XDP maps migrated"');

    const second = xdpAttachInNetns(`/run/netns/${netns}`, tc.pinDir, ['xa0'], ['--mode', 'generic']);
    assert.equal(second.status, 0, second.stderr);
    assert.deepEqual(targets(tc.pinDir), listed, 'the other device is still a redirect target');
    assert.equal(mapId(tc.pinDir, abi.SLUICE_MAP_XDP_TX), id, 'the same map, reused');
  } finally {
    spawnSync('ip', ['netns', 'del', netns]);
    tc.close();
  }
});

test('a pinned devmap that really differs (flags other than BPF_F_RDONLY_PROG, value size), or BPF_F_RDONLY_PROG on another map type, is still a layout change', () => {
  const dir = ensureBpffsDir(`/sys/fs/bpf/sluice-xdpflags-${randomBytes(4).toString('hex')}`);
  const pin = (name: string, m: BpfMap) => {
    try {
      m.pin(path.join(dir, name));
    } finally {
      m.close();
    }
  };
  const planned = () => MapMigration.plan(XDP_OBJECT, { bpffs: dir }).changes.map((c) => `${c.map}:${c.why}`).sort();
  const clear = () => { for (const f of fs.readdirSync(dir)) fs.rmSync(path.join(dir, f), { force: true }); };
  try {
    const devmap = (valueSize: number, flags: number) => BpfMap.create({ type: MapType.DEVMAP_HASH, name: 'sluice_xdp_tx', keySize: 4, valueSize, maxEntries: abi.SLUICE_MAX_XDP_DEVS, flags });
    // As the object declares it: the kernel adds BPF_F_RDONLY_PROG, nothing else.
    pin(abi.SLUICE_MAP_XDP_TX, devmap(4, 0));
    assert.deepEqual(planned(), []);
    clear();
    // A devmap created on a NUMA node: reported 0x84, declared 0.
    pin(abi.SLUICE_MAP_XDP_TX, devmap(4, MapFlags.NUMA_NODE));
    assert.deepEqual(planned(), [`${abi.SLUICE_MAP_XDP_TX}:layout`]);
    clear();
    // struct bpf_devmap_val (ifindex + program fd): another value layout.
    pin(abi.SLUICE_MAP_XDP_TX, devmap(8, 0));
    assert.deepEqual(planned(), [`${abi.SLUICE_MAP_XDP_TX}:layout`]);
    clear();
    // A hash map declared without BPF_F_RDONLY_PROG: the flag is a change there.
    pin(abi.SLUICE_MAP_XDP_FE4, BpfMap.create({ type: MapType.HASH, name: 'sluice_xdp_fe4', keySize: 4, valueSize: 1, maxEntries: abi.SLUICE_MAX_XDP_FE4, flags: MapFlags.NO_PREALLOC | MapFlags.RDONLY_PROG }));
    assert.deepEqual(planned(), [`${abi.SLUICE_MAP_XDP_FE4}:layout`]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
