// `sluice trace`: what the data path would do with one connection or packet,
// decided from the pinned maps with the rules of the BPF code, without
// sending anything. Pure: it reads through TraceMaps, so the same function
// runs against real pinned maps (the CLI) and tables of entries (unit tests).
//
// Paths, each mirroring its program:
//  - socket       (bpf/lib/sock.h)   connect()/sendmsg() from the node or a pod
//  - north_south  (bpf/lib/tc_lb.h)  a packet arriving on an external device
//  - pod          (bpf/lib/pod_lb.h) a packet from a pod whose socket LB is bypassed
// IPv6 destinations (trace6): the same three paths, mirroring lib/sock6.h and
// lib/nat_flow6.h (north-south and pod veth share that pipeline).
import * as abi from '../abi/generated';
import { bytesToIp6, hostPort, ip4ToNumber, ip6ToBytes, numberToIp4, protoNumber, type ProtoName } from '../datapath/addr';
import { formatServiceName, type ServiceName } from '../datapath/serviceNames';
import { counterName, COUNTERS } from '../datapath/counters';
import { flagNames, backendFlagNames, ALGORITHMS } from './inspect';
import { hash64, loadedBe32, maglevEntry, maglevFlowHash, maglevFlowHash6 } from '../datapath/maglev';

export type TracePath = 'socket' | 'north_south' | 'pod';

/** Point look-ups into the maps, as the programs make them. */
export interface TraceMaps {
  service(key: abi.Lb4FrontendKey): abi.Lb4Service | undefined;
  /** The backend id at this index of the range array (SLUICE_MAP_RANGES4). */
  rangeEntry(index: number): number | undefined;
  backend(id: number): abi.Lb4Backend | undefined;
  /** loadBalancerSourceRanges: an LPM match for this client under this rev-NAT id. */
  sourceAllowed(revNatId: number, client: number): boolean;
  affinity(key: abi.Lb4AffinityKey): abi.LbAffinity | undefined;
  /** Conntrack (TC paths); undefined when the TC maps are not pinned. */
  conntrack?: {
    get(key: abi.Lb4CtKey): abi.Lb4CtEntry | undefined;
    /** Original-direction entries from this client to this frontend (when no client port is given). */
    flowsOf(client: number, frontend: number, port: number, proto: number): Array<[abi.Lb4CtKey, abi.Lb4CtEntry]>;
  };
  tcConfig?(): abi.Lb4TcConfig | undefined;
  /** NodePorts listen on this address (sluice_nodeip4): its NodePorts are the wildcard frontend (bpf/lib/nodeport.h). */
  isNodePortAddress?(address: number): boolean;
  serviceName(revNatId: number, proto: ProtoName): ServiceName | undefined;
  /** A frontend's Maglev table (sluice_maglev4), undefined when it has none. */
  maglevTable?(f: { revNatId: number; proto: ProtoName; scope: 'external' | 'internal' }): { m: number; ids: Uint32Array } | undefined;
  /** Round-robin: the frontend's cursor (sluice_rr4), undefined beyond the array or when not pinned. */
  rrCursor?(revNatId: number): number | undefined;
  /** least-connection: the backend's active count (sluice_lc_cnt4, signed), undefined when not pinned. */
  lcCount?(backendId: number): number | undefined;
  /** bpf_ktime_get_ns() now (CLOCK_MONOTONIC). */
  nowNs(): bigint;
}

export interface TraceInput {
  path: TracePath;
  client: string;
  clientPort?: number;
  address: string;
  port: number;
  proto: ProtoName;
  /** socket path: the client's netns cookie, the affinity key there. */
  netnsCookie?: bigint;
}

export type Action = 'pass' | 'translate' | 'refuse' | 'drop' | 'reject' | 'reply';

export interface TraceBackend {
  slot: number;
  id: number;
  address?: string;
  port?: number;
  flags: string[];
  /** north_south: this backend would be SNATed to the node address. */
  snat?: boolean;
  /** The slot or its backend entry is missing (the agent mid-update): a pick of it fails. */
  missing?: boolean;
}

export interface TraceFlow {
  direction: 'original' | 'reply';
  state: string;
  flags: string[];
  client: string;
  frontend: string;
  backend: string;
  backendId: number;
  nat?: string;
  expiresInSeconds: number;
  packets: number;
  bytes: number;
  backendAlive?: boolean;
}

export interface TraceResult {
  path: TracePath;
  packet: string;
  frontend?: {
    frontend: string;
    scope: 'external' | 'internal';
    service?: string;
    flags: string[];
    revNatId: number;
    algorithm: string;
    affinityTimeoutSeconds: number;
    backends: TraceBackend[];
  };
  sourceRange?: { applies: boolean; allowed: boolean; enforced: boolean };
  affinity?: { key: string; backendId?: number; backend?: string; lastUsedSecondsAgo?: number; valid: boolean; note?: string };
  conntrack?: TraceFlow[];
  /**
   * The backend a new connection/flow would get, where the algorithm decides
   * it from what is known here (source-hash; maglev on the TC paths, or with
   * affinity): computed with the data path's hashes. `backendId` is absent
   * when it cannot be known in advance (note says why).
   */
  pick?: {
    algorithm: string; hashedBy: string; backendId?: number; backend?: string; slot?: number; entry?: number; note?: string; shares?: Record<string, number>;
    /** Round-robin: the frontend's cursor now (the next pick takes slot cursor % count + 1). */
    cursor?: number;
    /** least-connection: each backend's active count now ("#id" -> count), and the least loaded ones. */
    active?: Record<string, number>;
    least?: number[];
  };
  verdict: { action: Action; reason: string; counter?: string };
}

const NS = 1_000_000_000n;

