// Live map migration (issue 13 item 4): a pinned map whose capacity or layout
// differs from what a new object declares is replaced without dropping
// connections.
//
// libbpf reuses a pinned map only when type, key/value size, max_entries and
// flags match, and BpfObject adopts the pinned size otherwise, so before this
// module a `maxEntries` change in the config was silently ignored and a
// layout change needed a new map name. Now, per object load:
//
//   plan      compare every pinned map with the object's declaration and
//             the layout version recorded in the pinned `sluice_layout` map;
//             refuse (touching nothing) a pin from a newer layout, or a
//             layout change that a carried map has no translation for
//   open      move each changed map's pin aside (`<name>_migrating`, the
//             old programs keep it) so the load creates the new map
//   fill      copy the entries old -> new by the map's policy
//   (caller)  swap the programs in place through the pinned links
//   finish    copy again what the old programs wrote between fill and the
//             swap (insert-only), unpin the old maps (the kernel frees them
//             with the last program that holds them), record the layouts
//
// Policies are one line per map (MAP_POLICIES): helpers adding or changing a
// map add or edit its line; a layout change bumps `layout` and gives
// `translate`.
import * as fs from 'node:fs';
import * as path from 'node:path';
import os from 'node:os';
import { BpfObject } from '../bpf/object';
import { BpfMap, kernelAddedMapFlags, mapInfo, type MapDescription } from '../bpf/map';
import { BpfError, check, libbpf } from '../bpf/libbpf';
import { BPF_ANY, BPF_NOEXIST, MapType, mapTypeName } from '../bpf/constants';
import * as abi from '../abi/generated';
import { refillMaglevOuter } from './maglev';

/**
 * Turns one old entry into the new layout (key and value as the old map holds
 * them; per-CPU maps: every CPU's slot); undefined skips the entry.
 */
export type Translate = (key: Buffer, value: Buffer, from: MapDescription, to: MapDescription) => [Buffer, Buffer] | undefined;

/** The new object's maps by name: the loaded object at fill, the pins when an interrupted migration is finished. */
export type NewMaps = Pick<BpfObject, 'map'>;

/**
 * Fills the new map (and others of the new object) from the old map, for a
 * layout change whose entries move to other maps too (one entry cannot be
 * translated alone), and for a map-in-map at any change. Called once at fill;
 * not repeated at finish, so only for maps that only the agent writes.
 */
export type Refill = (from: BpfMap, obj: NewMaps, fromLayout: number, opts?: { resume?: boolean }) => { copied: number; skipped: number };

export type MapPolicy =
  /** Entries are state the data path needs (connections): copied; a layout change needs `translate` (or `refill`) or is refused. */
  | { kind: 'carry'; layout?: number; translate?: Translate; refill?: Refill }
  /** Written by the agent from the API: copied when the layout allows it, else refilled by the first sync. */
  | { kind: 'rebuild'; layout?: number; translate?: Translate }
  /** Starts empty; `reason` says why nothing is lost that matters. */
  | { kind: 'drop'; layout?: number; reason: string };

/**
 * One line per pinned map. `layout` (default 1) is the map's layout version:
 * bump it when the meaning of the key or value changes even at the same size,
 * and give the translation from the previous one.
 */
