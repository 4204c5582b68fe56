// TCP's reverse pair in its slot of sluice_sk_pair4, else in the LRU
// sluice_sk_tcp4 (issue 10: socket storage is created for UDP only, so a TCP
// connect pays no allocation; issue 12: a slot costs no hashing): where the
// pair lives, and what a user sees when a live connection's pair is lost
// (getpeername shows the backend, the stale-socket destroy leaves that
// socket alone; the connection itself keeps working). Throwaway cgroup +
// netns, real sockets.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Sandbox, sh, sluiceBin, waitFor } from '../helpers/sandbox';
import { rawSock as rawSockIn, holdConnection as hold, raceSlots, fillSlotArray } from '../helpers/tcpRev';
import { BpfMap } from '../../src/bpf/map';
import { TypedMap, u32Codec } from '../../src/datapath/typedMap';
import { StaleSocketTerminator } from '../../src/datapath/sockTerm';
import { ip4ToNumber } from '../../src/datapath/addr';
import * as abi from '../../src/abi/generated';

const VIP = '10.96.0.50';
const VIP2 = '10.96.0.51';
const BACKEND = '198.18.16.2';

let sb: Sandbox;
let flagDir: string;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

function tcpPairs(): TypedMap<abi.Lb4SockTcpKey, abi.Lb4SockTcp> {
  return new TypedMap(BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_TCP4)), abi.lb4_sock_tcp_keyCodec, abi.lb4_sock_tcpCodec);
}

function tcpSlots(): TypedMap<number, abi.Lb4SockSlot> {
  return new TypedMap(BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_SLOT4)), u32Codec, abi.lb4_sock_slotCodec);
}

const slotOf = (cookie: bigint): number => Number(cookie % BigInt(abi.SLUICE_SOCK_SLOTS4));

const rawSock = (args: string[], timeoutMs?: number) => rawSockIn(sb, args, timeoutMs);
/** A TCP connection through the VIP held open until release(); legacy: its pair moved to socket storage first. */
const holdConnection = (legacy = false, address = VIP, port = '80') =>
  hold(sb, flagDir, address, port, legacy ? [sb.bpffs, `${BACKEND}:8080`] : []);

before(async () => {
  sb = Sandbox.create('sluice-sock2-tcprev');
  flagDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-sock2-tcprev-'));
  await sb.startBackends([BACKEND], [8080]);
  sluice(['attach', '--cgroup', sb.cgroup]);
  sluice(['service', 'upsert', '--frontend', `${VIP}:80/tcp`, '--backends', `${BACKEND}:8080`]);
});

after(() => {
  sb?.close();
  if (flagDir) fs.rmSync(flagDir, { recursive: true, force: true });
});

test('a TCP connect writes its one pair into its slot of sluice_sk_pair4 (cookie modulo the slots), not into the LRU; closing frees the slot', async () => {
  const conn = await holdConnection();
  const slots = tcpSlots();
  const m = tcpPairs();
  try {
    assert.equal(conn.peer, `${VIP}:80`);
    const slot = slots.get(slotOf(conn.cookie));
    assert.ok(slot, `no slot ${slotOf(conn.cookie)}`);
    assert.equal(slot.cookie, conn.cookie);
    assert.equal(slot.backend_address, ip4ToNumber(BACKEND));
    assert.equal(slot.backend_port, 8080);
    assert.equal(slot.frontend_address, ip4ToNumber(VIP));
    assert.equal(slot.frontend_port, 80);
    assert.notEqual(slot.rev_nat_id, 0);
    assert.equal(m.get({ cookie: conn.cookie, backend_address: ip4ToNumber(BACKEND), backend_port: 8080 }), undefined, 'no LRU pair');
    // Closing the socket (sock_release) frees its slot: nothing is left
    // behind once every socket is gone.
    await conn.release();
    await waitFor('the slot freed at sock_release', () => slots.get(slotOf(conn.cookie))?.cookie === 0n);
  } finally {
    slots.map.close();
    m.map.close();
  }
  assert.deepEqual(await conn.release(), { peerAfter: `${VIP}:80`, greeting: `${BACKEND}:8080 ${BACKEND}` });
});

