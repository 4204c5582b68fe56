// Socket LB in the real kernel: programs attached to a throwaway child cgroup,
// backends and clients in a throwaway network namespace, real sockets.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Sandbox, sh, sluiceBin, labScript } from '../helpers/sandbox';
import { openSockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer } from '../../src/datapath/programmer';
import * as abi from '../../src/abi/generated';

const VIP = '10.96.0.10';
const BACKENDS = ['198.18.10.2', '198.18.10.3', '198.18.10.4'];

let sb: Sandbox;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

async function client(mode: 'tcp' | 'udp', address: string, port: number, count: number) {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), mode, address, String(port), String(count)]);
  return JSON.parse(out) as { results: Array<{ backend?: string; peer?: string; error?: string; ms: number }> };
}

function histogram(results: Array<{ backend?: string }>): Record<string, number> {
  const h: Record<string, number> = {};
  for (const r of results) h[r.backend ?? 'none'] = (h[r.backend ?? 'none'] ?? 0) + 1;
  return h;
}

before(async () => {
  sb = Sandbox.create();
  // Backends live on the namespace's loopback: a VIP that is not translated has no route.
  await sb.startBackends(BACKENDS, [8080, 5353]);
  sluice(['attach', '--cgroup', sb.cgroup]);
});

after(() => {
  sb?.close();
});

test('TCP connections to a VIP reach every backend, roughly uniformly; getpeername shows the VIP', async () => {
  sluice(['service', 'upsert', '--frontend', `${VIP}:80/tcp`, '--backends', BACKENDS.map((b) => `${b}:8080`).join(',')]);
  const { results } = await client('tcp', VIP, 80, 300);
  assert.deepEqual(results.filter((r) => r.error), []);
  const h = histogram(results);
  for (const b of BACKENDS) {
    // 300 draws over 3 backends: 100 expected, sd ~8; below 60 is > 5 sd off.
    assert.ok((h[`${b}:8080`] ?? 0) >= 60, `backend ${b} got ${h[`${b}:8080`] ?? 0} of 300: ${JSON.stringify(h)}`);
  }
  assert.ok(results.every((r) => r.peer === `${VIP}:80`), `getpeername must show the VIP: ${results[0]?.peer}`);
});

test('UDP request/reply through a VIP with sendto/recvfrom comes back from the VIP', async () => {
  sluice(['service', 'upsert', '--frontend', `${VIP}:53/udp`, '--backends', BACKENDS.map((b) => `${b}:5353`).join(',')]);
  const { results } = await client('udp', VIP, 53, 60);
  assert.deepEqual(results.filter((r) => r.error), []);
  assert.ok(results.every((r) => r.peer === `${VIP}:53`), `reply source must be the VIP, got ${results.map((r) => r.peer).join(',')}`);
  // One unconnected socket stays on one backend (see sock_state.test.ts).
  assert.equal(Object.keys(histogram(results)).length, 1, 'replies come from one backend');
});

test('after a backend is removed no new connection reaches it', async () => {
  sluice(['service', 'upsert', '--frontend', `${VIP}:80/tcp`, '--backends', BACKENDS.slice(0, 2).map((b) => `${b}:8080`).join(',')]);
  const { results } = await client('tcp', VIP, 80, 150);
  const h = histogram(results);
  assert.equal(h[`${BACKENDS[2]}:8080`], undefined, `removed backend still reached: ${JSON.stringify(h)}`);
  assert.equal((h[`${BACKENDS[0]}:8080`] ?? 0) + (h[`${BACKENDS[1]}:8080`] ?? 0), 150);
});

test('a frontend with zero backends refuses connect() at once with ECONNREFUSED', async () => {
  sluice(['service', 'upsert', '--frontend', `${VIP}:81/tcp`, '--backends', '']);
  const { results } = await client('tcp', VIP, 81, 5);
  for (const r of results) {
    assert.equal(r.error, 'ECONNREFUSED');
    assert.ok(r.ms < 200, `refusal took ${r.ms} ms`);
  }
});

test('a frontend flagged DROP_NO_BACKEND (Local policy, endpoints elsewhere) fails at once with EHOSTUNREACH, not ECONNREFUSED', async () => {
  const maps = openSockLbMaps(sb.bpffs);
  try {
    const flags = abi.LB_SVC_FLAG_CLUSTER_IP | abi.LB_SVC_FLAG_INT_LOCAL | abi.LB_SVC_FLAG_DROP_NO_BACKEND;
    const result = LbProgrammer.adopt(maps).apply([
      { address: VIP, port: 82, proto: 'tcp', scope: 'external', flags, affinityTimeout: 0, backends: [] },
      { address: VIP, port: 82, proto: 'udp', scope: 'external', flags, affinityTimeout: 0, backends: [] },
    ], { prune: false });
    assert.deepEqual(result.failures, []);
  } finally {
    maps.close();
  }
  for (const proto of ['tcp', 'udp'] as const) {
    const { results } = await client(proto, VIP, 82, 3);
    for (const r of results) {
      assert.equal(r.error, 'EHOSTUNREACH', `${proto}: ${JSON.stringify(r)}`);
      assert.ok(r.ms < 200, `${proto}: failing took ${r.ms} ms`);
    }
  }
});

