// Maglev tables in the data path (issue 15): build (maglevTable.ts), write,
// swap, free. Owned by the programmer, called for frontends whose algorithm
// is maglev.
//
// Layout (native/sluice_abi.h, bpf/lib/maglev.h): the pinned ARRAY_OF_MAPS
// sluice_maglev4 holds, at a frontend's index (maglevIndexOf: rev-NAT id and
// scope), an inner ARRAY of lb_maglev_row: row 0 holds M and the number of
// backends, entry e of the table is row 1 + e/8, column e%8, a backend id.
// An array, not a hash keyed by the frontend: the data path's lookup is one
// inlined load instead of a hash lookup's two cache misses. Array entries
// cannot be deleted in a batch (ENOTSUPP), and one delete of a map-in-map
// waits an RCU grace period, so a frontend's table is removed by pointing
// its entry at one shared empty table (M 0: the data path falls back to a
// random slot, as for a missing entry) in one batch update.
//
// Make-before-break: a new table is a new inner array, created and filled
// completely before one update of the outer entry installs it. A pick that
// started on the old table finishes on it (the kernel frees the old array
// after an RCU grace period), a pick that starts later sees the new one: no
// pick ever sees a half-written table. Frontends with the same backend set
// and M (a Service's ClusterIP, NodePorts and both scopes) share one inner
// array. Nothing is rebuilt when a frontend's backends did not change.
import * as fs from 'node:fs';
import { createHash } from 'node:crypto';
import * as abi from '../abi/generated';
import { BpfMap } from '../bpf/map';
import { MapType } from '../bpf/constants';
import { libbpf } from '../bpf/libbpf';
import { buildMaglevTable, maglevBackendName, DEFAULT_MAGLEV_TABLE_SIZE } from './maglevTable';
import { ip4ToNumber, ip6ToBytes, protoNumber } from './addr';

const ROW = abi.LB_MAGLEV_ROW;
const ROW_BYTES = ROW * 4;
/** BPF_F_INNER_MAP: the outer map's template has it, so every inner array must too (sizes may then differ). */
const BPF_F_INNER_MAP = 1 << 12;

export interface MaglevFrontend {
  revNatId: number;
  proto: string;
  scope: 'external' | 'internal';
}

export interface MaglevBackend {
  id: number;
  address: string;
  port: number;
}

/** What the agent exports as metrics. */
export interface MaglevStats {
  /** Distinct inner tables live (frontends with one backend set share one). */
  tables: number;
  /** Frontends with a table. */
  frontends: number;
  /** Kernel memory of the live tables (memlock of each inner array) plus the outer map. */
  bytes: number;
  builds: number;
}

/** What a drift repair (drift.ts) found and set right in the Maglev tables. */
export interface MaglevDrift {
  /** Inner tables whose rows differed from what the agent built: rewritten in place. */
  tables: number;
  /** Outer entries missing or naming another inner array: written again. */
  outer: number;
  /** Outer entries no maglev frontend owns: deleted. */
  extra: number;
  /** Tables adopted from the pins (content unknown, no fd): rebuilt and swapped in. */
  adopted: number;
}

interface Table {
  /** Open while the table lives: frontends that get the same backends later share it by this fd
   * (bpf_map_get_fd_by_id would need CAP_SYS_ADMIN, which the agent does not have). Absent for
   * tables adopted from the pins: those are never shared. */
  map?: BpfMap;
  mapId: number;
  refs: number;
  bytes: number;
  /** The backends it was built from (name-sorted) and a digest of its rows: drift repair compares and rebuilds with them. */
  backends?: readonly MaglevBackend[];
  digest?: string;
}

/**
 * The outer map's index of a frontend (lb_maglev_index in bpf/lib/maglev.h):
 * rev-NAT ids come from one pool for both families and each names one
 * address, port and protocol, so the id and the scope name one frontend.
 */
export function maglevIndexOf(f: Pick<MaglevFrontend, 'revNatId' | 'scope'>): number {
  return f.revNatId * 2 + (f.scope === 'internal' ? 1 : 0);
}