test('a slot held by another live socket: the connect\'s pair goes to the LRU (under its cookie and the backend), both sockets show their own frontend, closing deletes it', async () => {
  // A second Service on the same backend: a pair read from the wrong place would show it.
  sluice(['service', 'upsert', '--frontend', `${VIP2}:81/tcp`, '--backends', `${BACKEND}:8080`]);
  try {
    const r = await rawSock(['alias', VIP, '80', VIP2, '81', String(abi.SLUICE_SOCK_SLOTS4), String(3 * abi.SLUICE_SOCK_SLOTS4)], 120000);
    assert.ok(r.other !== undefined, `no socket with a cookie in the same slot within ${r.iterations} sockets (cookie ${r.cookie})`);
    assert.equal(r.peerBefore, `${VIP}:80`);
    assert.equal(r.otherPeer, `${VIP2}:81`, `socket ${r.other} (slot taken by ${r.cookie}) shows ${r.otherPeer}`);
    assert.equal(r.peerAfter, `${VIP}:80`, `socket ${r.cookie} shows ${r.peerAfter} after socket ${r.other} connected to ${VIP2}:81`);
    const m = tcpPairs();
    try {
      assert.equal(m.get({ cookie: BigInt(r.other as string), backend_address: ip4ToNumber(BACKEND), backend_port: 8080 }), undefined,
        'the other socket\'s LRU pair deleted at its sock_release');
    } finally {
      m.map.close();
    }
  } finally {
    sluice(['service', 'delete', '--frontend', `${VIP2}:81/tcp`]);
  }
});

test('a live connection whose pair is lost: getpeername shows the backend, traffic works, destroy leaves it alone', async () => {
  const conn = await holdConnection();
  const slots = tcpSlots();
  try {
    assert.equal(conn.peer, `${VIP}:80`);
    // What losing the pair does to this socket (the LRU recycling it, or a
    // slot freed): it is gone from both places.
    const slot = slots.get(slotOf(conn.cookie));
    assert.equal(slot?.cookie, conn.cookie, 'the pair was in its slot');
    slots.set(slotOf(conn.cookie), { ...slot, cookie: 0n });
  } finally {
    slots.map.close();
  }
  const t = StaleSocketTerminator.load({ bpffs: sb.bpffs, tcp: true, netns: [`/run/netns/${sb.netns}`] });
  try {
    const report = t.terminate([{ address: BACKEND, port: 8080, proto: 'tcp' }]);
    assert.deepEqual(report.destroyed, [], 'a socket without its pair is not known as translated: not destroyed');
  } finally {
    t.close();
  }
  assert.deepEqual(await conn.release(), { peerAfter: `${BACKEND}:8080`, greeting: `${BACKEND}:8080 ${BACKEND}` });
  // New connections are not affected.
  const next = await holdConnection();
  assert.equal(next.peer, `${VIP}:80`);
  assert.equal((await next.release()).peerAfter, `${VIP}:80`);
});

/** Every slot held by a bogus socket (cookie far above any real one) sent to
 * 10.96.0.51:81 on BACKEND; cookie 0n: every slot free again. */
function fillSlots(cookieBase: bigint): void {
  fillSlotArray(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_SLOT4), abi.LB4_SOCK_SLOT_SIZE, (i) => abi.encodeLb4SockSlot({
    lock: { val: 0 }, rev_nat_id: 1, cookie: cookieBase ? cookieBase + BigInt(i) : 0n, backend_address: ip4ToNumber(BACKEND),
    backend_port: 8080, frontend_port: 81, frontend_address: ip4ToNumber('10.96.0.51'), lc_backend_id: 0,
  }));
}

