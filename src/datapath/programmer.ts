// The apply step: make the socket-LB maps hold exactly the frontends asked for.
//
// State is read back from the pinned maps at start (adopt, never flush), ids of
// backends and rev-NAT entries are stable for as long as the object exists, and
// every change is make-before-break: backends and rev-NAT first, then the
// backend range (a new one per backend-set change, in the family's range
// array; ranges.ts), then the master entry that makes them visible; deletes
// in reverse. A program that finds a master entry therefore always finds its
// range and backends.
import * as abi from '../abi/generated';
import type { SockLbMaps, SockLbMaps6 } from './maps';
import type { TypedMap } from './typedMap';
import { bytesToIp6, ip4ToNumber, ip6ToBytes, isIp6, numberToIp4, protoName, protoNumber, type ProtoName } from './addr';
import { IdAllocator } from './ids';
import { BackendBatch, RangeBatch, ServiceEntryBatch } from './serviceBatch';
import { NumberIndex } from './numberIndex';
import { RangeAllocator } from './ranges';
import { readSourceRanges, readSourceRanges6, syncSourceRanges, syncSourceRanges6, syncSourceRangesOf } from './tc/sourceRanges';
import { ServiceNameWriter, type ServiceName } from './serviceNames';
import { MaglevTables } from './maglev';
import { BackendTable, backendKeyOf } from './backendTable';

export type ScopeName = 'external' | 'internal';

export interface BackendSpec {
  address: string;
  port: number;
  proto: ProtoName;
  local?: boolean;
  terminating?: boolean;
  zone?: number;
}

export interface FrontendSpec {
  address: string;
  port: number;
  proto: ProtoName;
  scope: ScopeName;
  flags: number; // LB_SVC_FLAG_*
  affinityTimeout: number; // seconds, 0 = none
  /** LB_ALG_* for the master entry; absent = LB_ALG_RANDOM. */
  algorithm?: number;
  backends: BackendSpec[];
  /** loadBalancerSourceRanges (CIDRs of the frontend's family) enforced by the TC path; needs LB_SVC_FLAG_SOURCE_RANGE. */
  sourceRanges?: string[];
  /** Who asked for it ("Service default/web port http"), for errors. */
  owner?: string;
  /** The Service and port that own it, kept in the names map for the CLI. */
  service?: ServiceName;
}

export interface ProgrammedFrontend {
  id: string;
  address: string;
  port: number;
  proto: ProtoName;
  scope: ScopeName;
  flags: number;
  affinityTimeout: number;
  algorithm: number; // LB_ALG_*
  revNatId: number;
  backendIds: number[];
  sourceRanges: string[];
  /** First index of the frontend's range in its family's range array (owned by it; undefined: owns none). */
  rangeStart?: number;
}

export interface ProgrammedBackend {
  id: number;
  address: string;
  port: number;
  proto: ProtoName;
  flags: number;
  zone: number;
}

export interface ApplyResult {
  frontendsWritten: number;
  frontendsDeleted: number;
  backendsWritten: number;
  backendsDeleted: number;
  /** Ids of backends deleted from the maps: conntrack entries to them must go too. */
  deletedBackendIds: number[];
  unchanged: number;
  failures: Array<{ frontend: string; owner?: string; error: Error }>;
  /** The CLI's names map refused this apply's names (informational: the frontends are programmed). */
  serviceNamesError?: Error;
}

/** What adoptAndRepair() removed: entries a crash mid-apply (or mid-delete) left behind. */
export interface RepairReport {
  /** Rev-NAT entries no master names. */
  revNats: number;
  /** Backends no slot names. */
  backends: number;
  /** Affinity entries naming a rev-NAT id or a backend that is gone, or a backend not of that frontend. */
  affinity: number;
  /** h-maglev: Maglev tables no maglev frontend owns. */
  maglevTables?: number;
}

export interface AdoptOptions {
  rangeGraceMs?: number;
  /** Names of pinned maps known to be empty (created by this start's install): not read. */
  emptyMaps?: ReadonlySet<string>;
}

export function frontendId(f: { address: string; port: number; proto: string; scope: ScopeName }): string {
  // join() makes one flat string; a template literal leaves a rope of 3-4
  // heap objects, and ids are kept by the thousand (programmer, syncer).
  if (isIp6(f.address)) return ['[', f.address, ']:', f.port, '/', f.proto, f.scope === 'internal' ? '#internal' : ''].join('');
  return [f.address, ':', f.port, '/', f.proto, f.scope === 'internal' ? '#internal' : ''].join('');
}

function backendText(b: { address: string; port: number; proto: string }): string {
  return `${b.address}:${b.port}/${b.proto}`;
}
// join(): one flat string per key (a template literal keeps a rope of 3-4 objects per Map key).
const revNatKeyOf = (f: { address: string; port: number; proto: string }) => [f.address, ':', f.port, '/', f.proto].join('');
const scopeNumber = (s: ScopeName) => (s === 'internal' ? abi.LB_SCOPE_INTERNAL : abi.LB_SCOPE_EXTERNAL);

function backendFlags(b: BackendSpec): number {
  return (b.local ? abi.LB_BACKEND_FLAG_LOCAL : 0) | (b.terminating ? abi.LB_BACKEND_FLAG_TERMINATING : 0);
}

/** The IPv4 services-map key of a frontend (its master; IPv4 has no slots). */
export function frontendKeyOf(f: { address: string; port: number; proto: string; scope: ScopeName }): abi.Lb4FrontendKey {
  return {
    address: ip4ToNumber(f.address),
    port: f.port,
    proto: protoNumber(f.proto),
    scope: scopeNumber(f.scope),
  };
}