/** The outer map's key (a little-endian __u32 index) of a frontend. */
export function maglevKeyOf(f: Pick<MaglevFrontend, 'revNatId' | 'scope'>): Buffer {
  const key = Buffer.alloc(KEY_SIZE);
  key.writeUInt32LE(maglevIndexOf(f), 0);
  return key;
}

const KEY_SIZE = 4;

const keyText = (f: MaglevFrontend) => `${f.revNatId}/${f.proto}/${f.scope}`;

function frontendOfKeyText(k: string): MaglevFrontend {
  const [revNatId, proto, scope] = k.split('/');
  return { revNatId: Number(revNatId), proto: proto!, scope: scope === 'internal' ? 'internal' : 'external' };
}

/** Index -> keyText of the frontends these keyTexts name (the index has no protocol). */
const indexTexts = (texts: Iterable<string>) => new Map([...texts].map((k) => [maglevIndexOf(frontendOfKeyText(k)), k]));

/** Digest of a table's encoded rows (drift repair compares tables by it; kept instead of the rows). */
const digestOf = (rows: Buffer) => createHash('sha1').update(rows).digest('base64');

/** MurmurHash3's 64-bit finaliser, as lb_hash64 in bpf/lib/hash64.h. */
export function hash64(x: bigint): bigint {
  const M64 = 0xffffffffffffffffn;
  x &= M64;
  x ^= x >> 33n;
  x = (x * 0xff51afd7ed558ccdn) & M64;
  x ^= x >> 33n;
  x = (x * 0xc4ceb9fe1a85ec53n) & M64;
  x ^= x >> 33n;
  return x;
}

/** A big-endian port as the data path loads it (__be16 into a little-endian register). */
const be16 = (port: number) => BigInt(((port & 0xff) << 8) | (port >> 8));
/** An IPv4 address as the data path loads it (__be32, little-endian host). */
export const loadedBe32 = (address: string): bigint => be32(address);
const be32 = (address: string) => {
  const n = ip4ToNumber(address) >>> 0; // the address as a number, most significant byte first
  return BigInt((((n & 0xff) << 24) | ((n & 0xff00) << 8) | ((n >>> 8) & 0xff00) | (n >>> 24)) >>> 0);
};

/**
 * lb4_maglev_flow_hash (bpf/lib/maglev.h) in TypeScript: the TC paths' hash of
 * a flow. Tests and `sluice trace` predict the entry with it; keep both equal.
 */
export function maglevFlowHash(t: { saddr: string; daddr: string; sport: number; dport: number; proto: string }): bigint {
  const ports = (be16(t.sport) << 32n) | (be16(t.dport) << 16n) | BigInt(protoNumber(t.proto));
  return hash64(((be32(t.saddr) << 32n) | be32(t.daddr)) ^ hash64(ports));
}

/**
 * lb6_maglev_flow_hash (bpf/lib/lb6.h) in TypeScript: the IPv6 TC path's hash
 * of a flow. The ports word is hashed, then each address half (two 32-bit
 * words as the data path loads them, little-endian) is mixed in and hashed
 * again: source high, source low, destination high, destination low.
 */
export function maglevFlowHash6(t: { saddr: string; daddr: string; sport: number; dport: number; proto: string }): bigint {
  const ports = (be16(t.sport) << 32n) | (be16(t.dport) << 16n) | BigInt(protoNumber(t.proto));
  let h = hash64(ports);
  for (const address of [t.saddr, t.daddr]) {
    const b = ip6ToBytes(address);
    for (const half of [0, 8]) h = hash64(h ^ ((BigInt(b.readUInt32LE(half)) << 32n) | BigInt(b.readUInt32LE(half + 4))));
  }
  return h;
}

/** The table entry a hash selects (lb4_maglev_select: low 32 bits mod M). */
export function maglevEntry(hash: bigint, m: number): number {
  return Number((hash & 0xffffffffn) % BigInt(m));
}

/** Encode a table of backend ids as the inner array's rows (row 0: M, backends). */
export function encodeMaglevRows(ids: Uint32Array, backends: number): Buffer {
  const m = ids.length;
  const rows = 1 + Math.ceil(m / ROW);
  const buf = Buffer.alloc(rows * ROW_BYTES);
  buf.writeUInt32LE(m, 0);
  buf.writeUInt32LE(backends, 4);
  for (let e = 0; e < m; e++) buf.writeUInt32LE(ids[e]!, ROW_BYTES + e * 4);
  return buf;
}