function counter(index: number): string | undefined {
  const l = COUNTERS.get(index);
  return l ? counterName(l) : undefined;
}

export function ctStateName(flags: number, proto: number): string {
  if (proto !== abi.LB_PROTO_TCP) return flags & abi.LB_CT_FLAG_SEEN_REPLY ? 'replied' : 'new';
  if (flags & abi.LB_CT_FLAG_CLOSING) return 'closing';
  if (flags & abi.LB_CT_FLAG_ESTABLISHED) return 'established';
  return flags & abi.LB_CT_FLAG_SEEN_REPLY ? 'syn-acked' : 'syn-sent';
}

export function ctFlagNames(flags: number): string[] {
  const names: Array<[number, string]> = [
    [abi.LB_CT_FLAG_SNAT, 'snat'], [abi.LB_CT_FLAG_CLOSING, 'closing'], [abi.LB_CT_FLAG_POD, 'pod'],
    [abi.LB_CT_FLAG_SEEN_REPLY, 'seen-reply'], [abi.LB_CT_FLAG_ESTABLISHED, 'established'],
    [abi.LB_CT_FLAG_FIN_ORIGINAL, 'fin-original'], [abi.LB_CT_FLAG_FIN_REPLY, 'fin-reply'], [abi.LB_CT_FLAG_SPORT, 'sport-remapped'],
  ];
  return names.filter(([bit]) => flags & bit).map(([, n]) => n);
}

const ep = (address: number, port: number) => `${numberToIp4(address)}:${port}`;

function flowView(e: abi.Lb4CtEntry, m: TraceMaps, now: bigint): TraceFlow {
  const backend = m.backend(e.backend_id);
  return {
    direction: e.dir === abi.LB_CT_DIR_REPLY ? 'reply' : 'original',
    state: ctStateName(e.flags, e.proto),
    flags: ctFlagNames(e.flags),
    client: ep(e.client_address, e.client_port),
    frontend: ep(e.frontend_address, e.frontend_port),
    backend: ep(e.backend_address, e.backend_port),
    backendId: e.backend_id,
    nat: e.nat_address || e.nat_port ? ep(e.nat_address || e.client_address, e.nat_port) : undefined,
    expiresInSeconds: Number((e.expires_ns - now) / 1_000_000n) / 1000,
    packets: Number(e.packets),
    bytes: Number(e.bytes),
    // lb4_ct_backend_alive: same id, same address and port.
    backendAlive: !!backend && backend.address === e.backend_address && backend.port === e.backend_port,
  };
}

/** lb4_lookup_service: the external-scope master, or its internal twin for in-cluster traffic. */
function lookupService(m: TraceMaps, key: abi.Lb4FrontendKey, internal: boolean): { svc?: abi.Lb4Service; scope: number } {
  const ext = m.service({ ...key, scope: abi.LB_SCOPE_EXTERNAL });
  if (!ext || !internal || !(ext.flags & abi.LB_SVC_FLAG_TWO_SCOPES)) return { svc: ext, scope: abi.LB_SCOPE_EXTERNAL };
  return { svc: m.service({ ...key, scope: abi.LB_SCOPE_INTERNAL }), scope: abi.LB_SCOPE_INTERNAL };
}

/** lb4_lookup_frontend (nodeport.h): then the NodePort wildcard on a NodePort address; `address` keys the slots. */
function lookupFrontend(m: TraceMaps, key: abi.Lb4FrontendKey, internal: boolean): { svc?: abi.Lb4Service; scope: number; address: number } {
  const exact = lookupService(m, key, internal);
  if (exact.svc || !key.address || !m.isNodePortAddress?.(key.address)) return { ...exact, address: key.address };
  const wild = lookupService(m, { ...key, address: 0 }, internal);
  return wild.svc && wild.svc.flags & abi.LB_SVC_FLAG_NODEPORT ? { ...wild, address: 0 } : { ...exact, address: key.address };
}

