// NodePort throughput (issue 6 item 3): a client outside the node reaches S
// Services through their NodePorts on the node's address; the node forwards
// to the ten backends (another namespace: "pods on other nodes", so both
// modes DNAT and SNAT). Two modes, each with its own client and node
// namespace, measured in interleaved rounds:
//
// * Sluice TC: the real agent (`bin/sluice agent --devices`) runs inside the
//   node namespace, watches the built-in API (reached through the cluster
//   tier's unix-socket forwarder, so the node namespace has no route
//   anywhere) holding S NodePort Services x 10 endpoints, and attaches
//   tc_lb.bpf.o to both node veths.
// * kube-proxy iptables (legacy): kube-proxy's NodePort layout loaded with
//   iptables-legacy-restore: KUBE-SERVICES (every ClusterIP rule, then the
//   `addrtype LOCAL -j KUBE-NODEPORTS` tail) -> KUBE-NODEPORTS (one rule per
//   node port) -> KUBE-EXT-* (mark for masquerade) -> KUBE-SVC-* ->
//   KUBE-SEP-* DNAT, MASQUERADE in KUBE-POSTROUTING.
// * Sluice TC, DSR (issue 17 item 2; m = 2): the agent with --nodeport-mode
//   dsr on N_2, a second agent in the backend namespace (the endpoints'
//   node) opening the IPIP packets, the replies straight to C_2 over a link
//   of their own (bench/nodeportDsr.ts; TCP and UDP echo series only).
//
// Series per round and mode: TCP request/response on a new connection each
// (requests/s, one at a time), and UDP packets/s (8 flows, 16 datagrams in
// flight each, echoed: every reply crossed the node twice).
//
//   client C_m 198.18.(64+2m).1/24 ── node N_m .2/24 | 198.18.(65+2m).1/30 ── backend ns .2/30
//                                                                              lo: 198.18.1.1-10
// Safety: every namespace is ours (random suffix), no default routes, no
// link to the machine's devices; TC only on veths inside N_m and, for DSR, on
// the backend namespace's be2/bc2; all removed at the end.
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../src/k8s/apiserver';
import { type SockLbMaps } from '../src/datapath/maps';
import * as abi from '../src/abi/generated';

const { LB_PROTO_TCP, LB_PROTO_UDP } = abi;
import type { AgentProcess } from '../src/lab/agentProcess';
import { type BenchNodeAgent, type BenchNodeAgentOptions, startBenchNodeAgent, waitProgrammed } from './nodeportAgent';
import { DsrPathMeter, dsrSummary, nonZeroCounters, type NodePortDsrResult } from './nodeportDsr';
import { masterKey, tick } from './controlplane';
import { inNetns, run } from './exec';
import { BENCH_NAMESPACE, BENCH_NODEPORT_RANGE, BENCH_SERVICE_CIDR, nodePortOf, preload, serviceName } from './k8sobjects';
import { iptablesRestoreInput, portProtoHash, svcChain } from './kube-iptables';
import { BACKEND_COUNT, BACKEND_PORT, backendAddress, makeServicePorts, ServicePort } from './services';
import { median } from './stats';
import { ProgStats, type ProgRef } from './progstats';
import { progInfo } from '../src/bpf/program';
import { detachXdp, listXdp, openXdpMaps, readXdpStats, xdpMapsPresent } from '../src/datapath/xdp/xdp';

export interface NodePortOptions {
  root: string;
  services: number;
  rounds: number;
  roundMs: number;
  budgetMs: number;
  suffix: string;
  makeCgroup: (tag: string) => string;
  makeBpffs: (tag: string) => string;
  log: (msg: string) => void;
  /** Program time of the agent's tc_lb under each series' traffic (make bench; bench/progstats.ts). */
  progStats?: ProgStats;
  /** Upper bound on the frames of one flood (npbench flood); the round time bounds it too. */
  floodCount?: number;
  /** The in-kernel generator's series (npbench live; default on) and its frame bound per series. */
  live?: boolean;
  liveCount?: number;
}

export interface NodePortRound {
  rr: { ok: number; failed: number; per_s: number; p50_us: number; p99_us: number };
  pps: { sent: number; received: number; per_s: number };
  /** UDP flood to the NodePorts (npbench flood): frames sent, frames counted at the backend, arrivals/s. */
  flood?: { sent: number; arrived: number; elapsed_s: number; per_s: number };
  /** The same flood to a backend address directly (not a Service packet), routed by the node. */
  plain?: { sent: number; arrived: number; elapsed_s: number; per_s: number };
  /** sluice_xdp run time per packet during the non-Service flood (bpf_stats), XDP modes only. */
  plainXdpNs?: number;
  /** In-kernel generator (npbench live): NodePort frames, and the non-Service ones (see docs/bench.md). */
  live?: LiveFlood;
  livePlain?: LiveFlood;
  /** The round's baseline: the generator straight into the sink, no node (the same for every mode of the round). */
  liveBase?: LiveFlood;
  /** sluice_xdp run time per packet during the live NodePort flood (bpf_stats), XDP modes only. */
  liveXdpNs?: number;
  /** sluice_xdp run time per packet during the live non-Service flood (bpf_stats), XDP modes only. */
  livePlainXdpNs?: number;
}

/**
 * One `npbench live` series: frames generated in the client namespace by
 * BPF_PROG_TEST_RUN (XDP live frames), counted at the backend. per_cpu_s =
 * arrivals per CPU-second of the generator's thread, whose CPU also ran the
 * node's receive processing (softirq): the node's packets/s per CPU, which the
 * machine's other load does not move the way it moves arrivals per wall second.
 */
export interface LiveFlood { sent: number; arrived: number; elapsed_s: number; cpu_s: number; per_s: number; per_cpu_s: number }

export type NodePortModeId = 'sluice-xdp-native' | 'sluice-xdp-generic' | 'sluice-tc' | 'sluice-dsr' | 'iptables-legacy';