/** The IPv6 services-map key (SLUICE_MAP_SERVICES6) of a frontend (its master; no slots either). */
export function service6KeyOf(f: { address: string; port: number; proto: string; scope: ScopeName }): abi.Lb6FrontendKey {
  return { address: ip6ToBytes(f.address), port: f.port, proto: protoNumber(f.proto), scope: scopeNumber(f.scope) };
}

/** The master entry's value: what makes a frontend and its range (rangeStart) visible. */
export function masterEntry(f: Pick<ProgrammedFrontend, 'backendIds' | 'flags' | 'revNatId' | 'affinityTimeout' | 'algorithm' | 'rangeStart'>): abi.Lb4Service {
  return { backend_id: f.rangeStart ?? 0, count: f.backendIds.length, flags: f.flags, rev_nat_id: f.revNatId, affinity_timeout: f.affinityTimeout, algorithm: f.algorithm };
}

/** The source ranges of a frontend without any: one shared (frozen) empty list, not one array per frontend. */
const NO_RANGES = Object.freeze([]) as unknown as string[];

function algorithmOf(f: FrontendSpec): number {
  return f.algorithm ?? abi.LB_ALG_RANDOM;
}

export class LbProgrammer {
  private readonly frontends = new Map<string, ProgrammedFrontend>();
  /** Backends by id and by identity (backendTable.ts: no object per backend). */
  private readonly backends = new BackendTable();
  /** Frontends pointing at each backend, by backend id (ids are small and dense). */
  private backendRefs = new Int32Array(1024);
  /** Backends whose last reference went away: checked (not all backends) after an apply. */
  private readonly orphans = new Set<number>();
  private readonly revNats = new Map<string, number>();
  /** Frontends (scopes) using each rev-NAT id. */
  private readonly revNatUsers = new Map<number, number>();
  /** Backends deleted since takeDeletedBackends() was last called (stale-socket termination). */
  private deletedBackends: ProgrammedBackend[] = [];
  private readonly backendIds: IdAllocator;
  private readonly revNatIds: IdAllocator;
  /** Found by adopt(), removed by adoptAndRepair(): never visible to the data path. */
  private readonly leftovers = { revNatIds: [] as number[] };
  private names?: ServiceNameWriter;
  private maglev?: MaglevTables;
  /** The IPv4 backend ranges (SLUICE_MAP_RANGES4). */
  private readonly ranges: RangeAllocator;
  /** The IPv6 backend ranges (SLUICE_MAP_RANGES6), when the pins have the IPv6 tables. */
  private readonly ranges6?: RangeAllocator;
  /** Frontends the next apply must write even if unchanged (adopted without a range of their own). */
  private readonly rewrite = new Set<string>();

  /**
   * Backends no frontend names any more, kept intact for
   * backendGraceMs before their entry is zeroed and their id freed. The
   * backends map is an ARRAY: a delete zeroes the entry in place, at once,
   * so a program that copied the master just before a shrink (it then reads
   * the old range, which names these ids) could check an entry, see it
   * zeroed, and connect to 0.0.0.0:0. (A hash delete left the element
   * readable until the RCU grace period.) A backend added again meanwhile
   * takes its id back: the entry still holds it.
   */
  private backendGraceMs = 0;
  private readonly retiring = new Map<number, { key: number | string; at: number }>();
  private readonly retiringByKey = new Map<number | string, number>();

  private constructor(private readonly maps: SockLbMaps, opts: { rangeGraceMs?: number } = {}) {
    // Backends and rev-NAT entries of both families are ARRAYs indexed by
    // ids from one pool: ids stay below the IPv4 capacity. The IPv6 arrays
    // are as large on a node that serves IPv6 (mapSizing.ts); an IPv6 id
    // beyond a small one is refused at write (checkIds6).
    this.backendIds = new IdAllocator('backend', maps.backends.map.maxEntries - 1);
    this.revNatIds = new IdAllocator('rev-NAT', maps.revNat.map.maxEntries - 1);
    this.ranges = new RangeAllocator(maps.ranges.map.maxEntries, opts.rangeGraceMs);
    if (maps.v6) this.ranges6 = new RangeAllocator(maps.v6.ranges.map.maxEntries, opts.rangeGraceMs);
  }

  /** Read what the pinned maps hold: a restarted agent continues from there. */
  static adopt(maps: SockLbMaps, opts: AdoptOptions = {}): LbProgrammer {
    const p = new LbProgrammer(maps, opts);
    // A map the install just created holds nothing: reading an ARRAY table
    // costs ~250 ns a slot in the kernel (262 144 backends: ~65 ms) before
    // the first sync can start.
    const read = <E>(m: { name: string; readAll(): E[] } | undefined): E[] => (!m || opts.emptyMaps?.has(m.name) ? [] : m.readAll());
    for (const [id, b] of read(maps.backends)) {
      const backend: ProgrammedBackend = {
        id, address: numberToIp4(b.address), port: b.port, proto: protoName(b.proto) as ProtoName, flags: b.flags, zone: b.zone,
      };
      p.backends.set(backend);
      p.backendIds.reserve(id);
      p.orphans.add(id); // unreferenced until a frontend below points at it
    }
    for (const [id, b] of read(maps.v6?.backends)) {
      const backend: ProgrammedBackend = {
        id, address: bytesToIp6(b.address), port: b.port, proto: protoName(b.proto) as ProtoName, flags: b.flags, zone: b.zone,
      };
      p.backends.set(backend);
      p.backendIds.reserve(id);
      p.orphans.add(id);
    }
    const revNatIds: number[] = [];
    for (const [id] of read(maps.v6?.revNat)) {
      p.revNatIds.reserve(id);
      revNatIds.push(id);
    }
    for (const [id] of read(maps.revNat)) {
      // rev-NAT entries are per frontend address:port; the protocol is not
      // stored, so recover it from the master entries below.
      p.revNatIds.reserve(id);
      revNatIds.push(id);
    }
    // One master per frontend, its backend ids in its range (both families).
    p.adoptTable(maps.services.readAll(), maps.ranges, p.ranges);
    if (maps.v6) p.adoptTable(maps.v6.services.readAll(), maps.v6.ranges, p.ranges6!);
    const named = new Set(p.revNats.values());
    p.leftovers.revNatIds = revNatIds.filter((id) => !named.has(id));
    return p;
  }