test('a destination that is not a Service passes untouched', async () => {
  const { results } = await client('tcp', BACKENDS[2]!, 8080, 5);
  for (const r of results) {
    assert.equal(r.backend, `${BACKENDS[2]}:8080`);
    assert.equal(r.peer, `${BACKENDS[2]}:8080`);
  }
  // A VIP-range address that is not a frontend has no route: the packet goes nowhere.
  const { results: none } = await client('tcp', '10.96.0.99', 80, 1);
  assert.ok(none[0]?.error, 'an unknown VIP must not be reachable');
});

test('service delete removes the frontend; CLI lists what the maps hold', async () => {
  const listed = JSON.parse(sluice(['services', '-o', 'json'])) as Array<{ frontend: string; backends: Array<{ address: string }> }>;
  const tcp = listed.find((s) => s.frontend === `${VIP}:80/tcp`);
  assert.deepEqual(tcp?.backends.map((b) => b.address).sort(), BACKENDS.slice(0, 2));
  sluice(['service', 'delete', '--frontend', `${VIP}:80/tcp`]);
  const after = JSON.parse(sluice(['services', '-o', 'json'])) as Array<{ frontend: string }>;
  assert.equal(after.find((s) => s.frontend === `${VIP}:80/tcp`), undefined);
  const { results } = await client('tcp', VIP, 80, 1);
  assert.ok(results[0]?.error, 'deleted VIP must not be translated any more');
});

test('bpftool prints the pinned services map with named fields, and the master\'s range names its backend', () => {
  sluice(['service', 'upsert', '--frontend', `${VIP}:80/tcp`, '--backends', `${BACKENDS[0]}:8080`]);
  const dump = sh('bpftool', ['map', 'dump', 'pinned', path.join(sb.bpffs, 'sluice_svc4')]);
  for (const field of ['"address"', '"port"', '"scope"', '"backend_id"', '"count"', '"rev_nat_id"']) {
    assert.ok(dump.includes(field), `bpftool output lacks ${field}:\n${dump.slice(0, 400)}`);
  }
  assert.ok(!dump.includes('"backend_slot"'), 'the IPv4 services map is keyed without a slot');
  // The master's backend_id is the first index of its range; that entry of
  // sluice_rng4 is the backend's id in sluice_be4.
  const entries = JSON.parse(sh('bpftool', ['-j', 'map', 'dump', 'pinned', path.join(sb.bpffs, 'sluice_svc4')])) as Array<{ formatted: { key: { address: number; port: number }; value: { backend_id: number; count: number } } }>;
  const master = entries.find((e) => e.formatted.value.count === 1)!.formatted.value; // the one frontend upserted here (bpftool prints __be16 ports as host numbers)
  const range = JSON.parse(sh('bpftool', ['-j', 'map', 'lookup', 'pinned', path.join(sb.bpffs, 'sluice_rng4'), 'key', ...u32Bytes(master.backend_id)])) as { formatted: { value: number } };
  const backend = JSON.parse(sh('bpftool', ['-j', 'map', 'lookup', 'pinned', path.join(sb.bpffs, 'sluice_be4'), 'key', ...u32Bytes(range.formatted.value)])) as { formatted: { value: { port: number } } };
  assert.equal(backend.formatted.value.port, ((8080 & 255) << 8) | (8080 >> 8), "port 8080 (network order, printed as a host number)");
});

const u32Bytes = (n: number) => [n & 255, (n >>> 8) & 255, (n >>> 16) & 255, n >>> 24].map(String);

test('attach again swaps programs in place and keeps serving; detach stops translation', async () => {
  const before = JSON.parse(sluice(['status', '-o', 'json'])) as { attachments: Array<{ linkId: number; programId: number }> };
  const out = sluice(['attach', '--cgroup', sb.cgroup]);
  assert.match(out, /replaced in place: connect4, sendmsg4, recvmsg4, getpeername4, post_bind4/);
  const after = JSON.parse(sluice(['status', '-o', 'json'])) as { attachments: Array<{ linkId: number; programId: number; attached: boolean }> };
  assert.deepEqual(after.attachments.map((a) => a.linkId), before.attachments.map((a) => a.linkId), 'same links');
  assert.notDeepEqual(after.attachments.map((a) => a.programId), before.attachments.map((a) => a.programId), 'new programs');
  const { results } = await client('tcp', VIP, 80, 10);
  assert.ok(results.every((r) => r.backend === `${BACKENDS[0]}:8080`));
  sluice(['detach']);
  const { results: detached } = await client('tcp', VIP, 80, 1);
  assert.ok(detached[0]?.error, 'after detach the VIP is not translated');
  const attachedCgroup = sh('bpftool', ['cgroup', 'show', sb.cgroup]);
  assert.doesNotMatch(attachedCgroup, /sluice_/);
});