/** Median over rounds of per-round ratios, packets/s = the flood's arrivals at the backend. */
export interface NodePortXdpRatios {
  rr: Record<string, number>;
  flood: Record<string, number>;
  echo: Record<string, number>;
  /** Non-Service flood: packets/s without an XDP program over packets/s with sluice_xdp (cost ratio, > 1 = XDP costs). */
  plainCost: { native?: number; generic?: number };
  /** sluice_xdp ns per non-Service packet (bpf_stats) and the no-program packet time at the measured rate: 1 + ns x pps. */
  plainProgNs?: number;
  plainDerivedCost?: number;
  /** In-kernel generator: packets per CPU-second of the node's processing, and per wall second (medians of per-round ratios). */
  live: Record<string, number>;
  liveWall: Record<string, number>;
  /** The same, the node's share only (the round's generator+sink baseline taken off, nodeRate). */
  liveNode: Record<string, number>;
  /** Non-Service, in-kernel generator: CPU time per packet with sluice_xdp over without (paired rounds; > 1 = XDP costs), whole chain and node's share. */
  livePlainCost: { native?: number; generic?: number };
  livePlainNodeCost: { native?: number; generic?: number };
  /** sluice_xdp ns per non-Service packet under the live flood, and 1 + that over the node's no-program CPU time per packet. */
  livePlainProgNs?: number;
  /**
   * sluice_xdp's ns per non-Service packet from BPF_PROG_TEST_RUN against a
   * bare XDP_PASS program (no bpf_stats clock reads in the difference), and
   * 1 + that difference over livePlainNoXdpNs.
   */
  plainTestRun?: { prog_ns: number; pass_ns: number; cost_ns: number; retval: number; derivedCost?: number };
  /** The node's CPU ns per non-Service packet without an XDP program (TC mode's rounds, node share, median). */
  livePlainNoXdpNs?: number;
  livePlainDerivedCost?: number;
}

export interface NodePortModeResult {
  id: NodePortModeId;
  label: string;
  loadMs?: number;
  reason?: string;
  rounds: NodePortRound[];
  rrPerS: number;
  rrP50Us: number;
  rrP99Us: number;
  ppsPerS: number;
  /** Median flood arrivals/s at the backend (packets/s the node forwarded). */
  floodPerS: number;
  plainPerS: number;
  /** In-kernel generator: median arrivals per CPU-second of the generator+node thread, and per wall second. */
  livePerCpuS: number;
  livePerS: number;
  /** Median node ns per packet (live, baseline taken off) and the baseline's ns per packet in this mode's rounds. */
  liveNodeNs: number;
  liveBaseNs: number;
  failed: number;
}

export interface NodePortResult {
  services: number;
  nodePorts: number;
  modes: NodePortModeResult[];
  /** Median over rounds of (Sluice / iptables) in the same round. */
  rrRatio?: number;
  ppsRatio?: number;
  /** Sluice's data-path counters (LB_CNT_*) after the rounds, non-zero ones. */
  sluiceCounters?: Record<string, number>;
  /** h-maglev: Sluice TC with every Service annotated maglev, rounds after the random ones (TCP req/s). */
  maglev?: { rounds: number; rrPerS: number; failed: number; vsRandom: number; switchS: number };
  /** sluice_xdp's per-device counters after the rounds (node veths: npc = from the client, npb = from the backends). */
  xdpCounters?: Record<string, Record<string, number>>;
  /** XDP native / generic against TC and iptables, same rounds (issue 17). */
  xdp?: NodePortXdpRatios;
  /** DSR against TC (SNAT) and iptables, same rounds, and where its replies went (issue 17 item 2, bench/nodeportDsr.ts). */
  dsr?: NodePortDsrResult;
  error?: string;
  notes: string[];
}

const MODES: Array<[NodePortModeId, string]> = [
  ['sluice-xdp-native', 'Sluice XDP native (agent, --xdp-mode native: sluice_xdp in front of tc_lb)'],
  ['sluice-xdp-generic', 'Sluice XDP generic (same program, generic mode)'],
  ['sluice-tc', 'Sluice TC (agent, tc_lb on the node veths)'],
  ['sluice-dsr', 'Sluice TC, DSR (--nodeport-mode dsr: IPIP to the backend node, replies straight to the client)'],
  ['iptables-legacy', 'kube-proxy iptables (legacy), NodePort layout'],
];

const SHORT: Record<NodePortModeId, string> = { 'sluice-xdp-native': 'native', 'sluice-xdp-generic': 'generic', 'sluice-tc': 'tc', 'sluice-dsr': 'dsr', 'iptables-legacy': 'iptables' };

/**
 * The node's share of a live series: packets per CPU-second once the
 * generator's and the sink's CPU per packet (the round's baseline, no node
 * between them) is taken off. NaN when either is missing or the remainder is
 * not positive (the baseline was the slower of the two: noise).
 */
export function nodeRate(live: LiveFlood | undefined, base: LiveFlood | undefined): number {
  if (!live || !base || !(live.per_cpu_s > 0) || !(base.per_cpu_s > 0)) return NaN;
  const s = 1 / live.per_cpu_s - 1 / base.per_cpu_s;
  return s > 0 ? 1 / s : NaN;
}

/** Per-round ratios between the modes (same round, so the machine's load is shared), medians. */
export function xdpRatios(modes: Record<string, NodePortModeResult>): NodePortXdpRatios | undefined {
  const nat = modes['sluice-xdp-native'];
  if (!nat || nat.rounds.length === 0) return undefined;
  const pairs: Array<[NodePortModeId, NodePortModeId]> = [
    ['sluice-xdp-native', 'sluice-tc'], ['sluice-xdp-native', 'iptables-legacy'], ['sluice-xdp-generic', 'sluice-tc'],
    ['sluice-xdp-generic', 'iptables-legacy'], ['sluice-tc', 'iptables-legacy'], ['sluice-dsr', 'sluice-tc'], ['sluice-dsr', 'iptables-legacy'],
  ];
  const ratio = (pick: (r: NodePortRound) => number | undefined) => {
    const out: Record<string, number> = {};
    for (const [x, y] of pairs) {
      const a = modes[x]?.rounds ?? [];
      const b = modes[y]?.rounds ?? [];
      const rs = a.map((r, i) => (b[i] ? (pick(r) ?? NaN) / (pick(b[i]!) ?? NaN) : NaN)).filter(Number.isFinite);
      if (rs.length) out[`${SHORT[x]}/${SHORT[y]}`] = median(rs);
    }
    return out;
  };
  const tc = modes['sluice-tc']?.rounds ?? [];
  const cost = (id: NodePortModeId) => {
    const rs = (modes[id]?.rounds ?? []).map((r, i) => (tc[i]?.plain && r.plain ? tc[i]!.plain!.per_s / r.plain.per_s : NaN)).filter(Number.isFinite);
    return rs.length ? median(rs) : undefined;
  };
  const liveCost = (id: NodePortModeId, rate: (r: NodePortRound) => number) => {
    const rs = (modes[id]?.rounds ?? []).map((r, i) => (tc[i] ? rate(tc[i]!) / rate(r) : NaN)).filter(Number.isFinite);
    return rs.length ? median(rs) : undefined;
  };
  const plainAll = (r: NodePortRound) => r.livePlain?.per_cpu_s ?? NaN;
  const plainNode = (r: NodePortRound) => nodeRate(r.livePlain, r.liveBase);
  const ns = nat.rounds.map((r) => r.plainXdpNs).filter((x): x is number => x !== undefined);
  const plainProgNs = ns.length ? median(ns) : undefined;
  const noProg = modes['sluice-tc']?.plainPerS;
  const liveNs = nat.rounds.map((r) => r.livePlainXdpNs).filter((x): x is number => x !== undefined);
  const livePlainProgNs = liveNs.length ? median(liveNs) : undefined;
  const tcLive = tc.map(plainNode).filter(Number.isFinite);
  const liveNoProg = tcLive.length ? median(tcLive) : undefined;
  return {
    rr: ratio((r) => r.rr.per_s),
    flood: ratio((r) => r.flood?.per_s),
    echo: ratio((r) => r.pps.per_s),
    plainCost: { native: cost('sluice-xdp-native'), generic: cost('sluice-xdp-generic') },
    plainProgNs,
    plainDerivedCost: plainProgNs !== undefined && noProg !== undefined && Number.isFinite(noProg) ? 1 + plainProgNs * 1e-9 * noProg : undefined,
    live: ratio((r) => r.live?.per_cpu_s),
    liveWall: ratio((r) => r.live?.per_s),
    liveNode: ratio((r) => nodeRate(r.live, r.liveBase)),
    livePlainCost: { native: liveCost('sluice-xdp-native', plainAll), generic: liveCost('sluice-xdp-generic', plainAll) },
    livePlainNodeCost: { native: liveCost('sluice-xdp-native', plainNode), generic: liveCost('sluice-xdp-generic', plainNode) },
    livePlainProgNs,
    livePlainNoXdpNs: liveNoProg !== undefined ? 1e9 / liveNoProg : undefined,
    livePlainDerivedCost: livePlainProgNs !== undefined && liveNoProg !== undefined ? 1 + livePlainProgNs * 1e-9 * liveNoProg : undefined,
  };
}