  /**
   * A family's masters and ranges. The range array is read only when a
   * master names a range: on a fresh node the services map is empty and the
   * whole ARRAY is not worth a pass.
   */
  private adoptTable(masters: Array<[abi.Lb4FrontendKey | abi.Lb6FrontendKey, abi.Lb4Service]>, rangeMap: TypedMap<number, number>, ranges: RangeAllocator): void {
    let rangeIds: Uint32Array | undefined;
    const owners: ProgrammedFrontend[] = [];
    for (const [k, v] of masters) {
      const f = keyToFrontend(k);
      const id = frontendId(f);
      const backendIds: number[] = [];
      if (v.count > 0) rangeIds ??= readRangeArray(rangeMap);
      for (let i = 0; i < v.count; i++) backendIds.push(rangeIds![v.backend_id + i] ?? 0);
      const fe = this.adoptMaster(f, id, v, backendIds);
      if (v.count > 0) {
        fe.rangeStart = v.backend_id;
        ranges.reserve(v.backend_id, v.count);
        owners.push(fe);
      }
    }
    // Ranges two masters share were not written by this allocator: neither
    // owns its range, and both get a range of their own at the next apply.
    const overlaps = ranges.adopted();
    if (overlaps.length === 0) return;
    const bad = new Set(overlaps.map(([start]) => start));
    for (const fe of owners) {
      if (fe.rangeStart === undefined) continue;
      const end = fe.rangeStart + fe.backendIds.length;
      if (overlaps.some(([start, size]) => start < end && fe.rangeStart! < start + size) || bad.has(fe.rangeStart)) {
        fe.rangeStart = undefined;
        this.rewrite.add(fe.id);
      }
    }
  }

  /** One master found in the pinned maps becomes a programmed frontend. */
  private adoptMaster(f: ReturnType<typeof keyToFrontend>, id: string, v: abi.Lb4Service, backendIds: number[]): ProgrammedFrontend {
    const rangeMap6 = this.maps.v6?.sourceRanges;
    const sourceRanges = !(v.flags & abi.LB_SVC_FLAG_SOURCE_RANGE) ? []
      : isIp6(f.address) ? (rangeMap6 ? readSourceRanges6(rangeMap6, v.rev_nat_id) : [])
        : this.maps.sourceRanges ? readSourceRanges(this.maps.sourceRanges, v.rev_nat_id) : [];
    const fe: ProgrammedFrontend = { ...f, id, flags: v.flags, affinityTimeout: v.affinity_timeout, algorithm: v.algorithm, revNatId: v.rev_nat_id, backendIds, sourceRanges };
    this.frontends.set(id, fe);
    this.revNats.set(revNatKeyOf(f), v.rev_nat_id);
    this.revNatUsers.set(v.rev_nat_id, (this.revNatUsers.get(v.rev_nat_id) ?? 0) + 1);
    for (const b of backendIds) this.ref(b, +1);
    return fe;
  }

  /**
   * adopt(), then remove what a crash left: rev-NAT entries and backends nothing names, and
   * affinity entries that name a frontend or backend that is gone (or a
   * backend not of that frontend). None of these is reachable by the data
   * path, so removing them changes no connection. For the agent at start;
   * the CLI's views use plain adopt(), which writes nothing.
   */
  static adoptAndRepair(maps: SockLbMaps, opts: AdoptOptions = {}): { programmer: LbProgrammer; repaired: RepairReport } {
    const p = LbProgrammer.adopt(maps, opts);
    const { revNatIds } = p.leftovers;
    for (const id of revNatIds) {
      if (maps.sourceRanges) syncSourceRanges(maps.sourceRanges, id, []);
      if (maps.v6?.sourceRanges) syncSourceRanges6(maps.v6.sourceRanges, id, []);
      maps.revNat.delete(id);
      maps.v6?.revNat.delete(id);
      p.revNatIds.release(id);
    }
    const backends = p.collectGarbage().length;
    // Backends each rev-NAT id's frontends (both scopes) may send a client to.
    const members = new Map<number, Set<number>>();
    for (const f of p.frontends.values()) {
      let m = members.get(f.revNatId);
      if (!m) members.set(f.revNatId, (m = new Set()));
      for (const b of f.backendIds) m.add(b);
    }
    const staleAffinity: abi.Lb4AffinityKey[] = [];
    for (const [k, v] of maps.affinity.entries()) {
      if (!members.get(k.rev_nat_id)?.has(v.backend_id)) staleAffinity.push(k);
    }
    maps.affinity.deleteMany(staleAffinity);
    const maglevTables = p.maglevTables()?.adopt(p.programmedFrontends().filter((f) => f.algorithm === abi.LB_ALG_MAGLEV)); // h-maglev
    const staleAffinity6: abi.Lb6AffinityKey[] = [];
    for (const [k, v] of maps.v6?.affinity.entries() ?? []) {
      if (!members.get(k.rev_nat_id)?.has(v.backend_id)) staleAffinity6.push(k);
    }
    maps.v6?.affinity.deleteMany(staleAffinity6);
    p.leftovers.revNatIds = [];
    return {
      programmer: p,
      repaired: { revNats: revNatIds.length, backends, affinity: staleAffinity.length + staleAffinity6.length, ...(maglevTables ? { maglevTables } : {}) },
    };
  }

