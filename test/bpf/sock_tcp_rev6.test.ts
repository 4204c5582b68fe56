// An IPv6 TCP socket's reverse pair in its slot of sluice_sk_pair6 (issue 12:
// connect6 no longer creates socket storage for TCP), else in the socket's
// storage (sluice_sock6) when another live socket holds the slot: where the
// pair lives, that a held slot still shows the frontend, and the race test of
// sock_tcp_rev.test.ts for IPv6 (two Services on one backend, parallel
// clients, bogus sockets taking and leaving slots: no socket ever shows the
// other frontend). Throwaway cgroup + netns, real AF_INET6 sockets.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Sandbox, sh, sluiceBin, waitFor } from '../helpers/sandbox';
import { holdConnection as hold, raceSlots, fillSlotArray } from '../helpers/tcpRev';
import { BpfMap } from '../../src/bpf/map';
import { TypedMap, u32Codec } from '../../src/datapath/typedMap';
import { openSockLbMaps, readCounter } from '../../src/datapath/maps';
import { StaleSocketTerminator } from '../../src/datapath/sockTerm';
import { ip6ToBytes } from '../../src/datapath/addr';
import * as abi from '../../src/abi/generated';

const VIP = 'fd00:96::50';
const VIP2 = 'fd00:96::51';
const BACKEND = 'fd00:18:16::2';
const BOGUS_COOKIE = 1n << 60n;

let sb: Sandbox;
let flagDir: string;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

function slots(): TypedMap<number, abi.Lb6SockSlot> {
  return new TypedMap(BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_SLOT6)), u32Codec, abi.lb6_sock_slotCodec);
}

const slotOf = (cookie: bigint): number => Number(cookie % BigInt(abi.SLUICE_SOCK_SLOTS6));

function slotHeld(): bigint {
  const maps = openSockLbMaps(sb.bpffs);
  try {
    return readCounter(maps.counters, abi.LB_CNT_SOCK6_SLOT_HELD);
  } finally {
    maps.close();
  }
}

/** A TCP connection through the VIP held open until release(). */
const holdConnection = (address = VIP, port = '80') => hold(sb, flagDir, address, port);

/** A slot value naming VIP2:81 on BACKEND for a bogus socket (cookie 0n: free). */
function bogusSlot(cookie: bigint, revNatId: number): Buffer {
  return abi.encodeLb6SockSlot({
    lock: { val: 0 }, rev_nat_id: revNatId, cookie, backend_address: ip6ToBytes(BACKEND), backend_port: 8080,
    frontend_address: ip6ToBytes(VIP2), frontend_port: 81,
  });
}

/** Every slot held by a bogus socket (cookies far above any real one); cookieBase 0n: every slot free again. */
function fillSlots(cookieBase: bigint, revNatId = 1): void {
  fillSlotArray(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_SLOT6), abi.LB6_SOCK_SLOT_SIZE, (i) => bogusSlot(cookieBase ? cookieBase + BigInt(i) : 0n, revNatId));
}

before(async () => {
  sb = Sandbox.create('sluice-sock6-tcprev');
  flagDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-sock6-tcprev-'));
  await sb.startBackends([BACKEND], [8080]);
  sluice(['attach', '--cgroup', sb.cgroup]);
  sluice(['service', 'upsert', '--frontend', `[${VIP}]:80/tcp`, '--backends', `[${BACKEND}]:8080`]);
});

after(() => {
  sb?.close();
  if (flagDir) fs.rmSync(flagDir, { recursive: true, force: true });
});

test('an IPv6 TCP connect writes its one pair into its slot of sluice_sk_pair6 (cookie modulo the slots), not into socket storage; closing frees the slot', async () => {
  const heldBefore = slotHeld();
  const conn = await holdConnection();
  const m = slots();
  try {
    assert.equal(conn.peer, `[${VIP}]:80`);
    const slot = m.get(slotOf(conn.cookie));
    assert.ok(slot, `no slot ${slotOf(conn.cookie)}`);
    assert.equal(slot.cookie, conn.cookie);
    assert.deepEqual(slot.backend_address, ip6ToBytes(BACKEND));
    assert.equal(slot.backend_port, 8080);
    assert.deepEqual(slot.frontend_address, ip6ToBytes(VIP));
    assert.equal(slot.frontend_port, 80);
    assert.notEqual(slot.rev_nat_id, 0);
    assert.equal(slotHeld(), heldBefore, 'the slot was free: no pair went to storage');
    // sock_release frees the slot.
    const after = await conn.release();
    assert.equal(after.peerAfter, `[${VIP}]:80`);
    assert.ok(after.greeting.includes(BACKEND), `greeting ${after.greeting}`);
    await waitFor('the slot freed at sock_release', () => m.get(slotOf(conn.cookie))?.cookie === 0n);
  } finally {
    m.map.close();
  }
});

