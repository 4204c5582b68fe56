// An IPv6 UDP socket's first frontend pair in its slot of sluice_sk_udp6
// (issue 12: sendmsg6 no longer creates socket storage on a fresh socket's
// first datagram), its storage (sluice_sock6) for a second frontend or when
// another live socket holds the slot: sock_udp_slot.test.ts for IPv6.
// Whichever holds the pair, the socket stays on one backend per frontend and
// every reply (and getpeername of a connected socket) shows the frontend it
// was sent to. Throwaway cgroup + netns, real AF_INET6 sockets.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Sandbox, sh, sluiceBin, labScript } from '../helpers/sandbox';
import { fillSlotArray } from '../helpers/tcpRev';
import { counter as readCounter, oneBackend, heldSlots, slotCookies, raceSlot, assertNoTornCopies, type Exchange } from '../helpers/udpSlot';
import { ip6ToBytes } from '../../src/datapath/addr';
import { BpfMap } from '../../src/bpf/map';
import { TypedMap, u32Codec } from '../../src/datapath/typedMap';
import * as abi from '../../src/abi/generated';

// Two Services on the same pods: a pair read from the wrong socket or the
// wrong frontend would show the other VIP.
const VIP = 'fd00:96::60';
const VIP2 = 'fd00:96::61';
const BACKENDS = ['fd00:18:17::2', 'fd00:18:17::3', 'fd00:18:17::4', 'fd00:18:17::5'];
// An IPv4 Service a dual-stack socket reaches through ::ffff:a.b.c.d (its
// pair then goes to sluice_sk_udp4: the kernel runs sendmsg4 for it).
const VIP4 = '10.96.0.62';
const BACKEND4 = '198.18.17.6';
const SLOTS = abi.SLUICE_SOCK_USLOTS6;
const MAP = abi.SLUICE_MAP_SOCK_USLOT6;
const BOGUS_COOKIE = 1n << 60n; // far above any real socket's cookie

let sb: Sandbox;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

const counter = (index: number): bigint => readCounter(sb.bpffs, index);

type Reply = { backend?: string; peer?: string; connectedPeer?: string; error?: string };

/** lbClient (Node dgram): its replies as exchanges (peer: addr:port, no brackets). */
async function client(mode: 'udp' | 'udpc', address: string, port: number, count: number): Promise<Reply[]> {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), mode, address, String(port), String(count)]);
  return (JSON.parse(out) as { results: Reply[] }).results;
}
const asExchanges = (replies: Reply[]): Exchange[] => replies.map((r) => ({ backend: r.backend, from: r.peer, error: r.error }));

/** Every slot held by a bogus socket whose pair names VIP2 (cookieBase 0n: every slot free again). */
function fillSlots(cookieBase: bigint): void {
  const pair = {
    frontend_address: ip6ToBytes(VIP2), backend_address: ip6ToBytes(BACKENDS[0]!), frontend_port: 54, backend_port: 5353,
    scope: 0, used: 1, backend_slot: 1, backend_id: 1, rev_nat_id: 1,
  };
  fillSlotArray(path.join(sb.bpffs, MAP), abi.LB6_SOCK_USLOT_SIZE, (i) => abi.encodeLb6SockUslot({
    lock: { val: 0 }, seq: 0, cookie: cookieBase ? cookieBase + BigInt(i) : 0n, pair,
  }));
}

/** The sequence count (lb6_sock_uslot.seq) of one slot of sluice_sk_udp6. */
function slotSeq(index: number): number {
  const m = new TypedMap(BpfMap.fromPinned(path.join(sb.bpffs, MAP)), u32Codec, abi.lb6_sock_uslotCodec);
  try {
    return m.get(index)!.seq;
  } finally {
    m.map.close();
  }
}

before(async () => {
  sb = Sandbox.create('sluice-udpslot6');
  await sb.startBackends([...BACKENDS, BACKEND4], [5353]);
  sluice(['attach', '--cgroup', sb.cgroup]);
  const backends = BACKENDS.map((b) => `[${b}]:5353`).join(',');
  sluice(['service', 'upsert', '--frontend', `[${VIP}]:53/udp`, '--backends', backends]);
  sluice(['service', 'upsert', '--frontend', `[${VIP2}]:54/udp`, '--backends', backends]);
  sluice(['service', 'upsert', '--frontend', `${VIP4}:55/udp`, '--backends', `${BACKEND4}:5353`]);
});