  /**
   * Ids freed since the last call may be handed out again. Call it once the
   * entries that could still name them are gone: affinity entries are purged
   * by the programmer itself, conntrack flows by the owner of the TC path
   * (the syncer's onBackendsDeleted) right after the apply that freed them.
   */
  /** Keep removed backends' entries readable this long (the agent: after adoption, which removes leftovers at once). */
  setBackendGrace(ms: number): void {
    this.backendGraceMs = ms;
  }

  /** Retiring backends whose grace period is over: zero their entries, free their ids. */
  private retireExpired(now: number): void {
    for (const [id, r] of this.retiring) {
      if (r.at > now - this.backendGraceMs) break; // insertion order is time order
      this.backendMapOf(r.key).delete(id);
      this.backendIds.release(id);
      this.retiring.delete(id);
      this.retiringByKey.delete(r.key);
    }
  }

  /** A retiring backend added again: its id (and intact entry) come back. */
  private takeRetiring(key: number | string): number | undefined {
    const id = this.retiringByKey.get(key);
    if (id === undefined) return undefined;
    this.retiringByKey.delete(key);
    this.retiring.delete(id);
    return id;
  }

  recycleIds(): void {
    this.backendIds.recycle();
    this.revNatIds.recycle();
  }

  programmedFrontends(): ProgrammedFrontend[] {
    return [...this.frontends.values()];
  }

  programmedBackends(): ProgrammedBackend[] {
    return [...this.backends.values()];
  }

  frontend(id: string): ProgrammedFrontend | undefined {
    return this.frontends.get(id);
  }

  frontendCount(): number {
    return this.frontends.size;
  }

  backendCount(): number {
    return this.backends.size;
  }

  /** A range array (IPv4, or IPv6 with `ipv6`): entries used, free, waiting for their grace period; times it was full. */
  rangeStats(ipv6 = false): ReturnType<RangeAllocator['stats']> & { full: number } {
    const r = ipv6 ? this.ranges6 : this.ranges;
    if (!r) return { capacity: 0, used: 0, free: 0, quarantined: 0, largestFree: 0, full: 0 };
    return { ...r.stats(), full: r.fullCount };
  }

  /** Ids the allocators hold (issue 13 item 2: back to 0 once every Service is gone, or an id leaked). */
  idsInUse(): { backend: number; revNat: number } {
    return { backend: this.backendIds.size, revNat: this.revNatIds.size };
  }

  backendById(id: number): ProgrammedBackend | undefined {
    return this.backends.byId(id);
  }

  /**
   * Backends deleted from the maps since the last call whose address, port
   * and protocol no frontend uses any more (one deleted and re-added under a
   * new id in the same pass is still alive): the sockets connected to these
   * can be ended.
   */
  takeDeletedBackends(): ProgrammedBackend[] {
    const gone = this.deletedBackends.filter((b) => !this.backends.has(backendKeyOf(b)));
    this.deletedBackends = [];
    return gone;
  }

  /**
   * Make the maps hold exactly `desired` (prune: true) or add/replace just
   * these frontends (prune: false). Frontends are applied in batches; when a
   * batch fails (a full map, a rejected value) the frontends of that batch are
   * retried one by one so one bad frontend cannot block the others, and each
   * failure is returned with its frontend.
   */
  apply(desired: FrontendSpec[], opts: { prune: boolean }): ApplyResult {
    const result: ApplyResult = { frontendsWritten: 0, frontendsDeleted: 0, backendsWritten: 0, backendsDeleted: 0, deletedBackendIds: [], unchanged: 0, failures: [] };
    const wanted = new Map<string, FrontendSpec>();
    for (const f of desired) wanted.set(frontendId(f), f);

    const changed: FrontendSpec[] = [];
    for (const [id, f] of wanted) {
      if (this.isUnchanged(id, f)) result.unchanged++;
      else changed.push(f);
    }
    try {
      this.writeFrontends(changed, result);
    } catch {
      for (const f of changed) {
        try {
          this.writeFrontends([f], result);
        } catch (error) {
          result.failures.push({ frontend: frontendId(f), owner: f.owner, error: error as Error });
        }
      }
    }
    if (opts.prune) {
      const stale = [...this.frontends.keys()].filter((id) => !wanted.has(id));
      for (const id of stale) {
        this.deleteFrontend(id);
        result.frontendsDeleted++;
      }
    }
    this.maglev?.flushRemovals();
    result.deletedBackendIds = this.collectGarbage();
    result.backendsDeleted = result.deletedBackendIds.length;
    try {
      this.recordServiceNames(wanted);
    } catch (error) {
      // Names only serve the CLI: a full names map must not fail a pass
      // whose frontends are all programmed (the syncer would retry it forever).
      result.serviceNamesError = error as Error;
    }
    return result;
  }

