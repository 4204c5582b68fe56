// The IPv4 FIB caches' slots (SLUICE_MAP_XDP_FC, SLUICE_MAP_TC_FC: per-CPU
// arrays of lb4_xdp_fib_cache, bpf/lib/fib_cache.h) as the tests read and
// write them: the program runs on any CPU, so every CPU's copy counts.
import * as abi from '../../src/abi/generated';
import { ip4ToNumber } from '../../src/datapath/addr';
import type { BpfMap } from '../../src/bpf';

/** The slots of `fc` with a filled entry for `backend` on some CPU. */
export function fibCacheSlotsOf(fc: BpfMap, backend: string): Array<{ slot: number; perCpu: abi.Lb4XdpFibCache[] }> {
  const key = Buffer.alloc(4);
  const found = [];
  for (let slot = 0; slot < abi.SLUICE_XDP_FC_SLOTS; slot++) {
    key.writeUInt32LE(slot);
    const perCpu = fc.lookupPerCpu(key)!.map((b) => abi.decodeLb4XdpFibCache(b));
    if (perCpu.some((c) => c.expires_ns !== 0n && c.daddr === ip4ToNumber(backend))) found.push({ slot, perCpu });
  }
  return found;
}

/** Put `entry` in `slot` of `fc` on every CPU. */
export function writeFibCacheSlot(fc: BpfMap, slot: number, entry: abi.Lb4XdpFibCache): void {
  const key = Buffer.alloc(4);
  key.writeUInt32LE(slot);
  const cpus = fc.splitPerCpu(Buffer.alloc(fc.valueBufferSize)).length;
  fc.updatePerCpu(key, Array.from({ length: cpus }, () => abi.encodeLb4XdpFibCache(entry)));
}