const NODE_NAME = 'bench-np-node';
/** Endpoints live "elsewhere": both modes DNAT + SNAT, as kube-proxy does for every NodePort (eTP Cluster). */
const ENDPOINT_NODE = 'bench-np-other';
/** The DSR ingress node (its endpoints are on ENDPOINT_NODE, the backend namespace, whose agent opens the IPIP packets). */
const DSR_NODE_NAME = 'bench-np-dsr';
const FORWARDER = (root: string) => path.join(root, 'dist', 'test', 'cluster', 'forwarder.js');
const T = { timeoutMs: 15000 };

/** kube-proxy's NodePort rules on top of its ClusterIP tables (pkg/proxy/iptables, "Capture nodeports"). */
export function nodePortRestoreInput(ports: ServicePort[], nodePort: (sp: ServicePort) => number): string {
  const full = iptablesRestoreInput(ports);
  const lines = full.split('\n');
  const nat = lines.indexOf('*nat');
  const decl = lines.indexOf(':KUBE-SERVICES - [0:0]', nat);
  const commit = lines.lastIndexOf('COMMIT');
  const chains: string[] = [];
  const rules: string[] = [];
  for (const sp of ports) {
    const ext = 'KUBE-EXT-' + portProtoHash(sp.name, sp.proto);
    chains.push(`:${ext} - [0:0]`);
    rules.push(`-A KUBE-NODEPORTS -m comment --comment ${sp.name} -m ${sp.proto} -p ${sp.proto} --dport ${nodePort(sp)} -j ${ext}`);
    rules.push(`-A ${ext} -m comment --comment "masquerade traffic for ${sp.name} external destinations" -j KUBE-MARK-MASQ`);
    rules.push(`-A ${ext} -j ${svcChain(sp)}`);
  }
  return [...lines.slice(0, decl + 1), ...chains, ...lines.slice(decl + 1, commit), ...rules, ...lines.slice(commit)].join('\n');
}

interface Side {
  id: NodePortModeResult['id'];
  client: string;
  node: string;
  clientAddr: string;
  nodeAddr: string;
}

class Topology {
  readonly backend: string;
  /** The live generator's baseline: a namespace whose eth0 is wired straight to the backend's sink (veth gb), no node between. */
  readonly gen: string;
  readonly sides: Side[];
  private readonly made: string[] = [];
  private readonly children: ChildProcess[] = [];

  constructor(suffix: string) {
    this.backend = `sbnp-be-${suffix}`;
    this.gen = `sbnp-g-${suffix}`;
    this.sides = (['sluice-tc', 'iptables-legacy', 'sluice-dsr'] as const).map((id, m) => ({
      id, client: `sbnp-c${m}-${suffix}`, node: `sbnp-n${m}-${suffix}`,
      clientAddr: `198.18.${64 + 2 * m}.1`, nodeAddr: `198.18.${64 + 2 * m}.2`,
    }));
  }

  private async netns(name: string): Promise<void> {
    await run(['ip', 'netns', 'add', name], T);
    this.made.push(name);
    await run(['ip', '-n', name, 'link', 'set', 'lo', 'up'], T);
  }

  private async sysctl(ns: string, kv: Record<string, string>): Promise<void> {
    for (const [k, v] of Object.entries(kv)) await run(['ip', 'netns', 'exec', ns, 'sysctl', '-qw', `${k}=${v}`], T);
  }

  private sink?: { npbench: string; pin: string; ifindex: Record<string, number> };

  /**
   * Frames of the floods counted (and dropped) where they reach the backend,
   * the same in every mode: `npbench sink`, a native XDP program on each
   * backend veth that counts IPv4/UDP frames of total length 46 (no other
   * traffic of the bench has it) per ingress ifindex and drops them, and
   * passes everything else. As cheap as a counter can be, so the backend's
   * share of a flood packet's cost is small next to the node's. It also
   * gives the backend veths NAPI, which XDP_REDIRECT into them needs.
   */
  async attachSink(npbench: string, pin: string): Promise<void> {
    const devs = [...this.sides.map((_, m) => `be${m}`), 'gb'];
    const r = await run([npbench, 'sink', '--netns', this.backend, '--dev', devs.join(','), '--pin', pin], T);
    this.sink = { npbench, pin, ifindex: (JSON.parse(r.stdout) as { ifindex: Record<string, number> }).ifindex };
  }

  /** Flood frames counted at be<m> (m = the side), or at gb (the baseline) for m = -1. */
  async arrivals(m: number): Promise<number> {
    if (!this.sink) throw new Error('nodeport: the backend sink is not attached');
    const r = await run([this.sink.npbench, 'sink-count', '--pin', this.sink.pin, '--ifindex', String(this.sink.ifindex[m < 0 ? 'gb' : `be${m}`])], T);
    return (JSON.parse(r.stdout) as { count: number }).count;
  }