  /** Remove one frontend by id; returns the backend ids deleted. */
  removeFrontend(id: string): { frontends: number; deletedBackendIds: number[] } {
    if (!this.frontends.has(id)) return { frontends: 0, deletedBackendIds: [] };
    this.deleteFrontend(id);
    this.maglev?.flushRemovals();
    return { frontends: 1, deletedBackendIds: this.collectGarbage() };
  }

  /** Remove one frontend (both scopes when scope is not given); returns the backend ids deleted. */
  remove(address: string, port: number, proto: ProtoName, only?: ScopeName): { frontends: number; deletedBackendIds: number[] } {
    let frontends = 0;
    for (const scope of only ? [only] : (['internal', 'external'] as const)) {
      const id = frontendId({ address, port, proto, scope });
      if (this.frontends.has(id)) {
        this.deleteFrontend(id);
        frontends++;
      }
    }
    this.maglev?.flushRemovals();
    return { frontends, deletedBackendIds: this.collectGarbage() };
  }

  private isUnchanged(id: string, f: FrontendSpec): boolean {
    const cur = this.frontends.get(id);
    if (!cur || this.rewrite.has(id) || cur.flags !== f.flags || cur.affinityTimeout !== f.affinityTimeout || cur.algorithm !== algorithmOf(f)) return false;
    if (!sameRanges(cur.sourceRanges, f.sourceRanges ?? [])) return false;
    if (cur.backendIds.length !== f.backends.length) return false;
    return f.backends.every((b, i) => {
      const id = this.backends.idOf(backendKeyOf(b));
      return id !== undefined && id === cur.backendIds[i] && this.backends.same(id, backendFlags(b), b.zone ?? 0);
    });
  }