/** Decode an inner array's rows back to { m, backends, ids } (CLI, tests). */
export function decodeMaglevRows(buf: Buffer): { m: number; backends: number; ids: Uint32Array } {
  const m = buf.readUInt32LE(0);
  const ids = new Uint32Array(m);
  for (let e = 0; e < m; e++) ids[e] = buf.readUInt32LE(ROW_BYTES + e * 4);
  return { m, backends: buf.readUInt32LE(4), ids };
}

/** Read one frontend's table from the pinned outer map; undefined when it has none. */
export function readMaglevTable(outer: BpfMap, f: MaglevFrontend): { m: number; backends: number; ids: Uint32Array; mapId: number } | undefined {
  const raw = outer.lookup(maglevKeyOf(f));
  if (!raw) return undefined;
  const mapId = raw.readUInt32LE(0);
  const inner = BpfMap.fromId(mapId);
  try {
    if (inner.maxEntries < 2) return undefined; // the shared empty table: a removed one
    const all = Buffer.alloc(inner.maxEntries * ROW_BYTES);
    const key = Buffer.alloc(4);
    const row = Buffer.alloc(ROW_BYTES);
    for (let i = 0; i < inner.maxEntries; i++) {
      key.writeUInt32LE(i, 0);
      if (inner.lookupInto(key, row)) row.copy(all, i * ROW_BYTES);
    }
    return { ...decodeMaglevRows(all), mapId };
  } finally {
    inner.close();
  }
}

/**
 * Kernel memory of a table the agent did not create (found at start): its
 * memlock when it can be opened by id (needs CAP_SYS_ADMIN), else the array's
 * size at the configured M.
 */
function adoptedBytes(mapId: number, m: number): number {
  try {
    const inner = BpfMap.fromId(mapId);
    try {
      return memlockOf(inner.fd);
    } finally {
      inner.close();
    }
  } catch {
    return (1 + Math.ceil(m / ROW)) * ROW_BYTES;
  }
}

/** memlock of a map as the kernel accounts it (/proc/self/fdinfo). */
function memlockOf(fd: number): number {
  const m = /memlock:\s*(\d+)/.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'));
  return m ? Number(m[1]) : 0;
}

export class MaglevTables {
  /** Inner tables by content (M and the name=id list). */
  private readonly tables = new Map<string, Table>();
  /** Each frontend's table signature. */
  private readonly frontends = new Map<string, string>();
  /** Tables built and waiting for flush(), by frontend. */
  private readonly pending = new Map<string, { f: MaglevFrontend; sig: string }>();
  /** Frontends whose outer entry flushRemovals() deletes. */
  private readonly removals = new Map<string, MaglevFrontend>();
  private btf?: { fd: number; keyTypeId: number; valueTypeId: number } | null;
  /** What a removed frontend's entry names (created on first use): one row of zeros, M 0. */
  private empty?: BpfMap;
  /** Ids of empty tables found in the pins (an earlier agent's). */
  private readonly emptyIds = new Set<number>();
  private builds = 0;
  private readonly buildSeconds: number[] = [];
  private readonly outerBytes: number;

  constructor(
    private readonly outer: BpfMap,
    readonly tableSize: number = DEFAULT_MAGLEV_TABLE_SIZE,
  ) {
    this.outerBytes = memlockOf(outer.fd);
  }

  /**
   * Make the frontend's table name these backends, now. Builds a table only
   * when no live table has this backend set; returns true when the
   * frontend's outer entry changed.
   */
  sync(f: MaglevFrontend, backends: readonly MaglevBackend[]): boolean {
    const changed = this.queue(f, backends);
    this.flush();
    return changed;
  }

