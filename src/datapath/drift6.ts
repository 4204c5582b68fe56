// Drift repair for the IPv6 maps (issue 14): the rules of drift.ts (the
// programmer's state is authoritative; backends and rev-NAT entries before
// slots, slots before masters, extras deleted masters first) on
// sluice_svc6 / sluice_be6 / sluice_revnat6. IPv6 frontends are few next to
// IPv4 ones, so this compares entry by entry in one step, without chunks.
import * as abi from '../abi/generated';
import type { SockLbMaps } from './maps';
import { ip6ToBytes, isIp6, protoNumber } from './addr';
import { masterEntry, service6KeyOf, type LbProgrammer, type ProgrammedBackend } from './programmer';
import type { DriftReport } from './drift';

const SLOT: abi.Lb4Service = { backend_id: 0, count: 0, flags: 0, rev_nat_id: 0, affinity_timeout: 0, algorithm: 0 };

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
  const slots: Array<[abi.Lb6ServiceKey, abi.Lb4Service]> = [];
  const masters: Array<[abi.Lb6ServiceKey, abi.Lb4Service]> = [];
  const wanted = new Set<string>();
  for (const f of frontends) {
    const revNat = { address: ip6ToBytes(f.address), port: f.port };
    report.checked++;
    if (!same(abi.lb6_reverse_natCodec, v6.revNat.get(f.revNatId), revNat)) revNatWrites.push([f.revNatId, revNat]);
    let intact = true;
    const entries: Array<[abi.Lb6ServiceKey, abi.Lb4Service]> = [[service6KeyOf(f, 0), masterEntry(f)]];
    f.backendIds.forEach((id, i) => entries.push([service6KeyOf(f, i + 1), { ...SLOT, backend_id: id }]));
    for (const [k, v] of entries) {
      wanted.add(abi.lb6_service_keyCodec.encode(k).toString('latin1'));
      report.checked++;
      if (!same(abi.lb4_serviceCodec, v6.services.get(k), v)) intact = false;
    }
    if (intact) continue;
    report.frontends++;
    masters.push(entries[0]!);
    slots.push(...entries.slice(1));
  }
  v6.revNat.setMany(revNatWrites);
  report.revNats += revNatWrites.length;
  v6.services.setMany(slots);
  v6.services.setMany(masters);

  // Extras: masters first, so a foreign frontend disappears before its slots.
  const stale = v6.services.readAll().map(([k]) => k).filter((k) => !wanted.has(abi.lb6_service_keyCodec.encode(k).toString('latin1')));
  stale.sort((a, b) => a.backend_slot - b.backend_slot);
  for (const k of stale) if (v6.services.delete(k)) report.extra++;
  for (const [id] of v6.backends.readAll()) {
    const known = p.backendById(id);
    if ((!known || !isIp6(known.address)) && v6.backends.delete(id)) report.extra++;
  }
}