export const MAP_POLICIES: Record<string, MapPolicy> = {
  // Frontends and backends: connect()s and new flows need them at every
  // moment, so they are carried (the agent adopts them, then re-programs).
  // Layout 2 (Katran-style table): the services hash holds one master per
  // frontend (key without the slot) naming a range of the range array;
  // layout 1 held the master and one entry per backend slot. Backends and
  // rev-NAT entries became ARRAYs indexed by the same ids (same key and
  // value: copied as they are).
  [abi.SLUICE_MAP_SERVICES4]: { kind: 'carry', layout: 2, refill: (from, obj, layout, opts) => slotsToRanges(SLOTS4, from, obj, layout, opts) },
  [abi.SLUICE_MAP_RANGES4]: { kind: 'carry' },
  [abi.SLUICE_MAP_BACKENDS4]: { kind: 'carry', layout: 2, translate: (k, v) => [k, v] },
  [abi.SLUICE_MAP_REVNAT4]: { kind: 'carry', layout: 2, translate: (k, v) => [k, v] },
  [abi.SLUICE_MAP_AFFINITY4]: { kind: 'carry' },
  [abi.SLUICE_MAP_RR4]: { kind: 'carry' },
  [abi.SLUICE_MAP_SOCK_CFG]: { kind: 'carry' },
  [abi.SLUICE_MAP_COUNTERS]: { kind: 'carry' },
  [abi.SLUICE_MAP_AGENT]: { kind: 'carry' },
  // North-south flows: the reply translation of every open connection.
  [abi.SLUICE_MAP_CT4]: { kind: 'carry' },
  [abi.SLUICE_MAP_TC_CONFIG]: { kind: 'carry' },
  [abi.SLUICE_MAP_NODEIP4]: { kind: 'rebuild' },
  [abi.SLUICE_MAP_SRCRANGE4]: { kind: 'rebuild' },
  [abi.SLUICE_MAP_SNAT_DEV4]: { kind: 'rebuild' },
  [abi.SLUICE_MAP_SNAT_DEV6]: { kind: 'rebuild' },
  [abi.SLUICE_MAP_SVC_NAMES]: { kind: 'rebuild' },
  [abi.SLUICE_MAP_FRAG4]: { kind: 'drop', reason: 'fragment ports live for one datagram; a datagram in flight during the swap is lost, as with any fragment loss' },
  [abi.SLUICE_MAP_FRAG6]: { kind: 'drop', reason: 'IPv6 fragment ports, as sluice_frag4: an IPv6 datagram in flight during the swap is lost' },
  [abi.SLUICE_MAP_ICMP6_TMP]: { kind: 'drop', reason: 'per-CPU scratch of the ICMPv6 errors the TC paths build: empty between packets' },
  [abi.SLUICE_MAP_EVENTS]: { kind: 'drop', reason: 'events not yet read by `sluice monitor` are lost' },
  [abi.SLUICE_MAP_EVENTS_ON]: { kind: 'drop', reason: 'a running `sluice monitor` must be restarted' },
  // Socket-local storage cannot be read or written for other processes'
  // sockets from user space: its layout must only ever grow compatibly.
  [abi.SLUICE_MAP_SOCK4]: { kind: 'drop', reason: 'per-socket state cannot be copied from user space: existing sockets lose their reverse translation (keep lb4_sock_state compatible instead)' },
  [abi.SLUICE_MAP_SOCKTERM4]: { kind: 'rebuild' },
  [abi.SLUICE_MAP_SOCKTERM6]: { kind: 'rebuild' },
  // TCP's reverse pairs, keyed by socket cookie (never reused): carried, so
  // open connections keep showing their Service in getpeername.
  [abi.SLUICE_MAP_SOCK_TCP4]: { kind: 'carry' },
  // Their first home, slots indexed by the cookie's low bits (same reason).
  [abi.SLUICE_MAP_SOCK_SLOT4]: { kind: 'carry' },
  // IPv6 TCP sockets' slots (same reason; before them, every IPv6 pair lived
  // in sluice_sock6, which the hooks still read when a slot does not name the socket).
  [abi.SLUICE_MAP_SOCK_SLOT6]: { kind: 'carry' },
  // UDP sockets' first-frontend slots (same reason: open sockets keep their
  // sticky backend and recvmsg's Service address; cookies are never reused).
  [abi.SLUICE_MAP_SOCK_USLOT4]: { kind: 'carry' },
  // IPv6 UDP sockets' first-frontend slots (the same reasons as IPv4's).
  [abi.SLUICE_MAP_SOCK_USLOT6]: { kind: 'carry' },
  // Pod netns cookie -> pod addresses: written by the CNI plugin at ADD only,
  // so the agent cannot rebuild it: carried (loadBalancerSourceRanges).
  [abi.SLUICE_MAP_POD_ADDR]: { kind: 'carry' },
  // least-connection: the active counts and the flows holding them must
  // survive, or counts drift; a socket's note of its count lives with the socket.
  [abi.SLUICE_MAP_LC_COUNT4]: { kind: 'carry' },
  [abi.SLUICE_MAP_LC_FLOW4]: { kind: 'carry' },
  [abi.SLUICE_MAP_LC_FLOW6]: { kind: 'carry' },
  [abi.SLUICE_MAP_LC_SOCK4]: { kind: 'drop', reason: 'per-socket state cannot be copied from user space: sockets open across a layout change would never give their counts back (keep lb_lc_sock compatible instead)' },
  // Maglev: layout 2 (issue 12) is an ARRAY_OF_MAPS indexed by rev-NAT id
  // and scope instead of a HASH_OF_MAPS keyed by them. The outer entries
  // name inner tables by id, which an update cannot take: refilled by
  // pointing the new map at the same tables, so every Maglev frontend keeps
  // its backends for its flows across the upgrade (and across a capacity change).
  [abi.SLUICE_MAP_MAGLEV4]: { kind: 'carry', layout: 2, refill: (from, obj, layout) => refillMaglevOuter(from, obj.map(abi.SLUICE_MAP_MAGLEV4), layout) },
  // IPv6 (issue 14): the same policies as their IPv4 twins, layout 2 too
  // (one master per frontend naming a range of sluice_rng6; backends and
  // rev-NAT entries in ARRAYs indexed by the same ids as the hashes' keys).
  [abi.SLUICE_MAP_SERVICES6]: { kind: 'carry', layout: 2, refill: (from, obj, layout, opts) => slotsToRanges(SLOTS6, from, obj, layout, opts) },
  [abi.SLUICE_MAP_RANGES6]: { kind: 'carry' },
  [abi.SLUICE_MAP_BACKENDS6]: { kind: 'carry', layout: 2, translate: (k, v) => [k, v] },
  [abi.SLUICE_MAP_REVNAT6]: { kind: 'carry', layout: 2, translate: (k, v) => [k, v] },
  [abi.SLUICE_MAP_AFFINITY6]: { kind: 'carry' },
  [abi.SLUICE_MAP_NODEIP6]: { kind: 'rebuild' },
  [abi.SLUICE_MAP_SRCRANGE6]: { kind: 'rebuild' },
  // IPv6 north-south (issue 14 item 3): flows carried like sluice_ct4; the
  // scratch entry holds nothing between packets.
  [abi.SLUICE_MAP_CT6]: { kind: 'carry' },
  [abi.SLUICE_MAP_TC_CONFIG6]: { kind: 'carry' },
  // DSR (issue 17 item 2): the node's --nodeport-mode, rewritten by the agent at its start.
  [abi.SLUICE_MAP_DSR_CFG]: { kind: 'carry' },
  [abi.SLUICE_MAP_CT6_TMP]: { kind: 'drop', reason: 'per-CPU scratch of the IPv6 TC path: empty between packets' },
  [abi.SLUICE_MAP_SOCK6]: { kind: 'drop', reason: 'per-socket state cannot be copied from user space: existing IPv6 sockets lose their reverse translation (keep lb6_sock_state compatible instead)' },
  // XDP (issue 17): the frontend-address set and the redirect targets are the
  // agent's (rewritten at its start); the counters are kept; the FIB scratch is per packet.
  [abi.SLUICE_MAP_XDP_FE4]: { kind: 'rebuild' },
  [abi.SLUICE_MAP_XDP_FE6]: { kind: 'rebuild' },
  [abi.SLUICE_MAP_XDP_TX]: { kind: 'rebuild' },
  // The prefilter bitmap: recomputed from the two sets before the links switch (loadXdpObject).
  [abi.SLUICE_MAP_XDP_PF]: { kind: 'rebuild' },
  [abi.SLUICE_MAP_XDP_STATS]: { kind: 'carry' },
  [abi.SLUICE_MAP_XDP_NP]: { kind: 'carry' },
  [abi.SLUICE_MAP_XDP_FIB]: { kind: 'drop', reason: 'scratch space of one packet: nothing lives in it between packets' },
  [abi.SLUICE_MAP_XDP_S6]: { kind: 'drop', reason: 'scratch space of one IPv6 packet: nothing lives in it between packets' },
  [abi.SLUICE_MAP_XDP_FC]: { kind: 'drop', reason: 'FIB answers cached for 50 ms: the first packets after the load look the routes up again' },
  [abi.SLUICE_MAP_XDP_FC6]: { kind: 'drop', reason: 'IPv6 FIB answers cached for 50 ms: the first packets after the load look the routes up again' },
  [abi.SLUICE_MAP_TC_FC]: { kind: 'drop', reason: 'FIB answers of TC redirects cached for 50 ms: the first packets after the load look the routes up again' },
  // Pod veths (issue 12): the frontend-address bitmap is its maintainer's; copied
  // as it is (marker word included), so a maintained bitmap stays complete across an upgrade.
  [abi.SLUICE_MAP_POD_PF4]: { kind: 'rebuild' },
};