export function trace(input: TraceInput, m: TraceMaps): TraceResult {
  const client = ip4ToNumber(input.client);
  const daddr = ip4ToNumber(input.address);
  const proto = protoNumber(input.proto);
  const now = m.nowNs();
  const internal = input.path !== 'north_south';
  const result: TraceResult = {
    path: input.path,
    packet: `${input.client}${input.clientPort !== undefined ? `:${input.clientPort}` : ''} -> ${input.address}:${input.port}/${input.proto}`,
    verdict: { action: 'pass', reason: '' },
  };
  const podPath = input.path === 'pod';
  const needCtFlags = podPath ? abi.LB_CT_FLAG_POD : 0;
  let gone: string | undefined;

  // TC paths: a reply or a known flow wins over the service lookup.
  if (input.path !== 'socket' && m.conntrack) {
    const live = (e: abi.Lb4CtEntry | undefined) => (e && e.expires_ns > now ? e : undefined);
    if (input.clientPort !== undefined) {
      const tuple = { saddr: client, daddr, sport: input.clientPort, dport: input.port, proto };
      const reply = live(m.conntrack.get({ ...tuple, dir: abi.LB_CT_DIR_REPLY }));
      // tc ingress: a SNATed flow's reply; pod ingress: a hairpin flow's reply.
      const replyHere = reply && (podPath
        ? (reply.flags & (abi.LB_CT_FLAG_POD | abi.LB_CT_FLAG_SNAT)) === (abi.LB_CT_FLAG_POD | abi.LB_CT_FLAG_SNAT)
        : reply.flags & abi.LB_CT_FLAG_SNAT);
      if (reply && replyHere) {
        result.conntrack = [flowView(reply, m, now)];
        result.verdict = { action: 'reply', reason: `reply of a known flow: restored to ${ep(reply.frontend_address, reply.frontend_port)} -> ${ep(reply.client_address, reply.client_port)}`, counter: counter(reply.flags & abi.LB_CT_FLAG_POD ? abi.LB_CNT_TC_REV_XLATED + abi.LB_CNT_POD_OFFSET : abi.LB_CNT_TC_REV_XLATED) };
        return result;
      }
      const orig = live(m.conntrack.get({ ...tuple, dir: abi.LB_CT_DIR_ORIGINAL }));
      if (orig && (orig.flags & needCtFlags) === needCtFlags) {
        const view = flowView(orig, m, now);
        result.conntrack = [view];
        if (view.backendAlive) {
          const reopen = orig.proto === abi.LB_PROTO_TCP && orig.flags & abi.LB_CT_FLAG_CLOSING;
          result.verdict = {
            action: 'translate',
            reason: `known flow (${view.state}) to backend ${view.backend}${view.nat ? `, source ${view.nat}` : ''}${reopen ? '; a new SYN on this tuple would open a new flow' : ''}`,
          };
          return result;
        }
        // lb4_ct_live_original: a flow whose backend went is deleted and balanced again.
        gone = `the known flow's backend ${view.backend} is gone: the flow is deleted (${counter(podPath ? abi.LB_CNT_TC_BACKEND_GONE + abi.LB_CNT_POD_OFFSET : abi.LB_CNT_TC_BACKEND_GONE)}) and the packet balanced as new`;
      }
    } else {
      const flows = m.conntrack.flowsOf(client, daddr, input.port, proto).filter(([, e]) => e.expires_ns > now && (e.flags & needCtFlags) === needCtFlags);
      if (flows.length) result.conntrack = flows.map(([, e]) => flowView(e, m, now));
    }
  }

  const { svc, scope } = lookupFrontend(m, { address: daddr, port: input.port, proto, scope: 0 }, internal);
  const finish = (verdict: TraceResult['verdict']): TraceResult => {
    result.verdict = gone ? { ...verdict, reason: `${gone}; ${verdict.reason}` } : verdict;
    return result;
  };
  if (!svc) return finish({ action: 'pass', reason: `not a frontend: ${input.path === 'socket' ? 'the call proceeds' : 'the packet passes'} untouched` });
  const revNatId = svc.rev_nat_id;
  const name = m.serviceName(revNatId, input.proto);
  const cfg = m.tcConfig?.();
  const extLocal = (svc.flags & abi.LB_SVC_FLAG_EXT_LOCAL) !== 0;
  const backends: TraceBackend[] = [];
  // The frontend's range: positions 1..count (shown as slots, as the programs count them).
  for (let slot = 1; slot <= svc.count; slot++) {
    const id = m.rangeEntry(svc.backend_id + slot - 1) ?? 0;
    const b = id ? m.backend(id) : undefined;
    const row: TraceBackend = { slot, id, flags: b ? backendFlagNames(b.flags) : [] };
    if (!b) row.missing = true;
    else {
      row.address = numberToIp4(b.address);
      row.port = b.port;
      if (input.path === 'north_south') row.snat = !extLocal || !(b.flags & abi.LB_BACKEND_FLAG_LOCAL) || b.address === client;
      if (podPath) row.snat = b.address === client; // hairpin
    }
    backends.push(row);
  }
  result.frontend = {
    frontend: `${input.address}:${input.port}/${input.proto}`,
    scope: scope === abi.LB_SCOPE_INTERNAL ? 'internal' : 'external',
    service: name ? formatServiceName(name) : undefined,
    flags: flagNames(svc.flags),
    revNatId,
    algorithm: ALGORITHMS[svc.algorithm] ?? `algorithm ${svc.algorithm}`,
    affinityTimeoutSeconds: svc.affinity_timeout,
    backends,
  };

  const rangesApply = (svc.flags & abi.LB_SVC_FLAG_SOURCE_RANGE) !== 0;
  const allowed = !rangesApply || m.sourceAllowed(revNatId, client);
  // The socket path checks the socket's source address (the client given here);
  // the pod-veth path does not enforce ranges.
  result.sourceRange = { applies: rangesApply, allowed, enforced: input.path !== 'pod' };

  if (input.path === 'north_south') {
    if (!(svc.flags & (abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXTERNAL_IP | abi.LB_SVC_FLAG_LOADBALANCER))) {
      return finish({ action: 'pass', reason: 'a ClusterIP frontend: not served on external devices, the packet passes untouched' });
    }
    if (!allowed) return finish({ action: 'drop', reason: 'source outside loadBalancerSourceRanges', counter: counter(abi.LB_CNT_TC_SRC_RANGE_DROP) });
  }
  if (input.path === 'socket' && !allowed) {
    return finish({ action: 'refuse', reason: 'source outside loadBalancerSourceRanges: connect()/sendmsg() fail with EHOSTUNREACH', counter: counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP) });
  }
  if (svc.count === 0) {
    // DROP_NO_BACKEND: endpoints exist, none usable from here (kube-proxy drops); else none at all (kube-proxy rejects).
    const drop = (svc.flags & abi.LB_SVC_FLAG_DROP_NO_BACKEND) !== 0;
    return finish(input.path === 'socket'
      ? { action: 'refuse', reason: drop ? 'no usable backends here: connect()/sendmsg() fail with EHOSTUNREACH' : 'no backends: connect()/sendmsg() fail with ECONNREFUSED', counter: counter(abi.LB_CNT_SOCK_NO_BACKEND) }
      : drop
        ? { action: 'drop', reason: `no ${extLocal ? 'local ' : 'usable '}backends: dropped`, counter: counter(abi.LB_CNT_TC_NO_BACKEND) }
        : podPath
          ? { action: 'reject', reason: 'no backends: ICMP port unreachable sent back into the pod', counter: counter(abi.LB_CNT_TC_NO_BACKEND + abi.LB_CNT_POD_OFFSET) }
          : { action: 'reject', reason: 'no backends: ICMP port unreachable sent back to the client', counter: counter(abi.LB_CNT_TC_NO_BACKEND) });
  }
  result.affinity = affinityOf(input, svc, m, client, now);
  const usable = backends.filter((b) => !b.missing);
  const chosen = result.affinity?.valid ? usable.find((b) => b.id === result.affinity!.backendId) : undefined;
  const missing = backends.length - usable.length;
  if (!chosen) result.pick = predictPick(input, svc, scope, backends, m, daddr);
  const picked = result.pick?.backend;
  let reason = chosen
    ? `affinity: to backend #${chosen.id} ${chosen.address}:${chosen.port}`
    : picked
      ? `to backend #${result.pick!.backendId} ${picked} (${result.frontend.algorithm}, ${result.pick!.slot !== undefined ? `slot ${result.pick!.slot}` : `table entry ${result.pick!.entry}`} by ${result.pick!.hashedBy})`
      : `to one of ${backends.length} backends (${result.frontend.algorithm})${missing ? `; ${missing} slot(s) missing, a pick of one fails (agent mid-update)` : ''}`;
  if (input.path === 'north_south') {
    const snat = (chosen ? [chosen] : usable).filter((b) => b.snat);
    if (snat.length && !cfg?.snat_address) {
      reason += `; ${snat.length === usable.length ? 'every' : `${snat.length} of ${usable.length}`} backend(s) need SNAT and no SNAT address is configured: dropped (${counter(abi.LB_CNT_TC_SNAT_FAILED)})`;
    } else if (snat.length) {
      reason += `; source SNATed to ${numberToIp4(cfg!.snat_address)}${snat.length === usable.length ? '' : ' for remote backends (client address kept for local ones)'}`;
    }
  }
  if (!allowed && input.path === 'pod') reason += '; source outside loadBalancerSourceRanges, which this path does not enforce';
  return finish({
    action: 'translate',
    reason,
    counter: counter(input.path === 'socket' ? abi.LB_CNT_SOCK_TRANSLATED : podPath ? abi.LB_CNT_TC_TRANSLATED + abi.LB_CNT_POD_OFFSET : abi.LB_CNT_TC_TRANSLATED),
  });
}

