// IPv6 and dual-stack socket LB in the real kernel (issue 14): connect6,
// sendmsg6, recvmsg6 and getpeername6 attached to a throwaway cgroup, backends
// on the loopback of a throwaway namespace (fd00::/8 only), real AF_INET6
// sockets, including dual-stack ones reaching an IPv4 Service through
// ::ffff:a.b.c.d.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, sh, sluiceBin, labScript } from '../helpers/sandbox';
import { openSockLbMaps, readCounter } from '../../src/datapath/maps';
import { LbProgrammer, service6KeyOf } from '../../src/datapath/programmer';
import * as abi from '../../src/abi/generated';
import { ip6ToBytes } from '../../src/datapath/addr';

const VIP6 = 'fd00:96::10';
const BACKENDS6 = ['fd00:18::2', 'fd00:18::3', 'fd00:18::4'];
const VIP4 = '10.96.0.10';
const BACKENDS4 = ['198.18.10.2', '198.18.10.3'];

let sb: Sandbox;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

type Result = { backend?: string; peer?: string; connectedPeer?: string; error?: string; ms: number };

async function client(mode: 'tcp' | 'udp' | 'udpc', address: string, port: number, count: number): Promise<Result[]> {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), mode, address, String(port), String(count)]);
  return (JSON.parse(out) as { results: Result[] }).results;
}

const hp = (a: string, p: number) => (a.includes(':') ? `[${a}]:${p}` : `${a}:${p}`);
const backendsFlag = (addresses: string[], port: number) => addresses.map((a) => hp(a, port)).join(',');

function counter(index: number): bigint {
  const maps = openSockLbMaps(sb.bpffs);
  try {
    return readCounter(maps.counters, index);
  } finally {
    maps.close();
  }
}

before(async () => {
  sb = Sandbox.create('sluice-v6');
  await sb.startBackends([...BACKENDS6, ...BACKENDS4], [8080, 5353]);
  sluice(['attach', '--cgroup', sb.cgroup]);
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:80/tcp`, '--backends', backendsFlag(BACKENDS6, 8080)]);
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:53/udp`, '--backends', backendsFlag(BACKENDS6, 5353)]);
  sluice(['service', 'upsert', '--frontend', `${VIP4}:80/tcp`, '--backends', backendsFlag(BACKENDS4, 8080)]);
  sluice(['service', 'upsert', '--frontend', `${VIP4}:53/udp`, '--backends', backendsFlag(BACKENDS4, 5353)]);
});

after(() => {
  sb?.close();
});

test('IPv6 client -> IPv6 Service over TCP: every backend reached, getpeername shows the Service', async () => {
  const results = await client('tcp', VIP6, 80, 90);
  assert.deepEqual(results.filter((r) => r.error), []);
  const seen = new Set(results.map((r) => r.backend));
  assert.deepEqual([...seen].sort(), BACKENDS6.map((b) => `${b}:8080`).sort(), 'all three IPv6 backends answer');
  assert.ok(results.every((r) => r.peer === `${VIP6}:80`), `getpeername must show the VIP: ${results[0]?.peer}`);
});

test('IPv6 UDP, unconnected: replies come from the Service address, one socket stays on one backend', async () => {
  const results = await client('udp', VIP6, 53, 20);
  assert.deepEqual(results.filter((r) => r.error), []);
  assert.ok(results.every((r) => r.peer === `${VIP6}:53`), `recvfrom must show the VIP: ${results.map((r) => r.peer).join(',')}`);
  assert.equal(new Set(results.map((r) => r.backend)).size, 1, 'one unconnected socket, one backend');
  assert.ok(BACKENDS6.map((b) => `${b}:5353`).includes(results[0]!.backend!));
});

test('IPv6 UDP, connected: getpeername and recvmsg both show the Service address', async () => {
  const results = await client('udpc', VIP6, 53, 5);
  assert.deepEqual(results.filter((r) => r.error), []);
  for (const r of results) {
    assert.equal(r.connectedPeer, `${VIP6}:53`);
    assert.equal(r.peer, `${VIP6}:53`);
  }
});

