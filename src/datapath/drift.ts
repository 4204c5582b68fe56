// Drift repair: make the pinned maps hold again what the programmer believes
// it wrote, when something behind the agent's back changed them (`sluice
// service delete`, bpftool, a crashed older agent). The programmer's state is
// authoritative; the maps are compared with it as encoded bytes, key by key,
// a chunk of frontends at a time with a yield between chunks (so /healthz and
// the health-check servers answer during it), rarely (kube-proxy's full sync
// is hourly). Only the entries found different are rewritten, and only after
// re-checking them against the programmer's state at that moment: syncs run
// between the chunks.
import * as abi from '../abi/generated';
import type { SockLbMaps } from './maps';
import { ip4ToNumber, isIp6, protoNumber } from './addr';
import { masterEntry, frontendKeyOf, type LbProgrammer, type ProgrammedFrontend, type ProgrammedBackend } from './programmer';
import { repairDrift6 } from './drift6';
import type { MaglevDrift } from './maglev';

export interface DriftReport {
  /** Frontends with a missing or different master or range (IPv6: slot) entry. */
  frontends: number;
  /** Backends and rev-NAT entries missing or different. */
  backends: number;
  revNats: number;
  /** Entries in the maps nobody asked for, deleted. */
  extra: number;
  /** Maglev repairs (issue 15): the sum of maglevDetail. */
  maglev: number;
  maglevDetail: MaglevDrift;
  /** Entries compared. */
  checked: number;
  durationMs: number;
}

const K = abi.LB4_FRONTEND_KEY_SIZE;
const V = abi.LB4_SERVICE_SIZE;

function backendValue(b: ProgrammedBackend): abi.Lb4Backend {
  return { address: ip4ToNumber(b.address), port: b.port, proto: protoNumber(b.proto), flags: b.flags, zone: b.zone };
}

/** Scratch buffers for one comparison at a time (no allocation per entry). */
class Comparer {
  private readonly key = Buffer.alloc(K);
  private readonly want = Buffer.alloc(V);
  private readonly have = Buffer.alloc(V);
  private readonly u32 = Buffer.alloc(4);
  private readonly idHave = Buffer.alloc(4);
  private readonly beWant = Buffer.alloc(abi.LB4_BACKEND_SIZE);
  private readonly beHave = Buffer.alloc(abi.LB4_BACKEND_SIZE);
  private readonly rnWant = Buffer.alloc(abi.LB4_REVERSE_NAT_SIZE);
  private readonly rnHave = Buffer.alloc(abi.LB4_REVERSE_NAT_SIZE);
  checked = 0;

  constructor(private readonly maps: SockLbMaps) {}

  /** The master and every entry of the frontend's range hold what was written. */
  frontendIntact(f: ProgrammedFrontend): boolean {
    abi.encodeLb4FrontendKey(frontendKeyOf(f), this.key, 0);
    abi.encodeLb4Service(masterEntry(f), this.want, 0);
    this.checked++;
    if (!this.maps.services.map.lookupInto(this.key, this.have) || !this.have.equals(this.want)) return false;
    if (f.rangeStart === undefined) return true; // no range of its own yet: the next apply writes one
    for (let i = 0; i < f.backendIds.length; i++) {
      this.u32.writeUInt32LE(f.rangeStart + i, 0);
      this.checked++;
      if (!this.maps.ranges.map.lookupInto(this.u32, this.idHave) || this.idHave.readUInt32LE(0) !== f.backendIds[i]) return false;
    }
    return true;
  }

  backendIntact(b: ProgrammedBackend): boolean {
    this.u32.writeUInt32LE(b.id, 0);
    abi.encodeLb4Backend(backendValue(b), this.beWant, 0);
    this.checked++;
    return this.maps.backends.map.lookupInto(this.u32, this.beHave) && this.beHave.equals(this.beWant);
  }

  revNatIntact(f: ProgrammedFrontend): boolean {
    this.u32.writeUInt32LE(f.revNatId, 0);
    abi.encodeLb4ReverseNat({ address: ip4ToNumber(f.address), port: f.port }, this.rnWant, 0);
    this.checked++;
    return this.maps.revNat.map.lookupInto(this.u32, this.rnHave) && this.rnHave.equals(this.rnWant);
  }
}

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Compare, then repair. `programmer()` is read again after every yield (a
 * sync may have replaced it); `chunk` frontends are compared per turn.
 */
