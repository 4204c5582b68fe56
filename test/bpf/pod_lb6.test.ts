// Pod-veth data path (bpf/pod_lb.bpf.c) for IPv6 Services on crafted
// packets through BPF_PROG_TEST_RUN (issue 14 item 4): ClusterIP and
// NodePort-from-a-pod DNAT to IPv6 backends in sluice_ct6, reverse NAT on the
// way back, hairpin, ICMPv6 port unreachable for a frontend without
// backends, ICMPv6 errors of translated flows, extension headers, and what
// must stay untouched (non-Service IPv6, Neighbor Discovery, echo). Every
// output is compared byte by byte with a packet built from scratch with its
// checksum recomputed over the IPv6 pseudo-header (test/bpf/tc_packet6.ts).
//
// SLUICE_POD_OBJECT=<older pod_lb.bpf.o> runs the same fixtures against an
// older object (the fail-first run: it passed every IPv6 packet untouched).
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TcHarness } from './tc_harness';
import { PodPrograms, POD_OBJECT as BUILT_POD_OBJECT, bounced, expectPacket } from './pod_harness';
import { Tc6Maps } from './tc_harness6';
import { TC_ACT_OK, TC_ACT_REDIRECT, TC_ACT_SHOT, TCP_ACK, TCP_PSH, TCP_SYN, frame } from './tc_packet';
import { ethernet6, exthdr, fragment6, frame6, icmp6, ip6Packet, neighborSolicitation, rewriteQuoted6, type L4Spec6 } from './tc_packet6';

const POD_OBJECT = process.env.SLUICE_POD_OBJECT ?? BUILT_POD_OBJECT;

const POD = 'fd00:10:1::5'; // the client pod behind the veth
const VIP = 'fd00:10:96::10'; // ClusterIP (exists only as map entries here)
const VIP_PORT = 80;
const NODE = 'fd00:10:0::1'; // a NodePort address of the node
const NODE_PORT = 30080;
const BE1 = { id: 31, address: 'fd00:10:1::20', port: 8080, local: true };
const BE2 = { id: 32, address: 'fd00:10:2::30', port: 8080, local: false };
const SELF = { id: 33, address: POD, port: 8080, local: true }; // the client pod is a backend too
const POD_CNT = (c: number) => c + abi.LB_CNT_POD_OFFSET;

let h: TcHarness;
let v6: Tc6Maps;
let pod: PodPrograms;

before(() => {
  h = TcHarness.create('sluice-pod6test');
  v6 = new Tc6Maps(h);
  pod = PodPrograms.load(h, POD_OBJECT);
});
after(() => {
  pod?.close();
  h?.close();
});
beforeEach(() => {
  h.reset();
  v6.reset();
  writeTcConfig(h.tc.config, {});
});

const run = (direction: 'ingress' | 'egress', packet: Buffer) => pod.run(direction, packet);

function check(direction: 'ingress' | 'egress', input: L4Spec6, expected: L4Spec6 | null, verdict = TC_ACT_OK): Buffer {
  const packet = frame6(input);
  const { verdict: got, out } = run(direction, packet);
  assert.equal(got, verdict, `verdict for [${input.src}]:${input.sport} -> [${input.dst}]:${input.dport} on ${direction}`);
  expectPacket(out, expected ? frame6(expected) : packet, `${direction} ${input.proto}`);
  return out;
}

function checkRaw(direction: 'ingress' | 'egress', packet: Buffer, expected: Buffer | null, verdict = TC_ACT_OK, what = 'packet'): void {
  const { verdict: got, out } = run(direction, packet);
  assert.equal(got, verdict, `verdict of ${what} on ${direction}`);
  expectPacket(out, expected ?? packet, `${what} on ${direction}`);
}