  /**
   * sync() for many frontends: tables are built now, the outer entries all
   * written by the next flush() in one batch. Every single update of a
   * map-in-map waits for an RCU grace period (the kernel's
   * maybe_wait_bpf_programs, ~13 ms here), a batch waits once: 10 000
   * tables went from 154 s one by one to seconds.
   */
  queue(f: MaglevFrontend, backends: readonly MaglevBackend[]): boolean {
    const k = keyText(f);
    if (maglevIndexOf(f) >= this.outer.maxEntries) {
      throw new Error(`maglev frontend rev-NAT id ${f.revNatId} (${f.proto}, ${f.scope}): index ${maglevIndexOf(f)} is beyond the ${this.outer.maxEntries} entries of ${abi.SLUICE_MAP_MAGLEV4} (twice the rev-NAT capacity: raise sluice_revnat4's maxEntries and restart)`);
    }
    const sorted = [...backends].sort((a, b) => cmp(maglevBackendName(a), maglevBackendName(b)));
    const sig = `${this.tableSize}|${sorted.map((b) => `${maglevBackendName(b)}=${b.id}`).join(',')}`;
    const pending = this.pending.get(k);
    if ((pending?.sig ?? this.frontends.get(k)) === sig) return false;
    if (backends.length === 0) {
      this.remove(f);
      return true;
    }
    if (!this.tables.has(sig)) {
      const { map, digest } = this.build(sorted);
      this.tables.set(sig, { map, mapId: map.id, refs: 0, bytes: memlockOf(map.fd), backends: sorted, digest });
    }
    this.pending.set(k, { f, sig });
    if (pending) this.dropUnused(pending.sig);
    this.removals.delete(k);
    return true;
  }

  /** Write every queued table into the outer map (one batch). */
  flush(): void {
    if (this.pending.size === 0) return;
    const items = [...this.pending.values()];
    this.pending.clear();
    const keys = Buffer.alloc(items.length * KEY_SIZE);
    const fds = Buffer.alloc(items.length * 4);
    items.forEach((it, i) => {
      keys.writeUInt32LE(maglevIndexOf(it.f), i * KEY_SIZE);
      fds.writeUInt32LE(this.tables.get(it.sig)!.map!.fd, i * 4);
    });
    try {
      this.outer.updateBatch(keys, fds, items.length);
    } catch (err) {
      for (const it of items) this.dropUnused(it.sig);
      throw err;
    }
    for (const it of items) {
      const k = keyText(it.f);
      this.tables.get(it.sig)!.refs++;
      this.release(this.frontends.get(k));
      this.frontends.set(k, it.sig);
    }
  }

  /** The frontend no longer uses Maglev (or is gone): queued, see flushRemovals (after its master says so). */
  remove(f: MaglevFrontend): void {
    const k = keyText(f);
    const pending = this.pending.get(k);
    if (pending) {
      this.pending.delete(k);
      this.dropUnused(pending.sig);
    }
    this.removals.set(k, f);
  }

  /** Point the queued frontends' outer entries at the empty table (one batch). */
  flushRemovals(): void {
    if (this.removals.size === 0) return;
    const items = [...this.removals];
    this.removals.clear();
    this.emptyEntries(items.map(([, f]) => maglevIndexOf(f)));
    for (const [k] of items) {
      this.release(this.frontends.get(k));
      this.frontends.delete(k);
    }
  }

  /**
   * At agent start: account the tables the pinned map already holds for
   * these (maglev) frontends, and delete outer entries no such frontend owns
   * (left by a crash between a table write and its master, or by a switch
   * away that did not finish). Nothing looks those up; they only hold
   * memory. Returns how many were deleted.
   */
  adopt(owned: readonly MaglevFrontend[]): number {
    const want = indexTexts(owned.map(keyText));
    const stale: number[] = [];
    const all = this.outer.lookupBatch();
    for (let i = 0; i < all.count; i++) {
      const index = all.keys.readUInt32LE(i * KEY_SIZE);
      const mapId = all.values.readUInt32LE(i * 4);
      const kt = want.get(index);
      if (kt === undefined) {
        if (!this.isEmpty(mapId)) stale.push(index);
        continue;
      }
      const sig = `adopted:${mapId}`; // content unknown: never shared, replaced on the next change
      let table = this.tables.get(sig);
      if (!table) {
        table = { mapId, refs: 0, bytes: adoptedBytes(mapId, this.tableSize) };
        this.tables.set(sig, table);
      }
      table.refs++;
      this.frontends.set(kt, sig);
    }
    this.emptyEntries(stale);
    return stale.length;
  }