/** The IPv6 maps trace6 reads; the TC ones only when the TC programs pinned them. */
export interface TraceMaps6 {
  service(key: abi.Lb6FrontendKey): abi.Lb4Service | undefined;
  /** The backend id at this index of the IPv6 range array (SLUICE_MAP_RANGES6). */
  rangeEntry(index: number): number | undefined;
  backend(id: number): abi.Lb6Backend | undefined;
  serviceName(revNatId: number, proto: ProtoName): ServiceName | undefined;
  /** loadBalancerSourceRanges of IPv6 frontends (sluice_srcrng6): an LPM match for this client. */
  sourceAllowed?(revNatId: number, client: Buffer): boolean;
  /** sluice_ct6 (TC paths). */
  conntrack?: {
    get(key: abi.Lb6CtKey): abi.Lb6CtEntry | undefined;
    /** Original-direction entries from this client to this frontend (when no client port is given). */
    flowsOf(client: Buffer, frontend: Buffer, port: number, proto: number): abi.Lb6CtEntry[];
  };
  /** The node's IPv6 SNAT address (sluice_tc_cfg6); undefined or zero: none. */
  snatAddress?(): Buffer | undefined;
  /** The family-blind maps IPv6 frontends share with IPv4 (by rev-NAT id / backend id). */
  maglevTable?: TraceMaps['maglevTable'];
  rrCursor?: TraceMaps['rrCursor'];
  lcCount?: TraceMaps['lcCount'];
  nowNs?(): bigint;
}

const ep6 = (address: Uint8Array, port: number) => hostPort(bytesToIp6(address), port);
const zero16 = (b: Uint8Array) => b.every((x) => x === 0);

function flowView6(e: abi.Lb6CtEntry, m: TraceMaps6, now: bigint): TraceFlow {
  const backend = m.backend(e.backend_id);
  return {
    direction: e.dir === abi.LB_CT_DIR_REPLY ? 'reply' : 'original',
    state: ctStateName(e.flags, e.proto),
    flags: ctFlagNames(e.flags),
    client: ep6(e.client_address, e.client_port),
    frontend: ep6(e.frontend_address, e.frontend_port),
    backend: ep6(e.backend_address, e.backend_port),
    backendId: e.backend_id,
    nat: !zero16(e.nat_address) || e.nat_port ? ep6(zero16(e.nat_address) ? e.client_address : e.nat_address, e.nat_port) : undefined,
    expiresInSeconds: Number((e.expires_ns - now) / 1_000_000n) / 1000,
    packets: Number(e.packets),
    bytes: Number(e.bytes),
    // lb6_ct_backend_alive: same id, same address and port.
    backendAlive: !!backend && Buffer.compare(backend.address, e.backend_address) === 0 && backend.port === e.backend_port,
  };
}

/**
 * An IPv6 destination on one of the three paths:
 *  - socket (lib/sock6.h lb6_sock_xlate_fwd): the internal-scope twin where
 *    there is one, source ranges from sluice_srcrng6 (the client given is the
 *    socket's source), the backends of every slot, what connect()/sendmsg() get.
 *  - north_south and pod (lib/nat_flow6.h, one pipeline for both): a known
 *    flow or reply in sluice_ct6 first; then lb6_flow_new: the frontend
 *    (north-south: NodePort / ExternalIP / LoadBalancer only, source ranges
 *    from sluice_srcrng6; pod: any, internal twin), no backends (north-south
 *    drops; the pod path rejects with ICMPv6 unless no endpoint may be used
 *    from here), SNAT (north-south but externalTrafficPolicy Local to a local
 *    backend; the pod path only for hairpin).
 * The next pick where state or hashes decide it: round-robin's cursor and
 * least-connection's counts (the family-blind sluice_rr4 / sluice_lc_cnt4),
 * source-hash by the client address and Maglev by the 5-tuple on the TC
 * paths (the data path's hashes, lb6_flow_start). Affinity entries
 * (sluice_affin6) are not looked up.
 */
