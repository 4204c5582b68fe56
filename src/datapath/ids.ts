// Stable ids for backends and rev-NAT entries. Id 0 is reserved as invalid
// (zeroed map values then never point at a real object).
//
// allocate() and release() are O(1): fresh ids come from a counter, freed ids
// from a FIFO queue, oldest freed first, so an id rests as long as possible
// before it names something else. A released id is first *quarantined*: it
// joins the queue only at recycle(), which the owner calls once the entries
// that may still name the id (conntrack flows, affinity entries) have been
// purged. Until then a new backend gets another id, so a flow or a client
// pinned to the old backend can never land on the new one.
export class IdAllocator {
  private next = 1;
  /** One bit per id in use (a Set of 200k numbers cost ~6 MiB of hash table). */
  private used = new Uint8Array(128);
  private count = 0;
  /** Free ids, oldest freed first; may hold ids reserved since (skipped lazily). */
  private free: number[] = [];
  private head = 0;
  private quarantined: number[] = [];

  constructor(private readonly what: string, private readonly max = 0x7fffffff) {}

  /** Mark an id found in a pinned map as taken (adoption after a restart). */
  reserve(id: number): void {
    if (id === 0) throw new Error(`${this.what} id 0 is reserved as invalid`);
    if (id > this.max) throw new Error(`${this.what} id ${id} is above the maximum ${this.max}`);
    this.mark(id, true);
    if (id >= this.next) {
      // The gap below a reserved id is free, unless it is huge (a stray id):
      // then fresh ids simply continue above it.
      if (id - this.next <= 1 << 16) for (let gap = this.next; gap < id; gap++) this.free.push(gap);
      this.next = id + 1;
    }
  }

  allocate(): number {
    while (this.head < this.free.length) {
      const id = this.free[this.head++]!;
      this.compact();
      if (this.has(id)) continue; // reserved after it was queued
      this.mark(id, true);
      return id;
    }
    if (this.next > this.max) throw new Error(`${this.what} ids exhausted (max ${this.max})`);
    const id = this.next++;
    this.mark(id, true);
    return id;
  }

  /** The id no longer names anything in the maps; reusable after the next recycle(). */
  release(id: number): void {
    if (this.mark(id, false)) this.quarantined.push(id);
  }

  /** Give back a freshly allocated id that never reached a map: reusable at once. */
  unallocate(id: number): void {
    if (this.mark(id, false)) this.free.push(id);
  }

  /** What named the released ids has been purged: they may be handed out again. */
  recycle(): void {
    for (const id of this.quarantined) this.free.push(id);
    this.quarantined = [];
  }

  get size(): number {
    return this.count;
  }

  private has(id: number): boolean {
    return ((this.used[id >>> 3] ?? 0) & (1 << (id & 7))) !== 0;
  }

  /** Set or clear an id's bit; false when it already was so. */
  private mark(id: number, on: boolean): boolean {
    const byte = id >>> 3;
    if (byte >= this.used.length) {
      if (!on) return false;
      const grown = new Uint8Array(Math.max(byte + 1, this.used.length * 2));
      grown.set(this.used);
      this.used = grown;
    }
    if (this.has(id) === on) return false;
    this.used[byte]! ^= 1 << (id & 7);
    this.count += on ? 1 : -1;
    return true;
  }

  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.free.length) {
      this.free = this.free.slice(this.head);
      this.head = 0;
    }
  }
}