after(() => {
  sb?.close();
});

test('IPv6 UDP: a fresh socket\'s first frontend pair goes into its slot of sluice_sk_udp6 (no socket storage), later datagrams stick to it from the slot; closing frees the slot', async () => {
  const [inSlot, inStorage, sticky] = [counter(abi.LB_CNT_SOCK_UDP_SLOT), counter(abi.LB_CNT_SOCK_UDP_STORAGE), counter(abi.LB_CNT_SOCK_STICKY)];
  const replies = await client('udp', VIP, 53, 4);
  oneBackend('socket', asExchanges(replies), `${VIP}:53`);
  assert.equal(counter(abi.LB_CNT_SOCK_UDP_SLOT) - inSlot, 1n, 'one slot claim');
  assert.equal(counter(abi.LB_CNT_SOCK_UDP_STORAGE) - inStorage, 0n, 'no pair in socket storage');
  assert.equal(counter(abi.LB_CNT_SOCK_STICKY) - sticky, 3n, 'datagrams 2-4 reuse the slot\'s backend');
  assert.deepEqual(heldSlots(sb.bpffs, MAP), [], 'no slot held once the socket closed');
});

test('IPv6 UDP: a socket whose slot is held, a socket on two frontends and a socket reusing a closed socket\'s slot each keep one backend per frontend and see their own frontend', async () => {
  const inSlot = counter(abi.LB_CNT_SOCK_UDP_SLOT);
  const inStorage = counter(abi.LB_CNT_SOCK_UDP_STORAGE);
  const r = JSON.parse(await sb.runInCgroup(
    ['node', labScript('rawSock'), 'udpalias', VIP, '53', VIP2, '54', String(SLOTS), String(3 * SLOTS)],
    120000)) as Record<string, Exchange[]> & { cookie: string; other: string; reused: string };
  const [s, o, reused] = [r.sFirst!, r.oHeld!, r.rReused!];
  const at = (list: Exchange[], idx: number[]) => idx.map((i) => list[i]!);
  // S: its slot, before and after another socket used the same slot.
  oneBackend('S', [...s, ...r.sAgain!], `[${VIP}]:53`);
  // O: S held its slot, so its pairs (two frontends) are in its storage.
  oneBackend('O to VIP2', [...at(o, [0, 1, 3]), r.oAfter![0]!], `[${VIP2}]:54`);
  oneBackend('O to VIP', [o[2]!, r.oAfter![1]!], `[${VIP}]:53`);
  // R: the slot S left at close, then a second frontend (the slot's pair
  // moved to R's storage).
  oneBackend('R to VIP2', at(reused, [0, 1, 3]), `[${VIP2}]:54`);
  oneBackend('R to VIP', at(reused, [2, 4]), `[${VIP}]:53`);
  assert.ok(counter(abi.LB_CNT_SOCK_UDP_SLOT) - inSlot >= 2n, 'S and R wrote their first pair into the slot');
  assert.ok(counter(abi.LB_CNT_SOCK_UDP_STORAGE) - inStorage >= 3n, 'O and R wrote pairs into socket storage');
  // Every socket closed: the slot is free again (sock_release, or R's move to storage).
  const at6 = Number(BigInt(r.cookie) % BigInt(SLOTS));
  assert.equal(slotCookies(sb.bpffs, MAP)[at6], 0n);
  // Every write went through the sequence count (odd while writing, even
  // after: issue 12's lock-free recvmsg6 read, bpf/lib/sock_slot6.h): S's
  // claim and free, R's claim and move to storage are two steps each.
  const seq = slotSeq(at6);
  assert.equal(seq % 2, 0, `seq ${seq} even once no write is in progress`);
  assert.ok(seq >= 8, `seq ${seq}: at least four writes counted`);
});