  async create(root?: string): Promise<void> {
    await this.netns(this.backend);
    await this.netns(this.gen);
    await run(['ip', '-n', this.backend, 'link', 'add', 'gb', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', this.gen], T);
    await run(['ip', '-n', this.backend, 'link', 'set', 'gb', 'up'], T);
    await run(['ip', '-n', this.gen, 'link', 'set', 'eth0', 'up'], T);
    for (let i = 0; i < BACKEND_COUNT; i++) await run(['ip', '-n', this.backend, 'addr', 'add', `${backendAddress(i)}/32`, 'dev', 'lo'], T);
    await this.sysctl(this.backend, { 'net.core.somaxconn': '8192', 'net.ipv4.tcp_max_syn_backlog': '16384' });
    for (const [m, s] of this.sides.entries()) {
      const link = `198.18.${65 + 2 * m}`;
      await this.netns(s.client);
      await this.netns(s.node);
      await run(['ip', '-n', s.node, 'link', 'add', 'npc', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', s.client], T);
      await run(['ip', '-n', s.node, 'link', 'add', 'npb', 'type', 'veth', 'peer', 'name', `be${m}`, 'netns', this.backend], T);
      await run(['ip', '-n', s.client, 'addr', 'add', `${s.clientAddr}/24`, 'dev', 'eth0'], T);
      await run(['ip', '-n', s.node, 'addr', 'add', `${s.nodeAddr}/24`, 'dev', 'npc'], T);
      await run(['ip', '-n', s.node, 'addr', 'add', `${link}.1/30`, 'dev', 'npb'], T);
      await run(['ip', '-n', this.backend, 'addr', 'add', `${link}.2/30`, 'dev', `be${m}`], T);
      for (const [ns, dev] of [[s.client, 'eth0'], [s.node, 'npc'], [s.node, 'npb'], [this.backend, `be${m}`]] as const) {
        await run(['ip', '-n', ns, 'link', 'set', dev, 'up'], T);
      }
      // No default routes: the node reaches the backends, the backends reach the node's /24.
      await run(['ip', '-n', s.node, 'route', 'add', '198.18.1.0/24', 'via', `${link}.2`], T);
      await run(['ip', '-n', this.backend, 'route', 'add', `198.18.${64 + 2 * m}.0/24`, 'via', `${link}.1`], T);
      await this.sysctl(s.node, { 'net.ipv4.ip_forward': '1', 'net.ipv4.conf.all.rp_filter': '0', 'net.ipv4.conf.default.rp_filter': '0' });
      await this.sysctl(s.client, { 'net.ipv4.tcp_tw_reuse': '1', 'net.ipv4.ip_local_port_range': '10000 65000' });
      // The client plays an external machine: complete TCP/UDP checksums on
      // its wire (ethtool -K eth0 tx off), as a NIC would deliver them; a
      // veth otherwise hands native XDP CHECKSUM_PARTIAL frames (docs/xdp.md).
      // Every mode gets the same client.
      if (root) await run(['ip', 'netns', 'exec', s.client, path.join(root, 'build', 'txcsum_off'), 'eth0'], T);
    }
    await this.directReturn();
  }

  /**
   * DSR's reply path: the backend "node" reaches the DSR side's client over
   * a link of its own (client eth1 198.18.70.1/30 -- backend bc<m> .2/30), a
   * host route for the client's address only, so every other mode's replies
   * (to its node's addresses) keep their way through their node. The client
   * takes replies from the NodePort address on eth1 (rp_filter off), as an
   * external client reached by DSR does.
   */
  private async directReturn(): Promise<void> {
    const m = this.sides.findIndex((s) => s.id === 'sluice-dsr');
    const s = this.sides[m]!;
    await run(['ip', '-n', s.client, 'link', 'add', 'eth1', 'type', 'veth', 'peer', 'name', `bc${m}`, 'netns', this.backend], T);
    await run(['ip', '-n', s.client, 'addr', 'add', '198.18.70.1/30', 'dev', 'eth1'], T);
    await run(['ip', '-n', this.backend, 'addr', 'add', '198.18.70.2/30', 'dev', `bc${m}`], T);
    await run(['ip', '-n', s.client, 'link', 'set', 'eth1', 'up'], T);
    await run(['ip', '-n', this.backend, 'link', 'set', `bc${m}`, 'up'], T);
    await run(['ip', '-n', this.backend, 'route', 'add', `${s.clientAddr}/32`, 'via', '198.18.70.1', 'dev', `bc${m}`], T);
    await this.sysctl(s.client, { 'net.ipv4.conf.all.rp_filter': '0', 'net.ipv4.conf.default.rp_filter': '0', 'net.ipv4.conf.eth0.rp_filter': '0', 'net.ipv4.conf.eth1.rp_filter': '0' });
  }

  async startServer(root: string): Promise<void> {
    const binds = Array.from({ length: BACKEND_COUNT }, (_, i) => backendAddress(i)).join(',');
    const child = spawn('nsenter', [`--net=/run/netns/${this.backend}`, path.join(root, 'build', 'npbench'), 'server', '--port', String(BACKEND_PORT), '--udp-bind', binds, '--max-s', '1500'], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.children.push(child);
    await new Promise<void>((resolve, reject) => {
      let err = '';
      const timer = setTimeout(() => reject(new Error(`npbench server: not ready in 5 s: ${err}`)), 5000);
      child.stderr!.on('data', (d) => (err += d));
      child.stdout!.once('data', () => { clearTimeout(timer); resolve(); });
      child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`npbench server exited ${code}: ${err}`)); });
    });
  }

  spawn(argv: string[]): ChildProcess {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: 'ignore' });
    this.children.push(child);
    return child;
  }

  async destroy(): Promise<void> {
    for (const c of this.children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    for (const ns of this.made.reverse()) await run(['ip', 'netns', 'del', ns], { timeoutMs: 60000, allowFailure: true });
  }
}

/** Builds build/npbench when missing or older than its source (the Makefile's bench target may not list it). */
async function ensureNpbench(root: string): Promise<string> {
  const bin = path.join(root, 'build', 'npbench');
  const src = path.join(root, 'bench', 'npbench.c');
  if (!fs.existsSync(bin) || fs.statSync(bin).mtimeMs < fs.statSync(src).mtimeMs) {
    await run([process.env.CC ?? 'cc', '-O2', '-Wall', '-Wextra', '-Werror', '-o', bin, src], { timeoutMs: 60000 });
  }
  return bin;
}

