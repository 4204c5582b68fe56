// The DSR mode of the NodePort bench (issue 17 item 2, docs/dsr.md,
// bench/nodeport.ts): client C2 -> ingress node N2 (agent, --nodeport-mode
// dsr) -> IPIP -> the backend namespace, whose own agent (node name of the
// endpoints, so they are local there) opens the packet and DNATs it; the
// backend's reply leaves through a direct link to the client with the
// NodePort address restored as its source and never enters N2.
//
// What shows that the replies skipped N2, per DSR series: the packets N2's
// client-facing veth sent (replies would leave there; ARP only under DSR),
// the packets the client received on its direct link from the backend node,
// and N2's agent counters (dsr_encapsulated grows, reverse_translated stays 0).
import { counterName, readCounters } from '../src/datapath/counters';
import type { SockLbMaps } from '../src/datapath/maps';
import { run } from './exec';
import { median } from './stats';

/** The packets one namespace's device received and sent (ip -s link). */
export async function linkPackets(netns: string, dev: string): Promise<{ rx: number; tx: number }> {
  const r = await run(['ip', '-n', netns, '-s', '-j', 'link', 'show', 'dev', dev], { timeoutMs: 15000 });
  const s = (JSON.parse(r.stdout) as Array<{ stats64: { rx: { packets: number }; tx: { packets: number } } }>)[0]!.stats64;
  return { rx: s.rx.packets, tx: s.tx.packets };
}

/** Packet counts taken around every DSR series, summed over the rounds. */
export interface DsrPath {
  /** Packets N2's client-facing veth (npc) sent: any reply passing the ingress node would be here. */
  ingressToClient: number;
  /** Packets N2's backend-facing veth (npb) received. */
  ingressFromBackend: number;
  /** Packets N2's npb sent (the IPIP packets). */
  ingressToBackend: number;
  /** Packets the client received on its direct link from the backend node (the replies). */
  clientDirect: number;
}

export class DsrPathMeter {
  readonly total: DsrPath = { ingressToClient: 0, ingressFromBackend: 0, ingressToBackend: 0, clientDirect: 0 };

  constructor(private readonly ingress: string, private readonly client: string) {}

  /** Runs fn and adds the packets the devices counted meanwhile. */
  async around<T>(fn: () => Promise<T>): Promise<T> {
    const snap = () => Promise.all([linkPackets(this.ingress, 'npc'), linkPackets(this.ingress, 'npb'), linkPackets(this.client, 'eth1')]);
    const [c0, b0, d0] = await snap();
    const out = await fn();
    const [c1, b1, d1] = await snap();
    this.total.ingressToClient += c1.tx - c0.tx;
    this.total.ingressFromBackend += b1.rx - b0.rx;
    this.total.ingressToBackend += b1.tx - b0.tx;
    this.total.clientDirect += d1.rx - d0.rx;
    return out;
  }
}

export interface NodePortDsrResult {
  /** Median of per-round ratios (same rounds, order alternating): requests/s and UDP echo replies/s. */
  rr: Record<string, number>;
  echo: Record<string, number>;
  /** Request p50 latency, DSR over the other mode (< 1 = DSR faster): steadier than requests/s, which the tail moves. */
  rrP50: Record<string, number>;
  path: DsrPath;
  /** The ingress node's agent: packets sent in IPIP, replies it translated back (0 under DSR), every non-zero counter. */
  ingress: { encapsulated: number; reverseTranslated: number; counters: Record<string, number> };
  /** The backend node's agent: IPIP packets it opened, replies it gave the NodePort address, every non-zero counter. */
  backend: { decapsulated: number; reverseTranslated: number; counters: Record<string, number> };
  /**
   * The replies went around the ingress node: it encapsulated, translated no
   * reply back, its client-facing veth sent under 1 % of what the client
   * received on its direct link (ARP only), and that link carried replies.
   */
  repliesBypassedIngress: boolean;
}

export function nonZeroCounters(maps: SockLbMaps): Record<string, number> {
  const out: Record<string, number> = {};
  for (const { labels, value } of readCounters(maps.counters)) if (value > 0n) out[counterName(labels)] = Number(value);
  return out;
}

const sumWhere = (c: Record<string, number>, reason: string) => Object.entries(c).reduce((n, [k, v]) => n + (k.split('/')[1] === reason ? v : 0), 0);

/** Per-round ratio medians of DSR against the other modes, pick = the series' rate. */
function ratios(dsr: number[], others: Record<string, number[]>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, xs] of Object.entries(others)) {
    const rs = dsr.map((v, i) => v / (xs[i] ?? NaN)).filter(Number.isFinite);
    if (rs.length) out[`dsr/${name}`] = median(rs);
  }
  return out;
}

/** One round's series of one mode: requests/s, request p50 µs, UDP echo replies/s. */
export interface DsrRoundRates { rr: number; rrP50: number; echo: number }

export function dsrSummary(o: {
  rounds: { dsr: DsrRoundRates[]; others: Record<string, DsrRoundRates[]> };
  path: DsrPath;
  /** Non-zero counters of the two agents after the rounds (nonZeroCounters). */
  ingress: Record<string, number>;
  backend: Record<string, number>;
}): NodePortDsrResult {
  const ic = o.ingress;
  const bc = o.backend;
  const ingress = { encapsulated: ic['north_south/dsr_encapsulated/original'] ?? 0, reverseTranslated: sumWhere(ic, 'reverse_translated'), counters: ic };
  const backend = { decapsulated: bc['north_south/dsr_decapsulated/original'] ?? 0, reverseTranslated: sumWhere(bc, 'reverse_translated'), counters: bc };
  const pick = (f: (x: DsrRoundRates) => number) => Object.fromEntries(Object.entries(o.rounds.others).map(([k, v]) => [k, v.map(f)]));
  return {
    rr: ratios(o.rounds.dsr.map((x) => x.rr), pick((x) => x.rr)),
    echo: ratios(o.rounds.dsr.map((x) => x.echo), pick((x) => x.echo)),
    rrP50: ratios(o.rounds.dsr.map((x) => x.rrP50), pick((x) => x.rrP50)),
    path: o.path,
    ingress,
    backend,
    repliesBypassedIngress: ingress.encapsulated > 0 && ingress.reverseTranslated === 0 && o.path.clientDirect > 0 && o.path.ingressToClient < 0.01 * o.path.clientDirect,
  };
}