/**
 * Pins of maps no build declares any more, unpinned by finish (the old
 * programs hold their own references until their links are swapped). A map
 * whose layout no BTF describes (a ring buffer's records) changes its name
 * instead of its layout version, so that programs and readers of different
 * versions never share it: the old name is listed here.
 */
export const RETIRED_MAPS: Record<string, string> = {
  sluice_events: 'ring of lb_event layout 1 (IPv4 only, 72 bytes); now sluice_ev_v2 (both families, 104 bytes)',
};

/** Unlisted maps: copied when the layout allows it, else empty (logged). */
const DEFAULT_POLICY: MapPolicy = { kind: 'rebuild' };

/** The pinned map that records each map's layout version: name (16 bytes, NUL-padded) -> u32. */
export const LAYOUT_MAP = 'sluice_layout';
const NAME_LEN = 16;
const LAYOUT_MAP_ENTRIES = 256;

/** Pin name of a map being replaced (bpffs refuses names with a dot). */
export const oldPinName = (name: string) => `${name}_migrating`;

/** A pinned map that is not what the object declares. */
export interface MapChange {
  map: string;
  /** capacity: only max_entries differs; layout: type, sizes, flags or layout version. */
  why: 'capacity' | 'layout';
  from: MapDescription & { layout: number };
  to: MapDescription & { layout: number };
  policy: MapPolicy['kind'];
}

export interface MigratedMap extends MapChange {
  /** Entries in the new map taken from the old one. */
  carried: number;
  /** Old entries not carried (no room, translation skipped them, or the policy starts empty). */
  dropped: number;
  note?: string;
}

/** A migration this code cannot do: nothing was changed. */
export class MigrationRefused extends Error {}

const ARRAY_TYPES = new Set<number>([MapType.ARRAY, MapType.PERCPU_ARRAY]);
/** Types whose values read back as inner map ids but are written as fds: copyEntries cannot copy them, a refill must. */
const MAP_IN_MAP = new Set<number>([MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS]);
/** Types whose entries user space cannot list or whose size is not a capacity. */
const NO_ENTRIES = new Set<number>([MapType.SK_STORAGE, MapType.RINGBUF]);

export interface MigrationOptions {
  bpffs: string;
  /** Capacities asked for (the config's maxEntries); names of other objects' maps are ignored. */
  maxEntries?: Record<string, number>;
  /** Tests: replace or add policies. */
  policies?: Record<string, MapPolicy>;
}