describe('IPv6 ClusterIP from a pod: DNAT, pod address kept, reverse NAT on egress', () => {
  beforeEach(() => v6.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 41, backends: [BE1] }));

  test('SYN and data are DNATed, the reply gets the ClusterIP back; both entries in sluice_ct6 flagged POD', () => {
    const before = h.counter(POD_CNT(abi.LB_CNT_TC_TRANSLATED));
    const syn: L4Spec6 = { proto: 'tcp', src: POD, dst: VIP, sport: 40001, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE1.address, dport: BE1.port });
    const data: L4Spec6 = { ...syn, tcpFlags: TCP_ACK | TCP_PSH, payload: Buffer.from('GET / HTTP/1.0\r\n\r\n') };
    check('ingress', data, { ...data, dst: BE1.address, dport: BE1.port });
    assert.equal(h.counter(POD_CNT(abi.LB_CNT_TC_TRANSLATED)) - before, 1n, 'one new flow, counted on the pod path');

    const revBefore = h.counter(POD_CNT(abi.LB_CNT_TC_REV_XLATED));
    const reply: L4Spec6 = { proto: 'tcp', src: BE1.address, dst: POD, sport: BE1.port, dport: 40001, tcpFlags: TCP_SYN | TCP_ACK, payload: Buffer.from('hello') };
    check('egress', reply, { ...reply, src: VIP, sport: VIP_PORT });
    assert.equal(h.counter(POD_CNT(abi.LB_CNT_TC_REV_XLATED)) - revBefore, 1n);

    const rows = v6.rows();
    assert.equal(rows.length, 2, JSON.stringify(rows));
    assert.ok(rows.every((r) => r.client === `[${POD}]:40001` && r.frontend === `[${VIP}]:${VIP_PORT}` &&
      r.backend === `[${BE1.address}]:${BE1.port}` && (r.flags & abi.LB_CT_FLAG_POD) && !(r.flags & abi.LB_CT_FLAG_SNAT)), JSON.stringify(rows));
  });

  test('UDP to an IPv6 ClusterIP and its reply (UDP checksum over the pseudo-header)', () => {
    v6.upsertFrontend({ address: VIP, port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 42, backends: [BE2] });
    const q: L4Spec6 = { proto: 'udp', src: POD, dst: VIP, sport: 5353, dport: 53, payload: Buffer.from('query') };
    check('ingress', q, { ...q, dst: BE2.address, dport: BE2.port });
    const a: L4Spec6 = { proto: 'udp', src: BE2.address, dst: POD, sport: BE2.port, dport: 5353, payload: Buffer.from('answer!') };
    check('egress', a, { ...a, src: VIP, sport: 53 });
  });

  test('a reply is not touched on ingress, a request not on egress', () => {
    const syn: L4Spec6 = { proto: 'tcp', src: POD, dst: VIP, sport: 40002, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE1.address, dport: BE1.port });
    check('ingress', { proto: 'tcp', src: BE1.address, dst: POD, sport: BE1.port, dport: 40002, tcpFlags: TCP_ACK }, null);
    check('egress', syn, null);
  });

  test('hop-by-hop and destination options before TCP are walked; the ClusterIP is translated after them', () => {
    const ext = [exthdr(0, Buffer.from([1, 4, 0, 0, 0, 0])), exthdr(60, Buffer.from([1, 4, 0, 0, 0, 0]))];
    const syn: L4Spec6 = { proto: 'tcp', src: POD, dst: VIP, sport: 40003, dport: VIP_PORT, tcpFlags: TCP_SYN, ext };
    check('ingress', syn, { ...syn, dst: BE1.address, dport: BE1.port });
  });

  test('fragments to the ClusterIP: the first is translated and remembered, a later one follows it (shared pipeline, frag6.h)', () => {
    const tracked = h.counter(abi.LB_CNT_TC6_FRAG_TRACKED);
    const found = h.counter(abi.LB_CNT_TC6_FRAG_FOUND);
    const dgram: L4Spec6 = { proto: 'udp', src: POD, dst: VIP, sport: 40004, dport: VIP_PORT, payload: Buffer.alloc(3000, 7) };
    const frags = fragment6(ip6Packet(dgram), 1448, 0x0a0b0c0d);
    const want = fragment6(ip6Packet({ ...dgram, dst: BE1.address, dport: BE1.port }), 1448, 0x0a0b0c0d);
    v6.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 49, backends: [BE1] });
    frags.forEach((f, i) => checkRaw('ingress', f, want[i]!, TC_ACT_OK, `fragment ${i}`));
    assert.equal(h.counter(abi.LB_CNT_TC6_FRAG_TRACKED) - tracked, 1n);
    assert.equal(h.counter(abi.LB_CNT_TC6_FRAG_FOUND) - found, 2n);
  });
});

describe('IPv6 NodePort reached from a pod (internal scope)', () => {
  test('the node\'s NodePort address is DNATed from the pod like a ClusterIP, no SNAT', () => {
    v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 43, backends: [BE2] });
    const syn: L4Spec6 = { proto: 'tcp', src: POD, dst: NODE, sport: 40010, dport: NODE_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE2.address, dport: BE2.port });
    const reply: L4Spec6 = { proto: 'tcp', src: BE2.address, dst: POD, sport: BE2.port, dport: 40010, tcpFlags: TCP_SYN | TCP_ACK };
    check('egress', reply, { ...reply, src: NODE, sport: NODE_PORT });
  });
});

