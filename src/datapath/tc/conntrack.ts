// Conntrack of the north-south path, seen from user space: list the flows
// (`sluice ct list [-o json]`), garbage-collect expired entries, and forget
// the flows of a backend the agent removes.
//
// Deadlines are bpf_ktime_get_ns() values (CLOCK_MONOTONIC); process.hrtime
// reads the same clock, so "expires in" is exact.
import * as abi from '../../abi/generated';
import { bytesToIp6, numberToIp4, protoName } from '../addr';
import type { TypedMap } from '../typedMap';
import { progTestRun, type BpfProgram } from '../../bpf/program';
import { openTcMaps } from './maps';

export type ConntrackMap = TypedMap<abi.Lb4CtKey, abi.Lb4CtEntry>;
/** IPv6 (issue 14): sluice_ct6, the same rows with 16-byte addresses. */
export type Conntrack6Map = TypedMap<abi.Lb6CtKey, abi.Lb6CtEntry>;

/** One flow: its original (client -> frontend) and reply entries merged. */
export interface ConntrackRow {
  /** 4: sluice_ct4, 6: sluice_ct6. */
  family: 4 | 6;
  proto: string;
  client: string; // "198.18.0.10:40000", "[2001:db8::10]:40000"
  frontend: string;
  backend: string;
  /** Source the backend sees, "addr:port" (SNAT, or the client with a remapped port); undefined: the client as is. */
  snat?: string;
  backendId: number;
  revNatId: number;
  closing: boolean;
  /** Conntrack state from the flags (see LB_CT_FLAG_* in sluice_abi.h). */
  state: ConntrackState;
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

/**
 * TCP: syn (no handshake yet: SYN timeout), established, fin-wait (one side
 * sent FIN: still the established timeout), closing (RST, or FIN both ways).
 * UDP: unreplied or replied.
 */
export type ConntrackState = 'syn' | 'established' | 'fin-wait' | 'closing' | 'unreplied' | 'replied';

export function conntrackState(proto: number, flags: number): ConntrackState {
  if (proto !== abi.LB_PROTO_TCP) return flags & abi.LB_CT_FLAG_SEEN_REPLY ? 'replied' : 'unreplied';
  if (flags & abi.LB_CT_FLAG_CLOSING) return 'closing';
  if (flags & (abi.LB_CT_FLAG_FIN_ORIGINAL | abi.LB_CT_FLAG_FIN_REPLY)) return 'fin-wait';
  return flags & abi.LB_CT_FLAG_ESTABLISHED ? 'established' : 'syn';
}

export const monotonicNs = (): bigint => process.hrtime.bigint();

/** An entry of either family: addresses a number (IPv4) or 16 bytes (IPv6). */
type AnyCtEntry = abi.Lb4CtEntry | abi.Lb6CtEntry;

const ep = (address: number | Uint8Array, port: number) =>
  typeof address === 'number' ? `${numberToIp4(address)}:${port}` : `[${bytesToIp6(address)}]:${port}`;

function flowId(v: AnyCtEntry): string {
  return `${v.proto}|${v.flags & abi.LB_CT_FLAG_POD}|${ep(v.client_address, v.client_port)}|${ep(v.frontend_address, v.frontend_port)}`;
}

/** The flows in a conntrack map (IPv4 or IPv6), oldest deadline first. */
export function listConntrack(map: ConntrackMap | Conntrack6Map, now: bigint = monotonicNs()): ConntrackRow[] {
  const rows = new Map<string, ConntrackRow>();
  for (const [key, v] of (map as TypedMap<{ dir: number }, AnyCtEntry>).readAll()) {
    const id = flowId(v);
    let row = rows.get(id);
    if (!row) {
      row = {
        family: typeof v.client_address === 'number' ? 4 : 6,
        proto: protoName(v.proto),
        client: ep(v.client_address, v.client_port),
        frontend: ep(v.frontend_address, v.frontend_port),
        backend: ep(v.backend_address, v.backend_port),
        backendId: v.backend_id,
        revNatId: v.rev_nat_id,
        closing: false,
        state: conntrackState(v.proto, v.flags),
        path: v.flags & abi.LB_CT_FLAG_POD ? 'pod' : 'external',
        expiresInSeconds: Number(v.expires_ns - now) / 1e9,
        packetsOriginal: 0,
        bytesOriginal: 0,
        packetsReply: 0,
        bytesReply: 0,
        ifindex: v.ifindex,
        entries: [],
      };
      if (v.flags & (abi.LB_CT_FLAG_SNAT | abi.LB_CT_FLAG_SPORT)) row.snat = ep(v.nat_address, v.nat_port);
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
    r.entries.length === 2 ? r.state : `${r.state},only-${r.entries[0] ?? '?'}`,
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
 * their LRU slots). The work is done in the kernel by the sluice_ct_gc
 * program of tc_lb.bpf.o, run once through BPF_PROG_TEST_RUN: it claims
 * each expired entry with the compare-and-swap the data path uses before it
 * replaces one, so it cannot delete an entry the data path re-created under
 * the same key after the expiry was seen (a user-space dump-then-delete
 * could, between the two). Returns how many were deleted.
 */
export function gcConntrack(gcProgram: BpfProgram): number {
  return progTestRun(gcProgram.fd, { dataIn: GC_DUMMY_PACKET }).retval;
}

/** BPF_PROG_TEST_RUN needs a packet; the GC program never reads it. */
const GC_DUMMY_PACKET = Buffer.alloc(64);

/**
 * Forget every flow balanced to these backends (the agent calls it when it
 * removes backends). The data path would also re-balance such a flow on its
 * next packet once the backend entry is gone; deleting here makes the
 * change immediate and frees the entries. kube-proxy's stale-UDP-conntrack
 * bug is exactly the absence of this step.
 */
export function purgeBackends<K>(map: TypedMap<K, { backend_id: number }>, backendIds: Iterable<number>): number {
  const ids = new Set(backendIds);
  if (ids.size === 0) return 0;
  let deleted = 0;
  for (const [key, v] of map.readAll()) {
    if (ids.has(v.backend_id) && map.delete(key)) deleted++;
  }
  return deleted;
}

/** Periodic GC; returns a stop function. The timer does not keep the process alive. */
export function startConntrackGc(gcProgram: BpfProgram, intervalMs: number, onRun?: (deleted: number) => void): () => void {
  const timer = setInterval(() => {
    const deleted = gcConntrack(gcProgram);
    onRun?.(deleted);
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** For `sluice ct list`: the flows in the maps pinned under `bpffs`, IPv4 then IPv6 (opens and closes them). */
export function readConntrack(bpffs: string): ConntrackRow[] {
  const maps = openTcMaps(bpffs);
  try {
    return [...listConntrack(maps.conntrack), ...(maps.conntrack6 ? listConntrack(maps.conntrack6) : [])];
  } finally {
    maps.close();
  }
}