/**
 * Opens `objectPath` for loading with its maps pinned under bpffs, after
 * moving aside the pins that must be migrated. Throws MigrationRefused,
 * touching nothing, when a pin cannot be migrated.
 */
export class MapMigration {
  readonly changes: MapChange[];
  private readonly old = new Map<string, BpfMap>();
  private readonly results = new Map<string, MigratedMap>();
  /** Maps whose entries were copied at fill: copied again at finish. */
  private readonly copied = new Set<string>();
  private readonly policies: Record<string, MapPolicy>;
  private readonly declared: MapDescription[];
  private readonly requested: Record<string, number>;
  /** Old maps of a migration a kill cut short, still pinned aside: copied again after the swap, unpinned at finish. */
  private readonly interrupted = new Map<string, Interrupted>();
  private moved = false;

  private constructor(private readonly objectPath: string, private readonly opts: MigrationOptions, declared: MapDescription[], requested: Record<string, number>) {
    this.policies = { ...MAP_POLICIES, ...(opts.policies ?? {}) };
    this.declared = declared;
    this.requested = requested;
    for (const i of finishInterrupted(opts.bpffs, this.policies, new Set(declared.map((d) => d.name)))) this.interrupted.set(i.name, i);
    try {
      this.changes = plan(opts.bpffs, declared, requested, this.policies);
    } catch (err) {
      this.closeInterrupted(); // their pins stay aside: the next start finishes them
      throw err;
    }
    // A map changed again (another capacity) while its last migration was
    // unfinished: that one ends here, so open() can move the pin aside.
    for (const c of this.changes) {
      const i = this.interrupted.get(c.map);
      if (!i) continue;
      i.from.close();
      this.interrupted.delete(c.map);
      fs.rmSync(path.join(opts.bpffs, oldPinName(c.map)), { force: true });
    }
  }

  private closeInterrupted(): void {
    for (const i of this.interrupted.values()) i.from.close();
    this.interrupted.clear();
  }

  /** Plan the migration of the maps `objectPath` declares (refusals throw here). */
  static plan(objectPath: string, opts: MigrationOptions): MapMigration {
    // Opened without pins: the declaration as built, with the requested sizes.
    const probe = BpfObject.open(objectPath);
    try {
      const names = new Set(probe.mapNames());
      const requested = Object.fromEntries(Object.entries(opts.maxEntries ?? {}).filter(([n]) => names.has(n)));
      const declared = probe.declaredMaps().map((d) => ({ ...d, maxEntries: requested[d.name] ?? d.maxEntries }));
      return new MapMigration(objectPath, opts, declared, requested);
    } finally {
      probe.close();
    }
  }

  /**
   * Declared maps with no pin (and none moved aside by an unfinished
   * migration): the load creates them, all zero. Read before open().
   */
  unpinnedMaps(): string[] {
    return this.declared.map((d) => d.name)
      .filter((n) => !fs.existsSync(path.join(this.opts.bpffs, n)) && !fs.existsSync(path.join(this.opts.bpffs, oldPinName(n))));
  }

  /** Move the changed maps' pins aside and open the object (load it next). */
  open(): BpfObject {
    this.moved = true; // abort() puts back whatever was moved, even if this loop fails half-way
    for (const c of this.changes) {
      const pin = path.join(this.opts.bpffs, c.map);
      this.old.set(c.map, BpfMap.fromPinned(pin));
      fs.renameSync(pin, path.join(this.opts.bpffs, oldPinName(c.map)));
    }
    const sizes = { ...this.requested, ...Object.fromEntries(this.changes.map((c) => [c.map, c.to.maxEntries])) };
    try {
      return BpfObject.open(this.objectPath, { pinDir: this.opts.bpffs, maxEntries: sizes });
    } catch (err) {
      this.abort();
      throw err;
    }
  }

  /** After load, before the programs are swapped: copy the entries. */
  fill(obj: BpfObject): void {
    for (const c of this.changes) {
      const policy = this.policies[c.map] ?? DEFAULT_POLICY;
      const result: MigratedMap = { ...c, carried: 0, dropped: 0 };
      const from = this.old.get(c.map)!;
      const translate = policy.kind === 'drop' ? undefined : policy.translate;
      const refill = policy.kind === 'carry' ? policy.refill : undefined;
      if (policy.kind === 'drop') {
        result.note = policy.reason;
      } else if (NO_ENTRIES.has(c.from.type)) {
        result.note = `${mapTypeName(c.from.type)} entries cannot be copied from user space`;
      } else if (refill && (c.why === 'layout' || MAP_IN_MAP.has(c.from.type))) {
        const n = refill(from, obj, c.from.layout);
        result.carried = n.copied;
        result.dropped = n.skipped;
        result.note = `layout ${c.from.layout} -> ${c.to.layout}: entries rewritten into the new layout`;
      } else if (c.why === 'layout' && !translate) {
        // rebuild without a translation (carry without one was refused at plan)
        result.note = 'layout changed: the agent writes it again at its first sync';
        result.dropped = countEntries(from);
      } else {
        const n = copyEntries(from, obj.map(c.map), BPF_ANY, c.why === 'layout' ? translate : undefined);
        result.carried = n.copied;
        result.dropped = n.skipped;
        this.copied.add(c.map);
      }
      this.results.set(c.map, result);
    }
  }