export function trace6(input: Omit<TraceInput, 'path' | 'netnsCookie'> & { path?: TracePath }, m: TraceMaps6): TraceResult {
  const path = input.path ?? 'socket';
  const tc = path !== 'socket';
  const pod = path === 'pod';
  const address = ip6ToBytes(input.address);
  const client = ip6ToBytes(input.client);
  const proto = protoNumber(input.proto);
  const now = m.nowNs?.() ?? 0n;
  const pathCounter = (c: number) => counter(pod ? c + abi.LB_CNT_POD_OFFSET : c);
  const result: TraceResult = {
    path,
    packet: `${input.clientPort !== undefined ? hostPort(input.client, input.clientPort) : input.client} -> ${hostPort(input.address, input.port)}/${input.proto}`,
    verdict: { action: 'pass', reason: '' },
  };
  let gone: string | undefined;
  const finish = (verdict: TraceResult['verdict']): TraceResult => {
    result.verdict = gone ? { ...verdict, reason: `${gone}; ${verdict.reason}` } : verdict;
    return result;
  };

  // TC paths: a reply or a known flow of this path wins over the service lookup (lb6_flow_ingress_known).
  if (tc && m.conntrack) {
    const onPath = (e: abi.Lb6CtEntry) => (e.flags & abi.LB_CT_FLAG_POD) === (pod ? abi.LB_CT_FLAG_POD : 0);
    const live = (e: abi.Lb6CtEntry | undefined) => (e && e.expires_ns > now && onPath(e) ? e : undefined);
    if (input.clientPort !== undefined) {
      const tuple = { saddr: client, daddr: address, sport: input.clientPort, dport: input.port, proto };
      const reply = live(m.conntrack.get({ ...tuple, dir: abi.LB_CT_DIR_REPLY }));
      if (reply && reply.flags & abi.LB_CT_FLAG_SNAT) {
        result.conntrack = [flowView6(reply, m, now)];
        return finish({ action: 'reply', reason: `reply of a known flow: restored to ${ep6(reply.frontend_address, reply.frontend_port)} -> ${ep6(reply.client_address, reply.client_port)}`, counter: pathCounter(abi.LB_CNT_TC_REV_XLATED) });
      }
      const orig = live(m.conntrack.get({ ...tuple, dir: abi.LB_CT_DIR_ORIGINAL }));
      if (orig) {
        const view = flowView6(orig, m, now);
        result.conntrack = [view];
        if (view.backendAlive) {
          const reopen = orig.proto === abi.LB_PROTO_TCP && orig.flags & abi.LB_CT_FLAG_CLOSING;
          return finish({ action: 'translate', reason: `known flow (${view.state}) to backend ${view.backend}${view.nat ? `, source ${view.nat}` : ''}${reopen ? '; a new SYN on this tuple would open a new flow' : ''}` });
        }
        // lb6_ct_live_original: a flow whose backend went is deleted and balanced again.
        gone = `the known flow's backend ${view.backend} is gone: the flow is deleted (${pathCounter(abi.LB_CNT_TC_BACKEND_GONE)}) and the packet balanced as new`;
      }
    } else {
      const flows = m.conntrack.flowsOf(client, address, input.port, proto).filter((e) => live(e));
      if (flows.length) result.conntrack = flows.map((e) => flowView6(e, m, now));
    }
  }

  // lb6_lookup_service: the internal-scope twin for in-cluster traffic (socket, pod).
  const key = (scope: number): abi.Lb6FrontendKey => ({ address, port: input.port, proto, scope });
  let scope: number = abi.LB_SCOPE_EXTERNAL;
  let svc = m.service(key(scope));
  if (svc && path !== 'north_south' && svc.flags & abi.LB_SVC_FLAG_TWO_SCOPES) {
    scope = abi.LB_SCOPE_INTERNAL;
    svc = m.service(key(scope));
  }
  if (!svc) return finish({ action: 'pass', reason: `not a frontend: ${tc ? 'the packet passes' : 'the call proceeds'} untouched` });
  const extLocal = (svc.flags & abi.LB_SVC_FLAG_EXT_LOCAL) !== 0;
  const backends: TraceBackend[] = [];
  // The frontend's range: positions 1..count (shown as slots, as the programs count them).
  for (let slot = 1; slot <= svc.count; slot++) {
    const id = m.rangeEntry(svc.backend_id + slot - 1) ?? 0;
    const b = id ? m.backend(id) : undefined;
    if (!b) {
      backends.push({ slot, id, flags: [], missing: true });
      continue;
    }
    const row: TraceBackend = { slot, id, address: bytesToIp6(b.address), port: b.port, flags: backendFlagNames(b.flags) };
    const hairpin = Buffer.compare(b.address, client) === 0;
    if (path === 'north_south') row.snat = hairpin || !(extLocal && b.flags & abi.LB_BACKEND_FLAG_LOCAL);
    if (pod) row.snat = hairpin;
    backends.push(row);
  }
  const name = m.serviceName(svc.rev_nat_id, input.proto);
  result.frontend = {
    frontend: `${hostPort(input.address, input.port)}/${input.proto}`,
    scope: scope === abi.LB_SCOPE_INTERNAL ? 'internal' : 'external',
    service: name ? formatServiceName(name) : undefined,
    flags: flagNames(svc.flags),
    revNatId: svc.rev_nat_id,
    algorithm: ALGORITHMS[svc.algorithm] ?? `algorithm ${svc.algorithm}`,
    affinityTimeoutSeconds: svc.affinity_timeout,
    backends,
  };
  const rangesApply = (svc.flags & abi.LB_SVC_FLAG_SOURCE_RANGE) !== 0;
  if (rangesApply && m.sourceAllowed) {
    // The north-south path and the socket hooks (lb6_sock_src_range_refusal) check IPv6 sources; the pod path does not.
    result.sourceRange = { applies: true, allowed: m.sourceAllowed(svc.rev_nat_id, client), enforced: path !== 'pod' };
  }
  if (!tc && result.sourceRange && !result.sourceRange.allowed) {
    return finish({ action: 'refuse', reason: 'source outside loadBalancerSourceRanges: connect()/sendmsg() fail with EHOSTUNREACH', counter: counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP) });
  }
  if (path === 'north_south') {
    if (!(svc.flags & (abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXTERNAL_IP | abi.LB_SVC_FLAG_LOADBALANCER))) {
      return finish({ action: 'pass', reason: 'a ClusterIP frontend: not served on external devices, the packet passes untouched' });
    }
    if (result.sourceRange && !result.sourceRange.allowed) return finish({ action: 'drop', reason: 'source outside loadBalancerSourceRanges', counter: counter(abi.LB_CNT_TC_SRC_RANGE_DROP) });
  }
  if (svc.count === 0) {
    const drop = (svc.flags & abi.LB_SVC_FLAG_DROP_NO_BACKEND) !== 0;
    if (!tc) return finish({ action: 'refuse', reason: `no backends: connect()/sendmsg() fail with ${drop ? 'EHOSTUNREACH' : 'ECONNREFUSED'}`, counter: counter(abi.LB_CNT_SOCK_NO_BACKEND) });
    // lb6_flow_no_backend: north-south always drops; the pod path rejects unless no endpoint may be used from here.
    return finish(!pod || drop
      ? { action: 'drop', reason: `no ${extLocal ? 'local ' : drop ? 'usable ' : ''}backends: dropped`, counter: pathCounter(abi.LB_CNT_TC_NO_BACKEND) }
      : { action: 'reject', reason: 'no backends: ICMPv6 port unreachable sent back into the pod', counter: pathCounter(abi.LB_CNT_TC_NO_BACKEND) });
  }
  result.pick = predictPick6(path, input, svc, scope, backends, m, client);
  const usable = backends.filter((b) => !b.missing);
  const missing = backends.length - usable.length;
  const pick = result.pick;
  let reason = pick?.backend
    ? `to backend #${pick.backendId} ${pick.backend} (${result.frontend.algorithm}, ${pick.slot !== undefined ? `slot ${pick.slot}` : `table entry ${pick.entry}`} by ${pick.hashedBy})`
    : `to one of ${backends.length} backends (${result.frontend.algorithm})${missing ? `; ${missing} slot(s) missing, a pick of one fails (agent mid-update)` : ''}`;
  if (path === 'north_south') {
    const chosen = pick?.backendId !== undefined ? usable.filter((b) => b.id === pick.backendId) : usable;
    const snat = chosen.filter((b) => b.snat);
    const to = m.snatAddress?.();
    if (snat.length && (!to || zero16(to))) {
      reason += `; ${snat.length === chosen.length ? 'every' : `${snat.length} of ${chosen.length}`} backend(s) need SNAT and no IPv6 SNAT address is configured: dropped (${counter(abi.LB_CNT_TC_SNAT_FAILED)})`;
    } else if (snat.length) {
      reason += `; source SNATed to ${bytesToIp6(to!)}${snat.length === chosen.length ? '' : ' for remote backends (client address kept for local ones)'}`;
    }
  }
  if (pod && usable.some((b) => b.snat)) reason += `; hairpin to the pod itself: source becomes ${hostPort(input.address, input.port)}'s address`;
  return finish({ action: 'translate', reason, counter: tc ? pathCounter(abi.LB_CNT_TC_TRANSLATED) : counter(abi.LB_CNT_SOCK_TRANSLATED) });
}

