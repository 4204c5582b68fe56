// A map from integer keys below 2^53 to non-negative int32 values, in typed
// arrays (open addressing, linear probing). The programmer's backend index
// (backendTable.ts) keys 200 000 IPv4 backends by address, port and protocol
// as one 49-bit number: in a Map each key is a heap number of its own, and
// the inserts and lookups of the first sync, with the garbage collections
// those numbers cause, were a tenth of the agent's cold start (docs/bench.md,
// "cold start and one change").
const EMPTY = -1;
const DELETED = -2;
const TWO_32 = 4294967296;

export class NumberIndex {
  private keys: Float64Array;
  private vals: Int32Array;
  private count = 0;
  /** Live entries plus tombstones: what decides when to grow. */
  private used = 0;

  /** Room for `expected` keys without a rehash (a power of two at least twice that). */
  constructor(expected = 512) {
    let slots = 1024;
    while (slots < expected * 2) slots *= 2;
    this.keys = new Float64Array(slots);
    this.vals = new Int32Array(slots).fill(EMPTY);
  }

  get size(): number {
    return this.count;
  }

  get(key: number): number | undefined {
    const i = this.find(key);
    return i < 0 ? undefined : this.vals[i]!;
  }

  has(key: number): boolean {
    return this.find(key) >= 0;
  }

  set(key: number, value: number): void {
    if (!Number.isSafeInteger(key) || key < 0) throw new RangeError(`NumberIndex: key ${key} is not a non-negative safe integer`);
    if (!Number.isInteger(value) || value < 0 || value > 0x7fffffff) throw new RangeError(`NumberIndex: value ${value} is not a non-negative int32`);
    if ((this.used + 1) * 2 > this.vals.length) this.rehash(this.count * 2 + 2 > this.vals.length / 2 ? this.vals.length * 2 : this.vals.length);
    const mask = this.vals.length - 1;
    let tomb = -1;
    for (let i = hash(key) & mask; ; i = (i + 1) & mask) {
      const v = this.vals[i]!;
      if (v === EMPTY) {
        const at = tomb >= 0 ? tomb : i;
        if (tomb < 0) this.used++;
        this.keys[at] = key;
        this.vals[at] = value;
        this.count++;
        return;
      }
      if (v === DELETED) {
        if (tomb < 0) tomb = i;
      } else if (this.keys[i] === key) {
        this.vals[i] = value;
        return;
      }
    }
  }

  delete(key: number): boolean {
    const i = this.find(key);
    if (i < 0) return false;
    this.vals[i] = DELETED;
    this.count--;
    return true;
  }

  /** Every value, in no particular order. */
  *values(): IterableIterator<number> {
    const vals = this.vals;
    for (let i = 0; i < vals.length; i++) if (vals[i]! >= 0) yield vals[i]!;
  }

  private find(key: number): number {
    const mask = this.vals.length - 1;
    for (let i = hash(key) & mask; ; i = (i + 1) & mask) {
      const v = this.vals[i]!;
      if (v === EMPTY) return -1;
      if (v !== DELETED && this.keys[i] === key) return i;
    }
  }

  private rehash(capacity: number): void {
    const keys = this.keys;
    const vals = this.vals;
    this.keys = new Float64Array(capacity);
    this.vals = new Int32Array(capacity).fill(EMPTY);
    this.count = 0;
    this.used = 0;
    for (let i = 0; i < vals.length; i++) if (vals[i]! >= 0) this.set(keys[i]!, vals[i]!);
  }
}

/** Mixes both 32-bit halves of the key (addresses differ in the high half). */
function hash(key: number): number {
  const lo = key >>> 0;
  const hi = Math.floor(key / TWO_32) >>> 0;
  let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b);
  h ^= h >>> 15;
  return Math.imul(h, 0xc2b2ae35) ^ (h >>> 13);
}