  /** After every link runs the new programs: catch up, unpin the old maps, record layouts. */
  finish(obj: BpfObject): MigratedMap[] {
    for (const c of this.changes) {
      const policy = this.policies[c.map] ?? DEFAULT_POLICY;
      const result = this.results.get(c.map)!;
      const from = this.old.get(c.map)!;
      // Arrays: every index exists, so insert-only means nothing; their pass-1 copy stands.
      if (this.copied.has(c.map) && !ARRAY_TYPES.has(c.from.type) && policy.kind !== 'drop') {
        // Only what is new counts: entries that did not fit were counted at fill.
        result.carried += copyEntries(from, obj.map(c.map), BPF_NOEXIST, c.why === 'layout' ? policy.translate : undefined).copied;
      }
      from.close();
      fs.rmSync(path.join(this.opts.bpffs, oldPinName(c.map)), { force: true });
    }
    this.old.clear();
    // An interrupted migration's old map: what the old programs wrote until
    // the swap (insert-only, as above), then its pin goes.
    for (const i of this.interrupted.values()) {
      if (i.recopy) copyEntries(i.from, obj.map(i.name), BPF_NOEXIST, i.translate);
      i.from.close();
      fs.rmSync(path.join(this.opts.bpffs, oldPinName(i.name)), { force: true });
    }
    this.interrupted.clear();
    for (const name of Object.keys(RETIRED_MAPS)) fs.rmSync(path.join(this.opts.bpffs, name), { force: true });
    recordLayouts(this.opts.bpffs, this.declared.map((d) => [d.name, layoutOf(this.policies, d.name)]));
    return [...this.results.values()];
  }

  /** Before any program was swapped: put the old pins back. */
  abort(): void {
    this.closeInterrupted(); // still pinned aside: the next start finishes them
    if (!this.moved) return;
    for (const [name, m] of this.old) {
      m.close();
      const pin = path.join(this.opts.bpffs, name);
      const aside = path.join(this.opts.bpffs, oldPinName(name));
      if (!fs.existsSync(aside)) continue; // opened, not yet moved
      fs.rmSync(pin, { force: true });
      fs.renameSync(aside, pin);
    }
    this.old.clear();
    this.moved = false;
  }
}

/**
 * Load `objectPath` with its maps reused from (or pinned to) `bpffs`,
 * migrating pinned maps whose capacity or layout changed: `swapLinks`
 * switches the object's pinned links to the new programs before the old
 * maps are unpinned, so no program keeps running on a map about to go.
 */
export function loadMigrated(objectPath: string, bpffs: string, opts: { maxEntries?: Record<string, number>; onMigrated?: (m: MigratedMap[]) => void }, swapLinks: (obj: BpfObject) => void): BpfObject {
  const migration = MapMigration.plan(objectPath, { bpffs, maxEntries: opts.maxEntries });
  const obj = migration.open();
  try {
    obj.load();
    migration.fill(obj);
  } catch (err) {
    obj.close();
    migration.abort();
    throw err;
  }
  try {
    swapLinks(obj);
    const migrated = migration.finish(obj);
    if (migrated.length > 0) opts.onMigrated?.(migrated);
  } catch (err) {
    obj.close(); // the old maps stay pinned as <name>_migrating: the next load finishes
    throw err;
  }
  return obj;
}

/** Where a family's slot-layout services map keeps the frontend and the slot. */
interface SlotLayout {
  services: string;
  ranges: string;
  /** Bytes of the layout-1 key: the frontend (layout 2's whole key), then backend_slot u16 and pad[2]. */
  oldKeySize: number;
  frontendSize: number;
}
const SLOTS4: SlotLayout = { services: abi.SLUICE_MAP_SERVICES4, ranges: abi.SLUICE_MAP_RANGES4, oldKeySize: 12, frontendSize: abi.LB4_FRONTEND_KEY_SIZE };
const SLOTS6: SlotLayout = { services: abi.SLUICE_MAP_SERVICES6, ranges: abi.SLUICE_MAP_RANGES6, oldKeySize: 24, frontendSize: abi.LB6_FRONTEND_KEY_SIZE };

/**
 * sluice_svc4 / sluice_svc6 layout 1 -> 2. Layout 1: key {frontend (address,
 * port, proto, scope), backend_slot u16, pad[2]} (12 bytes; IPv6 24); slot 0
 * the master (lb4_service, backend_id 0), slots 1..count one backend id each
 * in backend_id. Layout 2: key the frontend (the first 8 bytes of the old
 * key; IPv6 20), the master's backend_id the first index of its range in
 * the family's (new, empty) range array, which gets the slots' ids in order,
 * frontend after frontend from index 0. Ranges first, then masters. A
 * frontend that does not fit is skipped (the agent's first sync writes it).
 * The agent adopts the result (ranges.ts).
 */