test('a dual-stack AF_INET6 socket reaches an IPv4 Service through ::ffff:a.b.c.d (TCP), balanced by the IPv4 table', async () => {
  const mapped = `::ffff:${VIP4}`;
  const before4 = counter(abi.LB_CNT_SOCK6_V4MAPPED);
  const results = await client('tcp', mapped, 80, 40);
  assert.deepEqual(results.filter((r) => r.error), []);
  assert.deepEqual([...new Set(results.map((r) => r.backend))].sort(), BACKENDS4.map((b) => `${b}:8080`).sort());
  assert.ok(results.every((r) => r.peer === `${mapped}:80`), `getpeername6 must show the mapped VIP: ${results[0]?.peer}`);
  // connect6 and getpeername6 each count once per connection.
  assert.ok(counter(abi.LB_CNT_SOCK6_V4MAPPED) - before4 >= 80n, 'ipv4_mapped counter');
});

test('a dual-stack AF_INET6 socket reaches an IPv4 Service over UDP, unconnected and connected; replies show the mapped VIP', async () => {
  const mapped = `::ffff:${VIP4}`;
  const unconnected = await client('udp', mapped, 53, 10);
  assert.deepEqual(unconnected.filter((r) => r.error), []);
  assert.ok(unconnected.every((r) => r.peer === `${mapped}:53`), `recvfrom: ${unconnected.map((r) => r.peer).join(',')}`);
  assert.equal(new Set(unconnected.map((r) => r.backend)).size, 1, 'sticky per socket');
  const connected = await client('udpc', mapped, 53, 5);
  assert.deepEqual(connected.filter((r) => r.error), []);
  for (const r of connected) {
    assert.equal(r.connectedPeer, `${mapped}:53`);
    assert.equal(r.peer, `${mapped}:53`);
    assert.ok(BACKENDS4.map((b) => `${b}:5353`).includes(r.backend!));
  }
});

test('no backends: IPv6 and IPv4-mapped connect() fail at once with ECONNREFUSED', async () => {
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:81/tcp`, '--backends', '']);
  sluice(['service', 'upsert', '--frontend', `${VIP4}:81/tcp`, '--backends', '']);
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:54/udp`, '--backends', '']);
  for (const [mode, address, port] of [['tcp', VIP6, 81], ['tcp', `::ffff:${VIP4}`, 81], ['udp', VIP6, 54], ['udpc', VIP6, 54]] as const) {
    const results = await client(mode, address, port, 2);
    for (const r of results) {
      assert.equal(r.error, 'ECONNREFUSED', `${mode} ${address}: ${JSON.stringify(r)}`);
      assert.ok(r.ms < 200, `${mode} ${address}: refusal took ${r.ms} ms`);
    }
  }
});

test('non-Service IPv6 traffic passes untouched; an unknown IPv6 VIP stays unreachable', async () => {
  const direct = await client('tcp', BACKENDS6[2]!, 8080, 3);
  for (const r of direct) {
    assert.equal(r.backend, `${BACKENDS6[2]}:8080`);
    assert.equal(r.peer, `${BACKENDS6[2]}:8080`);
  }
  const udp = await client('udp', BACKENDS6[1]!, 5353, 2);
  for (const r of udp) assert.equal(r.peer, `${BACKENDS6[1]}:5353`);
  const none = await client('tcp', 'fd00:96::99', 80, 1);
  assert.ok(none[0]?.error, `an unknown IPv6 VIP must not be reachable: ${JSON.stringify(none[0])}`);
});

test('CLI: services and backends list both families (table and -o json); delete removes an IPv6 frontend', async () => {
  const listed = JSON.parse(sluice(['services', '-o', 'json'])) as Array<{ frontend: string; family: string; backends: Array<{ address: string }> }>;
  const v6 = listed.find((s) => s.frontend === `[${VIP6}]:80/tcp`);
  assert.equal(v6?.family, 'IPv6');
  assert.deepEqual(v6?.backends.map((b) => b.address).sort(), [...BACKENDS6].sort());
  assert.equal(listed.find((s) => s.frontend === `${VIP4}:80/tcp`)?.family, 'IPv4');
  const table = sluice(['services']);
  assert.match(table, /\[fd00:96::10\]:80\/tcp .*\[fd00:18::2\]:8080/);
  const backends = JSON.parse(sluice(['backends', '-o', 'json'])) as Array<{ family: string; address: string }>;
  assert.deepEqual(new Set(backends.map((b) => b.family)), new Set(['IPv4', 'IPv6']));
  assert.match(sluice(['backends']), /\[fd00:18::3\]:8080\/tcp/);
  sluice(['service', 'delete', '--frontend', `[${VIP6}]:80/tcp`]);
  const after = JSON.parse(sluice(['services', '-o', 'json'])) as Array<{ frontend: string }>;
  assert.equal(after.find((s) => s.frontend === `[${VIP6}]:80/tcp`), undefined);
  const results = await client('tcp', VIP6, 80, 1);
  assert.ok(results[0]?.error, 'a deleted IPv6 VIP must not be translated any more');
});