  // ---- drift repair (drift.ts) --------------------------------------------

  /** The frontends with a table, for drift repair to walk in chunks. */
  frontendList(): MaglevFrontend[] {
    return [...this.frontends.keys()].map(frontendOfKeyText);
  }

  /**
   * Drift repair of these frontends, synchronous (so no sync interleaves):
   * an outer entry that is missing or names another inner array is written
   * again (one batch); a table whose rows differ from what was built (compared
   * by digest, one batch read per table, each table once per pass: `seen`)
   * is rewritten in place (its entries were wrong already; every value
   * written is a live backend). Frontends gone since the list was taken are
   * skipped. Tables adopted from the pins are returned: the caller rebuilds
   * them from the programmer's backends (their content is unknown here).
   */
  repairChunk(frontends: readonly MaglevFrontend[], seen: Set<string>, drift: MaglevDrift): { checked: number; adopted: MaglevFrontend[] } {
    const key = Buffer.alloc(KEY_SIZE);
    const value = Buffer.alloc(4);
    const outerKeys: Buffer[] = [];
    const outerFds: number[] = [];
    const adopted: MaglevFrontend[] = [];
    let checked = 0;
    for (const f of frontends) {
      const sig = this.frontends.get(keyText(f));
      const t = sig === undefined ? undefined : this.tables.get(sig);
      if (!t || this.pending.has(keyText(f))) continue;
      if (!t.map || !t.backends || !t.digest) {
        adopted.push(f);
        continue;
      }
      key.writeUInt32LE(maglevIndexOf(f), 0);
      checked++;
      if (!this.outer.lookupInto(key, value) || value.readUInt32LE(0) !== t.mapId) {
        outerKeys.push(Buffer.from(key));
        outerFds.push(t.map.fd);
      }
      if (seen.has(sig!)) continue;
      seen.add(sig!);
      checked++;
      const have = t.map.lookupBatch();
      if (digestOf(have.values.subarray(0, have.count * ROW_BYTES)) === t.digest) continue;
      const m = Number(sig!.slice(0, sig!.indexOf('|')));
      const rows = this.rowsOf(t.backends, m);
      const count = rows.length / ROW_BYTES;
      const keys = Buffer.alloc(count * 4);
      for (let i = 0; i < count; i++) keys.writeUInt32LE(i, i * 4);
      t.map.updateBatch(keys, rows, count);
      drift.tables++;
    }
    if (outerKeys.length) {
      const fds = Buffer.alloc(outerFds.length * 4);
      outerFds.forEach((fd, i) => fds.writeUInt32LE(fd, i * 4));
      this.outer.updateBatch(Buffer.concat(outerKeys), fds, outerKeys.length);
      drift.outer += outerKeys.length;
    }
    return { checked, adopted };
  }

  /** Drift repair: empty the outer entries no frontend with a table owns (bpftool, a crashed agent). */
  deleteForeign(drift: MaglevDrift): void {
    const all = this.outer.lookupBatch();
    const owned = indexTexts([...this.frontends.keys(), ...this.pending.keys()]);
    const stale: number[] = [];
    for (let i = 0; i < all.count; i++) {
      const index = all.keys.readUInt32LE(i * KEY_SIZE);
      if (!owned.has(index) && !this.isEmpty(all.values.readUInt32LE(i * 4))) stale.push(index);
    }
    this.emptyEntries(stale);
    drift.extra += stale.length;
  }

  /** Point these outer entries at the shared empty table, in one batch (see the header). */
  private emptyEntries(indices: readonly number[]): void {
    if (indices.length === 0) return;
    const empty = (this.empty ??= this.createEmpty());
    const keys = Buffer.alloc(indices.length * KEY_SIZE);
    const fds = Buffer.alloc(indices.length * 4);
    indices.forEach((index, i) => {
      keys.writeUInt32LE(index, i * KEY_SIZE);
      fds.writeUInt32LE(empty.fd, i * 4);
    });
    this.outer.updateBatch(keys, fds, indices.length);
  }