test('every slot held by another socket: the connect\'s pair goes to its socket storage (counted), getpeername still shows the VIP, the stale-socket destroy still knows it', async () => {
  fillSlots(BOGUS_COOKIE);
  try {
    const heldBefore = slotHeld();
    const conn = await holdConnection();
    assert.equal(conn.peer, `[${VIP}]:80`, 'the pair in storage: getpeername shows the VIP');
    assert.equal(slotHeld(), heldBefore + 1n);
    const t = StaleSocketTerminator.load({ bpffs: sb.bpffs, tcp: true, netns: [`/run/netns/${sb.netns}`] });
    try {
      const report = t.terminate([{ address: BACKEND, port: 8080, proto: 'tcp' }]);
      assert.deepEqual(report.destroyed.map((d) => d.backend), [`[${BACKEND}]:8080/tcp`]);
    } finally {
      t.close();
    }
    assert.equal((await conn.release()).peerAfter, 'ENOTCONN');
  } finally {
    fillSlots(0n);
  }
});

test('a connection in its slot is known to the stale-socket destroy; once its slot is lost it shows the backend and is left alone', async () => {
  const conn = await holdConnection();
  const m = slots();
  const t = StaleSocketTerminator.load({ bpffs: sb.bpffs, tcp: true, netns: [`/run/netns/${sb.netns}`] });
  try {
    const slot = m.get(slotOf(conn.cookie))!;
    assert.equal(slot.cookie, conn.cookie);
    m.set(slotOf(conn.cookie), { ...slot, cookie: 0n });
    assert.deepEqual(t.terminate([{ address: BACKEND, port: 8080, proto: 'tcp' }]).destroyed, [], 'no pair: not destroyed');
  } finally {
    m.map.close();
  }
  assert.equal((await conn.release()).peerAfter, `[${BACKEND}]:8080`);
  const next = await holdConnection();
  try {
    assert.equal(next.peer, `[${VIP}]:80`);
    assert.deepEqual(t.terminate([{ address: BACKEND, port: 8080, proto: 'tcp' }]).destroyed.map((d) => d.backend), [`[${BACKEND}]:8080/tcp`]);
  } finally {
    t.close();
    await next.release();
  }
});

test('two IPv6 Services on one backend, TCP clients of both in parallel while bogus sockets (pairs naming the second Service) take and leave slots: no socket ever shows the other frontend', async () => {
  sluice(['service', 'upsert', '--frontend', `[${VIP2}]:81/tcp`, '--backends', `[${BACKEND}]:8080`]);
  // VIP2's rev-NAT id, from a connection's slot: the bogus pairs below name
  // VIP2 validly, so only the cookie check keeps VIP's clients from them.
  const probe = await holdConnection(VIP2, '81');
  const probeSlots = slots();
  const vip2RevNat = probeSlots.get(slotOf(probe.cookie))!.rev_nat_id;
  probeSlots.map.close();
  await probe.release();
  const m = BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_SLOT6));
  const heldBefore = slotHeld();
  try {
    await raceSlots(sb, m, abi.SLUICE_SOCK_SLOTS6, [[VIP, '80', `[${VIP}]:80`], [VIP2, '81', `[${VIP2}]:81`]],
      bogusSlot(BOGUS_COOKIE, vip2RevNat), bogusSlot(0n, 0), BOGUS_COOKIE, `[${BACKEND}]:8080`);
    console.log(`pairs sent to storage (slot held): ${slotHeld() - heldBefore}`);
    assert.ok(slotHeld() > heldBefore, 'some connects met a bogus slot (the race was exercised)');
  } finally {
    m.close();
    fillSlots(0n);
    sluice(['service', 'delete', '--frontend', `[${VIP2}]:81/tcp`]);
  }
});
