// What the UDP first-frontend slot tests (sock_udp_slot, sock_udp_slot6) share:
// a counter read, the "one backend per frontend, replies from the frontend"
// check, and the cookies the slot arrays hold (sluice_sk_udp4/6).
import assert from 'node:assert/strict';
import * as path from 'node:path';
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
