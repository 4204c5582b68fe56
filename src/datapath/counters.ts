// The data-path counters: one per-CPU array (SLUICE_MAP_COUNTERS) whose
// indices each stand for one {reason, direction, path}. This table is the
// one place that names them; the agent exports every row as
// sluice_datapath_events_total{reason, direction, path} and `sluice status`
// prints them. Index ranges per feature are listed in native/sluice_abi.h;
// a new counter is a #define there plus one row here.
import * as abi from '../abi/generated';
import type { BpfMap } from '../bpf/map';
import { readCounter } from './maps';

/** Which program counted: socket hooks, TC on external devices, TC on pod veths, or the agent. */
export type CounterPath = 'socket' | 'north_south' | 'pod' | 'agent';
/** Of the packet or operation counted: toward the backend, back to the client, or neither. */
export type CounterDirection = 'original' | 'reply' | 'none';

export interface CounterLabels {
  reason: string;
  direction: CounterDirection;
  path: CounterPath;
}

type Row = readonly [index: number, reason: string, direction: CounterDirection];

const SOCKET: Row[] = [
  [abi.LB_CNT_SOCK_TRANSLATED, 'translated', 'original'],
  [abi.LB_CNT_SOCK_NO_BACKEND, 'no_backend', 'original'],
  [abi.LB_CNT_SOCK_SLOT_MISSING, 'slot_missing', 'original'],
  [abi.LB_CNT_SOCK_REV_XLATED, 'reverse_translated', 'reply'],
  [abi.LB_CNT_SOCK_STATE_FAILED, 'state_store_failed', 'original'],
  [abi.LB_CNT_SOCK_PAIR_EVICTED, 'pair_evicted', 'original'],
  [abi.LB_CNT_SOCK_UDP_SLOT, 'udp_slot', 'original'],
  [abi.LB_CNT_SOCK_UDP_STORAGE, 'udp_storage', 'original'],
  [abi.LB_CNT_SOCK_STICKY, 'sticky', 'original'],
  // Also counted by the TC paths' selection (one shared index).
  [abi.LB_CNT_SELECT_RETRY, 'select_retry', 'original'],
  [abi.LB_CNT_SOCK_NS_SKIPPED, 'netns_skipped', 'original'],
  [abi.LB_CNT_SOCK_EXTIP_PASSED, 'external_ip_passed', 'original'],
  [abi.LB_CNT_SOCK_BIND_REFUSED, 'bind_refused', 'none'],
  [abi.LB_CNT_SOCK6_SLOT_HELD, 'ipv6_slot_held', 'original'],
  // least-connection (issue 15): counted by the socket hooks and by the TC
  // paths' new flows and closes (one shared index each).
  [abi.LB_CNT_LC_HELD, 'lc_count_held', 'original'],
  [abi.LB_CNT_LC_RELEASED, 'lc_count_released', 'none'],
  [abi.LB_CNT_LC_UNTRACKED, 'lc_untracked', 'original'],
  // Maglev (issue 15): counted by every path's selection (one shared index each).
  [abi.LB_CNT_MAGLEV_PICKED, 'maglev_picked', 'original'],
  [abi.LB_CNT_MAGLEV_FALLBACK, 'maglev_fallback', 'original'],
  [abi.LB_CNT_SOCK_SRC_RANGE_DROP, 'source_range_drop', 'original'],
  [abi.LB_CNT_SOCK_SRC_RANGE_UNKNOWN, 'source_range_unknown_source', 'original'],
  // AF_INET6 sockets count at the rows above (same reasons, no family label);
  // this row only says how many of them were IPv4 through ::ffff:a.b.c.d.
  [abi.LB_CNT_SOCK6_V4MAPPED, 'ipv4_mapped', 'none'],
];

/** Counted by the north-south path only: fragments, PMTU, multi-homed nodes. */
const NORTH_SOUTH: Row[] = [
  [abi.LB_CNT_TC_FRAG_TRACKED, 'fragment_tracked', 'none'],
  [abi.LB_CNT_TC_FRAG_FOUND, 'fragment_translated', 'none'],
  [abi.LB_CNT_TC_FRAG_UNKNOWN, 'fragment_unknown', 'none'],
  [abi.LB_CNT_TC_FRAG_NEEDED_SENT, 'fragmentation_needed_sent', 'none'],
  [abi.LB_CNT_TC_TOO_BIG_DROP, 'too_big_drop', 'none'],
  [abi.LB_CNT_TC_SNAT_EGRESS_DEV, 'snat_egress_device', 'original'],
  // least-connection: flows gone without a close (expired, evicted, replaced), found by the conntrack GC.
  [abi.LB_CNT_LC_GC_RELEASED, 'lc_count_gc_released', 'none'],
  // issue 13 item 5: also counted as snat_failed; this row says the range was full.
  [abi.LB_CNT_TC_SNAT_EXHAUSTED, 'snat_ports_exhausted', 'original'],
  // issue 14: IPv6 packets the TC path passes untouched rather than parse past
  // what it reads (other IPv6 events count at their IPv4 twins' rows).
  [abi.LB_CNT_TC6_FRAG_PASSED, 'ipv6_fragment_passed', 'none'],
  // IPv6 fragments (bpf/lib/frag6.h; both TC paths, one row each like IPv4's 48-50).
  [abi.LB_CNT_TC6_FRAG_TRACKED, 'ipv6_fragment_tracked', 'none'],
  [abi.LB_CNT_TC6_FRAG_FOUND, 'ipv6_fragment_translated', 'none'],
  [abi.LB_CNT_TC6_FRAG_UNKNOWN, 'ipv6_fragment_unknown', 'none'],
  [abi.LB_CNT_TC6_EXTHDR_PASSED, 'ipv6_exthdr_passed', 'none'],
  // issue 17 item 2 (docs/dsr.md): rows 28-29 of the TC flow range, north-south only.
  [abi.LB_CNT_TC_DSR_ENCAP, 'dsr_encapsulated', 'original'],
  [abi.LB_CNT_TC_DSR_DECAP, 'dsr_decapsulated', 'original'],
  // XDP's known-flow sending, both families (bpf/lib/xdp_fc.h, xdp_fc6.h): a full FIB lookup, or the cached answer.
  [abi.LB_CNT_XDP_FIB_LOOKUP, 'xdp_fib_lookup', 'original'],
  [abi.LB_CNT_XDP_FIB_CACHED, 'xdp_fib_cached', 'original'],
  // TC's IPv4 redirect of a rewritten packet, either direction (bpf/lib/tc_fc.h): a full FIB lookup, or the cached answer.
  [abi.LB_CNT_TC_FIB_LOOKUP, 'tc_fib_lookup', 'none'],
  [abi.LB_CNT_TC_FIB_CACHED, 'tc_fib_cached', 'none'],
];