function slotsToRanges(layout: SlotLayout, from: BpfMap, obj: NewMaps, fromLayout: number, opts: { resume?: boolean } = {}): { copied: number; skipped: number } {
  const K = layout.oldKeySize;
  const F = layout.frontendSize;
  if (fromLayout !== 1 || from.keySize !== K) throw new MigrationRefused(`${from.name}: no translation from layout ${fromLayout} (key ${from.keySize} bytes)`);
  const all = from.lookupBatch();
  const masters = new Map<string, Buffer>();
  const slots = new Map<string, Map<number, number>>();
  for (let i = 0; i < all.count; i++) {
    const key = all.keys.subarray(i * K, (i + 1) * K);
    const value = all.values.subarray(i * from.valueBufferSize, i * from.valueBufferSize + from.valueSize);
    const frontend = key.toString('latin1', 0, F);
    const slot = key.readUInt16LE(F);
    if (slot === 0) {
      masters.set(frontend, Buffer.from(value));
      continue;
    }
    let m = slots.get(frontend);
    if (!m) slots.set(frontend, (m = new Map()));
    m.set(slot, value.readUInt32LE(0));
  }
  const services = obj.map(layout.services);
  const ranges = obj.map(layout.ranges);
  let next = 0;
  let copied = 0;
  let skipped = 0;
  for (const [frontend, value] of masters) {
    const count = value.readUInt16LE(4);
    const ids = slots.get(frontend);
    if (next + count > ranges.maxEntries) {
      skipped++;
      continue;
    }
    // resume (finishing a fill a kill cut short): the old map reads back in
    // the same order, so every frontend gets the same range as at the fill;
    // one the fill wrote is kept as it is.
    if (opts.resume && services.lookup(Buffer.from(frontend, 'latin1'))) {
      next += count;
      continue;
    }
    if (count > 0) {
      const keys = Buffer.alloc(4 * count);
      const vals = Buffer.alloc(4 * count);
      for (let i = 0; i < count; i++) {
        keys.writeUInt32LE(next + i, 4 * i);
        vals.writeUInt32LE(ids?.get(i + 1) ?? 0, 4 * i);
      }
      ranges.updateBatch(keys, vals, count);
    }
    value.writeUInt32LE(count > 0 ? next : 0, 0);
    try {
      services.update(Buffer.from(frontend, 'latin1'), value, BPF_ANY);
      copied++;
      next += count;
    } catch (err) {
      if (!(err instanceof BpfError) || (err.errno !== E2BIG && err.errno !== ENOSPC)) throw err;
      skipped++;
    }
  }
  return { copied, skipped };
}

const layoutOf = (policies: Record<string, MapPolicy>, name: string) => (policies[name] ?? DEFAULT_POLICY).layout ?? 1;

/** A pin's layout: as recorded, else this build's when the pin has the shape this build gives the map, else 1 (see plan). */
const pinnedLayoutOf = (layouts: Map<string, number>, name: string, sameShape: boolean, ourLayout: number) => layouts.get(name) ?? (sameShape ? ourLayout : 1);

const describe = (d: MapDescription) => `${mapTypeName(d.type)} key ${d.keySize} value ${d.valueSize} max_entries ${d.maxEntries} flags 0x${d.flags.toString(16)}`;

function plan(bpffs: string, declared: MapDescription[], requested: Record<string, number>, policies: Record<string, MapPolicy>): MapChange[] {
  const layouts = readLayouts(bpffs);
  const refusals: string[] = [];
  const changes: MapChange[] = [];
  for (const d of declared) {
    const pin = path.join(bpffs, d.name);
    if (!fs.existsSync(pin)) continue;
    const fd = check(libbpf().bpf_obj_get(pin), 'bpf_obj_get', pin);
    let info;
    try {
      info = mapInfo(fd, pin);
    } finally {
      fs.closeSync(fd);
    }
    const policy = policies[d.name] ?? DEFAULT_POLICY;
    const ourLayout = policy.layout ?? 1;
    // No record: pinned before layouts were recorded (layout 1), or by a tool
    // or test harness that pins the object's maps itself. Every layout change
    // so far changed the map's type or sizes, so a map of exactly this build's
    // shape is taken as this build's layout; any other shape is layout 1.
    const sameShape = info.type === d.type && info.keySize === d.keySize && info.valueSize === d.valueSize;
    const pinnedLayout = pinnedLayoutOf(layouts, d.name, sameShape, ourLayout);
    if (pinnedLayout > ourLayout) {
      refusals.push(`map ${d.name} at ${pin} has layout version ${pinnedLayout}, newer than this agent's ${ourLayout} (pinned by a newer Sluice): downgrading it is not supported`);
      continue;
    }
    const from = { name: d.name, type: info.type, keySize: info.keySize, valueSize: info.valueSize, maxEntries: info.maxEntries, flags: info.flags, layout: pinnedLayout };
    // Flags the kernel adds itself (a devmap's BPF_F_RDONLY_PROG) are not
    // declared by any object: ignored when both sides are of such a type.
    const added = kernelAddedMapFlags(d.type) & kernelAddedMapFlags(info.type);
    const flagsChanged = (from.flags & ~added) !== (d.flags & ~added);
    const layoutChanged = from.type !== d.type || from.keySize !== d.keySize || from.valueSize !== d.valueSize || flagsChanged || pinnedLayout < ourLayout;
    // A size nobody asked for keeps the pinned one (another object, or the
    // CLI, loading without the config), except arrays that grew: their
    // indices are meaning (counters), not capacity.
    let wantEntries = requested[d.name] ?? from.maxEntries;
    if (requested[d.name] === undefined && ARRAY_TYPES.has(d.type) && d.type === from.type && d.maxEntries > from.maxEntries) wantEntries = d.maxEntries;
    if (NO_ENTRIES.has(d.type) && requested[d.name] === undefined) wantEntries = d.type === from.type ? from.maxEntries : d.maxEntries;
    if (!layoutChanged && wantEntries === from.maxEntries) continue;
    if (layoutChanged && policy.kind === 'carry' && !policy.translate && !policy.refill) {
      refusals.push(`map ${d.name} at ${pin} changed layout (pinned: ${describe(from)}, layout ${pinnedLayout}; new: ${describe(d)}, layout ${ourLayout}) and its migration policy carries entries without a translation: add one in MAP_POLICIES`);
      continue;
    }
    changes.push({ map: d.name, why: layoutChanged ? 'layout' : 'capacity', from, to: { ...d, maxEntries: wantEntries, layout: ourLayout }, policy: policy.kind });
  }
  if (refusals.length > 0) throw new MigrationRefused(`refusing to migrate the pinned maps under ${bpffs}, nothing was changed: ${refusals.join('; ')}`);
  return changes;
}

