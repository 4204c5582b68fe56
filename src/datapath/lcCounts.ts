// least-connection's active-connection counts (SLUICE_MAP_LC_COUNT4, an
// array keyed by backend id; bpf/lib/lc.h), read for the CLI and tests.
import * as fs from 'node:fs';
import * as abi from '../abi/generated';
import { BpfMap } from '../bpf/map';
import { mapPinPath } from './maps';
import { u32Codec } from './typedMap';

/** A count read as a signed 32-bit number: a drift below zero shows as negative, not as 4 billion. */
function decode(value: Buffer): number {
  return value.readInt32LE(0);
}

/** The active-connection count of each backend id; undefined when the map is not pinned (older Sluice). */
export function readLcCounts(bpffs: string, ids: Iterable<number>): Map<number, number> | undefined {
  const pin = mapPinPath(bpffs, abi.SLUICE_MAP_LC_COUNT4);
  if (!fs.existsSync(pin)) return undefined;
  const m = BpfMap.fromPinned(pin);
  try {
    const out = new Map<number, number>();
    for (const id of ids) {
      if (id <= 0 || id >= m.maxEntries) continue;
      const v = m.lookup(u32Codec.encode(id));
      out.set(id, v ? decode(v) : 0);
    }
    return out;
  } finally {
    m.close();
  }
}

/** Backend ids listed by at least one least-connection frontend. */
export function lcBackendIds(frontends: ReadonlyArray<{ algorithm: number; backendIds: readonly number[] }>): Set<number> {
  const ids = new Set<number>();
  for (const f of frontends) if (f.algorithm === abi.LB_ALG_LEAST_CONN) for (const id of f.backendIds) ids.add(id);
  return ids;
}
