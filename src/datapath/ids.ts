// Stable ids for backends and rev-NAT entries. Id 0 is reserved as invalid
// (zeroed map values then never point at a real object). Freed ids are reused
// lowest first, so ids stay small and dense.
export class IdAllocator {
  private next = 1;
  private readonly free = new Set<number>();
  private readonly used = new Set<number>();

  constructor(private readonly what: string, private readonly max = 0x7fffffff) {}

  /** Mark an id found in a pinned map as taken (adoption after a restart). */
  reserve(id: number): void {
    if (id === 0) throw new Error(`${this.what} id 0 is reserved as invalid`);
    if (id > this.max) throw new Error(`${this.what} id ${id} is above the maximum ${this.max}`);
    this.used.add(id);
    this.free.delete(id);
    for (; this.next < id; this.next++) if (!this.used.has(this.next)) this.free.add(this.next);
    if (id >= this.next) this.next = id + 1;
  }

  allocate(): number {
    let id: number | undefined;
    for (const candidate of this.free) if (id === undefined || candidate < id) id = candidate;
    if (id !== undefined) this.free.delete(id);
    else id = this.next++;
    if (id > this.max) throw new Error(`${this.what} ids exhausted (max ${this.max})`);
    this.used.add(id);
    return id;
  }

  release(id: number): void {
    if (this.used.delete(id)) this.free.add(id);
  }

  get size(): number {
    return this.used.size;
  }
}
