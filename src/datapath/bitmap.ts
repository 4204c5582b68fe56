// Bitmaps of frontend-address slots held in BPF ARRAYs of u64 words
// (native/sluice_abi.h: SLUICE_MAP_XDP_PF, SLUICE_MAP_POD_PF4). The slot
// function is sluice_bit_slot of the ABI header, spelled here for the agent.
import * as abi from '../abi/generated';
import type { BpfMap } from '../bpf';

/** sluice_bit_slot(h, log2): the top `log2` bits of h * SLUICE_XDP_PF_MULT (mod 2^32). */
export function bitSlot(h: number, log2: number): number {
  return Math.imul(h >>> 0, abi.SLUICE_XDP_PF_MULT) >>> (32 - log2);
}

/** Words 0 .. n-1 of the array as the kernel holds them. */
export function readWords(m: BpfMap, n: number): BigUint64Array {
  const words = new BigUint64Array(n);
  const all = m.lookupBatch();
  for (let i = 0; i < all.count; i++) {
    const k = all.keys.readUInt32LE(i * m.keySize);
    if (k < n) words[k] = all.values.readBigUInt64LE(i * m.valueBufferSize);
  }
  return words;
}

/** Store one word (an aligned u64 store: the programs see the old or the new word, never a mix). */
export function writeWord(m: BpfMap, index: number, word: bigint): void {
  const key = Buffer.alloc(4);
  const value = Buffer.alloc(8);
  key.writeUInt32LE(index);
  value.writeBigUInt64LE(word);
  m.update(key, value);
}

/** Write the words of `next` that differ from `current`, one update each. */
export function writeWords(m: BpfMap, current: BigUint64Array, next: BigUint64Array): void {
  for (let w = 0; w < next.length; w++) if (next[w] !== current[w]) writeWord(m, w, next[w]!);
}