describe('IPv6 hairpin: a pod that reaches itself through its Service', () => {
  beforeEach(() => v6.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 44, backends: [SELF] }));

  test('request and reply are SNATed to the ClusterIP and bounced back into the pod, hop limit - 1', () => {
    const syn: L4Spec6 = { proto: 'tcp', src: POD, dst: VIP, sport: 62100, dport: VIP_PORT, tcpFlags: TCP_SYN };
    const { verdict, out } = run('ingress', frame6(syn));
    assert.equal(verdict, TC_ACT_REDIRECT);
    expectPacket(out, bounced(frame6({ ...syn, src: VIP, sport: 62100, dst: POD, dport: SELF.port, hopLimit: 63 })), 'hairpin request');
    const reply: L4Spec6 = { proto: 'tcp', src: POD, dst: VIP, sport: SELF.port, dport: 62100, tcpFlags: TCP_SYN | TCP_ACK };
    const r = run('ingress', frame6(reply));
    assert.equal(r.verdict, TC_ACT_REDIRECT);
    expectPacket(r.out, bounced(frame6({ ...reply, src: VIP, sport: VIP_PORT, dst: POD, dport: 62100, hopLimit: 63 })), 'hairpin reply');
    const rows = v6.rows();
    assert.equal(rows.length, 2);
    assert.ok(rows.every((r2) => r2.nat === `[${VIP}]:62100` && (r2.flags & abi.LB_CT_FLAG_POD) && (r2.flags & abi.LB_CT_FLAG_SNAT)), JSON.stringify(rows));
  });

  test('UDP port unreachable from the pod about a hairpin packet is bounced back quoting pod -> ClusterIP', () => {
    v6.upsertFrontend({ address: VIP, port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 45, backends: [SELF] });
    const q: L4Spec6 = { proto: 'udp', src: POD, dst: VIP, sport: 62200, dport: 53, payload: Buffer.from('q') };
    assert.equal(run('ingress', frame6(q)).verdict, TC_ACT_REDIRECT);
    const got = ip6Packet({ ...q, src: VIP, dst: POD, dport: SELF.port, hopLimit: 63 }); // what the pod received
    const unreach = ethernet6(icmp6(POD, VIP, 1, 4, Buffer.alloc(4), got));
    const quote = rewriteQuoted6(got, { src: POD, dst: VIP, sport: 62200, dport: 53 });
    const want = bounced(ethernet6(icmp6(VIP, POD, 1, 4, Buffer.alloc(4), quote, 63)));
    checkRaw('ingress', unreach, want, TC_ACT_REDIRECT, 'hairpin port unreachable');
  });

  // Ingress looks a SNATed flow's reply up only when its destination port
  // lies in the SNAT range (nat_flow6.h, lb6_flow_maybe_snat_reply): the
  // configured range, both ends included, not the default one.
  test('with a configured SNAT range, the replies to its first and last ports are found', () => {
    writeTcConfig(h.tc.config, { snatPortMin: 40200, snatPortMax: 40201 });
    for (const port of [40200, 40201]) {
      const syn: L4Spec6 = { proto: 'tcp', src: POD, dst: VIP, sport: port, dport: VIP_PORT, tcpFlags: TCP_SYN };
      const { verdict, out } = run('ingress', frame6(syn));
      assert.equal(verdict, TC_ACT_REDIRECT);
      expectPacket(out, bounced(frame6({ ...syn, src: VIP, dst: POD, dport: SELF.port, hopLimit: 63 })), `hairpin request from ${port}`);
      const reply: L4Spec6 = { proto: 'tcp', src: POD, dst: VIP, sport: SELF.port, dport: port, tcpFlags: TCP_SYN | TCP_ACK };
      const r = run('ingress', frame6(reply));
      assert.equal(r.verdict, TC_ACT_REDIRECT, `hairpin reply to ${port}`);
      expectPacket(r.out, bounced(frame6({ ...reply, src: VIP, sport: VIP_PORT, dst: POD, dport: port, hopLimit: 63 })), `hairpin reply to ${port}`);
    }
    assert.deepEqual([...new Set(v6.rows().map((row) => row.nat))].sort(), [`[${VIP}]:40200`, `[${VIP}]:40201`]);
  });

  test('a UDP hairpin reply is found too; a Service port inside the SNAT range still opens a flow', () => {
    v6.upsertFrontend({ address: VIP, port: 62000, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 46, backends: [SELF, BE2] });
    const q: L4Spec6 = { proto: 'udp', src: POD, dst: VIP, sport: 63000, dport: 62000, payload: Buffer.from('q') };
    let hairpin = false;
    for (let sport = 63000; sport < 63064 && !hairpin; sport++) {
      const { verdict, out } = run('ingress', frame6({ ...q, sport }));
      if (verdict === TC_ACT_OK) {
        expectPacket(out, frame6({ ...q, sport, dst: BE2.address, dport: BE2.port }), 'UDP to the other backend');
        continue;
      }
      hairpin = true;
      assert.equal(verdict, TC_ACT_REDIRECT);
      expectPacket(out, bounced(frame6({ ...q, sport, src: VIP, dst: POD, dport: SELF.port, hopLimit: 63 })), 'UDP hairpin request');
      const reply: L4Spec6 = { proto: 'udp', src: POD, dst: VIP, sport: SELF.port, dport: sport, payload: Buffer.from('a') };
      const r = run('ingress', frame6(reply));
      assert.equal(r.verdict, TC_ACT_REDIRECT);
      expectPacket(r.out, bounced(frame6({ ...reply, src: VIP, sport: 62000, dst: POD, dport: sport, hopLimit: 63 })), 'UDP hairpin reply');
    }
    assert.ok(hairpin, 'one of 64 flows picked the pod itself');
  });
});

