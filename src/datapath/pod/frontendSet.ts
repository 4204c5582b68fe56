// The pod path's frontend-address bitmap (sluice_podpf4, native/sluice_abi.h;
// docs/pod-veth.md): the slot of every IPv4 address a pod reaches a frontend
// at is set, so pod ingress passes packets whose slot is clear after one
// array load. Make before break, as with the frontends themselves: an
// address's bit is set before the first frontend on it is written, and
// cleared only after the last address on that bit is gone (per-bit counts of
// addresses, kept in memory). The "maintained" marker (the word at
// SLUICE_POD_PF_MARKER) is written only once the bitmap holds every programmed
// frontend's address; until then (and after any failed write, when the
// marker is zeroed) the programs do the full lookups. The NodePort wildcard
// (0.0.0.0:port) stands for the node's addresses, which are therefore always
// in. A sync costs one word write per bit that comes or goes, never a walk.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as abi from '../../abi/generated';
import { BpfMap } from '../../bpf';
import { ip4ToNumber, isIp6 } from '../addr';
import { bitSlot, readWords, writeWord, writeWords } from '../bitmap';

/** The bitmap slot of an IPv4 address (as ip4ToNumber gives it), as the programs compute it. */
export function podSlot(address: number): number {
  return bitSlot(address, abi.SLUICE_POD_PF_BITS_LOG2);
}

/** The IPv4 address of a frontend id (programmer.ts frontendId: "a.b.c.d:port/proto..."), undefined for IPv6. */
function idAddress(id: string): number | undefined {
  if (id.startsWith('[')) return undefined;
  return ip4ToNumber(id.slice(0, id.indexOf(':')));
}

export class PodFrontendSet {
  private readonly present = new Set<number>(); // addresses whose bit this writer holds
  private readonly count = new Map<number, number>(); // frontend ids per address (0: the NodePort wildcard)
  private readonly perSlot = new Map<number, number>(); // addresses of `present` per slot
  private readonly words: BigUint64Array; // the bitmap as the kernel holds it (bits of an earlier run included until markMaintained)
  private readonly ids = new Set<string>();
  private nodeAddresses = new Set<number>();
  private maintained = false;
  /** Why the set stopped being maintained (a failed write); the programs do the full lookups. */
  failed?: string;

  private constructor(private readonly map: BpfMap) {
    this.words = readWords(map, abi.SLUICE_POD_PF_WORDS);
  }

  /** The pinned set, or undefined when no pod_lb object pinned one (pod-veth programs off, or an older build). */
  static open(bpffs: string): PodFrontendSet | undefined {
    const pin = path.join(bpffs, abi.SLUICE_MAP_POD_PF4);
    return fs.existsSync(pin) ? new PodFrontendSet(BpfMap.fromPinned(pin)) : undefined;
  }

  private wanted(a: number): boolean {
    return (this.count.get(a) ?? 0) > 0 || this.nodeAddresses.has(a);
  }

  private guard(what: string, fn: () => void): void {
    if (this.failed) return;
    try {
      fn();
    } catch (err) {
      this.failed = `${this.map.name}: ${what}: ${(err as Error).message}`;
      try {
        writeWord(this.map, abi.SLUICE_POD_PF_MARKER, 0n); // not trusted any more: full lookups
      } catch { /* the programs still see the marker: nothing better to do */ }
      this.maintained = false;
    }
  }

  private ensure(a: number): void {
    if (a === 0 || this.present.has(a)) return;
    const slot = podSlot(a);
    const w = slot >>> 6;
    const bit = 1n << BigInt(slot & 63);
    if (!(this.words[w]! & bit)) {
      writeWord(this.map, w, this.words[w]! | bit);
      this.words[w]! |= bit;
    }
    this.perSlot.set(slot, (this.perSlot.get(slot) ?? 0) + 1);
    this.present.add(a);
  }

  /** Break: `a` is no longer wanted; its bit is cleared when no other address of this writer is on it. */
  private drop(a: number): void {
    if (!this.present.delete(a)) return;
    const slot = podSlot(a);
    const n = (this.perSlot.get(slot) ?? 1) - 1;
    if (n > 0) {
      this.perSlot.set(slot, n);
      return;
    }
    this.perSlot.delete(slot);
    const w = slot >>> 6;
    const next = this.words[w]! & ~(1n << BigInt(slot & 63));
    writeWord(this.map, w, next);
    this.words[w] = next;
  }

  /** Make: frontends about to be written (ids from programmer.ts frontendId). */
  add(ids: Iterable<string>): void {
    this.guard('add', () => {
      for (const id of ids) {
        if (this.ids.has(id)) continue;
        const a = idAddress(id);
        if (a === undefined) continue;
        this.ids.add(id);
        this.count.set(a, (this.count.get(a) ?? 0) + 1);
        this.ensure(a);
      }
    });
  }

  /** Break: frontends removed (ids still wanted by `kept` stay counted). */
  removed(ids: Iterable<string>, kept: ReadonlySet<string> = new Set()): void {
    this.guard('remove', () => {
      for (const id of ids) {
        if (kept.has(id) || !this.ids.delete(id)) continue;
        const a = idAddress(id)!;
        const n = (this.count.get(a) ?? 1) - 1;
        if (n > 0) this.count.set(a, n);
        else this.count.delete(a);
        if (a !== 0 && !this.wanted(a)) this.drop(a);
      }
    });
  }

  /** The node's addresses (the wildcard's stand-ins): added at once, a gone one removed unless a frontend has it. */
  setNodeAddresses(addresses: Iterable<string>): void {
    this.guard('node addresses', () => {
      const before = this.nodeAddresses;
      this.nodeAddresses = new Set([...addresses].filter((a) => !isIp6(a)).map(ip4ToNumber).filter((a) => a !== 0));
      for (const a of this.nodeAddresses) this.ensure(a);
      for (const a of before) if (!this.wanted(a)) this.drop(a);
    });
  }

  /**
   * After the first pass over every programmed frontend (`add` saw them all):
   * bits left from an earlier run that no address of this writer holds are
   * cleared, then the bitmap is marked maintained. Later calls do nothing.
   */
  markMaintained(): void {
    if (this.maintained) return;
    this.guard('mark', () => {
      const next = new BigUint64Array(abi.SLUICE_POD_PF_WORDS);
      for (const slot of this.perSlot.keys()) next[slot >>> 6]! |= 1n << BigInt(slot & 63);
      writeWords(this.map, this.words, next);
      this.words.set(next);
      writeWord(this.map, abi.SLUICE_POD_PF_MARKER, 1n);
      this.maintained = true;
    });
  }

  /** Addresses this writer holds a bit for. */
  get size(): number {
    return this.present.size;
  }

  close(): void {
    this.map.close();
  }
}