export async function repairDrift(maps: SockLbMaps, programmer: () => LbProgrammer, chunk = 2000): Promise<DriftReport> {
  const start = performance.now();
  const cmp = new Comparer(maps);
  const suspectFrontends = new Set<string>();
  const suspectBackends = new Set<number>();
  // IPv4 maps here; the IPv6 tables are repaired by drift6.ts at the end.
  const ids = programmer().programmedFrontends().filter((f) => !isIp6(f.address)).map((f) => f.id);
  for (let i = 0; i < ids.length; i += chunk) {
    const p = programmer();
    for (const id of ids.slice(i, i + chunk)) {
      const f = p.frontend(id);
      if (f && (!cmp.frontendIntact(f) || !cmp.revNatIntact(f))) suspectFrontends.add(id);
    }
    await nextTurn();
  }
  const backendIds = programmer().programmedBackends().filter((b) => !isIp6(b.address)).map((b) => b.id);
  for (let i = 0; i < backendIds.length; i += chunk * 4) {
    const p = programmer();
    for (const id of backendIds.slice(i, i + chunk * 4)) {
      const b = p.backendById(id);
      if (b && !cmp.backendIntact(b)) suspectBackends.add(id);
    }
    await nextTurn();
  }
  // Repair, in one synchronous step against the state as it is now.
  const p = programmer();
  const report: DriftReport = { frontends: 0, backends: 0, revNats: 0, extra: 0, maglev: 0, maglevDetail: { tables: 0, outer: 0, extra: 0, adopted: 0 }, checked: cmp.checked, durationMs: 0 };
  const backendWrites: Array<[number, abi.Lb4Backend]> = [];
  for (const id of suspectBackends) {
    const b = p.backendById(id);
    if (b && !cmp.backendIntact(b)) backendWrites.push([id, backendValue(b)]);
  }
  const frontends: ProgrammedFrontend[] = [];
  for (const id of suspectFrontends) {
    const f = p.frontend(id);
    if (!f) continue;
    // A frontend's backends must be there before its slots point at them.
    for (const b of f.backendIds) {
      const be = p.backendById(b);
      if (be && !backendWrites.some(([wid]) => wid === b) && !cmp.backendIntact(be)) backendWrites.push([b, backendValue(be)]);
    }
    if (!cmp.frontendIntact(f) || !cmp.revNatIntact(f)) frontends.push(f);
  }
  maps.backends.setMany(backendWrites);
  report.backends = backendWrites.length;
  const revNats: Array<[number, abi.Lb4ReverseNat]> = [];
  for (const f of frontends) if (!cmp.revNatIntact(f)) revNats.push([f.revNatId, { address: ip4ToNumber(f.address), port: f.port }]);
  maps.revNat.setMany(revNats);
  report.revNats = revNats.length;
  // Make-before-break: ranges (rewritten where they are: their content was
  // wrong already), then the masters that name them.
  const ranges: Array<[number, number]> = [];
  const masters: Array<[abi.Lb4FrontendKey, abi.Lb4Service]> = [];
  for (const f of frontends) {
    if (f.rangeStart !== undefined) f.backendIds.forEach((b, i) => ranges.push([f.rangeStart! + i, b]));
    masters.push([frontendKeyOf(f), masterEntry(f)]);
  }
  maps.ranges.setMany(ranges);
  maps.services.setMany(masters);
  report.frontends = frontends.length;
  report.extra = deleteExtras(maps, p);
  repairDrift6(maps, p, report);
  await repairMaglev(programmer, Math.max(1, Math.floor(chunk / 8)), report);
  const md = report.maglevDetail;
  report.maglev = md.tables + md.outer + md.extra + md.adopted;
  report.durationMs = performance.now() - start;
  return report;
}

/**
 * The Maglev tables (issue 15): each frontend's outer entry must name the
 * table the agent built for it, and each table hold the rows it was built
 * with (compared by digest, `chunk` frontends per turn). Tables adopted from
 * the pins (the agent restarted; their content is unknown to it and it holds
 * no fd to compare or share them) are rebuilt from the programmer's backends
 * and swapped in whole, once; from then on they are checked like the others.
 */
async function repairMaglev(programmer: () => LbProgrammer, chunk: number, report: DriftReport): Promise<void> {
  const list = programmer().maglevTables()?.frontendList() ?? [];
  const seen = new Set<string>();
  for (let i = 0; i < list.length; i += chunk) {
    const p = programmer();
    const tables = p.maglevTables();
    if (!tables) return;
    const { checked, adopted } = tables.repairChunk(list.slice(i, i + chunk), seen, report.maglevDetail);
    report.checked += checked;
    if (adopted.length) {
      const byKey = new Map<string, ProgrammedFrontend>();
      for (const f of p.programmedFrontends()) if (f.algorithm === abi.LB_ALG_MAGLEV) byKey.set(`${f.revNatId}/${f.proto}/${f.scope}`, f);
      for (const mf of adopted) {
        const f = byKey.get(`${mf.revNatId}/${mf.proto}/${mf.scope}`);
        const backends = f?.backendIds.map((id) => p.backendById(id)).filter((b) => b !== undefined) ?? [];
        if (!f || backends.length !== f.backendIds.length) continue;
        if (tables.queue(mf, backends.map((b) => ({ id: b.id, address: b.address, port: b.port })))) report.maglevDetail.adopted++;
      }
      tables.flush();
    }
    await nextTurn();
  }
  programmer().maglevTables()?.deleteForeign(report.maglevDetail);
}

/**
 * Delete entries the programmer does not know. After the repair every wanted
 * entry is there, so a map holding more entries than wanted has extras; only
 * then are its keys compared one by one.
 */
function deleteExtras(maps: SockLbMaps, p: LbProgrammer): number {
  let extra = 0;
  const frontends = p.programmedFrontends().filter((f) => !isIp6(f.address));
  const all = maps.services.map.lookupBatch();
  if (all.count !== frontends.length) {
    const wanted = new Set<string>();
    const key = Buffer.alloc(K);
    for (const f of frontends) {
      abi.encodeLb4FrontendKey(frontendKeyOf(f), key, 0);
      wanted.add(key.toString('latin1'));
    }
    const stale: Buffer[] = [];
    for (let i = 0; i < all.count; i++) {
      const k = all.keys.subarray(i * K, (i + 1) * K);
      if (!wanted.has(k.toString('latin1'))) stale.push(k);
    }
    for (const k of stale) if (maps.services.map.delete(k)) extra++;
  }
  // An ARRAY: entries in use are the non-zero ones (IdArrayMap).
  const backends = maps.backends.readAll();
  if (backends.length !== p.backendCount()) {
    for (const [id] of backends) {
      if (!p.backendById(id) && maps.backends.delete(id)) extra++;
    }
  }
  return extra;
}
