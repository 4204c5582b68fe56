// Stable ids for backends and rev-NAT entries. Id 0 is reserved as invalid
// (zeroed map values then never point at a real object). Freed ids are reused
// lowest first, so ids stay small and dense.
export class IdAllocator {
  private next = 1;
  private readonly free = new Set<number>();
  /** One bit per id (a Set of 200k numbers cost ~6 MiB of hash table). */
  private used = new Uint8Array(128);
  private count = 0;

  constructor(private readonly what: string, private readonly max = 0x7fffffff) {}

  /** Mark an id found in a pinned map as taken (adoption after a restart). */
  reserve(id: number): void {
    if (id === 0) throw new Error(`${this.what} id 0 is reserved as invalid`);
    if (id > this.max) throw new Error(`${this.what} id ${id} is above the maximum ${this.max}`);
    this.mark(id, true);
    this.free.delete(id);
    for (; this.next < id; this.next++) if (!this.has(this.next)) this.free.add(this.next);
    if (id >= this.next) this.next = id + 1;
  }

  allocate(): number {
    let id: number | undefined;
    for (const candidate of this.free) if (id === undefined || candidate < id) id = candidate;
    if (id !== undefined) this.free.delete(id);
    else id = this.next++;
    if (id > this.max) throw new Error(`${this.what} ids exhausted (max ${this.max})`);
    this.mark(id, true);
    return id;
  }

  release(id: number): void {
    if (this.has(id)) {
      this.mark(id, false);
      this.free.add(id);
    }
  }

  get size(): number {
    return this.count;
  }

  private has(id: number): boolean {
    return ((this.used[id >>> 3] ?? 0) & (1 << (id & 7))) !== 0;
  }

  private mark(id: number, on: boolean): void {
    const byte = id >>> 3;
    if (byte >= this.used.length) {
      const grown = new Uint8Array(Math.max(byte + 1, this.used.length * 2));
      grown.set(this.used);
      this.used = grown;
    }
    if (this.has(id) === on) return;
    this.used[byte]! ^= 1 << (id & 7);
    this.count += on ? 1 : -1;
  }
}
