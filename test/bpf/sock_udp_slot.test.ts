// An unconnected UDP socket's first frontend pair in its slot of
// sluice_sk_udp4 (issue 12: no socket storage created on a fresh socket's
// first datagram), its storage (sluice_sock4) for a second frontend or when
// another live socket holds the slot. Whichever holds the pair, the socket
// stays on one backend per frontend and every reply shows the frontend it
// was sent to (issue 10 items 1-2). Throwaway cgroup + netns, real sockets.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Sandbox, sh, sluiceBin, labScript } from '../helpers/sandbox';
import { BpfMap } from '../../src/bpf/map';
import { TypedMap, u32Codec } from '../../src/datapath/typedMap';
import * as abi from '../../src/abi/generated';
import { counter as readCounter, oneBackend, raceSlot, assertNoTornCopies, type Exchange } from '../helpers/udpSlot';

// Two Services on the same pods: a pair read from the wrong socket or the
// wrong frontend would show the other VIP.
const VIP = '10.96.0.60';
const VIP2 = '10.96.0.61';
const BACKENDS = ['198.18.17.2', '198.18.17.3', '198.18.17.4', '198.18.17.5'];

let sb: Sandbox;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

const counter = (index: number): bigint => readCounter(sb.bpffs, index);

before(async () => {
  sb = Sandbox.create('sluice-udpslot');
  await sb.startBackends(BACKENDS, [5353]);
  sluice(['attach', '--cgroup', sb.cgroup]);
  const backends = BACKENDS.map((b) => `${b}:5353`).join(',');
  sluice(['service', 'upsert', '--frontend', `${VIP}:53/udp`, '--backends', backends]);
  sluice(['service', 'upsert', '--frontend', `${VIP2}:54/udp`, '--backends', backends]);
});

after(() => {
  sb?.close();
});

test('UDP: the first frontend\'s pair in the socket\'s slot; a socket whose slot is held, a socket on two frontends and a socket reusing a closed socket\'s slot each keep one backend per frontend and see their own frontend', async () => {
  const inSlot = counter(abi.LB_CNT_SOCK_UDP_SLOT);
  const inStorage = counter(abi.LB_CNT_SOCK_UDP_STORAGE);
  const r = JSON.parse(await sb.runInCgroup(
    ['node', labScript('rawSock'), 'udpalias', VIP, '53', VIP2, '54', String(abi.SLUICE_SOCK_USLOTS4), String(3 * abi.SLUICE_SOCK_USLOTS4)],
    120000)) as Record<string, Exchange[]> & { cookie: string; other: string; reused: string };
  const [s, o, reused] = [r.sFirst!, r.oHeld!, r.rReused!];
  const at = (list: Exchange[], idx: number[]) => idx.map((i) => list[i]!);
  // S: its slot, before and after another socket used the same slot.
  assert.equal(oneBackend('S', [...s, ...r.sAgain!], `${VIP}:53`), s[0]!.backend);
  // O: S held its slot, so its pairs (two frontends) are in its storage.
  const oFirst = oneBackend('O to VIP2', [...at(o, [0, 1, 3]), r.oAfter![0]!], `${VIP2}:54`);
  const oSecond = oneBackend('O to VIP', [o[2]!, r.oAfter![1]!], `${VIP}:53`);
  // R: the slot S left at close (its pair to VIP still in it), then a
  // second frontend (the slot's pair moved to R's storage).
  oneBackend('R to VIP2', at(reused, [0, 1, 3]), `${VIP2}:54`);
  oneBackend('R to VIP', at(reused, [2, 4]), `${VIP}:53`);
  assert.ok(oFirst && oSecond);
  // S and R took the slot; O (twice: held slot, second frontend) and R (its
  // second frontend) went to storage.
  assert.ok(counter(abi.LB_CNT_SOCK_UDP_SLOT) - inSlot >= 2n, 'S and R wrote their first pair into the slot');
  assert.ok(counter(abi.LB_CNT_SOCK_UDP_STORAGE) - inStorage >= 3n, 'O and R wrote pairs into socket storage');
  // Every socket closed: the slot is free again (sock_release, or R's move to storage).
  const slots = new TypedMap(BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_USLOT4)), u32Codec, abi.lb4_sock_uslotCodec);
  try {
    const slot = slots.get(Number(BigInt(r.cookie) % BigInt(abi.SLUICE_SOCK_USLOTS4)));
    assert.equal(slot?.cookie, 0n);
    // Every write went through the sequence count (odd while writing, even
    // after: issue 12's lock-free recvmsg4 read): S's claim and free, R's
    // claim and move to storage are two steps each.
    assert.equal(slot!.seq % 2, 0, `seq ${slot!.seq} even once no write is in progress`);
    assert.ok(slot!.seq >= 8, `seq ${slot!.seq}: at least four writes counted`);
  } finally {
    slots.map.close();
  }
});

test('UDP: a socket closed while holding its slot frees it', async () => {
  const before = counter(abi.LB_CNT_SOCK_UDP_SLOT);
  const out = JSON.parse(await sb.runInCgroup(['node', labScript('lbClient'), 'udp', VIP, '53', '3'])) as { results: Exchange[] };
  assert.equal(new Set(out.results.map((x) => x.backend)).size, 1);
  assert.equal(counter(abi.LB_CNT_SOCK_UDP_SLOT) - before, 1n, 'one slot claim, then sticky from the slot');
  const slots = new TypedMap(BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_USLOT4)), u32Codec, abi.lb4_sock_uslotCodec);
  try {
    const held = [...Array(abi.SLUICE_SOCK_USLOTS4).keys()].filter((i) => (slots.get(i)?.cookie ?? 0n) !== 0n);
    assert.deepEqual(held, [], 'no slot held once every socket closed');
  } finally {
    slots.map.close();
  }
});

// issue 12: recvmsg4 reads the UDP slot without its lock on x86-64 (a
// sequence count, bpf/lib/sock_slot.h lb4_sock_uslot_read). The real claim
// and read code, compiled into build/test/uslot_race.bpf.o, run at once on
// the two CPUs with BPF_PROG_TEST_RUN: a writer alternating two pairs that
// differ in every field, a reader counting copies that mix them. The same
// race with the copy taken without the sequence count shows torn copies
// (so the reader's zero is not for want of a race).
test('UDP slot: a lock-free reader racing a writer never sees a torn pair (frontend of one write, backend of another)', async () => {
  // Each program writes or reads 16 times a run (raceSlot: bounded rounds).
  assertNoTornCopies(await raceSlot({ writer: 'writer', reader: 'reader', noseq: 'reader_noseq', counts: 'race_counts' }), 'lb4_sock_uslot_read');
});