  private writeFrontends(frontends: FrontendSpec[], result: ApplyResult): void {
    if (frontends.length === 0) return;
    // 1. backends and rev-NAT entries (new or changed). IPv4 backends are
    // encoded into one batch straight from their identity number, with a
    // typed-array index of the batch's keys: at a cold start this loop runs
    // for every backend (100k+), and an object, a Map entry and a second
    // parse of the address per backend were most of the write's time.
    const backendWrites = new BackendBatch(frontends.length * 8);
    const pending4 = new NumberIndex(frontends.length * 8); // backendKeyOf -> index in backendWrites
    const backend6Writes = new Map<number, abi.Lb6Backend>(); // by id: a later frontend of the batch may change flags
    // IPv6 backends written by this batch, by key: frontends of one batch often
    // share backends (ClusterIP and NodePort of one Service), and must share ids.
    const pending6 = new Map<string, ProgrammedBackend>();
    const idsFor: number[][] = new Array(frontends.length);
    const fids: string[] = new Array(frontends.length);
    for (let fi = 0; fi < frontends.length; fi++) {
      const f = frontends[fi]!;
      const fid = frontendId(f);
      fids[fi] = fid;
      const f6 = isIp6(f.address);
      const ids: number[] = new Array(f.backends.length);
      for (let bi = 0; bi < f.backends.length; bi++) {
        const b = f.backends[bi]!;
        if (b.proto !== f.proto) throw new Error(`${fid}: backend ${backendText(b)} has another protocol`);
        // Each family's backends live in that family's map (the socket hook rewrites one family's address).
        if (isIp6(b.address) !== f6) throw new Error(`${fid}: backend ${backendText(b)} is of another address family`);
        const key = backendKeyOf(b);
        const flags = backendFlags(b);
        const zone = b.zone ?? 0;
        if (typeof key === 'number') {
          const at = pending4.get(key);
          if (at !== undefined) {
            if (backendWrites.flagsAt(at) !== flags || backendWrites.zoneAt(at) !== zone) backendWrites.setMeta(at, flags, zone);
            ids[bi] = backendWrites.idAt(at);
            continue;
          }
          const known = this.backends.idOf(key);
          if (known !== undefined && this.backends.same(known, flags, zone)) {
            ids[bi] = known;
            continue;
          }
          protoNumber(b.proto); // a named error for a protocol the maps cannot hold
          const id = known ?? this.takeRetiring(key) ?? this.backendIds.allocate();
          pending4.set(key, backendWrites.add(id, key, flags, zone));
          ids[bi] = id;
          continue;
        }
        let known: { id: number; flags: number; zone: number } | undefined = pending6.get(key);
        if (!known) {
          const id = this.backends.idOf(key);
          if (id !== undefined) known = { id, flags: this.backends.flags(id), zone: this.backends.zone(id) };
        }
        if (!known || known.flags !== flags || known.zone !== zone) {
          const id = known?.id ?? this.takeRetiring(key) ?? this.backendIds.allocate();
          const record: ProgrammedBackend = { id, address: b.address, port: b.port, proto: b.proto, flags, zone };
          known = record;
          backend6Writes.set(id, { address: ip6ToBytes(b.address), port: b.port, proto: protoNumber(b.proto), flags, zone });
          pending6.set(key, record);
        }
        ids[bi] = known.id;
      }
      idsFor[fi] = ids;
    }
    const newBackendIds = () => {
      const out = [...pending6.values()].map((b) => b.id);
      for (let i = 0; i < backendWrites.count; i++) out.push(backendWrites.idAt(i));
      return out;
    };
    const revNatWrites: Array<[number, abi.Lb4ReverseNat]> = [];
    const revNat6Writes: Array<[number, abi.Lb6ReverseNat]> = [];
    const newRevNats = new Map<string, number>();
    const revNatKeys: string[] = new Array(frontends.length);
    for (let fi = 0; fi < frontends.length; fi++) {
      const f = frontends[fi]!;
      const key = revNatKeyOf(f);
      revNatKeys[fi] = key;
      if (!this.revNats.has(key) && !newRevNats.has(key)) {
        const id = this.revNatIds.allocate();
        newRevNats.set(key, id);
        if (isIp6(f.address)) revNat6Writes.push([id, { address: ip6ToBytes(f.address), port: f.port }]);
        else revNatWrites.push([id, { address: ip4ToNumber(f.address), port: f.port }]);
      }
    }
    try {
      backendWrites.writeTo(this.maps.backends);
      this.maps.revNat.setMany(revNatWrites);
      if (backend6Writes.size > 0 || revNat6Writes.length > 0) {
        checkIds6(this.v6().backends, backend6Writes.keys(), 'backend');
        checkIds6(this.v6().revNat, revNat6Writes.map(([id]) => id), 'rev-NAT');
        this.v6().backends.setMany([...backend6Writes]);
        this.v6().revNat.setMany(revNat6Writes);
      }
    } catch (err) {
      // Ids allocated for entries that never landed go back to the pool.
      for (let i = 0; i < backendWrites.count; i++) if (!this.backends.has(backendWrites.keyAt(i))) this.backendIds.unallocate(backendWrites.idAt(i));
      for (const b of pending6.values()) if (!this.backends.has(backendKeyOf(b))) this.backendIds.unallocate(b.id);
      for (const id of newRevNats.values()) this.revNatIds.unallocate(id);
      throw err;
    }
    for (let i = 0; i < backendWrites.count; i++) {
      this.backends.setIp4(backendWrites.idAt(i), backendWrites.keyAt(i), backendWrites.flagsAt(i), backendWrites.zoneAt(i));
    }
    for (const b of pending6.values()) this.backends.set(b);
    for (const [k, id] of newRevNats) this.revNats.set(k, id);
    result.backendsWritten += backendWrites.count + backend6Writes.size;

    // 1b. Maglev tables of frontends that use it (before the master that
    // turns the algorithm on; unchanged backend sets are not rebuilt).
    frontends.forEach((f, fi) => {
      if (algorithmOf(f) === abi.LB_ALG_MAGLEV) this.syncMaglev(f, this.revNats.get(revNatKeys[fi]!)!, idsFor[fi]!);
    });
    this.maglev?.flush();

    // 2. a new range for each new backend set (in its family's array),
    // 3. masters, 4. old ranges released.
    const rangeWrites = new RangeBatch(frontends.length * 4);
    const range6Writes = new RangeBatch(16);
    // [allocator, start, size]
    const newRanges: Array<[RangeAllocator, number, number]> = [];
    const oldRanges: Array<[RangeAllocator, number, number]> = [];
    const masterWrites = new ServiceEntryBatch(frontends.length);
    // IPv6 masters: a plain entry list (their numbers are small next to IPv4's).
    const master6Writes: Array<[abi.Lb6FrontendKey, abi.Lb4Service]> = [];
    const updates: ProgrammedFrontend[] = [];
    const unallocate = () => {
      for (const [r, start, size] of newRanges) r.unallocate(start, size);
    };
    try {
      for (let fi = 0; fi < frontends.length; fi++) {
        const f = frontends[fi]!;
        const id = fids[fi]!;
        const ids = idsFor[fi]!;
        if (ids.length > abi.SLUICE_MAX_SLOTS_PER_SERVICE) {
          throw new Error(`${id}: ${ids.length} backends exceed the ${abi.SLUICE_MAX_SLOTS_PER_SERVICE} slots of one frontend`);
        }
        const cur = this.frontends.get(id);
        const revNatId = this.revNats.get(revNatKeys[fi]!)!;
        const update: ProgrammedFrontend = { id, address: f.address, port: f.port, proto: f.proto, scope: f.scope, flags: f.flags, affinityTimeout: f.affinityTimeout, algorithm: algorithmOf(f), revNatId, backendIds: ids, sourceRanges: f.sourceRanges?.length ? [...f.sourceRanges].sort() : NO_RANGES };
        const v6 = isIp6(f.address);
        const ranges = v6 ? this.ranges6Of() : this.ranges;
        // The same backend set keeps its range (only the master changes);
        // another set gets a new range, never the one a reader may hold.
        if (cur?.rangeStart !== undefined && sameIds(cur.backendIds, ids)) {
          update.rangeStart = cur.rangeStart;
        } else {
          if (ids.length > 0) {
            update.rangeStart = ranges.allocate(ids.length);
            newRanges.push([ranges, update.rangeStart, ids.length]);
            (v6 ? range6Writes : rangeWrites).add(update.rangeStart, ids);
          }
          if (cur?.rangeStart !== undefined) oldRanges.push([ranges, cur.rangeStart, cur.backendIds.length]);
        }
        if (v6) master6Writes.push([service6KeyOf(f), masterEntry(update)]);
        else masterWrites.add(frontendKeyOf(f), masterEntry(update));
        updates.push(update);
      }
    } catch (err) {
      unallocate();
      for (const id of newBackendIds()) this.orphans.add(id);
      throw err;
    }
    // Source ranges are written before the master that turns them on, and
    // ranges no longer wanted are removed only after it (make-before-break).
    const rangeMaps = { v4: this.maps.sourceRanges, v6: this.maps.v6?.sourceRanges };
    for (const u of updates) {
      if (u.sourceRanges.length > 0) syncSourceRangesOf(rangeMaps, u.address, u.revNatId, u.sourceRanges);
    }
    try {
      rangeWrites.writeTo(this.maps.ranges);
      masterWrites.writeTo(this.maps.services);
      if (master6Writes.length > 0) {
        range6Writes.writeTo(this.v6().ranges);
        this.v6().services.setMany(master6Writes);
      }
    } catch (err) {
      // Nothing half-done stays behind: ranges this batch wrote are named by
      // no master that a failed batch update left out, and go back to the
      // allocator (a master the batch did write keeps its range: the
      // frontend stays "changed" and is rewritten by the next attempt, and
      // its range is released then). Backends nobody references are
      // collected at the end of apply().
      const visible = new Set<number>();
      const visible6 = new Set<number>();
      for (let i = 0; i < masterWrites.count; i++) {
        const v = this.maps.services.get(masterWrites.keyAt(i));
        if (v && v.count > 0) visible.add(v.backend_id);
      }
      for (const [k] of master6Writes) {
        const v = this.maps.v6?.services.get(k);
        if (v && v.count > 0) visible6.add(v.backend_id);
      }
      for (const [r, start, size] of newRanges) if (!(r === this.ranges ? visible : visible6).has(start)) r.unallocate(start, size);
      for (const id of newBackendIds()) this.orphans.add(id);
      throw err;
    }
    for (const [r, start, size] of oldRanges) r.release(start, size);
    for (const u of updates) {
      if (u.algorithm !== abi.LB_ALG_MAGLEV && this.frontends.get(u.id)?.algorithm === abi.LB_ALG_MAGLEV) this.maglevTables()?.remove(u);
    }
    this.maglev?.flushRemovals();
    for (const u of updates) {
      const before = this.frontends.get(u.id)?.sourceRanges ?? [];
      if (u.sourceRanges.length === 0 && before.length > 0) syncSourceRangesOf(rangeMaps, u.address, u.revNatId, []);
    }

    for (const u of updates) {
      const cur = this.frontends.get(u.id);
      for (const b of u.backendIds) this.ref(b, +1);
      if (!cur) this.revNatUsers.set(u.revNatId, (this.revNatUsers.get(u.revNatId) ?? 0) + 1);
      if (cur) {
        for (const b of cur.backendIds) this.ref(b, -1);
        this.forgetAffinity(u, cur.backendIds.filter((b) => !u.backendIds.includes(b)));
      }
      this.frontends.set(u.id, u);
      this.rewrite.delete(u.id);
      result.frontendsWritten++;
    }
  }

