// Allocator of the IPv4 frontends' backend ranges in SLUICE_MAP_RANGES4 (an
// ARRAY of backend ids; native/sluice_abi.h). Each frontend's backend set is
// one contiguous range [start, start + size); its master entry names start
// and size. A backend-set change takes a new range, writes it, then replaces
// the master in one map update; the old range is released here and handed
// out again only after a grace period.
//
// Why the grace period is long enough: a program copies the master once and
// reads the range it names within the same invocation. Programs run under
// rcu_read_lock with migration disabled, cannot sleep, and have bounded
// loops: one invocation lasts microseconds. A range is reused no sooner than
// `graceMs` (1 s by default, > 10^5 times that) after the master that named
// it was replaced, so no program can still read it when it is rewritten.
//
// allocate() is O(1) in the common cases: a free block of exactly the size
// (a Service whose backend count did not change gets its own old block back
// once its grace period is over), or the bump pointer at the top. When both
// fail, free blocks are coalesced (sorted by start, neighbours merged, a
// block touching the top lowers it) and the smallest free block that fits is
// split: fragmentation costs a sort of the free blocks, only when the array
// looks full. Live ranges are never moved. When even that finds no room,
// RangeArrayFull names the request, the free total and the largest block.

/** No room for a range: the frontend is not programmed (the caller reports it). */
export class RangeArrayFull extends Error {
  constructor(readonly wanted: number, readonly stats: RangeStats) {
    super(
      `backend range array (${stats.capacity} entries) is full: no ${wanted} contiguous free entries ` +
        `(free ${stats.free}, largest free block ${stats.largestFree}, ${stats.quarantined} waiting for their grace period); ` +
        'raise the capacity of the backend range map (maxEntries) or remove Services',
    );
    this.name = 'RangeArrayFull';
  }
}

export interface RangeStats {
  capacity: number;
  /** Entries in ranges that masters name (or may still be read: quarantined ones count separately). */
  used: number;
  free: number;
  quarantined: number;
  largestFree: number;
}

export class RangeAllocator {
  /** Everything at or above top is free. */
  private top = 0;
  /** Free blocks below top, by exact size: start indices. */
  private readonly bySize = new Map<number, number[]>();
  private freeEntries = 0;
  /** Released ranges in release order, reusable once their grace period has passed. */
  private pending: Array<{ start: number; size: number; at: number }> = [];
  private pendingHead = 0;
  private quarantinedEntries = 0;
  /** Ranges found in the pinned maps (adoption), turned into free gaps by adopted(). */
  private reserved: Array<[number, number]> = [];
  /** Times allocate() threw RangeArrayFull (a metric). */
  fullCount = 0;

  constructor(
    readonly capacity: number,
    private readonly graceMs = 1000,
    private readonly now: () => number = () => Date.now(),
  ) {}

  /** Mark a range found in the pinned maps as in use (adoption); call adopted() after the last one. */
  reserve(start: number, size: number): void {
    if (size > 0) this.reserved.push([start, size]);
  }

  /**
   * The reserved ranges are all known: the gaps between them become free
   * blocks. Overlapping reserved ranges (two masters naming the same
   * entries, never written by this allocator) are returned so the caller
   * can rewrite those frontends into ranges of their own.
   */
  adopted(): Array<[number, number]> {
    const rs = this.reserved.sort((a, b) => a[0] - b[0]);
    this.reserved = [];
    const overlaps: Array<[number, number]> = [];
    let end = this.top;
    for (const [start, size] of rs) {
      if (start < end) {
        overlaps.push([start, size]);
        end = Math.max(end, start + size);
        continue;
      }
      if (start > end) this.addFree(end, start - end);
      end = start + size;
    }
    this.top = Math.max(this.top, end);
    return overlaps;
  }

  /** A range of `size` entries (start index); 0 for size 0 (an empty frontend names no range). */
  allocate(size: number): number {
    if (size <= 0) return 0;
    this.reclaim();
    const start = this.take(size);
    if (start !== undefined) return start;
    this.coalesce();
    const again = this.take(size) ?? this.split(size);
    if (again !== undefined) return again;
    this.fullCount++;
    throw new RangeArrayFull(size, this.stats());
  }

  /** A range no master names any more: reusable after the grace period. */
  release(start: number, size: number): void {
    if (size <= 0) return;
    this.pending.push({ start, size, at: this.now() });
    this.quarantinedEntries += size;
  }

  /** Give back a range that never became visible (its master was not written): reusable at once. */
  unallocate(start: number, size: number): void {
    if (size > 0) this.addFree(start, size);
  }

  stats(): RangeStats {
    let largest = this.capacity - this.top;
    for (const [size, list] of this.bySize) if (list.length > 0 && size > largest) largest = size;
    const free = this.freeEntries + (this.capacity - this.top);
    return { capacity: this.capacity, used: this.capacity - free - this.quarantinedEntries, free, quarantined: this.quarantinedEntries, largestFree: largest };
  }

  private take(size: number): number | undefined {
    const list = this.bySize.get(size);
    if (list && list.length > 0) {
      this.freeEntries -= size;
      return list.pop()!;
    }
    if (this.top + size <= this.capacity) {
      const start = this.top;
      this.top += size;
      return start;
    }
    return undefined;
  }

  /** The smallest free block larger than size, split; the rest stays free. */
  private split(size: number): number | undefined {
    let best = 0;
    for (const [s, list] of this.bySize) if (s > size && list.length > 0 && (best === 0 || s < best)) best = s;
    if (best === 0) return undefined;
    const start = this.bySize.get(best)!.pop()!;
    this.freeEntries -= best;
    this.addFree(start + size, best - size);
    return start;
  }

  private reclaim(): void {
    const until = this.now() - this.graceMs;
    while (this.pendingHead < this.pending.length && this.pending[this.pendingHead]!.at <= until) {
      const p = this.pending[this.pendingHead++]!;
      this.quarantinedEntries -= p.size;
      this.addFree(p.start, p.size);
    }
    if (this.pendingHead > 1024 && this.pendingHead * 2 > this.pending.length) {
      this.pending = this.pending.slice(this.pendingHead);
      this.pendingHead = 0;
    }
  }

  private addFree(start: number, size: number): void {
    let list = this.bySize.get(size);
    if (!list) this.bySize.set(size, (list = []));
    list.push(start);
    this.freeEntries += size;
  }

  /** Merge neighbouring free blocks; a block that ends at top lowers top. */
  private coalesce(): void {
    const blocks: Array<[number, number]> = [];
    for (const [size, list] of this.bySize) for (const start of list) blocks.push([start, size]);
    this.bySize.clear();
    this.freeEntries = 0;
    blocks.sort((a, b) => a[0] - b[0]);
    const merged: Array<[number, number]> = [];
    for (const [start, size] of blocks) {
      const last = merged[merged.length - 1];
      if (last && last[0] + last[1] === start) last[1] += size;
      else merged.push([start, size]);
    }
    const last = merged[merged.length - 1];
    if (last && last[0] + last[1] === this.top) {
      this.top = last[0];
      merged.pop();
    }
    for (const [start, size] of merged) this.addFree(start, size);
  }
}