test('the LRU under pressure (twice its capacity in other sockets\' pairs) and every slot held by another socket: a live connection shows the VIP or its backend, nothing else; a new one shows the VIP', async () => {
  const conn = await holdConnection();
  fillSlots(1n << 61n);
  const m = BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_TCP4));
  const batch = 4096;
  const keys = Buffer.alloc(batch * 16);
  const values = Buffer.alloc(batch * 12);
  try {
    // Bogus sockets (cookies far above any real one) sent to another
    // frontend on the same backend: a wrong pair would show 10.96.0.51:81.
    for (let i = 0; i < batch; i++) abi.encodeLb4SockTcp({ frontend_address: ip4ToNumber('10.96.0.51'), frontend_port: 81, rev_nat_id: 1 }, values, i * 12);
    for (let base = 0; base < 2 * m.maxEntries; base += batch) {
      for (let i = 0; i < batch; i++) {
        abi.encodeLb4SockTcpKey({ cookie: (1n << 62n) + BigInt(base + i), backend_address: ip4ToNumber(BACKEND), backend_port: 8080 }, keys, i * 16);
      }
      m.updateBatch(keys, values, batch);
    }
  } finally {
    m.close();
  }
  const after = await conn.release();
  assert.ok([`${VIP}:80`, `${BACKEND}:8080`].includes(after.peerAfter), `peer after the flood: ${after.peerAfter}`);
  assert.equal(after.greeting, `${BACKEND}:8080 ${BACKEND}`);
  const next = await holdConnection();
  try {
    assert.equal(next.peer, `${VIP}:80`, 'a new connection gets its own pair (in the LRU: every slot is held)');
    const lru = tcpPairs();
    try {
      assert.ok(lru.get({ cookie: next.cookie, backend_address: ip4ToNumber(BACKEND), backend_port: 8080 }), 'the new pair is in the LRU');
    } finally {
      lru.map.close();
    }
  } finally {
    await next.release();
    fillSlots(0n);
  }
});

test('two Services on one backend, TCP clients of both in parallel while bogus sockets (pairs naming the second Service) take and leave slots: no socket ever shows the other frontend', async () => {
  sluice(['service', 'upsert', '--frontend', `${VIP2}:81/tcp`, '--backends', `${BACKEND}:8080`]);
  // VIP2's rev-NAT id, from a connection's slot: the bogus pairs below name
  // VIP2 validly, so only the cookie check keeps VIP's clients from them.
  const probe = await holdConnection(false, VIP2, '81');
  const probeSlots = tcpSlots();
  const vip2RevNat = probeSlots.get(slotOf(probe.cookie))!.rev_nat_id;
  probeSlots.map.close();
  await probe.release();
  const slots = BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_SLOT4));
  try {
    const bogus = abi.encodeLb4SockSlot({
      lock: { val: 0 }, rev_nat_id: vip2RevNat, cookie: 1n << 60n, backend_address: ip4ToNumber(BACKEND), backend_port: 8080,
      frontend_port: 81, frontend_address: ip4ToNumber(VIP2), lc_backend_id: 0,
    });
    const free = abi.encodeLb4SockSlot({ lock: { val: 0 }, rev_nat_id: 0, cookie: 0n, backend_address: 0, backend_port: 0, frontend_port: 0, frontend_address: 0, lc_backend_id: 0 });
    await raceSlots(sb, slots, abi.SLUICE_SOCK_SLOTS4, [[VIP, '80', `${VIP}:80`], [VIP2, '81', `${VIP2}:81`]], bogus, free, 1n << 60n, `${BACKEND}:8080`);
  } finally {
    slots.close();
    fillSlots(0n);
    sluice(['service', 'delete', '--frontend', `${VIP2}:81/tcp`]);
  }
});

test('a TCP connection made before the upgrade to the LRU (its pair in socket storage): getpeername still shows the VIP and destroy still ends it', async () => {
  const conn = await holdConnection(true);
  const m = tcpPairs();
  try {
    assert.equal(m.get({ cookie: conn.cookie, backend_address: ip4ToNumber(BACKEND), backend_port: 8080 }), undefined, 'the pair is in storage only');
  } finally {
    m.map.close();
  }
  assert.equal(conn.peer, `${VIP}:80`, 'getpeername falls back to the socket storage');
  const t = StaleSocketTerminator.load({ bpffs: sb.bpffs, tcp: true, netns: [`/run/netns/${sb.netns}`] });
  try {
    const report = t.terminate([{ address: BACKEND, port: 8080, proto: 'tcp' }]);
    assert.deepEqual(report.destroyed.map((d) => d.backend), [`${BACKEND}:8080/tcp`]);
  } finally {
    t.close();
  }
  // Destroyed: no longer connected (what the greeting read finds is what had arrived before).
  assert.equal((await conn.release()).peerAfter, 'ENOTCONN');
});