/** The old map of a migration a kill cut short (pinned as `<name>_migrating` until finish). */
interface Interrupted {
  name: string;
  from: BpfMap;
  /** Copied again (insert-only) after the swap: a hash whose entries the old programs may still write. */
  recopy: boolean;
  translate?: Translate;
}

/**
 * A migration cut short (the agent killed between open and finish) leaves
 * `<name>_migrating`. Until this start swaps the links, the old programs
 * still run on it. Handled by the object that declares the map (a map of
 * another object waits for that object's load: its programs are swapped
 * there), before its plan:
 *   - no new map (killed before the load pinned it): put the old one back,
 *     as if nothing had started (plan migrates it again);
 *   - a new map: fill it from the old one by the policy, as the fill would
 *     have; a fill that ran is not repeated (hashes insert-only, arrays only
 *     when the new one is all zero, refills only what the new map lacks).
 *     Hashes are copied again after the swap (finish), for what the old
 *     programs wrote meanwhile, and the old pin goes at finish;
 *   - a new map that cannot be filled because the load was killed before it
 *     created a map the refill writes (the slot layout's range array):
 *     discarded, the old one put back (no program used the new map).
 * A map-in-map's entries read back as inner map ids, which copyEntries
 * cannot write: its refill points the new map at the old inner maps, so
 * every Maglev frontend keeps its table. The slot-layout services maps are
 * refilled into masters + ranges (slotsToRanges), with their backends and
 * rev-NAT arrays copied, so every frontend is back before the swap with its
 * ids (the agent's sync adopts them).
 */
function finishInterrupted(bpffs: string, policies: Record<string, MapPolicy>, declared: Set<string>): Interrupted[] {
  const out: Interrupted[] = [];
  if (!fs.existsSync(bpffs)) return out;
  // Read once, when a map-in-map needs them: the records of the old maps (finish records the new ones).
  let layouts: Map<string, number> | undefined;
  for (const file of fs.readdirSync(bpffs)) {
    if (!file.endsWith('_migrating')) continue;
    const name = file.slice(0, -'_migrating'.length);
    // Another object's map (tc_lb's conntrack at sock_lb's load): its old
    // programs run until that object's swap, which finishes it.
    if (!declared.has(name) && name in MAP_POLICIES) continue;
    const oldPin = path.join(bpffs, file);
    const pin = path.join(bpffs, name);
    const putBack = () => {
      fs.rmSync(pin, { force: true });
      fs.renameSync(oldPin, pin);
    };
    if (!fs.existsSync(pin)) {
      putBack();
      continue;
    }
    const policy = policies[name] ?? DEFAULT_POLICY;
    const from = BpfMap.fromPinned(oldPin);
    let recopy = false;
    let translate: Translate | undefined;
    let restored = false;
    const opened: BpfMap[] = [];
    try {
      const to = BpfMap.fromPinned(pin);
      opened.push(to);
      const sameLayout = from.type === to.type && from.keySize === to.keySize && from.valueSize === to.valueSize;
      translate = sameLayout || policy.kind === 'drop' ? undefined : policy.translate;
      const refill = policy.kind === 'carry' ? policy.refill : undefined;
      if (policy.kind === 'drop' || NO_ENTRIES.has(from.type)) {
        // starts empty by policy
      } else if (refill && (MAP_IN_MAP.has(from.type) || !sameLayout)) {
        const layout = pinnedLayoutOf(layouts ??= readLayouts(bpffs), name, sameLayout, policy.layout ?? 1);
        let missing: string | undefined;
        const maps: NewMaps = {
          map: (n) => {
            if (n === name) return to;
            const p = path.join(bpffs, n);
            if (!declared.has(n) || !fs.existsSync(p)) {
              missing = n;
              throw new Error(`${name}: the refill writes ${n}, which is not pinned`);
            }
            const m = BpfMap.fromPinned(p);
            opened.push(m);
            return m;
          },
        };
        try {
          refill(from, maps, layout, { resume: true });
        } catch (err) {
          if (missing === undefined) throw err;
          restored = true; // the load was killed before it created `missing`
        }
      } else if (MAP_IN_MAP.has(from.type) || MAP_IN_MAP.has(to.type)) {
        // inner map ids: nothing to copy without a refill
      } else if (ARRAY_TYPES.has(to.type)) {
        // Every index exists: an all-zero array is one the fill never wrote.
        if ((sameLayout || translate) && to.lookupBatch().values.every((b) => b === 0)) copyEntries(from, to, BPF_ANY, translate);
      } else if (sameLayout || translate) {
        copyEntries(from, to, BPF_NOEXIST, translate);
        recopy = true;
      }
    } catch (err) {
      from.close();
      throw err;
    } finally {
      for (const m of opened) m.close();
    }
    if (restored) {
      from.close();
      putBack();
      continue;
    }
    out.push({ name, from, recopy, translate });
    // The record names the old map's layout (finish would have recorded the
    // new one): without it plan takes the new map's layout from its shape,
    // instead of migrating it again from the old layout.
    forgetLayout(bpffs, name);
  }
  return out;
}