  private deleteFrontend(id: string): void {
    const cur = this.frontends.get(id);
    if (!cur) return;
    // Master first: the frontend disappears at once, then its range.
    if (isIp6(cur.address)) this.v6().services.delete(service6KeyOf(cur));
    else this.maps.services.delete(frontendKeyOf(cur));
    // Programs may still read the range through a copy of the master: reused after the grace period.
    if (cur.rangeStart !== undefined) (isIp6(cur.address) ? this.ranges6Of() : this.ranges).release(cur.rangeStart, cur.backendIds.length);
    if (cur.algorithm === abi.LB_ALG_MAGLEV) this.maglevTables()?.remove(cur); // deleted by flushRemovals() below the callers
    for (const b of cur.backendIds) this.ref(b, -1);
    this.forgetAffinity(cur, cur.backendIds);
    this.frontends.delete(id);
    this.forgetServiceName(cur);
    const rnKey = revNatKeyOf(cur);
    const users = (this.revNatUsers.get(cur.revNatId) ?? 1) - 1;
    this.revNatUsers.set(cur.revNatId, users);
    if (users <= 0) {
      // Ranges are keyed by rev-NAT id, shared by both scopes: cleared with it.
      if (cur.sourceRanges.length > 0) syncSourceRangesOf({ v4: this.maps.sourceRanges, v6: this.maps.v6?.sourceRanges }, cur.address, cur.revNatId, []);
      this.revNatUsers.delete(cur.revNatId);
      if (isIp6(cur.address)) this.v6().revNat.delete(cur.revNatId);
      else this.maps.revNat.delete(cur.revNatId);
      this.revNatIds.release(cur.revNatId);
      this.revNats.delete(rnKey);
    }
  }

  /** Names of programmed frontends for the CLI (informational: after the frontends, and only where they differ). */
  private recordServiceNames(specs: Map<string, FrontendSpec>): void {
    const names = this.serviceNameWriter();
    if (!names) return;
    const batch: Array<{ revNatId: number; proto: ProtoName; name: ServiceName }> = [];
    for (const [id, f] of specs) {
      const programmed = this.frontends.get(id);
      if (f.service && programmed) batch.push({ revNatId: programmed.revNatId, proto: f.proto, name: f.service });
    }
    names.writeMany(batch);
  }

  /** A name goes with the last scope of its frontend. */
  private forgetServiceName(f: ProgrammedFrontend): void {
    const other = frontendId({ ...f, scope: f.scope === 'internal' ? 'external' : 'internal' });
    if (!this.frontends.has(other)) this.serviceNameWriter()?.forget(f.revNatId, f.proto);
  }

