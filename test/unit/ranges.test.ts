// The IPv4 backend-range allocator (src/datapath/ranges.ts): ranges never
// overlap, a released range is not handed out before its grace period,
// fragmentation is absorbed by coalescing and splitting free blocks, and a
// full array is a named error with the numbers an operator needs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RangeAllocator, RangeArrayFull } from '../../src/datapath/ranges';

/** A clock the test moves. */
function clock(start = 0) {
  const c = { t: start, now: () => c.t };
  return c;
}

function assertDisjoint(ranges: Array<[number, number]>, capacity: number): void {
  const cells = new Uint8Array(capacity);
  for (const [start, size] of ranges) {
    assert.ok(start >= 0 && start + size <= capacity, `range ${start}+${size} inside the array`);
    for (let i = start; i < start + size; i++) {
      assert.equal(cells[i], 0, `index ${i} handed out twice`);
      cells[i] = 1;
    }
  }
}

test('ranges are disjoint, empty ones take nothing, and the stats add up', () => {
  const a = new RangeAllocator(100, 1000, clock().now);
  const got: Array<[number, number]> = [3, 10, 1, 7].map((n) => [a.allocate(n), n]);
  assertDisjoint(got, 100);
  assert.equal(a.allocate(0), 0);
  assert.deepEqual(a.stats(), { capacity: 100, used: 21, free: 79, quarantined: 0, largestFree: 79 });
});

test('a released range is reused only after the grace period (a program may still read it through an old master)', () => {
  const c = clock();
  const a = new RangeAllocator(20, 1000, c.now);
  const first = a.allocate(10);
  const second = a.allocate(10);
  a.release(first, 10);
  assert.equal(a.stats().quarantined, 10);
  assert.throws(() => a.allocate(10), RangeArrayFull, 'within the grace period the old range is not free');
  c.t += 999;
  assert.throws(() => a.allocate(10), RangeArrayFull);
  c.t += 1;
  assert.equal(a.allocate(10), first, 'after the grace period: the same block back (exact size, O(1))');
  assertDisjoint([[first, 10], [second, 10]], 20);
});

test('fragmentation: freed neighbours are merged for a larger range, a larger free block is split for a smaller one', () => {
  const c = clock();
  const a = new RangeAllocator(40, 0, c.now);
  const r = [0, 1, 2, 3].map(() => a.allocate(10)); // the array is full: 4 x 10
  assert.throws(() => a.allocate(1), RangeArrayFull);
  // Free two neighbours (10 + 10): a range of 15 fits only if they merge.
  a.release(r[1]!, 10);
  a.release(r[2]!, 10);
  const big = a.allocate(15);
  assert.equal(big, r[1], 'the merged block 10..29');
  // The 5 left over (25..29) serves a smaller range.
  const small = a.allocate(5);
  assert.equal(small, 25);
  assertDisjoint([[r[0]!, 10], [big, 15], [small, 5], [r[3]!, 10]], 40);
  assert.equal(a.stats().free, 0);
});

test('churn: thousands of backend-set changes of varying sizes never hand out an index twice, and space comes back', () => {
  const c = clock();
  const a = new RangeAllocator(4096, 10, c.now);
  const live = new Map<number, [number, number]>(); // frontend -> range
  let seed = 7;
  const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n);
  for (let i = 0; i < 20000; i++) {
    const fe = rnd(200);
    const size = 1 + rnd(16);
    const old = live.get(fe);
    live.set(fe, [a.allocate(size), size]);
    if (old) a.release(old[0], old[1]);
    if (i % 50 === 0) assertDisjoint([...live.values()], 4096);
    c.t += 1;
  }
  c.t += 1000;
  for (const [start, size] of live.values()) a.release(start, size);
  c.t += 1000;
  const one = a.allocate(1); // reclaims every released range
  const s = a.stats();
  assert.equal(s.used, 1);
  assert.equal(s.quarantined, 0);
  a.release(one, 1);
  c.t += 1000;
  // Everything merges back: the whole array is one block again.
  assert.equal(a.allocate(4096), 0);
});

test('a full array: RangeArrayFull names the request, the free total, the largest block and what waits for its grace period', () => {
  const c = clock();
  const a = new RangeAllocator(30, 1000, c.now);
  const r = [a.allocate(10), a.allocate(10), a.allocate(10)];
  a.release(r[0]!, 10);
  c.t += 1000;
  a.release(r[2]!, 10);
  let err: unknown;
  try {
    a.allocate(20);
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof RangeArrayFull);
  assert.equal(err.name, 'RangeArrayFull');
  assert.equal(err.message, 'backend range array (30 entries) is full: no 20 contiguous free entries (free 10, largest free block 10, 10 waiting for their grace period); raise the capacity of the backend range map (maxEntries) or remove Services');
  assert.equal(a.fullCount, 1);
});

test('adoption: ranges found in the pinned maps are kept, the gaps between them are free, overlaps are reported', () => {
  const a = new RangeAllocator(100, 0);
  a.reserve(10, 5);
  a.reserve(40, 10);
  a.reserve(12, 2); // inside 10..14: two masters naming the same entries
  const overlaps = a.adopted();
  assert.deepEqual(overlaps, [[12, 2]]);
  const got: Array<[number, number]> = [a.allocate(10), a.allocate(25), a.allocate(50)].map((s, i) => [s, [10, 25, 50][i]!]);
  assertDisjoint([[10, 5], [40, 10], ...got], 100);
  assert.deepEqual(got.map(([s]) => s).sort((x, y) => x - y), [0, 15, 50], 'gap 0..9, gap 15..39, then the top');
});