/**
 * The next pick for an IPv6 frontend (lb6_select_backend, lb6_flow_start):
 * round-robin and least-connection from live state on every path; on the TC
 * paths source-hash by the client address (the xor of its four 32-bit
 * words) and Maglev by the 5-tuple (lb6_maglev_flow_hash, mirrored in
 * maglevFlowHash6), or by the client with ClientIP affinity. The socket
 * path hashes cookies a trace does not know.
 */
function predictPick6(path: TracePath, input: Omit<TraceInput, 'path' | 'netnsCookie'>, svc: abi.Lb4Service, scope: number, backends: TraceBackend[], m: TraceMaps6, client: Buffer): TraceResult['pick'] {
  const algorithm = ALGORITHMS[svc.algorithm] ?? `algorithm ${svc.algorithm}`;
  if (svc.algorithm === abi.LB_ALG_ROUND_ROBIN) return rrPick(algorithm, svc, backends, m);
  if (svc.algorithm === abi.LB_ALG_LEAST_CONN) return lcPick(algorithm, svc, backends, m);
  if (svc.algorithm !== abi.LB_ALG_SOURCE_HASH && svc.algorithm !== abi.LB_ALG_MAGLEV) return undefined;
  const affinity = (svc.flags & abi.LB_SVC_FLAG_AFFINITY) !== 0;
  const flowHash = svc.algorithm === abi.LB_ALG_MAGLEV && !affinity;
  if (path === 'socket') {
    return { algorithm, hashedBy: flowHash ? 'socket cookie' : 'netns cookie', note: 'the IPv6 socket path hashes a cookie a trace does not know' };
  }
  const hashedBy = flowHash ? '5-tuple' : 'client address';
  let clientId: bigint | undefined;
  if (!flowHash) clientId = BigInt((client.readUInt32LE(0) ^ client.readUInt32LE(4) ^ client.readUInt32LE(8) ^ client.readUInt32LE(12)) >>> 0);
  else if (input.clientPort !== undefined) clientId = maglevFlowHash6({ saddr: input.client, daddr: input.address, sport: input.clientPort, dport: input.port, proto: input.proto });
  const pick: NonNullable<TraceResult['pick']> = { algorithm, hashedBy };
  const byId = (id: number) => backends.find((b) => b.id === id && !b.missing);
  if (svc.algorithm === abi.LB_ALG_MAGLEV) {
    const table = m.maglevTable?.({ revNatId: svc.rev_nat_id, proto: input.proto, scope: scope === abi.LB_SCOPE_INTERNAL ? 'internal' : 'external' });
    if (!table || table.m === 0) {
      pick.note = `no Maglev table for this frontend: a random slot (${counter(abi.LB_CNT_MAGLEV_FALLBACK)})`;
      return pick;
    }
    if (clientId === undefined) {
      pick.note = 'give the client port ([SRC]:PORT) to hash the 5-tuple';
      return pick;
    }
    pick.entry = maglevEntry(clientId, table.m);
    const id = table.ids[pick.entry]!;
    const b = byId(id);
    pick.backendId = id;
    if (b) pick.backend = hostPort(b.address!, b.port!);
    else pick.note = `entry ${pick.entry} names backend #${id}, not in the backends map: a random slot (${counter(abi.LB_CNT_MAGLEV_FALLBACK)})`;
    return pick;
  }
  // lb4_slot_choice: (u32)lb_hash64(client ^ (rev-NAT id << 32)); slot = choice % count + 1.
  const choice = Number(hash64(clientId! ^ (BigInt(svc.rev_nat_id) << 32n)) & 0xffffffffn);
  pick.slot = (choice % svc.count) + 1;
  const row = backends[pick.slot - 1];
  pick.backendId = row?.id;
  if (row && !row.missing) pick.backend = hostPort(row.address!, row.port!);
  else pick.note = `slot ${pick.slot} is missing (agent mid-update): the program retries below it`;
  return pick;
}

