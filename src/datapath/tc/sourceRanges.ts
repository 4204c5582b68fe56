// loadBalancerSourceRanges in the LPM map: one entry per (frontend, CIDR),
// keyed by the frontend's rev-NAT id. The frontend's master entry must carry
// LB_SVC_FLAG_SOURCE_RANGE for the data path to consult them; write the
// ranges before setting the flag (make-before-break) and clear the flag
// before deleting them.
import * as abi from '../../abi/generated';
import { bytesToIp6, ip4ToNumber, ip6ToBytes, isIp6, numberToIp4 } from '../addr';
import type { TypedMap } from '../typedMap';

export interface Cidr4 {
  address: number; // network address, host number
  prefixLength: number;
}

/** "198.18.0.0/24" -> network and length; host bits must be zero, like the API server requires. */
export function parseCidr4(text: string): Cidr4 {
  const m = /^(\d+\.\d+\.\d+\.\d+)\/(\d{1,2})$/.exec(text.trim());
  const prefixLength = m ? Number(m[2]) : NaN;
  if (!m || prefixLength > 32) throw new Error(`source range ${JSON.stringify(text)}: expected an IPv4 CIDR like 198.18.0.0/24`);
  const address = ip4ToNumber(m[1]!);
  const mask = prefixLength === 0 ? 0 : (0xffffffff << (32 - prefixLength)) >>> 0;
  return { address: (address & mask) >>> 0, prefixLength };
}

export function formatCidr4(c: Cidr4): string {
  return `${numberToIp4(c.address)}/${c.prefixLength}`;
}

function keyOf(revNatId: number, c: Cidr4): abi.Lb4SrcRangeKey {
  return { prefixlen: 32 + c.prefixLength, rev_nat_id: revNatId, address: c.address };
}

/** The CIDRs stored for one frontend. */
export function readSourceRanges(map: TypedMap<abi.Lb4SrcRangeKey, number>, revNatId: number): string[] {
  const out: string[] = [];
  for (const [k] of map.entries()) {
    if (k.rev_nat_id === revNatId) out.push(formatCidr4({ address: k.address, prefixLength: k.prefixlen - 32 }));
  }
  return out.sort();
}

/**
 * Make the map hold exactly `cidrs` for this frontend: add the new ones first,
 * then delete the ones no longer wanted. Returns what changed.
 */
export function syncSourceRanges(
  map: TypedMap<abi.Lb4SrcRangeKey, number>,
  revNatId: number,
  cidrs: string[],
): { added: number; deleted: number } {
  const wanted = new Map(cidrs.map((text) => { const c = parseCidr4(text); return [formatCidr4(c), c] as const; }));
  const existing = new Set(readSourceRanges(map, revNatId));
  let added = 0;
  let deleted = 0;
  for (const [text, c] of wanted) {
    if (existing.has(text)) continue;
    map.set(keyOf(revNatId, c), 1);
    added++;
  }
  for (const text of existing) {
    if (wanted.has(text)) continue;
    map.delete(keyOf(revNatId, parseCidr4(text)));
    deleted++;
  }
  return { added, deleted };
}

// ---- IPv6 frontends (issue 14): the same entries in sluice_srcrng6 ----

/** "2001:db8::/32" -> network bytes (host bits cleared) and length. */
export function parseCidr6(text: string): { address: Buffer; prefixLength: number } {
  const m = /^([0-9a-fA-F:.]+)\/(\d{1,3})$/.exec(text.trim());
  const prefixLength = m ? Number(m[2]) : NaN;
  if (!m || !isIp6(m[1]!) || prefixLength > 128) throw new Error(`source range ${JSON.stringify(text)}: expected an IPv6 CIDR like 2001:db8::/32`);
  const address = ip6ToBytes(m[1]!);
  for (let bit = prefixLength; bit < 128; bit++) address[bit >> 3]! &= ~(0x80 >> (bit & 7));
  return { address, prefixLength };
}

const formatCidr6 = (c: { address: Uint8Array; prefixLength: number }) => `${bytesToIp6(c.address)}/${c.prefixLength}`;

export function readSourceRanges6(map: TypedMap<abi.Lb6SrcRangeKey, number>, revNatId: number): string[] {
  const out: string[] = [];
  for (const [k] of map.entries()) {
    if (k.rev_nat_id === revNatId) out.push(formatCidr6({ address: k.address, prefixLength: k.prefixlen - 32 }));
  }
  return out.sort();
}

/** syncSourceRanges for an IPv6 frontend (IPv6 CIDRs, sluice_srcrng6). */
export function syncSourceRanges6(map: TypedMap<abi.Lb6SrcRangeKey, number>, revNatId: number, cidrs: string[]): { added: number; deleted: number } {
  const keyOf6 = (c: { address: Buffer; prefixLength: number }): abi.Lb6SrcRangeKey => ({ prefixlen: 32 + c.prefixLength, rev_nat_id: revNatId, address: c.address });
  const wanted = new Map(cidrs.map((text) => { const c = parseCidr6(text); return [formatCidr6(c), c] as const; }));
  const existing = new Set(readSourceRanges6(map, revNatId));
  let added = 0;
  let deleted = 0;
  for (const [text, c] of wanted) {
    if (!existing.has(text)) { map.set(keyOf6(c), 1); added++; }
  }
  for (const text of existing) {
    if (!wanted.has(text)) { map.delete(keyOf6(parseCidr6(text))); deleted++; }
  }
  return { added, deleted };
}

/** The frontend's family's ranges: IPv6 frontends' in `v6` (rev-NAT ids are one pool for both families). */
export interface SourceRangeMaps {
  v4?: TypedMap<abi.Lb4SrcRangeKey, number>;
  v6?: TypedMap<abi.Lb6SrcRangeKey, number>;
}

export function syncSourceRangesOf(maps: SourceRangeMaps, frontendAddress: string, revNatId: number, cidrs: string[]): void {
  if (isIp6(frontendAddress)) {
    if (!maps.v6) { if (cidrs.length) throw new Error(`[${frontendAddress}]: loadBalancerSourceRanges need the IPv6 source-range map (sluice_srcrng6)`); return; }
    syncSourceRanges6(maps.v6, revNatId, cidrs);
    return;
  }
  if (!maps.v4) { if (cidrs.length) throw new Error(`${frontendAddress}: loadBalancerSourceRanges need the source-range map`); return; }
  syncSourceRanges(maps.v4, revNatId, cidrs);
}