/** Per-packet flow reasons: counted at these indices on the north-south path, LB_CNT_POD_OFFSET above on pod veths. */
const FLOW: Row[] = [
  [abi.LB_CNT_TC_TRANSLATED, 'new_flow', 'original'],
  [abi.LB_CNT_TC_REV_XLATED, 'reverse_translated', 'reply'],
  [abi.LB_CNT_TC_NO_BACKEND, 'no_backend', 'original'],
  [abi.LB_CNT_TC_SRC_RANGE_DROP, 'source_range_drop', 'original'],
  [abi.LB_CNT_TC_SNAT_FAILED, 'snat_failed', 'original'],
  [abi.LB_CNT_TC_BACKEND_GONE, 'backend_gone', 'original'],
  [abi.LB_CNT_TC_CT_FAILED, 'conntrack_failed', 'original'],
  [abi.LB_CNT_TC_FIB_FAILED, 'fib_failed', 'none'],
  [abi.LB_CNT_TC_CT_RESTORED_ORIG, 'conntrack_restored', 'original'],
  [abi.LB_CNT_TC_CT_RESTORED_REPLY, 'conntrack_restored', 'reply'],
  [abi.LB_CNT_TC_CT_PEER_LOST, 'conntrack_peer_lost', 'none'],
  [abi.LB_CNT_TC_SPORT_REMAPPED, 'source_port_remapped', 'original'],
];

function table(): Map<number, CounterLabels> {
  const t = new Map<number, CounterLabels>();
  const add = (index: number, labels: CounterLabels) => {
    if (!Number.isInteger(index) || index < 0 || index >= abi.LB_CNT_MAX) throw new Error(`counter ${labels.reason}: index ${index} outside 0..${abi.LB_CNT_MAX - 1}`);
    if (t.has(index)) throw new Error(`counter ${labels.reason}: index ${index} already names ${t.get(index)?.reason}`);
    t.set(index, labels);
  };
  for (const [index, reason, direction] of SOCKET) add(index, { reason, direction, path: 'socket' });
  for (const [index, reason, direction] of NORTH_SOUTH) add(index, { reason, direction, path: 'north_south' });
  add(abi.LB_CNT_POD_SNAT_EXHAUSTED, { reason: 'snat_ports_exhausted', direction: 'original', path: 'pod' });
  // issue 12: pod ingress packets the frontend-address bitmap passed before any conntrack work.
  add(abi.LB_CNT_POD_NOT_FRONTEND, { reason: 'not_frontend_passed', direction: 'none', path: 'pod' });
  for (const [index, reason, direction] of FLOW) {
    add(index, { reason, direction, path: 'north_south' });
    add(index + abi.LB_CNT_POD_OFFSET, { reason, direction, path: 'pod' });
  }
  return t;
}

/** Every counter index the data path writes, with its labels. */
export const COUNTERS: ReadonlyMap<number, CounterLabels> = table();

/** The index of a counter by its labels (tests, tools); throws when there is none. */
export function counterIndex(path: CounterPath, reason: string, direction?: CounterDirection): number {
  for (const [index, l] of COUNTERS) {
    if (l.path === path && l.reason === reason && (direction === undefined || l.direction === direction)) return index;
  }
  throw new Error(`no data-path counter {path=${path}, reason=${reason}${direction ? `, direction=${direction}` : ''}}`);
}

/** "north_south/new_flow/original" for text output. */
export function counterName(l: CounterLabels): string {
  return `${l.path}/${l.reason}/${l.direction}`;
}

/** Every counter's current value (summed over CPUs). */
export function readCounters(counters: BpfMap): Array<{ index: number; labels: CounterLabels; value: bigint }> {
  return [...COUNTERS].map(([index, labels]) => ({ index, labels, value: readCounter(counters, index) }));
}