/** The affinity entry the program would consult (lb4_affinity_backend_id). */
function affinityOf(input: TraceInput, svc: abi.Lb4Service, m: TraceMaps, client: number, now: bigint): TraceResult['affinity'] {
  if (!(svc.flags & abi.LB_SVC_FLAG_AFFINITY)) return undefined;
  let key: abi.Lb4AffinityKey;
  if (input.path === 'socket') {
    if (input.netnsCookie === undefined) return { key: 'netns cookie', valid: false, note: 'the socket path keys affinity by the client\'s netns cookie: pass --netns-cookie to look it up' };
    key = { client_id: input.netnsCookie, rev_nat_id: svc.rev_nat_id, netns_cookie: 1 };
  } else {
    key = { client_id: BigInt(client), rev_nat_id: svc.rev_nat_id, netns_cookie: 0 };
  }
  const label = input.path === 'socket' ? `netns ${key.client_id}` : input.client;
  const a = m.affinity(key);
  if (!a) return { key: label, valid: false, note: 'no entry: the first pick is remembered' };
  const age = now - a.last_used_ns;
  const valid = age <= BigInt(svc.affinity_timeout) * NS;
  const b = m.backend(a.backend_id);
  return {
    key: label,
    backendId: a.backend_id,
    backend: b ? `${numberToIp4(b.address)}:${b.port}` : undefined,
    lastUsedSecondsAgo: Number(age / 1_000_000n) / 1000,
    valid: valid && !!b,
    note: !valid ? 'expired: a new pick replaces it' : !b ? 'its backend is gone: a new pick replaces it' : undefined,
  };
}

/**
 * The first pick of source-hash and maglev, as lb4_slot_choice and
 * lb4_maglev_select (bpf/lib/lb.h, maglev.h) make it: the same client id
 * (socket path: the netns cookie, or the socket cookie for maglev; TC paths:
 * the client address, or the 5-tuple for maglev without affinity), the same
 * hashes (src/datapath/maglev.ts mirrors them). Random, round-robin and
 * least-connection depend on state a trace does not own; undefined for them.
 */