test('ClientIP affinity on an IPv6 frontend: every connection of one client (netns) reaches one backend', async () => {
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:83/tcp`, '--backends', backendsFlag(BACKENDS6, 8080), '--affinity-timeout', '60']);
  const results = await client('tcp', VIP6, 83, 20);
  assert.deepEqual(results.filter((r) => r.error), []);
  assert.equal(new Set(results.map((r) => r.backend)).size, 1, JSON.stringify(results.map((r) => r.backend)));
  const maps = openSockLbMaps(sb.bpffs);
  try {
    const entries = [...maps.v6!.affinity.entries()];
    assert.equal(entries.length, 1, 'one affinity entry (netns cookie, rev-NAT id) in sluice_affin6');
    assert.equal(entries[0]![0].netns_cookie, 1);
  } finally {
    maps.close();
  }
});

test('a restarted programmer adopts IPv6 frontends from the pins (master and range); rev-NAT ids are one pool for both families; a stray IPv6 rev-NAT entry is repaired', () => {
  const maps = openSockLbMaps(sb.bpffs);
  try {
    const adopted = LbProgrammer.adopt(maps);
    const udp6 = adopted.frontend(`[${VIP6}]:53/udp`);
    assert.equal(udp6?.backendIds.length, 3);
    assert.deepEqual(udp6!.backendIds.map((id) => adopted.backendById(id)?.address).sort(), [...BACKENDS6].sort());
    const revNats = adopted.programmedFrontends().map((f) => f.revNatId);
    const udp4 = adopted.frontend(`${VIP4}:53/udp`);
    assert.notEqual(udp4?.revNatId, udp6.revNatId);
    assert.equal(new Set(revNats).size, new Set(adopted.programmedFrontends().map((f) => `${f.address}|${f.port}|${f.proto}`)).size, "one rev-NAT id per frontend address:port/proto, unique across both families");
    assert.equal(maps.v6!.services.get(service6KeyOf(udp6))?.backend_id, udp6.rangeStart, 'the master names its range');
    // A crash left a rev-NAT entry no master names: adoptAndRepair removes it, nothing else.
    const strayId = 4000;
    maps.v6!.revNat.set(strayId, { address: ip6ToBytes('fd00:96::99'), port: 9 });
    const { programmer, repaired } = LbProgrammer.adoptAndRepair(maps);
    assert.equal(repaired.revNats, 1);
    assert.equal(maps.v6!.revNat.get(strayId), undefined);
    assert.deepEqual(programmer.frontend(`[${VIP6}]:53/udp`)?.backendIds, udp6.backendIds);
  } finally {
    maps.close();
  }
});

test('round-robin and source-hash on IPv6 frontends use the shared per-rev-NAT machinery', async () => {
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:84/tcp`, '--backends', backendsFlag(BACKENDS6, 8080), '--algorithm', 'round-robin']);
  const rr = await client('tcp', VIP6, 84, 30);
  assert.deepEqual(rr.filter((r) => r.error), []);
  const counts: Record<string, number> = {};
  for (const r of rr) counts[r.backend!] = (counts[r.backend!] ?? 0) + 1;
  assert.deepEqual(Object.values(counts), [10, 10, 10], `round-robin: ${JSON.stringify(counts)}`);
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:85/tcp`, '--backends', backendsFlag(BACKENDS6, 8080), '--algorithm', 'source-hash']);
  const sh6 = await client('tcp', VIP6, 85, 15);
  assert.deepEqual(sh6.filter((r) => r.error), []);
  assert.equal(new Set(sh6.map((r) => r.backend)).size, 1, 'one client (netns): one backend');
});
