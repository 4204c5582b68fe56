// Maglev lookup table (Eisenbud et al., "Maglev: A Fast and Reliable Software
// Network Load Balancer", NSDI 2016, section 3.4). Pure: no I/O, so the
// agent, tests and the bench share one builder.
//
// Each backend gets a permutation of 0..M-1 from two hashes of its name
// (offset = h1 % M, skip = h2 % (M-1) + 1, permutation[j] = (offset + j*skip)
// % M; M prime makes every skip coprime with M). Backends then take turns
// claiming their next preferred entry that is still free until the table is
// full. Every backend ends with floor(M/N) or ceil(M/N) entries, and removing
// one backend moves (almost) only the entries it held.
//
// Cross-node consistency: the names are backend address:port (the same on
// every node, unlike backend ids, which each agent allocates), the backends
// are sorted by name before the fill, and the hashes are fixed functions of
// the name with no per-node seed. Two agents given the same backend set build
// byte-identical tables.

/** Default table size: a prime; see docs/algorithms.md for why this one. */
export const DEFAULT_MAGLEV_TABLE_SIZE = 4093;
/** Bounds for the configured size (the data path reads it from entry 0). */
export const MIN_MAGLEV_TABLE_SIZE = 251;
export const MAX_MAGLEV_TABLE_SIZE = 131071;

export function isPrime(n: number): boolean {
  if (!Number.isInteger(n) || n < 2) return false;
  if (n % 2 === 0) return n === 2;
  for (let d = 3; d * d <= n; d += 2) if (n % d === 0) return false;
  return true;
}

/** A configured table size, or an error naming what is wrong with it. */
export function checkMaglevTableSize(m: number, what: string): number {
  if (!Number.isInteger(m) || m < MIN_MAGLEV_TABLE_SIZE || m > MAX_MAGLEV_TABLE_SIZE) {
    throw new Error(`${what}: ${m} is outside ${MIN_MAGLEV_TABLE_SIZE}..${MAX_MAGLEV_TABLE_SIZE}`);
  }
  if (!isPrime(m)) throw new Error(`${what}: ${m} is not a prime (Maglev needs a prime table size, e.g. 1021, 4093, 16381)`);
  return m;
}

/** MurmurHash3's 32-bit finaliser over FNV-1a: a fixed function of the bytes. */
function hashName(name: string, seed: number): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i) & 0xff;
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

const SEED_OFFSET = 0x2545f491;
const SEED_SKIP = 0x9e3779b9 | 0;

/** The name a backend is hashed by: the same on every node. */
export function maglevBackendName(b: { address: string; port: number }): string {
  return `${b.address}:${b.port}`;
}

/**
 * The table: for each of the m entries, an index into `names` (as given, not
 * sorted). `names` must be distinct. Empty names give an empty table.
 */
export function buildMaglevTable(names: readonly string[], m: number): Uint32Array {
  const table = new Uint32Array(m);
  const n = names.length;
  if (n === 0) return new Uint32Array(0);
  // Fill in name order: independent of the order endpoints arrived in.
  const order = names.map((_, i) => i).sort((a, b) => (names[a]! < names[b]! ? -1 : names[a]! > names[b]! ? 1 : 0));
  const offset = new Uint32Array(n);
  const skip = new Uint32Array(n);
  const next = new Uint32Array(n); // current position in each permutation
  for (let k = 0; k < n; k++) {
    const name = names[order[k]!]!;
    offset[k] = hashName(name, SEED_OFFSET) % m;
    skip[k] = (hashName(name, SEED_SKIP) % (m - 1)) + 1;
  }
  const taken = new Uint8Array(m);
  let filled = 0;
  for (;;) {
    for (let k = 0; k < n; k++) {
      // permutation[j] = (offset + j * skip) % m, walked incrementally.
      let c = (offset[k]! + ((next[k]! * skip[k]!) % m)) % m;
      while (taken[c]) {
        next[k]!++;
        c = (c + skip[k]!) % m;
      }
      taken[c] = 1;
      table[c] = order[k]!;
      next[k]!++;
      if (++filled === m) return table;
    }
  }
}

/** Entries held by each name index (for the distribution checks and metrics). */
export function maglevShares(table: Uint32Array, n: number): number[] {
  const shares = new Array<number>(n).fill(0);
  for (const i of table) shares[i]!++;
  return shares;
}
