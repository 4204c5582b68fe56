// Conntrack of the north-south path, seen from user space: list the flows
// (`sluice ct list [-o json]`), garbage-collect expired entries, and forget
// the flows of a backend the agent removes.
//
// Deadlines are bpf_ktime_get_ns() values (CLOCK_MONOTONIC); process.hrtime
// reads the same clock, so "expires in" is exact.
import * as abi from '../../abi/generated';
import { numberToIp4, protoName } from '../addr';
import type { TypedMap } from '../typedMap';
import { openTcMaps } from './maps';

export type ConntrackMap = TypedMap<abi.Lb4CtKey, abi.Lb4CtEntry>;

/** One flow: its original (client -> frontend) and reply entries merged. */
export interface ConntrackRow {
  proto: string;
  client: string; // "198.18.0.10:40000"
  frontend: string;
  backend: string;
  /** SNAT source "addr:port", or undefined when the backend sees the client. */
  snat?: string;
  backendId: number;
  revNatId: number;
  closing: boolean;
  /** Where the flow was translated: a pod veth (per-packet ClusterIP) or an external device. */
  path: 'pod' | 'external';
  /** Seconds until the flow's entries expire (negative: expired, awaiting GC). */
  expiresInSeconds: number;
  packetsOriginal: number;
  bytesOriginal: number;
  packetsReply: number;
  bytesReply: number;
  ifindex: number;
  /** Which of the flow's two entries are in the map. */
  entries: Array<'original' | 'reply'>;
}

export const monotonicNs = (): bigint => process.hrtime.bigint();

const ep = (address: number, port: number) => `${numberToIp4(address)}:${port}`;

function flowId(v: abi.Lb4CtEntry): string {
  return `${v.proto}|${v.flags & abi.LB_CT_FLAG_POD}|${v.client_address}:${v.client_port}|${v.frontend_address}:${v.frontend_port}`;
}

/** The flows in the conntrack map, oldest deadline first. */
export function listConntrack(map: ConntrackMap, now: bigint = monotonicNs()): ConntrackRow[] {
  const rows = new Map<string, ConntrackRow>();
  for (const [key, v] of map.readAll()) {
    const id = flowId(v);
    let row = rows.get(id);
    if (!row) {
      row = {
        proto: protoName(v.proto),
        client: ep(v.client_address, v.client_port),
        frontend: ep(v.frontend_address, v.frontend_port),
        backend: ep(v.backend_address, v.backend_port),
        backendId: v.backend_id,
        revNatId: v.rev_nat_id,
        closing: false,
        path: v.flags & abi.LB_CT_FLAG_POD ? 'pod' : 'external',
        expiresInSeconds: Number(v.expires_ns - now) / 1e9,
        packetsOriginal: 0,
        bytesOriginal: 0,
        packetsReply: 0,
        bytesReply: 0,
        ifindex: v.ifindex,
        entries: [],
      };
      if (v.flags & abi.LB_CT_FLAG_SNAT) row.snat = ep(v.nat_address, v.nat_port);
      rows.set(id, row);
    }
    row.closing ||= (v.flags & abi.LB_CT_FLAG_CLOSING) !== 0;
    row.expiresInSeconds = Math.max(row.expiresInSeconds, Number(v.expires_ns - now) / 1e9);
    if (key.dir === abi.LB_CT_DIR_ORIGINAL) {
      row.entries.unshift('original');
      row.packetsOriginal = Number(v.packets);
      row.bytesOriginal = Number(v.bytes);
    } else {
      row.entries.push('reply');
      row.packetsReply = Number(v.packets);
      row.bytesReply = Number(v.bytes);
    }
  }
  return [...rows.values()].sort((a, b) => a.expiresInSeconds - b.expiresInSeconds);
}

/** Text table for `sluice ct list`. */
export function formatConntrack(rows: ConntrackRow[]): string {
  const header = ['PROTO', 'PATH', 'CLIENT', 'FRONTEND', 'BACKEND', 'SNAT', 'STATE', 'EXPIRES', 'PKTS(O/R)', 'BYTES(O/R)'];
  const lines = rows.map((r) => [
    r.proto,
    r.path,
    r.client,
    r.frontend,
    r.backend,
    r.snat ?? '-',
    r.closing ? 'closing' : r.entries.length === 2 ? 'active' : `only-${r.entries[0] ?? '?'}`,
    `${Math.round(r.expiresInSeconds)}s`,
    `${r.packetsOriginal}/${r.packetsReply}`,
    `${r.bytesOriginal}/${r.bytesReply}`,
  ]);
  const all = [header, ...lines];
  const widths = header.map((_, i) => Math.max(...all.map((l) => (l[i] ?? '').length)));
  return all.map((l) => l.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ').trimEnd()).join('\n');
}

/**
 * Delete expired entries (the data path already ignores them; this frees
 * their LRU slots). Returns how many were deleted.
 */
export function gcConntrack(map: ConntrackMap, now: bigint = monotonicNs()): number {
  let deleted = 0;
  for (const [key, v] of map.readAll()) {
    if (v.expires_ns <= now && map.delete(key)) deleted++;
  }
  return deleted;
}

/**
 * Forget every flow balanced to these backends (the agent calls it when it
 * removes backends). The data path would also re-balance such a flow on its
 * next packet once the backend entry is gone; deleting here makes the
 * change immediate and frees the entries. kube-proxy's stale-UDP-conntrack
 * bug is exactly the absence of this step.
 */
export function purgeBackends(map: ConntrackMap, backendIds: Iterable<number>): number {
  const ids = new Set(backendIds);
  if (ids.size === 0) return 0;
  let deleted = 0;
  for (const [key, v] of map.readAll()) {
    if (ids.has(v.backend_id) && map.delete(key)) deleted++;
  }
  return deleted;
}

/** Periodic GC; returns a stop function. The timer does not keep the process alive. */
export function startConntrackGc(map: ConntrackMap, intervalMs: number, onRun?: (deleted: number) => void): () => void {
  const timer = setInterval(() => {
    const deleted = gcConntrack(map);
    onRun?.(deleted);
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** For `sluice ct list`: the flows in the map pinned under `bpffs` (opens and closes it). */
export function readConntrack(bpffs: string): ConntrackRow[] {
  const maps = openTcMaps(bpffs);
  try {
    return listConntrack(maps.conntrack);
  } finally {
    maps.close();
  }
}