describe('IPv6 frontend without backends: ICMPv6 port unreachable back into the pod', () => {
  test('TCP SYN and UDP are answered with Destination Unreachable code 4 from the ClusterIP', () => {
    v6.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 46, backends: [] });
    v6.upsertFrontend({ address: VIP, port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 47, backends: [] });
    const before = h.counter(POD_CNT(abi.LB_CNT_TC_NO_BACKEND));
    for (const s of [
      { proto: 'tcp', src: POD, dst: VIP, sport: 40020, dport: VIP_PORT, tcpFlags: TCP_SYN },
      { proto: 'udp', src: POD, dst: VIP, sport: 40021, dport: 53, payload: Buffer.from('a longer payload than 8 bytes, quoted whole') },
    ] as L4Spec6[]) {
      const quoted = ip6Packet(s); // RFC 4443 2.4 (c): all of it (it fits in 1 280 bytes)
      const want = bounced(ethernet6(icmp6(VIP, POD, 1, 4, Buffer.alloc(4), quoted)));
      checkRaw('ingress', frame6(s), want, TC_ACT_REDIRECT, `${s.proto} to a frontend without backends`);
    }
    assert.equal(h.counter(POD_CNT(abi.LB_CNT_TC_NO_BACKEND)) - before, 2n);
    assert.equal(v6.rows().length, 0, 'no flow written');
  });

  test('a packet with extension headers is quoted past them, as much as fits in 1 280 bytes (RFC 4443 2.4 (c))', () => {
    v6.upsertFrontend({ address: VIP, port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 47, backends: [] });
    // Hop-by-hop (router alert) + destination options (24 bytes of PadN): the
    // UDP header starts 72 bytes into the packet, past a 48-byte quote.
    const ext = [exthdr(0, Buffer.from([5, 2, 0, 0, 1, 0])), exthdr(60, Buffer.from([1, 20, ...Buffer.alloc(20)]))];
    const small: L4Spec6 = { proto: 'udp', src: POD, dst: VIP, sport: 40023, dport: 53, payload: Buffer.from('query'), ext };
    checkRaw('ingress', frame6(small), bounced(ethernet6(icmp6(VIP, POD, 1, 4, Buffer.alloc(4), ip6Packet(small)))), TC_ACT_REDIRECT, 'small datagram with extension headers');
    // 1 400 bytes of payload: the quote is cut at 1 232 bytes, the ICMPv6 packet is 1 280.
    const large: L4Spec6 = { ...small, sport: 40024, payload: Buffer.alloc(1400, 0x5a) };
    const { verdict, out } = run('ingress', frame6(large));
    assert.equal(verdict, TC_ACT_REDIRECT);
    expectPacket(out, bounced(ethernet6(icmp6(VIP, POD, 1, 4, Buffer.alloc(4), ip6Packet(large).subarray(0, 1232)))), 'large datagram with extension headers');
    assert.equal(out.length, 14 + 1280);
  });

  test('DROP_NO_BACKEND (internalTrafficPolicy Local, endpoints elsewhere): dropped, no ICMPv6', () => {
    v6.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP | abi.LB_SVC_FLAG_DROP_NO_BACKEND, revNatId: 48, backends: [] });
    const syn = frame6({ proto: 'tcp', src: POD, dst: VIP, sport: 40022, dport: VIP_PORT, tcpFlags: TCP_SYN });
    assert.equal(run('ingress', syn).verdict, TC_ACT_SHOT);
  });
});