export async function measureNodePort(o: NodePortOptions): Promise<NodePortResult> {
  const deadline = Date.now() + o.budgetMs;
  const res: NodePortResult = { services: o.services, nodePorts: 2 * o.services, modes: [], notes: [] };
  const topo = new Topology(o.suffix);
  let api: ApiServerHandle | undefined;
  let agentBpffs: string | undefined;
  let maps: SockLbMaps | undefined;
  const started: AgentProcess[] = [];
  let dsrAgents: { ingress: BenchNodeAgent; backend: BenchNodeAgent } | undefined;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bench-np-'));
  try {
    const npbench = await ensureNpbench(o.root);
    await topo.create(o.root);
    await topo.startServer(o.root);
    const [sl, ipt, dsr] = topo.sides as [Side, Side, Side];
    // A veth hands XDP_REDIRECT / XDP_TX frames only to a peer running NAPI,
    // which it does while the peer has an XDP program: the floods' counter
    // (npbench sink) on the backend ends of both nodes, in every mode alike.
    await topo.attachSink(npbench, o.makeBpffs('npbe'));
    const ports = makeServicePorts(o.services, ['tcp', 'udp']);
    const nodePort = (sp: ServicePort) => nodePortOf(Number(sp.service.slice(4)), sp.proto === 'tcp' ? 'TCP' : 'UDP', o.services);
    // IPv4 NodePorts are one wildcard master per port (0.0.0.0, bpf/lib/nodeport.h).
    const keys = ports.map((sp) => masterKey('0.0.0.0', nodePort(sp), sp.proto === 'tcp' ? LB_PROTO_TCP : LB_PROTO_UDP));
    const modes: Record<string, NodePortModeResult> = {};
    for (const [id, label] of MODES) {
      modes[id] = { id, label, rounds: [], rrPerS: NaN, rrP50Us: NaN, rrP99Us: NaN, ppsPerS: NaN, floodPerS: NaN, plainPerS: NaN, livePerCpuS: NaN, livePerS: NaN, liveNodeNs: NaN, liveBaseNs: NaN, failed: 0 };
      res.modes.push(modes[id]!);
    }

    // kube-proxy iptables, bounded by a share of the budget.
    {
      const t0 = Date.now();
      const budget = Math.max(5000, (deadline - Date.now()) * 0.5);
      o.log(`nodeport: loading kube-proxy's NodePort layout for ${o.services} Services (${ports.length} node ports) with iptables-legacy-restore, budget ${Math.round(budget / 1000)} s`);
      const r = await inNetns(ipt.node, ['iptables-legacy-restore', '-w', '5'], { timeoutMs: budget, input: nodePortRestoreInput(ports, nodePort), allowFailure: true });
      if (r.code === 0) modes['iptables-legacy']!.loadMs = Date.now() - t0;
      else modes['iptables-legacy']!.reason = r.timedOut ? `not loadable within ${Math.round(budget / 1000)} s` : `iptables-legacy-restore failed: ${r.stderr.trim().slice(0, 200)}`;
      o.log(`nodeport: iptables: ${modes['iptables-legacy']!.reason ?? `loaded in ${(modes['iptables-legacy']!.loadMs! / 1000).toFixed(1)} s`}`);
    }

    // Sluice: API + forwarder into the node namespace + the agent with --devices.
    let agentOpts: Pick<BenchNodeAgentOptions, 'root' | 'apiSock' | 'tmp' | 'nodePorts' | 'makeCgroup' | 'makeBpffs' | 'spawn' | 'started'> | undefined;
    {
      const t0 = Date.now();
      api = await startApiServer({ serviceCIDR: BENCH_SERVICE_CIDR, nodePortRange: BENCH_NODEPORT_RANGE, bookmarkIntervalMs: 0 });
      preload(api.store, o.services, { protos: ['TCP', 'UDP'], type: 'NodePort', endpointNode: ENDPOINT_NODE }, { name: NODE_NAME, address: sl.nodeAddr });
      const kubeconfig = path.join(tmp, 'kubeconfig');
      await api.writeKubeconfig(kubeconfig);
      const sock = path.join(tmp, 'api.sock');
      topo.spawn([process.execPath, FORWARDER(o.root), 'unix-to-tcp', sock, `127.0.0.1:${api.port}`]);
      for (let i = 0; i < 500 && !fs.existsSync(sock); i++) await tick(10);
      agentOpts = { root: o.root, apiSock: sock, tmp, nodePorts: ports.length, makeCgroup: o.makeCgroup, makeBpffs: o.makeBpffs, spawn: (argv: string[]) => topo.spawn(argv), started };
      const sla = await startBenchNodeAgent({ ...agentOpts, netns: sl.node, nodeName: NODE_NAME, nodeAddr: sl.nodeAddr, devices: 'npc,npb', extraArgs: ['--xdp-mode', 'native'], tag: 'np' }, deadline);
      agentBpffs = sla.bpffs;
      maps = sla.maps;
      await waitProgrammed(sla, keys, deadline);
      modes['sluice-tc']!.loadMs = Date.now() - t0;
      modes['sluice-xdp-native']!.loadMs = modes['sluice-tc']!.loadMs;
      modes['sluice-xdp-generic']!.loadMs = modes['sluice-tc']!.loadMs;
      o.log(`nodeport: Sluice: ${ports.length} node ports programmed by the agent in ${(modes['sluice-tc']!.loadMs! / 1000).toFixed(1)} s (API preload included)`);
    }

    // DSR (docs/dsr.md): the ingress node's agent with --nodeport-mode dsr
    // and, in the backend namespace, the agent of the endpoints' node, whose
    // TC opens the IPIP packets arriving on be<m> and gives the replies
    // leaving bc<m> (straight to the client) the NodePort address. Only the
    // DSR side's links carry either program, so no other mode's packet meets them.
    if (api && agentOpts) {
      const t0 = Date.now();
      const m = topo.sides.indexOf(dsr);
      const beAddr = `198.18.${65 + 2 * m}.2`;
      for (const [name, address] of [[DSR_NODE_NAME, dsr.nodeAddr], [ENDPOINT_NODE, beAddr]]) {
        api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name }, status: { addresses: [{ type: 'InternalIP', address }] } });
      }
      try {
        const [ing, be] = await Promise.all([
          startBenchNodeAgent({ ...agentOpts, netns: dsr.node, nodeName: DSR_NODE_NAME, nodeAddr: dsr.nodeAddr, devices: 'npc,npb', extraArgs: ['--nodeport-mode', 'dsr'], tag: 'npdsr' }, deadline),
          startBenchNodeAgent({ ...agentOpts, netns: topo.backend, nodeName: ENDPOINT_NODE, nodeAddr: beAddr, devices: `be${m},bc${m}`, tag: 'npdsrbe' }, deadline),
        ]);
        dsrAgents = { ingress: ing, backend: be };
        await Promise.all([waitProgrammed(ing, keys, deadline), waitProgrammed(be, keys, deadline)]);
        modes['sluice-dsr']!.loadMs = Date.now() - t0;
        o.log(`nodeport: DSR: both agents programmed in ${(modes['sluice-dsr']!.loadMs! / 1000).toFixed(1)} s`);
      } catch (e) {
        modes['sluice-dsr']!.reason = `DSR agents: ${(e as Error).message.slice(0, 300)}`;
        o.log(`nodeport: ${modes['sluice-dsr']!.reason}`);
      }
    }

    // The agent attached sluice_xdp natively (--xdp-mode native) and filled
    // its frontend-address set and redirect targets. The modes of the Sluice
    // node are switched between series by moving that program: pinned, the
    // agent's links detached, then attached (netlink) natively, generically
    // or not at all; TC stays on the veths throughout.
    let xdpProg: number | undefined;
    const xdpPin = agentBpffs ? path.join(agentBpffs, 'bench-xdp-prog') : undefined;
    if (agentBpffs && xdpPin) {
      const links = listXdp(agentBpffs);
      xdpProg = links.find((l) => l.device === 'npc')?.programId;
      if (xdpProg === undefined) {
        for (const id of ['sluice-xdp-native', 'sluice-xdp-generic'] as const) modes[id]!.reason = 'the agent attached no XDP program (see its log)';
      } else {
        await run(['bpftool', 'prog', 'pin', 'id', String(xdpProg), xdpPin], T);
        for (const l of links) detachXdp(agentBpffs, l.device); // by link: no namespace needed
      }
    }
    const setXdp = async (mode: 'native' | 'generic' | 'off') => {
      for (const dev of ['npc', 'npb']) {
        for (const kind of ['xdpdrv', 'xdpgeneric']) await run(['nsenter', `--net=/run/netns/${sl.node}`, 'bpftool', 'net', 'detach', kind, 'dev', dev], { ...T, allowFailure: true });
        if (mode !== 'off') await run(['nsenter', `--net=/run/netns/${sl.node}`, 'bpftool', 'net', 'attach', mode === 'native' ? 'xdpdrv' : 'xdpgeneric', 'pinned', xdpPin!, 'dev', dev], T);
      }
    };
    const nodeMac: Record<string, string> = {};
    for (const s of topo.sides) {
      const r = await run(['ip', '-n', s.node, '-j', 'link', 'show', 'npc'], T);
      nodeMac[s.id] = (JSON.parse(r.stdout) as Array<{ address: string }>)[0]!.address;
    }
    // Interleaved rounds. tc_lb's run time: TCP (a new connection per
    // request: SYNs, new flows) apart from UDP (8 flows: known flows).
    const tcProgs: ProgRef[] = agentBpffs ? ProgStats.linkPrograms(agentBpffs, /^tc-/) : [];
    const xdpProgs: ProgRef[] = xdpProg !== undefined ? [{ id: xdpProg, name: progInfo(xdpProg).name }, ...tcProgs] : tcProgs;
    const timed = <T>(id: NodePortModeId, series: string, fn: () => Promise<T>) =>
      (id !== 'iptables-legacy' && id !== 'sluice-dsr' && o.progStats
        ? o.progStats.measure(id === 'sluice-tc' ? `NodePort (tc_lb on the node veths), ${o.services} Services, ${series}` : `XDP: NodePort (${id}), ${o.services} Services, ${series}`, id === 'sluice-tc' ? tcProgs : xdpProgs, fn, o.services)
        : fn());
    // bpf_stats for sluice_xdp's time per non-Service packet (part.js runs without main's ProgStats).
    const localStats = o.progStats ? undefined : new ProgStats();
    localStats?.enable();
    const sideOf = (id: NodePortModeId): Side => (id === 'iptables-legacy' ? ipt : id === 'sluice-dsr' ? dsr : sl);
    // DSR's series go through the meter that counts where the replies went.
    const dsrMeter = new DsrPathMeter(dsr.node, dsr.client);
    const active = MODES.map(([id]) => id).filter((id) => modes[id]!.loadMs !== undefined && !modes[id]!.reason);
    const targets: Record<string, { tcp: string; udp: string }> = {};
    for (const s of topo.sides) {
      const file = (proto: string) => {
        const f = path.join(tmp, `np-${s.id}-${proto}.txt`);
        fs.writeFileSync(f, ports.filter((sp) => sp.proto === proto).map((sp) => `${s.nodeAddr} ${nodePort(sp)}`).join('\n') + '\n');
        return f;
      };
      targets[s.id] = { tcp: file('tcp'), udp: file('udp') };
    }
    // Not a Service packet: to the backends' addresses themselves, routed by the node.
    const plainTargets = path.join(tmp, 'np-plain.txt');
    fs.writeFileSync(plainTargets, Array.from({ length: 8 }, (_, i) => `${backendAddress(i)} 9`).join('\n') + '\n');
    const flood = async (s: Side, file: string) => {
      const m = topo.sides.indexOf(s);
      const a0 = await topo.arrivals(m);
      const r = await run(['nsenter', `--net=/run/netns/${s.client}`, npbench, 'flood', '--dev', 'eth0', '--dst-mac', nodeMac[s.id]!, '--src', s.clientAddr,
        '--targets', file, '--count', String(o.floodCount ?? 5_000_000), '--max-ms', String(o.roundMs), '--flows', '8'], { timeoutMs: o.roundMs + 15000 });
      await tick(200); // what is still queued on the way
      const arrived = (await topo.arrivals(m)) - a0;
      const j = JSON.parse(r.stdout) as { sent: number; elapsed_s: number };
      return { sent: j.sent, arrived, elapsed_s: j.elapsed_s, per_s: arrived / j.elapsed_s };
    };
    // The in-kernel generator (npbench live) enters the client namespace
    // itself and sends through its eth0 only (it refuses the namespace it
    // started in, and any device but a veth). The node's npc needs NAPI to
    // take the redirected frames: native XDP gives it, GRO gives it to the
    // other modes. GRO is on in every mode for this series (so a packet
    // XDP passes takes the same path as one without XDP, as on a NIC) and
    // off again after it, so the other series keep their receive path.
    const live = async (client: string, node: string | undefined, dstMac: string, src: string, file: string, m: number): Promise<LiveFlood> => {
      const gro = (on: boolean) => (node ? run(['nsenter', `--net=/run/netns/${node}`, npbench, 'gro', '--dev', 'npc', '--set', on ? 'on' : 'off'], T) : Promise.resolve());
      await gro(true);
      try {
        const a0 = await topo.arrivals(m);
        const r = await run([npbench, 'live', '--netns', client, '--dev', 'eth0', '--dst-mac', dstMac, '--src', src,
          '--targets', file, '--count', String(o.liveCount ?? 20_000_000), '--max-ms', String(o.roundMs), '--flows', '8'], { timeoutMs: o.roundMs + 15000 });
        await tick(200);
        const arrived = (await topo.arrivals(m)) - a0;
        const j = JSON.parse(r.stdout) as { sent: number; elapsed_s: number; cpu_s: number };
        return { sent: j.sent, arrived, elapsed_s: j.elapsed_s, cpu_s: j.cpu_s, per_s: arrived / j.elapsed_s, per_cpu_s: arrived / j.cpu_s };
      } finally {
        await gro(false);
      }
    };
    const liveFlood = (s: Side, file: string) => live(s.client, s.node, nodeMac[s.id]!, s.clientAddr, file, topo.sides.indexOf(s));
    const genMac = (JSON.parse((await run(['ip', '-n', topo.backend, '-j', 'link', 'show', 'gb'], T)).stdout) as Array<{ address: string }>)[0]!.address;
    /** The generator and the sink alone (no node): the CPU per packet every live series pays besides the node's. */
    const liveBaseline = () => live(topo.gen, undefined, genMac, sl.clientAddr, plainTargets, -1);
    // DSR runs the TCP and UDP echo series only: the floods are counted at
    // the backend as plain UDP frames, which DSR's arrive inside IPIP.
    const perRound = active.reduce((n, id) => n + (id === 'sluice-dsr' ? 2 : 6) * (o.roundMs + 1500), 0);
    for (let r = 0; r < o.rounds; r++) {
      if (Date.now() + perRound + o.roundMs + 1500 > deadline) {
        res.notes.push(`NodePort: stopped after ${r} of ${o.rounds} rounds: the budget ran out`);
        break;
      }
      const order = r % 2 === 0 ? active : [...active].reverse();
      const base = o.live !== false ? await liveBaseline() : undefined;
      for (const id of order) {
        const s = sideOf(id);
        if (s === sl) await setXdp(id === 'sluice-xdp-native' ? 'native' : id === 'sluice-xdp-generic' ? 'generic' : 'off');
        const ns = ['nsenter', `--net=/run/netns/${s.client}`, npbench];
        const metered = <T>(fn: () => Promise<T>) => (id === 'sluice-dsr' ? dsrMeter.around(fn) : fn());
        const rr = await metered(() => timed(id, 'TCP, a new connection per request', () => run([...ns, 'rr', '--targets', targets[s.id]!.tcp, '--max-ms', String(o.roundMs), '--timeout-ms', '1000', '--seed', String(r + 1)], { timeoutMs: o.roundMs + 15000 })));
        const pps = await metered(() => timed(id, 'UDP, 8 known flows', () => run([...ns, 'pps', '--targets', targets[s.id]!.udp, '--max-ms', String(o.roundMs), '--flows', '8', '--window', '16', '--seed', String(r + 1)], { timeoutMs: o.roundMs + 15000 })));
        const round: NodePortRound = { rr: JSON.parse(rr.stdout) as NodePortRound['rr'], pps: JSON.parse(pps.stdout) as NodePortRound['pps'], liveBase: base };
        if (id === 'sluice-dsr') {
          modes[id]!.rounds.push(round);
          continue;
        }
        round.flood = await timed(id, 'UDP flood, 8 flows', () => flood(s, targets[s.id]!.udp));
        if (o.live !== false) {
          const before = s === sl && xdpProg !== undefined ? progInfo(xdpProg) : undefined;
          round.live = await timed(id, 'UDP live frames (in-kernel generator), 8 flows', () => liveFlood(s, targets[s.id]!.udp));
          const after = before ? progInfo(xdpProg!) : undefined;
          if (before && after && id !== 'sluice-tc' && after.runCount > before.runCount) round.liveXdpNs = Number(after.runTimeNs - before.runTimeNs) / Number(after.runCount - before.runCount);
        }
        if (s === sl && o.live !== false) {
          const before = xdpProg !== undefined ? progInfo(xdpProg) : undefined;
          round.livePlain = await liveFlood(s, plainTargets);
          const after = xdpProg !== undefined ? progInfo(xdpProg) : undefined;
          if (before && after && id !== 'sluice-tc' && after.runCount > before.runCount && after.runTimeNs > before.runTimeNs) {
            round.livePlainXdpNs = Number(after.runTimeNs - before.runTimeNs) / Number(after.runCount - before.runCount);
          }
        }
        if (s === sl) {
          const before = xdpProg !== undefined ? progInfo(xdpProg) : undefined;
          round.plain = await flood(s, plainTargets);
          const after = xdpProg !== undefined ? progInfo(xdpProg) : undefined;
          if (before && after && id !== 'sluice-tc' && after.runCount > before.runCount && after.runTimeNs > before.runTimeNs) {
            round.plainXdpNs = Number(after.runTimeNs - before.runTimeNs) / Number(after.runCount - before.runCount);
          }
        }
        modes[id]!.rounds.push(round);
      }
    }
    // sluice_xdp's own cost per non-Service packet without bpf_stats' clock
    // reads: BPF_PROG_TEST_RUN (not live: nothing is sent) against a bare
    // XDP_PASS program, on the same frame (npbench progcost).
    let progCost: { prog_ns: number; pass_ns: number; cost_ns: number; retval: number } | undefined;
    if (xdpPin && xdpProg !== undefined && o.live !== false) {
      const r = await run(['nsenter', `--net=/run/netns/${sl.node}`, npbench, 'progcost', '--pin', xdpPin, '--targets', plainTargets, '--repeat', '2000000'], { timeoutMs: 60000, allowFailure: true });
      if (r.code === 0) progCost = JSON.parse(r.stdout) as typeof progCost;
      else res.notes.push(`npbench progcost failed: ${r.stderr.trim().slice(0, 200)}`);
    }
    localStats?.restore();
    await setXdp('off');
    if (agentBpffs && xdpMapsPresent(agentBpffs)) {
      const xm = openXdpMaps(agentBpffs);
      // Informative only: a failure here must not cost the rounds' results.
      try {
        const names: Record<number, string> = {};
        for (const dev of ['npc', 'npb']) {
          const r = await run(['ip', '-n', sl.node, '-j', 'link', 'show', dev], T);
          names[(JSON.parse(r.stdout) as Array<{ ifindex: number }>)[0]!.ifindex] = dev;
        }
        res.xdpCounters = {};
        for (const st of readXdpStats(xm.stats, xm.passed, Object.keys(names).map(Number))) {
          const { ifindex, ...c } = st;
          res.xdpCounters[names[ifindex] ?? `ifindex ${ifindex}`] = Object.fromEntries(Object.entries(c).map(([k, v]) => [k, Number(v)]));
        }
      } catch (e) {
        res.notes.push(`sluice_xdp counters not read: ${(e as Error).message}`);
      } finally {
        xm.close();
      }
    }
    const slSide = sl;
    // h-maglev: the same node, every Service switched to maglev through the
    // API (the agent rebuilds its frontends), then rounds again. Not
    // interleaved with the random rounds: the switch takes a sync.
    const maglevRounds: NodePortRound[] = [];
    if (active.includes('sluice-tc') && api && maps && Date.now() + 3 * (o.roundMs + 2000) + 60_000 < deadline) {
      const t0 = Date.now();
      for (let i = 0; i < o.services; i++) {
        api.store.patch('services', serviceName(i), { metadata: { annotations: { 'sluice.io/lb-algorithm': 'maglev' } } }, { namespace: BENCH_NAMESPACE, contentType: 'application/merge-patch+json' });
      }
      const keys = ports.map((sp) => masterKey('0.0.0.0', nodePort(sp), sp.proto === 'tcp' ? LB_PROTO_TCP : LB_PROTO_UDP));
      const until = Math.min(deadline - 3 * (o.roundMs + 2000), Date.now() + 120_000);
      while (Date.now() < until && !keys.every((k) => maps!.services.get(k)?.algorithm === abi.LB_ALG_MAGLEV)) await tick(200);
      const switchS = (Date.now() - t0) / 1000;
      if (keys.every((k) => maps!.services.get(k)?.algorithm === abi.LB_ALG_MAGLEV)) {
        const ns = ['nsenter', `--net=/run/netns/${slSide.client}`, npbench];
        for (let r = 0; r < Math.min(3, o.rounds); r++) {
          const rr = await run([...ns, 'rr', '--targets', targets[slSide.id]!.tcp, '--max-ms', String(o.roundMs), '--timeout-ms', '1000', '--seed', String(r + 1)], { timeoutMs: o.roundMs + 15000 });
          maglevRounds.push({ rr: JSON.parse(rr.stdout) as NodePortRound['rr'], pps: { sent: 0, received: 0, per_s: NaN } });
        }
        o.log(`nodeport: maglev on every Service after ${switchS.toFixed(1)} s; ${maglevRounds.length} rounds`);
        res.maglev = { rounds: maglevRounds.length, rrPerS: median(maglevRounds.map((x) => x.rr.per_s)), failed: maglevRounds.reduce((n, x) => n + x.rr.failed, 0), vsRandom: NaN, switchS };
      } else {
        res.notes.push(`NodePort maglev: the agent had not switched every frontend within ${switchS.toFixed(0)} s`);
      }
    }
    if (maps) res.sluiceCounters = nonZeroCounters(maps);
    for (const m of res.modes) {
      m.rrPerS = median(m.rounds.map((x) => x.rr.per_s));
      m.rrP50Us = median(m.rounds.map((x) => x.rr.p50_us));
      m.rrP99Us = median(m.rounds.map((x) => x.rr.p99_us));
      m.ppsPerS = median(m.rounds.map((x) => x.pps.per_s));
      m.floodPerS = median(m.rounds.filter((x) => x.flood).map((x) => x.flood!.per_s));
      m.plainPerS = median(m.rounds.filter((x) => x.plain).map((x) => x.plain!.per_s));
      m.livePerCpuS = median(m.rounds.filter((x) => x.live).map((x) => x.live!.per_cpu_s));
      m.livePerS = median(m.rounds.filter((x) => x.live).map((x) => x.live!.per_s));
      m.liveNodeNs = median(m.rounds.map((x) => 1e9 / nodeRate(x.live, x.liveBase)).filter(Number.isFinite));
      m.liveBaseNs = median(m.rounds.filter((x) => x.liveBase).map((x) => 1e9 / x.liveBase!.per_cpu_s));
      m.failed = m.rounds.reduce((n, x) => n + x.rr.failed, 0);
    }
    if (res.maglev) res.maglev.vsRandom = res.maglev.rrPerS / modes['sluice-tc']!.rrPerS;
    const a = modes['sluice-tc']!.rounds;
    const b = modes['iptables-legacy']!.rounds;
    if (a.length && a.length === b.length) {
      res.rrRatio = median(a.map((x, i) => x.rr.per_s / b[i]!.rr.per_s));
      res.ppsRatio = median(a.map((x, i) => x.pps.per_s / b[i]!.pps.per_s));
    }
    res.xdp = xdpRatios(modes);
    if (dsrAgents && modes['sluice-dsr']!.rounds.length) {
      const series = (id: NodePortModeId) => modes[id]!.rounds.map((x) => ({ rr: x.rr.per_s, rrP50: x.rr.p50_us, echo: x.pps.per_s }));
      res.dsr = dsrSummary({ rounds: { dsr: series('sluice-dsr'), others: { tc: series('sluice-tc'), iptables: series('iptables-legacy') } }, path: dsrMeter.total, ingress: nonZeroCounters(dsrAgents.ingress.maps), backend: nonZeroCounters(dsrAgents.backend.maps) });
      o.log(`nodeport: DSR: ${Object.entries({ ...res.dsr.rr }).map(([k, v]) => `${k} ${v.toFixed(2)}x req/s`).join(', ')}; ${Object.entries(res.dsr.echo).map(([k, v]) => `${k} ${v.toFixed(2)}x echo`).join(', ')}; replies around the ingress node: ${res.dsr.repliesBypassedIngress} (${JSON.stringify(res.dsr.path)})`);
    }
    if (res.xdp && progCost) {
      res.xdp.plainTestRun = { ...progCost, derivedCost: res.xdp.livePlainNoXdpNs !== undefined ? 1 + progCost.cost_ns / res.xdp.livePlainNoXdpNs : undefined };
    }
    o.log(`nodeport at ${o.services} Services: ` + res.modes.map((m) => `${m.id} ${m.rrPerS.toFixed(0)} req/s (p50 ${m.rrP50Us.toFixed(0)} µs), ${m.ppsPerS.toFixed(0)} replies/s, flood ${m.floodPerS.toFixed(0)} pkt/s, live ${m.livePerCpuS.toFixed(0)} pkt/CPU-s (${m.livePerS.toFixed(0)} pkt/s; node ${m.liveNodeNs.toFixed(0)} ns/pkt over a ${m.liveBaseNs.toFixed(0)} ns baseline)`).join('; ') +
      (res.rrRatio !== undefined ? `; Sluice/iptables ${res.rrRatio.toFixed(2)}x req/s, ${res.ppsRatio!.toFixed(2)}x pps` : ''));
  } catch (e) {
    res.error = (e as Error).message;
    o.log(`nodeport: ${res.error}`);
  } finally {
    maps?.close();
    dsrAgents?.ingress.maps.close();
    dsrAgents?.backend.maps.close();
    for (const a of started) await a.stop();
    await topo.destroy();
    await api?.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  return res;
}