  /** h-maglev: the Maglev tables (undefined on pins without the map). */
  maglevTables(): MaglevTables | undefined {
    if (!this.maglev && this.maps.maglev) this.maglev = new MaglevTables(this.maps.maglev, this.maps.maglevTableSize);
    return this.maglev;
  }

  private syncMaglev(f: FrontendSpec, revNatId: number, ids: number[]): void {
    const tables = this.maglevTables();
    if (!tables) throw new Error(`${frontendId(f)}: maglev needs the ${abi.SLUICE_MAP_MAGLEV4} map (pins from an older Sluice: restart with fresh pins)`);
    tables.queue({ revNatId, proto: f.proto, scope: f.scope }, f.backends.map((b, i) => ({ id: ids[i]!, address: b.address, port: b.port })));
  }

  private serviceNameWriter(): ServiceNameWriter | undefined {
    if (!this.names && this.maps.serviceNames) this.names = new ServiceNameWriter(this.maps.serviceNames);
    return this.names;
  }

  /** Backends no frontend points at any more are deleted last. */
  private collectGarbage(): number[] {
    const deleted: number[] = [];
    const now = Date.now();
    this.retireExpired(now);
    for (const id of this.orphans) {
      if ((this.backendRefs[id] ?? 0) > 0) continue;
      const b = this.backendById(id);
      if (b) {
        const key = backendKeyOf(b);
        if (this.backendGraceMs > 0) {
          this.retiring.set(id, { key, at: now });
          this.retiringByKey.set(key, id);
        } else {
          this.backendMapOf(key).delete(id);
          this.backendIds.release(id);
        }
        this.backends.deleteId(id);
        deleted.push(id);
        this.deletedBackends.push(b);
      }
      if (id < this.backendRefs.length) this.backendRefs[id] = 0;
    }
    this.orphans.clear();
    return deleted;
  }

  /** ClientIP affinity must not keep sending clients to a removed backend. */
  private forgetAffinity(f: ProgrammedFrontend, removed: number[]): void {
    if (removed.length === 0 || (f.flags & abi.LB_SVC_FLAG_AFFINITY) === 0) return;
    const gone = new Set(removed);
    if (isIp6(f.address)) {
      for (const [k, v] of this.v6().affinity.entries()) {
        if (k.rev_nat_id === f.revNatId && gone.has(v.backend_id)) this.v6().affinity.delete(k);
      }
      return;
    }
    for (const [k, v] of this.maps.affinity.entries()) {
      if (k.rev_nat_id === f.revNatId && gone.has(v.backend_id)) this.maps.affinity.delete(k);
    }
  }

  /** A backend's map by its key (backendKeyOf: a string for IPv6). */
  private backendMapOf(key: number | string): TypedMap<number, unknown> {
    return typeof key === 'string' ? this.v6().backends : this.maps.backends;
  }

  /** The IPv6 range allocator (the IPv6 maps exist: see v6()). */
  private ranges6Of(): RangeAllocator {
    this.v6();
    return this.ranges6!;
  }

  /** The IPv6 maps, or a clear error when the pinned maps predate them. */
  private v6(): SockLbMaps6 {
    if (!this.maps.v6) throw new Error('IPv6 frontend: the pinned maps have no IPv6 tables (sluice_svc6); reinstall the data path with this Sluice');
    return this.maps.v6;
  }

  private ref(backendId: number, delta: number): void {
    if (backendId >= this.backendRefs.length) {
      const grown = new Int32Array(Math.max(backendId + 1, this.backendRefs.length * 2));
      grown.set(this.backendRefs);
      this.backendRefs = grown;
    }
    const refs = this.backendRefs[backendId]! + delta;
    this.backendRefs[backendId] = refs;
    if (refs <= 0) this.orphans.add(backendId);
  }
}

/**
 * IPv6 ids index sluice_be6 / sluice_revnat6, which a node that serves no
 * IPv6 pins small while ids come from the pool both families share: an id
 * beyond such an array is refused naming the map and the remedy.
 */
function checkIds6(table: TypedMap<number, unknown>, ids: Iterable<number>, what: string): void {
  for (const id of ids) {
    if (id >= table.map.maxEntries) {
      throw new Error(`IPv6 ${what} id ${id} is beyond ${table.name} (${table.map.maxEntries} entries; ids are shared with IPv4): ` +
        'this node\'s IPv6 tables are small (ipv6Maps: auto found no IPv6 on the Node); set ipv6Maps: full and restart the agent');
    }
  }
}

function sameIds(a: number[], b: number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** The whole range array, index -> backend id (one batched read). */
function readRangeArray(ranges: SockLbMaps['ranges']): Uint32Array {
  const out = new Uint32Array(ranges.map.maxEntries);
  const { keys, values, count } = ranges.map.lookupBatch(65536);
  for (let i = 0; i < count; i++) out[keys.readUInt32LE(i * 4)] = values.readUInt32LE(i * 4);
  return out;
}

function sameRanges(a: string[], b: string[]): boolean {
  if (a.length !== b.length) return false;
  const sorted = [...b].sort();
  return a.every((x, i) => x === sorted[i]);
}

function keyToFrontend(k: abi.Lb4FrontendKey | abi.Lb6FrontendKey): { address: string; port: number; proto: ProtoName; scope: ScopeName } {
  return {
    address: typeof k.address === 'number' ? numberToIp4(k.address) : bytesToIp6(k.address),
    port: k.port,
    proto: protoName(k.proto) as ProtoName,
    scope: k.scope === abi.LB_SCOPE_INTERNAL ? 'internal' : 'external',
  };
}
