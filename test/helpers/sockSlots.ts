// The TCP reverse-pair slots (SLUICE_MAP_SOCK_SLOT4, lb4_sock_slot) as the
// least-connection tests see them: which counts the slots hold, and every
// free slot made busy (a bogus socket's) so connects take the fallback path.
import * as path from 'node:path';
import { BpfMap } from '../../src/bpf/map';
import * as abi from '../../src/abi/generated';

function readSlots(bpffs: string): abi.Lb4SockSlot[] {
  const m = BpfMap.fromPinned(path.join(bpffs, abi.SLUICE_MAP_SOCK_SLOT4));
  try {
    const { values, count } = m.lookupBatch();
    return Array.from({ length: count }, (_, i) => abi.decodeLb4SockSlot(values, i * abi.LB4_SOCK_SLOT_SIZE));
  } finally {
    m.close();
  }
}

/** Backend id -> how many slots hold a least-connection count on it. */
export function slotLcCounts(bpffs: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const s of readSlots(bpffs)) if (s.cookie !== 0n && s.lc_backend_id) out.set(s.lc_backend_id, (out.get(s.lc_backend_id) ?? 0) + 1);
  return out;
}

/** Write `slot(index)` into each of `indexes`. */
function writeSlots(bpffs: string, indexes: number[], slot: (index: number) => abi.Lb4SockSlot): void {
  const m = BpfMap.fromPinned(path.join(bpffs, abi.SLUICE_MAP_SOCK_SLOT4));
  const batch = 4096;
  try {
    for (let base = 0; base < indexes.length; base += batch) {
      const n = Math.min(batch, indexes.length - base);
      const keys = Buffer.alloc(n * 4);
      const values = Buffer.alloc(n * abi.LB4_SOCK_SLOT_SIZE);
      for (let i = 0; i < n; i++) {
        keys.writeUInt32LE(indexes[base + i]!, i * 4);
        abi.encodeLb4SockSlot(slot(indexes[base + i]!), values, i * abi.LB4_SOCK_SLOT_SIZE);
      }
      m.updateBatch(keys, values, n);
    }
  } finally {
    m.close();
  }
}

const FREE: abi.Lb4SockSlot = { lock: { val: 0 }, rev_nat_id: 0, cookie: 0n, backend_address: 0, backend_port: 0, frontend_port: 0, frontend_address: 0, lc_backend_id: 0 };

/** Every free slot held by a bogus socket (cookie far above any real one,
 * no pair a real peer matches); returns the slots taken, for freeSlots. */
export function occupyFreeSlots(bpffs: string): number[] {
  const taken = readSlots(bpffs).flatMap((s, i) => (s.cookie === 0n ? [i] : []));
  writeSlots(bpffs, taken, (i) => ({ ...FREE, cookie: (1n << 60n) + BigInt(i) }));
  return taken;
}

/** Free the slots occupyFreeSlots took. */
export function freeSlots(bpffs: string, taken: number[]): void {
  writeSlots(bpffs, taken, () => FREE);
}
