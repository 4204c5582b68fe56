// Drift repair for the IPv6 maps (issue 14): the rules of drift.ts (the
// programmer's state is authoritative; backends and rev-NAT entries before
// ranges, ranges before masters) on sluice_svc6 / sluice_rng6 / sluice_be6 /
// sluice_revnat6, the IPv4 table's layout. IPv6 frontends are few next to
// IPv4 ones, so this compares entry by entry in one step, without chunks.
import * as abi from '../abi/generated';
import type { SockLbMaps } from './maps';
import { ip6ToBytes, isIp6, protoNumber } from './addr';
import { masterEntry, service6KeyOf, type LbProgrammer, type ProgrammedBackend } from './programmer';
import type { DriftReport } from './drift';

function backendValue(b: ProgrammedBackend): abi.Lb6Backend {
  return { address: ip6ToBytes(b.address), port: b.port, proto: protoNumber(b.proto), flags: b.flags, zone: b.zone };
}

/** Same bytes as the codec writes them (pads included). */
function same<T>(codec: { encode(v: T): Buffer }, have: T | undefined, want: T): boolean {
  return have !== undefined && codec.encode(have).equals(codec.encode(want));
}

/** Compare and repair the IPv6 maps against `p`; adds its counts to `report`. */
export function repairDrift6(maps: SockLbMaps, p: LbProgrammer, report: DriftReport): void {
  const v6 = maps.v6;
  if (!v6) return;
  const frontends = p.programmedFrontends().filter((f) => isIp6(f.address));
  const backends = p.programmedBackends().filter((b) => isIp6(b.address));

  const backendWrites: Array<[number, abi.Lb6Backend]> = [];
  for (const b of backends) {
    const want = backendValue(b);
    report.checked++;
    if (!same(abi.lb6_backendCodec, v6.backends.get(b.id), want)) backendWrites.push([b.id, want]);
  }
  v6.backends.setMany(backendWrites);
  report.backends += backendWrites.length;

  const revNatWrites: Array<[number, abi.Lb6ReverseNat]> = [];
  const ranges: Array<[number, number]> = [];
  const masters: Array<[abi.Lb6FrontendKey, abi.Lb4Service]> = [];
  const wanted = new Set<string>();
  for (const f of frontends) {
    const revNat = { address: ip6ToBytes(f.address), port: f.port };
    report.checked++;
    if (!same(abi.lb6_reverse_natCodec, v6.revNat.get(f.revNatId), revNat)) revNatWrites.push([f.revNatId, revNat]);
    const key = service6KeyOf(f);
    const master = masterEntry(f);
    wanted.add(abi.lb6_frontend_keyCodec.encode(key).toString('latin1'));
    report.checked++;
    let intact = same(abi.lb4_serviceCodec, v6.services.get(key), master);
    // The range (none of its own yet: the next apply writes one).
    if (f.rangeStart !== undefined) {
      for (let i = 0; i < f.backendIds.length; i++) {
        report.checked++;
        if (v6.ranges.get(f.rangeStart + i) !== f.backendIds[i]) intact = false;
      }
    }
    if (intact) continue;
    report.frontends++;
    if (f.rangeStart !== undefined) f.backendIds.forEach((b, i) => ranges.push([f.rangeStart! + i, b]));
    masters.push([key, master]);
  }
  v6.revNat.setMany(revNatWrites);
  report.revNats += revNatWrites.length;
  // Make-before-break: ranges (rewritten where they are: their content was
  // wrong already), then the masters that name them.
  v6.ranges.setMany(ranges);
  v6.services.setMany(masters);

  // Extras: frontends nobody asked for, then backends (an ARRAY: the
  // non-zero entries, IdArrayMap).
  const stale = v6.services.readAll().map(([k]) => k).filter((k) => !wanted.has(abi.lb6_frontend_keyCodec.encode(k).toString('latin1')));
  for (const k of stale) if (v6.services.delete(k)) report.extra++;
  for (const [id] of v6.backends.readAll()) {
    const known = p.backendById(id);
    if ((!known || !isIp6(known.address)) && v6.backends.delete(id)) report.extra++;
  }
}