function predictPick(input: TraceInput, svc: abi.Lb4Service, scope: number, backends: TraceBackend[], m: TraceMaps, daddr: number): TraceResult['pick'] {
  const algorithm = ALGORITHMS[svc.algorithm] ?? `algorithm ${svc.algorithm}`;
  if (svc.algorithm === abi.LB_ALG_ROUND_ROBIN) return rrPick(algorithm, svc, backends, m);
  if (svc.algorithm === abi.LB_ALG_LEAST_CONN) return lcPick(algorithm, svc, backends, m);
  if (svc.algorithm !== abi.LB_ALG_SOURCE_HASH && svc.algorithm !== abi.LB_ALG_MAGLEV) return undefined;
  const affinity = (svc.flags & abi.LB_SVC_FLAG_AFFINITY) !== 0;
  let clientId: bigint | undefined;
  let hashedBy: string;
  if (input.path === 'socket') {
    if (svc.algorithm === abi.LB_ALG_MAGLEV && !affinity) {
      hashedBy = 'socket cookie';
    } else {
      hashedBy = 'netns cookie';
      clientId = input.netnsCookie;
    }
  } else if (svc.algorithm === abi.LB_ALG_MAGLEV && !affinity) {
    hashedBy = '5-tuple';
    if (input.clientPort !== undefined) {
      clientId = maglevFlowHash({ saddr: input.client, daddr: numberToIp4(daddr), sport: input.clientPort, dport: input.port, proto: input.proto });
    }
  } else {
    hashedBy = 'client address';
    clientId = loadedBe32(input.client);
  }
  const byId = (id: number) => backends.find((b) => b.id === id && !b.missing);
  const pick: NonNullable<TraceResult['pick']> = { algorithm, hashedBy };
  if (svc.algorithm === abi.LB_ALG_MAGLEV) {
    const table = m.maglevTable?.({ revNatId: svc.rev_nat_id, proto: input.proto, scope: scope === abi.LB_SCOPE_INTERNAL ? 'internal' : 'external' });
    if (!table || table.m === 0) {
      pick.note = `no Maglev table for this frontend: a random slot (${counter(abi.LB_CNT_MAGLEV_FALLBACK)})`;
      return pick;
    }
    const shares: Record<string, number> = {};
    for (const id of table.ids) shares[`#${id}`] = (shares[`#${id}`] ?? 0) + 1;
    for (const k of Object.keys(shares)) shares[k] = Math.round((shares[k]! / table.m) * 10000) / 10000;
    pick.shares = shares;
    if (clientId === undefined) {
      pick.note = hashedBy === 'socket cookie'
        ? 'each socket is hashed by its cookie, unknown before the socket exists: a new socket lands on a backend with its table share'
        : hashedBy === '5-tuple' ? 'give the client port (SRC:PORT) to hash the 5-tuple' : 'pass --netns-cookie to hash the client';
      return pick;
    }
    pick.entry = maglevEntry(clientId, table.m);
    const id = table.ids[pick.entry]!;
    const b = byId(id);
    pick.backendId = id;
    if (b) pick.backend = `${b.address}:${b.port}`;
    else pick.note = `entry ${pick.entry} names backend #${id}, not in the backends map: a random slot (${counter(abi.LB_CNT_MAGLEV_FALLBACK)})`;
    return pick;
  }
  if (clientId === undefined) {
    pick.note = 'pass --netns-cookie to hash the client';
    return pick;
  }
  // lb4_slot_choice: (u32)lb_hash64(client ^ (rev-NAT id << 32)); slot = choice % count + 1.
  const choice = Number(hash64(clientId ^ (BigInt(svc.rev_nat_id) << 32n)) & 0xffffffffn);
  pick.slot = (choice % svc.count) + 1;
  const row = backends[pick.slot - 1];
  pick.backendId = row?.id;
  if (row && !row.missing) pick.backend = `${row.address}:${row.port}`;
  else pick.note = `slot ${pick.slot} is missing (agent mid-update): the program retries below it`;
  return pick;
}

/**
 * Round-robin's next pick from live state (lb4_slot_choice): the frontend's
 * cursor in sluice_rr4, slot cursor % count + 1. It is the next new
 * connection or flow of this frontend from any client that takes it.
 */
function rrPick(algorithm: string, svc: abi.Lb4Service, backends: TraceBackend[], m: Pick<TraceMaps, 'rrCursor'>): TraceResult['pick'] {
  const pick: NonNullable<TraceResult['pick']> = { algorithm, hashedBy: 'the frontend\'s cursor' };
  const cursor = m.rrCursor?.(svc.rev_nat_id);
  if (cursor === undefined) {
    pick.note = `no round-robin cursor for rev-NAT id ${svc.rev_nat_id} (${abi.SLUICE_MAP_RR4} not pinned, or the id is beyond it: random)`;
    return pick;
  }
  pick.cursor = cursor;
  pick.slot = (cursor % svc.count) + 1;
  const row = backends[pick.slot - 1];
  pick.backendId = row?.id;
  if (row && !row.missing) pick.backend = hostPort(row.address!, row.port!);
  else pick.note = `slot ${pick.slot} is missing (agent mid-update): the program retries below it`;
  return pick;
}

/**
 * least-connection from live state (lc4_select): the active count of every
 * backend now and the least loaded. With at most LB_LC_SCAN backends the
 * pick is the least loaded (a tie: any of the tied, by the scan's random
 * start); with more, the least of a random window of LB_LC_SCAN.
 */
function lcPick(algorithm: string, svc: abi.Lb4Service, backends: TraceBackend[], m: Pick<TraceMaps, 'lcCount'>): TraceResult['pick'] {
  const pick: NonNullable<TraceResult['pick']> = { algorithm, hashedBy: 'active connections' };
  const usable = backends.filter((b) => !b.missing);
  const counts = usable.map((b) => [b, m.lcCount?.(b.id)] as const);
  if (counts.some(([, n]) => n === undefined) || usable.length === 0) {
    pick.note = `active counts unavailable (${abi.SLUICE_MAP_LC_COUNT4} not pinned)`;
    return pick;
  }
  pick.active = Object.fromEntries(counts.map(([b, n]) => [`#${b.id}`, n!]));
  const min = Math.min(...counts.map(([, n]) => n!));
  const least = counts.filter(([, n]) => n === min).map(([b]) => b);
  pick.least = least.map((b) => b.id);
  if (svc.count > abi.LB_LC_SCAN) {
    pick.note = `least loaded now: ${least.map((b) => `#${b.id}`).join(', ')} (${min} active); with ${svc.count} backends a pick compares a random window of ${abi.LB_LC_SCAN}, so it takes the least of that window`;
  } else if (least.length === 1) {
    const b = least[0]!;
    pick.backendId = b.id;
    pick.slot = b.slot;
    pick.backend = hostPort(b.address!, b.port!);
  } else {
    pick.note = `tied at ${min} active: one of ${least.map((b) => `#${b.id}`).join(', ')} (the scan starts at a random slot)`;
  }
  return pick;
}
