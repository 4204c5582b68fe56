// What the UDP first-frontend slot tests (sock_udp_slot, sock_udp_slot6) share:
// a counter read, the "one backend per frontend, replies from the frontend"
// check, and the cookies the slot arrays hold (sluice_sk_udp4/6).
import assert from 'node:assert/strict';
import * as path from 'node:path';
import * as fs from 'node:fs';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { sh, repoRoot, bpffsRoot, collect } from './sandbox';
import { BpfMap } from '../../src/bpf/map';
import { readCounter } from '../../src/datapath/maps';
import * as abi from '../../src/abi/generated';

/** One request/reply: the backend that answered and the reply's source, or the error. */
export type Exchange = { backend?: string; from?: string; error?: string };

/** SLUICE_MAP_COUNTERS[index], summed over the CPUs. */
export function counter(bpffs: string, index: number): bigint {
  const m = BpfMap.fromPinned(path.join(bpffs, abi.SLUICE_MAP_COUNTERS));
  try {
    return readCounter(m, index);
  } finally {
    m.close();
  }
}

/** Every exchange answered, from `frontend`, by one backend; that backend. */
export function oneBackend(what: string, exchanges: Exchange[], frontend: string): string {
  assert.deepEqual(exchanges.filter((e) => e.error), [], `${what}: errors`);
  assert.deepEqual(exchanges.map((e) => e.from), exchanges.map(() => frontend), `${what}: reply sources`);
  const used = new Set(exchanges.map((e) => e.backend));
  assert.equal(used.size, 1, `${what}: backends ${[...used].join(',')}`);
  return exchanges[0]!.backend!;
}

/** The cookie of every slot of a UDP slot array (0n: free), read in one batch.
 * The cookie sits at offset 8 of both slot types (lb_sock_slot_head). */
export function slotCookies(bpffs: string, map: string): bigint[] {
  const m = BpfMap.fromPinned(path.join(bpffs, map));
  try {
    const { values, count } = m.lookupBatch();
    return Array.from({ length: count }, (_, i) => values.readBigUInt64LE(i * m.valueSize + 8));
  } finally {
    m.close();
  }
}

/** Indexes of the slots held (a non-zero cookie). */
export function heldSlots(bpffs: string, map: string): number[] {
  return slotCookies(bpffs, map).flatMap((c, i) => (c !== 0n ? [i] : []));
}

/**
 * The UDP slot race of build/test/uslot_race.bpf.o (issue 12): `writer`
 * claiming the slot with two pairs in turn on CPU 0 while `reader` (the
 * sequence-count read), then `noseq` (the same copy unchecked), reads it on
 * CPU 1, both through BPF_PROG_TEST_RUN; up to six rounds (bounded) until
 * the race has shown itself. The program's counters (`counts`, indexed as
 * the RACE_* enum): reads, torn, reads that overlapped a write, unchecked
 * reads, unchecked torn, writes.
 */
export async function raceSlot(progs: { writer: string; reader: string; noseq: string; counts: string }): Promise<bigint[]> {
  const obj = path.join(repoRoot, 'build', 'test', 'uslot_race.bpf.o');
  const dir = path.join(bpffsRoot(), `sluice-uslotrace-${randomBytes(4).toString('hex')}`);
  const pkt = `/tmp/${path.basename(dir)}.pkt`;
  fs.writeFileSync(pkt, Buffer.alloc(64));
  fs.mkdirSync(dir);
  try {
    sh('bpftool', ['prog', 'loadall', obj, dir, 'pinmaps', path.join(dir, 'maps')]);
    const run = (cpu: number, prog: string, repeat: number) =>
      collect(spawn('taskset', ['-c', String(cpu), 'bpftool', 'prog', 'run', 'pinned', path.join(dir, prog), 'data_in', pkt, 'repeat', String(repeat)]),
        120000, `${prog} on CPU ${cpu}`);
    const counts = (): bigint[] => {
      const dump = JSON.parse(sh('bpftool', ['-j', 'map', 'dump', 'pinned', path.join(dir, 'maps', progs.counts)])) as { formatted: { key: number; value: number } }[];
      return dump.map((e) => e.formatted).sort((a, b) => a.key - b.key).map((e) => BigInt(e.value));
    };
    // The writer runs longer than the reader so that it covers the reader's run.
    let c: bigint[] = [];
    for (let round = 0; round < 6; round++) {
      await Promise.all([run(0, progs.writer, 1_000_000), run(1, progs.reader, 200_000)]);
      await Promise.all([run(0, progs.writer, 1_000_000), run(1, progs.noseq, 200_000)]);
      c = counts();
      if (c[1]! > 0n || (c[2]! > 0n && c[4]! > 0n)) break;
    }
    return c;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    fs.rmSync(pkt, { force: true });
  }
}

/** The race's verdict: it happened (reads overlapped writes, and the unchecked
 * copy was torn at least once), and no checked copy was torn. */
export function assertNoTornCopies(c: bigint[], reader: string): void {
  const [reads, torn, seqRaced, noseqReads, noseqTorn, writes] = c;
  assert.ok(writes! > 0n && reads! > 0n && noseqReads! > 0n, `writes ${writes}, reads ${reads}, unchecked reads ${noseqReads}`);
  assert.ok(seqRaced! > 0n, `no read overlapped a write (${reads} reads): the race did not happen`);
  assert.equal(torn, 0n, `torn copies through ${reader} (${reads} reads, ${seqRaced} overlapped a write)`);
  assert.ok(noseqTorn! > 0n, `the unchecked copy was never torn (${noseqReads} reads): the race is too weak to show anything`);
}