const { E2BIG, EEXIST, ENOSPC } = os.constants.errno;

/** Copy every entry (translated when asked); entries that do not fit or already exist are skipped. */
function copyEntries(from: BpfMap, to: BpfMap, flags: number, translate?: Translate): { copied: number; skipped: number } {
  const all = from.lookupBatch();
  const fromDesc = descOf(from);
  const toDesc = descOf(to);
  let copied = 0;
  let skipped = 0;
  const isArray = ARRAY_TYPES.has(to.type);
  for (let i = 0; i < all.count; i++) {
    let key = all.keys.subarray(i * from.keySize, (i + 1) * from.keySize);
    let value = all.values.subarray(i * from.valueBufferSize, (i + 1) * from.valueBufferSize);
    if (translate) {
      const t = translate(key, value, fromDesc, toDesc);
      if (!t) {
        skipped++;
        continue;
      }
      [key, value] = t;
    }
    if (isArray && key.readUInt32LE(0) >= to.maxEntries) {
      skipped++;
      continue;
    }
    try {
      to.update(key, value, flags);
      copied++;
    } catch (err) {
      const errno = err instanceof BpfError ? err.errno : 0;
      if (errno !== EEXIST && errno !== E2BIG && errno !== ENOSPC) throw err;
      if (errno !== EEXIST) skipped++;
    }
  }
  return { copied, skipped };
}

function countEntries(m: BpfMap): number {
  return m.lookupBatch().count;
}

const descOf = (m: BpfMap): MapDescription => ({ name: m.name, type: m.type, keySize: m.keySize, valueSize: m.valueSize, maxEntries: m.maxEntries, flags: m.flags });

function layoutKey(name: string): Buffer {
  const key = Buffer.alloc(NAME_LEN);
  key.write(name.slice(0, NAME_LEN - 1), 'latin1');
  return key;
}

/** Layout versions recorded under bpffs; a map with none (pinned before they were recorded) is version 1. */
export function readLayouts(bpffs: string): Map<string, number> {
  const out = new Map<string, number>();
  const pin = path.join(bpffs, LAYOUT_MAP);
  if (!fs.existsSync(pin)) return out;
  const m = BpfMap.fromPinned(pin);
  try {
    for (const [k, v] of m.entries()) {
      const nul = k.indexOf(0);
      out.set(k.toString('latin1', 0, nul < 0 ? k.length : nul), v.readUInt32LE(0));
    }
  } finally {
    m.close();
  }
  return out;
}

/** Remove a map's layout record (a map without one is judged by its shape). */
function forgetLayout(bpffs: string, name: string): void {
  const pin = path.join(bpffs, LAYOUT_MAP);
  if (!fs.existsSync(pin)) return;
  const m = BpfMap.fromPinned(pin);
  try {
    m.delete(layoutKey(name));
  } finally {
    m.close();
  }
}

/** Write layout versions (creating the layout map on first use). */
export function recordLayouts(bpffs: string, entries: Array<[string, number]>): void {
  const pin = path.join(bpffs, LAYOUT_MAP);
  let m: BpfMap;
  if (fs.existsSync(pin)) {
    m = BpfMap.fromPinned(pin);
  } else {
    m = BpfMap.create({ type: MapType.HASH, name: LAYOUT_MAP, keySize: NAME_LEN, valueSize: 4, maxEntries: LAYOUT_MAP_ENTRIES });
    m.pin(pin);
  }
  try {
    const value = Buffer.alloc(4);
    for (const [name, layout] of entries) {
      value.writeUInt32LE(layout, 0);
      m.update(layoutKey(name), value);
    }
  } finally {
    m.close();
  }
}

/** One log line's worth per migrated map. */
export function summarize(migrated: MigratedMap[]): Array<Record<string, unknown>> {
  return migrated.map((m) => ({
    map: m.map,
    why: m.why,
    policy: m.policy,
    from: `${m.from.maxEntries} entries, value ${m.from.valueSize} B, layout ${m.from.layout}`,
    to: `${m.to.maxEntries} entries, value ${m.to.valueSize} B, layout ${m.to.layout}`,
    carried: m.carried,
    dropped: m.dropped,
    ...(m.note ? { note: m.note } : {}),
  }));
}