test('IPv6 UDP: with every slot held by other sockets, pairs go to socket storage (still sticky, replies from the frontend) and no socket frees a slot it does not hold', async () => {
  fillSlots(BOGUS_COOKIE);
  try {
    const [inSlot, inStorage] = [counter(abi.LB_CNT_SOCK_UDP_SLOT), counter(abi.LB_CNT_SOCK_UDP_STORAGE)];
    oneBackend('socket to VIP', asExchanges(await client('udp', VIP, 53, 3)), `${VIP}:53`);
    oneBackend('socket to VIP2', asExchanges(await client('udp', VIP2, 54, 3)), `${VIP2}:54`);
    assert.equal(counter(abi.LB_CNT_SOCK_UDP_SLOT) - inSlot, 0n, 'no slot claimed');
    assert.equal(counter(abi.LB_CNT_SOCK_UDP_STORAGE) - inStorage, 2n, 'each socket\'s pair in its storage');
    const cookies = slotCookies(sb.bpffs, MAP);
    assert.equal(cookies.filter((c, i) => c !== BOGUS_COOKIE + BigInt(i)).length, 0, 'every bogus slot still held by its socket');
  } finally {
    fillSlots(0n);
  }
});

test('IPv6 UDP, connected: connect6 keeps the pair in the slot; getpeername and recvmsg show the frontend; closing frees the slot', async () => {
  const inSlot = counter(abi.LB_CNT_SOCK_UDP_SLOT);
  const replies = await client('udpc', VIP, 53, 3);
  oneBackend('connected socket', asExchanges(replies), `${VIP}:53`);
  assert.deepEqual(replies.map((x) => x.connectedPeer), replies.map(() => `${VIP}:53`), 'getpeername shows the frontend');
  assert.equal(counter(abi.LB_CNT_SOCK_UDP_SLOT) - inSlot, 1n, 'the connect\'s pair in the slot');
  assert.deepEqual(heldSlots(sb.bpffs, MAP), [], 'no slot held once the socket closed');
});

// One AF_INET6 socket, unconnected: two exchanges with the IPv6 Service,
// two with the IPv4 one through ::ffff:, alternated; prints them, then closes.
const DUAL_STACK_CLIENT = `
const dgram = require('dgram');
const s = dgram.createSocket('udp6');
const ex = (a, p) => new Promise((r) => {
  const t = setTimeout(() => { s.removeAllListeners('message'); r({ error: 'ETIMEDOUT' }); }, 1000);
  s.once('message', (m, ri) => { clearTimeout(t); r({ backend: m.toString().trim().split(' ')[0], from: ri.address + ':' + ri.port }); });
  s.send('x', p, a);
});
s.bind(0, async () => {
  const out = [];
  for (let i = 0; i < 2; i++) { out.push(await ex('${VIP}', 53)); out.push(await ex('::ffff:${VIP4}', 55)); }
  s.close();
  console.log(JSON.stringify(out));
});
`;

test('a dual-stack UDP socket holding both an IPv6 slot (IPv6 Service) and an IPv4 slot (::ffff: Service) frees both at close', async () => {
  const inSlot = counter(abi.LB_CNT_SOCK_UDP_SLOT);
  const out = JSON.parse(await sb.runInCgroup(['node', '-e', DUAL_STACK_CLIENT])) as Exchange[];
  oneBackend('to the IPv6 Service', [out[0]!, out[2]!], `${VIP}:53`);
  oneBackend('to the IPv4 Service', [out[1]!, out[3]!], `::ffff:${VIP4}:55`);
  assert.equal(counter(abi.LB_CNT_SOCK_UDP_SLOT) - inSlot, 2n, 'one pair in each family\'s slot');
  assert.deepEqual(heldSlots(sb.bpffs, MAP), [], 'IPv6 slot freed');
  assert.deepEqual(heldSlots(sb.bpffs, abi.SLUICE_MAP_SOCK_USLOT4), [], 'IPv4 slot freed');
});

// issue 12: recvmsg6 reads the IPv6 UDP slot without its lock on x86-64 (a
// sequence count, bpf/lib/sock_slot6.h lb6_sock_uslot_read): the real claim
// and read code racing on the two CPUs (build/test/uslot_race.bpf.o, as
// sock_udp_slot.test.ts does for IPv4). A 48-byte pair is copied in several
// loads, so the unchecked copy does tear: the reader's zero means something.
test('IPv6 UDP slot: a lock-free reader racing a writer never sees a torn pair (frontend of one write, backend of another)', async () => {
  assertNoTornCopies(await raceSlot({ writer: 'writer6', reader: 'reader6', noseq: 'reader6_noseq', counts: 'race_counts6' }), 'lb6_sock_uslot_read');
});