  /** The empty table: one row of zeros (M 0). */
  private createEmpty(): BpfMap {
    return BpfMap.create({ type: MapType.ARRAY, name: 'sluice_maglev0', keySize: 4, valueSize: ROW_BYTES, maxEntries: 1, flags: BPF_F_INNER_MAP, btf: this.btfTypes() ?? undefined });
  }

  /** An inner array id that is an empty table (ours, or one of one row left by an earlier agent). */
  private isEmpty(mapId: number): boolean {
    if (this.empty && mapId === this.empty.id) return true;
    if (this.emptyIds.has(mapId)) return true;
    try {
      const inner = BpfMap.fromId(mapId);
      try {
        if (inner.maxEntries < 2) this.emptyIds.add(mapId);
        return inner.maxEntries < 2;
      } finally {
        inner.close();
      }
    } catch {
      return false; // cannot open it (no CAP_SYS_ADMIN): treated as a table
    }
  }

  /** Close the fds this object holds (the tables live on in the outer map's entries). */
  close(): void {
    this.empty?.close();
    this.empty = undefined;
    for (const t of this.tables.values()) t.map?.close();
    this.tables.clear();
    this.frontends.clear();
    this.pending.clear();
  }

  /** Build durations (seconds) since the last call, for the histogram. */
  takeBuildSeconds(): number[] {
    return this.buildSeconds.splice(0);
  }

  stats(): MaglevStats {
    let bytes = this.outerBytes;
    for (const t of this.tables.values()) bytes += t.bytes;
    return { tables: this.tables.size, frontends: this.frontends.size, bytes, builds: this.builds };
  }

  private release(sig: string | undefined): void {
    if (sig === undefined) return;
    const t = this.tables.get(sig);
    if (t) t.refs--;
    this.dropUnused(sig);
  }

  /** Close a table no frontend uses and none is about to (the kernel frees it with its last outer entry). */
  private dropUnused(sig: string): void {
    const t = this.tables.get(sig);
    if (!t || t.refs > 0) return;
    for (const p of this.pending.values()) if (p.sig === sig) return;
    t.map?.close();
    this.tables.delete(sig);
  }

  /** The encoded rows of the table of these (name-sorted) backends at size m. */
  private rowsOf(sorted: readonly MaglevBackend[], m: number): Buffer {
    const order = buildMaglevTable(sorted.map(maglevBackendName), m);
    const ids = new Uint32Array(m);
    for (let e = 0; e < m; e++) ids[e] = sorted[order[e]!]!.id;
    return encodeMaglevRows(ids, sorted.length);
  }

  /** A new inner array holding the table of these (name-sorted) backends. */
  private build(sorted: readonly MaglevBackend[]): { map: BpfMap; digest: string } {
    const start = process.hrtime.bigint();
    const rows = this.rowsOf(sorted, this.tableSize);
    const count = rows.length / ROW_BYTES;
    const map = BpfMap.create({ type: MapType.ARRAY, name: 'sluice_maglev', keySize: 4, valueSize: ROW_BYTES, maxEntries: count, flags: BPF_F_INNER_MAP, btf: this.btfTypes() ?? undefined });
    try {
      const keys = Buffer.alloc(count * 4);
      for (let i = 0; i < count; i++) keys.writeUInt32LE(i, i * 4);
      map.updateBatch(keys, rows, count);
    } catch (err) {
      map.close();
      throw err;
    }
    this.builds++;
    this.buildSeconds.push(Number(process.hrtime.bigint() - start) / 1e9);
    return { map, digest: digestOf(rows) };
  }

  /** BTF for the inner arrays (__u32 -> struct lb_maglev_row), so bpftool prints named rows; null when it cannot be loaded. */
  private btfTypes(): { fd: number; keyTypeId: number; valueTypeId: number } | null {
    return (this.btf ??= maglevRowBtf());
  }
}

let rowBtf: { fd: number; keyTypeId: number; valueTypeId: number } | null | undefined;

/**
 * The types of one inner array, loaded into the kernel once per process
 * (kept for its life: every table created references it). Built here rather
 * than taken from the object: its BTF has lb_maglev_row only as a forward
 * declaration (the type is used only through pointers there).
 */