describe('ICMPv6 errors of translated IPv6 pod flows', () => {
  beforeEach(() => v6.upsertFrontend({ address: VIP, port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 49, backends: [BE1] }));

  test('port unreachable from the backend (egress, to the pod) comes from the ClusterIP and quotes pod -> ClusterIP', () => {
    const q: L4Spec6 = { proto: 'udp', src: POD, dst: VIP, sport: 5300, dport: 53, payload: Buffer.from('query') };
    check('ingress', q, { ...q, dst: BE1.address, dport: BE1.port });
    const sent = ip6Packet({ ...q, dst: BE1.address, dport: BE1.port });
    const unreach = ethernet6(icmp6(BE1.address, POD, 1, 4, Buffer.alloc(4), sent));
    const want = ethernet6(icmp6(VIP, POD, 1, 4, Buffer.alloc(4), rewriteQuoted6(sent, { src: POD, dst: VIP, sport: 5300, dport: 53 })));
    checkRaw('egress', unreach, want, TC_ACT_OK, 'port unreachable from the backend');
  });

  test('an error the pod sends about a reply (ingress) goes to the backend quoting backend -> pod', () => {
    const q: L4Spec6 = { proto: 'udp', src: POD, dst: VIP, sport: 5301, dport: 53, payload: Buffer.from('query') };
    check('ingress', q, { ...q, dst: BE1.address, dport: BE1.port });
    const got = ip6Packet({ proto: 'udp', src: VIP, dst: POD, sport: 53, dport: 5301, payload: Buffer.from('late answer') });
    const unreach = ethernet6(icmp6(POD, VIP, 1, 4, Buffer.alloc(4), got));
    const want = ethernet6(icmp6(POD, BE1.address, 1, 4, Buffer.alloc(4), rewriteQuoted6(got, { src: BE1.address, dst: POD, sport: BE1.port, dport: 5301 })));
    checkRaw('ingress', unreach, want, TC_ACT_OK, 'port unreachable from the pod');
  });

  test('an ICMPv6 error about no known flow passes untouched', () => {
    const other = ip6Packet({ proto: 'udp', src: POD, dst: 'fd00:99::1', sport: 1, dport: 2 });
    const unreach = ethernet6(icmp6('fd00:99::1', POD, 1, 4, Buffer.alloc(4), other));
    checkRaw('egress', unreach, null, TC_ACT_OK, 'unrelated error');
    checkRaw('ingress', unreach, null, TC_ACT_OK, 'unrelated error');
  });
});

describe('what the IPv6 pod path leaves alone', () => {
  beforeEach(() => v6.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 50, backends: [BE1] }));

  test('non-Service IPv6 traffic (other address, other port, other protocol) passes untouched in both directions', () => {
    for (const s of [
      { proto: 'tcp', src: POD, dst: BE1.address, sport: 40030, dport: 8080, tcpFlags: TCP_SYN },
      { proto: 'tcp', src: POD, dst: VIP, sport: 40031, dport: 81, tcpFlags: TCP_SYN },
      { proto: 'udp', src: POD, dst: VIP, sport: 40032, dport: VIP_PORT, payload: Buffer.from('x') },
    ] as L4Spec6[]) {
      check('ingress', s, null);
      check('egress', s, null);
    }
    assert.equal(v6.rows().length, 0);
  });

  test('Neighbor Solicitation / Advertisement and echo pass untouched, both hooks', () => {
    const ns = neighborSolicitation(POD, 'fd00:10:1::1');
    const na = ethernet6(icmp6('fd00:10:1::1', POD, 136, 0, Buffer.from([0x60, 0, 0, 0]), Buffer.alloc(16), 255));
    const echo = ethernet6(icmp6(POD, VIP, 128, 0, Buffer.from([0, 1, 0, 1]), Buffer.from('ping')));
    for (const p of [ns, na, echo]) {
      checkRaw('ingress', p, null, TC_ACT_OK, 'ICMPv6 informational');
      checkRaw('egress', p, null, TC_ACT_OK, 'ICMPv6 informational');
    }
  });

  test('IPv4 still goes the IPv4 way (an IPv6 frontend does not catch it)', () => {
    // An IPv4 packet to a port the IPv6 frontend has: no IPv4 frontend, untouched.
    const p = frame({ proto: 'tcp', src: '198.18.10.5', dst: '10.96.0.10', sport: 40040, dport: VIP_PORT, tcpFlags: TCP_SYN });
    checkRaw('ingress', p, null, TC_ACT_OK, 'IPv4 SYN');
  });
});
