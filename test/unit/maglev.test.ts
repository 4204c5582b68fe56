// Maglev table builder (src/datapath/maglevTable.ts): the properties issue 15
// asks for, measured over the real builder at the default M. Distribution:
// max/min share <= 1.1 for every N <= 100. Disruption when one of N backends
// is removed: entries of surviving backends that move stay few, and the
// total moved stays near 1/N. Consistency: the table depends only on the
// backend set (not on order or on anything node-local).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildMaglevTable, maglevShares, DEFAULT_MAGLEV_TABLE_SIZE, checkMaglevTableSize, isPrime } from '../../src/datapath/maglevTable';
import { resolveConfig } from '../../src/agent/config';
import { maglevFlowHash, maglevEntry, hash64, encodeMaglevRows, decodeMaglevRows } from '../../src/datapath/maglev';

const M = DEFAULT_MAGLEV_TABLE_SIZE;
const names = (n: number, base = 0) => Array.from({ length: n }, (_, i) => `198.18.${(base + i) >> 8}.${(base + i) & 255}:8080`);

test('default M is a prime and the config check refuses non-primes and out-of-range sizes', () => {
  assert.ok(isPrime(M), `${M}`);
  assert.equal(checkMaglevTableSize(16381, 'x'), 16381);
  assert.throws(() => checkMaglevTableSize(4096, '--maglev-table-size'), /--maglev-table-size: 4096 is not a prime/);
  assert.throws(() => checkMaglevTableSize(7, '--maglev-table-size'), /outside/);
});

test('distribution: max/min share over the table <= 1.1 for every N in 1..100 at the default M', () => {
  let worst = { n: 0, ratio: 1 };
  for (let n = 1; n <= 100; n++) {
    const shares = maglevShares(buildMaglevTable(names(n), M), n);
    assert.equal(shares.reduce((a, b) => a + b, 0), M);
    const ratio = Math.max(...shares) / Math.min(...shares);
    if (ratio > worst.ratio) worst = { n, ratio };
    // The fill gives each backend floor(M/N) or ceil(M/N) entries.
    assert.ok(Math.max(...shares) - Math.min(...shares) <= 1, `N=${n}: shares ${Math.min(...shares)}..${Math.max(...shares)}`);
  }
  assert.ok(worst.ratio <= 1.1, `N=${worst.n}: max/min ${worst.ratio.toFixed(4)}`);
});

/** Entries that change when backend `removed` goes: of surviving backends, and overall. */
function disruption(n: number, removed: number): { survivors: number; overall: number } {
  const before = names(n);
  const after = before.filter((_, i) => i !== removed);
  const t1 = buildMaglevTable(before, M);
  const t2 = buildMaglevTable(after, M);
  let moved = 0;
  let survivorEntries = 0;
  let survivorMoved = 0;
  for (let e = 0; e < M; e++) {
    const a = before[t1[e]!]!;
    const b = after[t2[e]!]!;
    if (a !== b) moved++;
    if (t1[e] !== removed) {
      survivorEntries++;
      if (a !== b) survivorMoved++;
    }
  }
  return { survivors: survivorMoved / survivorEntries, overall: moved / M };
}

test('disruption: removing one of N backends moves its entries and few others', () => {
  const rows: string[] = [];
  for (const n of [2, 3, 5, 10, 20, 50, 100]) {
    for (const removed of [0, Math.floor(n / 2), n - 1]) {
      const d = disruption(n, removed);
      rows.push(`N=${n} -${removed}: survivors ${(d.survivors * 100).toFixed(2)}% overall ${(d.overall * 100).toFixed(2)}%`);
      // Measured at M=4093: survivors <= 3.4% (N=100), <= 1.6% for N <= 10.
      assert.ok(d.survivors <= (n <= 10 ? 0.02 : 0.04), rows.at(-1));
      assert.ok(d.overall <= 1 / n + 0.04, rows.at(-1));
      // Every entry of the removed backend moves (nothing points at it).
      assert.ok(d.overall >= 1 / n - 1 / M - 0.001, rows.at(-1));
    }
  }
});

test('adding a backend back restores the original table exactly', () => {
  const set = names(10);
  const t1 = buildMaglevTable(set, M);
  const t2 = buildMaglevTable(set.filter((_, i) => i !== 4), M);
  assert.notDeepEqual(t1, t2);
  assert.deepEqual(buildMaglevTable(set, M), t1);
});

test('consistency: the table depends only on the backend set, not on the order it arrives in', () => {
  const set = names(37);
  const shuffled = [...set].reverse();
  const t1 = buildMaglevTable(set, M);
  const t2 = buildMaglevTable(shuffled, M);
  for (let e = 0; e < M; e++) assert.equal(set[t1[e]!], shuffled[t2[e]!], `entry ${e}`);
});

test('flow hash: MurmurHash3 finaliser vectors and a fixed 5-tuple value (shared with bpf/lib/maglev.h)', () => {
  assert.equal(hash64(0n), 0n);
  assert.equal(hash64(1n), 0xb456bcfc34c2cb2cn);
  const t = { saddr: '198.18.0.10', daddr: '198.18.0.1', sport: 40000, dport: 30080, proto: 'tcp' };
  const h = maglevFlowHash(t);
  assert.equal(maglevFlowHash({ ...t }), h);
  assert.notEqual(maglevFlowHash({ ...t, sport: 40001 }), h);
  assert.ok(maglevEntry(h, M) >= 0 && maglevEntry(h, M) < M);
});

test('rows encoding round-trips (row 0: M and the backend count)', () => {
  const ids = Uint32Array.from({ length: 13 }, (_, i) => 100 + (i % 3));
  const buf = encodeMaglevRows(ids, 3);
  assert.equal(buf.length, (1 + 2) * 32);
  assert.deepEqual(decodeMaglevRows(buf), { m: 13, backends: 3, ids });
});

test('agent config: --lb-algorithm mh (IPVS name) and --maglev-table-size; a non-prime size is a start-up error', () => {
  const c = resolveConfig(new Map([['lb-algorithm', 'mh'], ['maglev-table-size', '16381']]));
  assert.equal(c.lbAlgorithm, 'maglev');
  assert.equal(c.maglevTableSize, 16381);
  assert.equal(resolveConfig(new Map()).maglevTableSize, M);
  assert.throws(() => resolveConfig(new Map([['maglev-table-size', '1000']])), /--maglev-table-size: 1000 is not a prime/);
});