function maglevRowBtf(): { fd: number; keyTypeId: number; valueTypeId: number } | null {
  if (rowBtf !== undefined) return rowBtf;
  rowBtf = null;
  const lib = libbpf();
  const btf = lib.btf__new_empty();
  if (!btf) return null;
  const u = lib.btf__add_int(btf, 'unsigned int', 4, 0);
  const u32 = lib.btf__add_typedef(btf, '__u32', u);
  const arr = lib.btf__add_array(btf, u, u32, ROW);
  const row = lib.btf__add_struct(btf, 'lb_maglev_row', ROW_BYTES);
  if (u <= 0 || u32 <= 0 || arr <= 0 || row <= 0 || lib.btf__add_field(btf, 'backend_id', arr, 0, 0) < 0 || lib.btf__load_into_kernel(btf) < 0) {
    lib.btf__free(btf);
    return null;
  }
  rowBtf = { fd: lib.btf__fd(btf), keyTypeId: u32, valueTypeId: row };
  return rowBtf;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Bytes of a layout-1 outer key (struct lb4_maglev_key: rev_nat_id u32, proto u8, scope u8, pad[2]). */
const LAYOUT1_KEY_SIZE = 8;

/**
 * Live migration of sluice_maglev4 (src/datapath/migrate.ts). Layout 1 was a
 * HASH_OF_MAPS keyed by {rev-NAT id, protocol, scope}; layout 2 is the
 * ARRAY_OF_MAPS at maglevIndexOf. The inner tables themselves are unchanged,
 * so the new outer map is pointed at the same inner arrays (opened by id:
 * an outer map reads back inner ids, updates take fds): every frontend keeps
 * its table, and so its flows' backends, across the upgrade. The same copy
 * serves a capacity change of layout 2. Indices beyond the new map, and
 * removed frontends' empty tables, are skipped. Insert-only: an index the new
 * map already names a table at is left as it is (a migration finished after
 * a kill, whose fill may have run).
 */
export function refillMaglevOuter(from: BpfMap, to: BpfMap, fromLayout: number): { copied: number; skipped: number } {
  const all = from.lookupBatch();
  const keySize = fromLayout === 1 ? LAYOUT1_KEY_SIZE : KEY_SIZE;
  if (from.keySize !== keySize) throw new Error(`${from.name}: no translation from layout ${fromLayout} (key ${from.keySize} bytes)`);
  const opened: BpfMap[] = [];
  const keys = Buffer.alloc(all.count * KEY_SIZE);
  const fds = Buffer.alloc(all.count * 4);
  const indexKey = Buffer.alloc(KEY_SIZE);
  const present = Buffer.alloc(4);
  let copied = 0;
  let skipped = 0;
  try {
    for (let i = 0; i < all.count; i++) {
      const raw = all.keys.subarray(i * keySize, (i + 1) * keySize);
      const index = fromLayout === 1 ? maglevIndexOf({ revNatId: raw.readUInt32LE(0), scope: raw.readUInt8(5) === abi.LB_SCOPE_INTERNAL ? 'internal' : 'external' }) : raw.readUInt32LE(0);
      if (index < to.maxEntries) {
        indexKey.writeUInt32LE(index, 0);
        if (to.lookupInto(indexKey, present)) continue;
      }
      let inner: BpfMap;
      try {
        inner = BpfMap.fromId(all.values.readUInt32LE(i * from.valueBufferSize));
      } catch {
        skipped++; // freed since the read (the old agent replaced it)
        continue;
      }
      opened.push(inner);
      if (index >= to.maxEntries || inner.maxEntries < 2) {
        skipped++;
        continue;
      }
      keys.writeUInt32LE(index, copied * KEY_SIZE);
      fds.writeUInt32LE(inner.fd, copied * 4);
      copied++;
    }
    // One batch: each single update of a map-in-map waits an RCU grace period (see MaglevTables.queue).
    to.updateBatch(keys, fds, copied);
  } finally {
    for (const inner of opened) inner.close();
  }
  return { copied, skipped };
}
