// IPv6 north-south TC data path on crafted packets (BPF_PROG_TEST_RUN,
// issue 14 item 3): DNAT, SNAT to the node's IPv6 address, reverse NAT,
// ICMPv6 Packet Too Big translation, Neighbor Discovery passed untouched,
// extension headers walked or passed. Every output packet is compared byte
// by byte with the packet built from scratch (checksums over the IPv6
// pseudo-header recomputed) for the expected tuple.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { bytesToIp6 } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { openSockLbMaps } from '../../src/datapath/maps';
import { purgeBackends } from '../../src/datapath/tc/conntrack';
import { LbProgrammer } from '../../src/datapath/programmer';
import { execFileSync } from 'node:child_process';
import { sluiceBin } from '../helpers/sandbox';
import { TcHarness } from './tc_harness';
import { Tc6Maps } from './tc_harness6';
import { TC_ACT_OK, TC_ACT_SHOT, TCP_ACK, TCP_PSH, TCP_SYN, diffHex } from './tc_packet';
import {
  ethernet6, exthdr, frame6, icmp6, ip6Packet, neighborSolicitation, packetTooBig, rewriteQuoted6, type L4Spec6,
} from './tc_packet6';

const CLIENT = '2001:db8::10';
const NODE = '2001:db8::1'; // NodePort address and IPv6 SNAT address
const ROUTER = '2001:db8:ffff::1'; // a router between the node and the backend
const NODE_PORT = 30080;
const EXTERNAL_IP = '2001:db8:100::10';
const LOCAL_BE = { id: 1, address: 'fd00:1::10', port: 8080, local: true };
const REMOTE_BE = { id: 2, address: 'fd00:2::20', port: 8080, local: false };
const NODEPORT = abi.LB_SVC_FLAG_NODEPORT;
const LOCAL_POLICY = abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;

let h: TcHarness;
let v6: Tc6Maps;

before(() => {
  h = TcHarness.create('sluice-tc6test');
  v6 = new Tc6Maps(h);
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  v6.reset();
  writeTcConfig(h.tc.config, { snatAddress: '198.18.0.1' });
  v6.setSnat(NODE);
});

function expectPacket(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

function check(direction: 'ingress' | 'egress', input: L4Spec6, expected: L4Spec6 | null, verdict = TC_ACT_OK): Buffer {
  const packet = frame6(input);
  const { verdict: got, out } = h.run(direction, packet);
  assert.equal(got, verdict, `verdict for [${input.src}]:${input.sport} -> [${input.dst}]:${input.dport}`);
  expectPacket(out, expected ? frame6(expected) : packet, `${direction} ${input.proto}`);
  return out;
}

describe('IPv6 NodePort, externalTrafficPolicy Local, local backend: DNAT only, client address kept', () => {
  beforeEach(() => v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT | LOCAL_POLICY, revNatId: 7, backends: [LOCAL_BE] }));

  test('SYN is DNATed, data follows the flow, the reply is restored on egress (byte-exact)', () => {
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40000, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const before = h.counter(abi.LB_CNT_TC_TRANSLATED);
    check('ingress', syn, { ...syn, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    const data = { ...syn, tcpFlags: TCP_ACK | TCP_PSH, payload: Buffer.from('GET / HTTP/1.0\r\n\r\n') };
    check('ingress', data, { ...data, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    assert.equal(h.counter(abi.LB_CNT_TC_TRANSLATED) - before, 1n, 'one new flow');
    const reply: L4Spec6 = { proto: 'tcp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 40000, tcpFlags: TCP_SYN | TCP_ACK, payload: Buffer.from('hello') };
    check('egress', reply, { ...reply, src: NODE, sport: NODE_PORT });
    const rows = v6.rows();
    assert.equal(rows.length, 2, JSON.stringify(rows));
    assert.ok(rows.every((r) => r.client === `[${CLIENT}]:40000` && r.backend === `[${LOCAL_BE.address}]:8080` && !(r.flags & abi.LB_CT_FLAG_SNAT)));
    const original = [...v6.conntrack.entries()].find(([k]) => k.dir === abi.LB_CT_DIR_ORIGINAL)![1];
    assert.equal(original.packets, 2n, 'SYN and data, each counted once');
  });

  test('UDP: DNAT and reverse NAT keep the UDP checksum right', () => {
    v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: NODEPORT | LOCAL_POLICY, revNatId: 9, backends: [LOCAL_BE] });
    const dgram: L4Spec6 = { proto: 'udp', src: CLIENT, dst: NODE, sport: 5353, dport: NODE_PORT, payload: Buffer.from('ping') };
    check('ingress', dgram, { ...dgram, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    const reply: L4Spec6 = { proto: 'udp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 5353, payload: Buffer.from('pong!') };
    check('egress', reply, { ...reply, src: NODE, sport: NODE_PORT });
  });

  test('a packet to the node that is not a frontend passes untouched', () => {
    check('ingress', { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40001, dport: 22 }, null);
    check('ingress', { proto: 'udp', src: CLIENT, dst: NODE, sport: 40001, dport: NODE_PORT }, null);
  });
});

describe('IPv6 NodePort to a remote backend: DNAT + SNAT to the node\'s IPv6 address, reverse NAT', () => {
  beforeEach(() => v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 8, backends: [REMOTE_BE] }));

  test('client port inside the SNAT range is kept; the reply on ingress is restored byte for byte', () => {
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62000, dport: NODE_PORT, tcpFlags: TCP_SYN };
    // No FIB route for the test run (no ingress device): translated, then left to the stack.
    check('ingress', syn, { ...syn, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const reply: L4Spec6 = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 62000, tcpFlags: TCP_SYN | TCP_ACK };
    const revBefore = h.counter(abi.LB_CNT_TC_REV_XLATED);
    check('ingress', reply, { ...reply, src: NODE, sport: NODE_PORT, dst: CLIENT, dport: 62000 });
    assert.equal(h.counter(abi.LB_CNT_TC_REV_XLATED) - revBefore, 1n);
    const rows = v6.rows();
    assert.equal(rows.length, 2);
    assert.ok(rows.every((r) => r.nat === `[${NODE}]:62000` && r.flags & abi.LB_CT_FLAG_SNAT), JSON.stringify(rows));
  });

  test('a client port outside the range gets a SNAT port from it; UDP too', () => {
    v6.upsertFrontend({ address: EXTERNAL_IP, port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_EXTERNAL_IP, revNatId: 10, backends: [REMOTE_BE] });
    const q: L4Spec6 = { proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 1234, dport: 53, payload: Buffer.from('query') };
    const { out } = h.run('ingress', frame6(q));
    const natPort = out.readUInt16BE(14 + 40);
    assert.ok(natPort >= 61000 && natPort <= 65535, `SNAT port ${natPort}`);
    expectPacket(out, frame6({ ...q, src: NODE, sport: natPort, dst: REMOTE_BE.address, dport: REMOTE_BE.port }), 'SNATed UDP');
    const reply: L4Spec6 = { proto: 'udp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: natPort, payload: Buffer.from('answer') };
    check('ingress', reply, { ...reply, src: EXTERNAL_IP, sport: 53, dst: CLIENT, dport: 1234 });
  });

  // Ingress looks a SNATed flow's reply up only when its destination port
  // lies in the SNAT range (nat_flow6.h, lb6_flow_maybe_snat_reply): the
  // configured range, both ends included, not the default one.
  test('with a configured SNAT range, the replies to its first and last ports are restored', () => {
    writeTcConfig(h.tc.config, { snatAddress: '198.18.0.1', snatPortMin: 40200, snatPortMax: 40201 });
    for (const port of [40200, 40201]) {
      const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: port, dport: NODE_PORT, tcpFlags: TCP_SYN };
      check('ingress', syn, { ...syn, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
      const reply: L4Spec6 = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: port, tcpFlags: TCP_SYN | TCP_ACK };
      check('ingress', reply, { ...reply, src: NODE, sport: NODE_PORT, dst: CLIENT, dport: port });
    }
    assert.deepEqual([...new Set(v6.rows().map((r) => r.nat))].sort(), [`[${NODE}]:40200`, `[${NODE}]:40201`]);
  });

  test('a UDP Service port inside the SNAT range opens and follows its flow; a reply to a port outside the range passes untouched', () => {
    v6.upsertFrontend({ address: EXTERNAL_IP, port: 62000, proto: 'udp', flags: abi.LB_SVC_FLAG_EXTERNAL_IP, revNatId: 11, backends: [REMOTE_BE] });
    const q: L4Spec6 = { proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 63100, dport: 62000, payload: Buffer.from('q') };
    check('ingress', q, { ...q, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const q2: L4Spec6 = { ...q, payload: Buffer.from('second') };
    check('ingress', q2, { ...q2, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const a: L4Spec6 = { proto: 'udp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 63100, payload: Buffer.from('a') };
    check('ingress', a, { ...a, src: EXTERNAL_IP, sport: 62000, dst: CLIENT });
    assert.equal(v6.rows().length, 2, 'one flow');
    // The node's own connection (an ephemeral port below the range): not ours.
    const own: L4Spec6 = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 40000, tcpFlags: TCP_SYN | TCP_ACK };
    check('ingress', own, null);
  });

  test('without an IPv6 SNAT address the flow is dropped and counted', () => {
    v6.setSnat(undefined);
    const before = h.counter(abi.LB_CNT_TC_SNAT_FAILED);
    check('ingress', { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62001, dport: NODE_PORT }, null, TC_ACT_SHOT);
    assert.equal(h.counter(abi.LB_CNT_TC_SNAT_FAILED) - before, 1n);
  });
});

describe('IPv6 loadBalancerSourceRanges', () => {
  test('a client inside an IPv6 CIDR is balanced, one outside is dropped', () => {
    v6.upsertFrontend({ address: EXTERNAL_IP, port: 443, proto: 'tcp', flags: abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE | LOCAL_POLICY, revNatId: 11, backends: [LOCAL_BE] });
    v6.addSourceRange(11, '2001:db8::/64');
    const ok: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: EXTERNAL_IP, sport: 40100, dport: 443 };
    check('ingress', ok, { ...ok, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    const before = h.counter(abi.LB_CNT_TC_SRC_RANGE_DROP);
    check('ingress', { ...ok, src: '2001:db8:1::10' }, null, TC_ACT_SHOT);
    assert.equal(h.counter(abi.LB_CNT_TC_SRC_RANGE_DROP) - before, 1n);
  });
});

describe('IPv6 loadBalancerSourceRanges written by the programmer (agent path)', () => {
  test('an IPv6 frontend\'s CIDRs go to sluice_srcrng6; changing them changes who is served', () => {
    const maps = openSockLbMaps(h.pinDir);
    try {
      const p = LbProgrammer.adopt(maps);
      const spec = (ranges: string[]) => ({
        address: EXTERNAL_IP, port: 443, proto: 'tcp' as const, scope: 'external' as const,
        flags: abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE, affinityTimeout: 0,
        backends: [{ address: REMOTE_BE.address, port: 8080, proto: 'tcp' as const }], sourceRanges: ranges,
      });
      assert.equal(p.apply([spec(['2001:db8::/64', '2001:db8:5::1/48'])], { prune: true }).failures.length, 0);
      const keys = [...v6.sourceRanges.entries()].map(([k]) => `${bytesToIp6(k.address)}/${k.prefixlen - 32}`).sort();
      assert.deepEqual(keys, ['2001:db8:5::/48', '2001:db8::/64'], 'host bits cleared, one entry per CIDR');
      const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: EXTERNAL_IP, sport: 62100, dport: 443 };
      const { out } = h.run('ingress', frame6(syn));
      assert.equal(bytesToIp6(out.subarray(14 + 24, 14 + 40)), REMOTE_BE.address, 'served');
      assert.equal(p.apply([spec(['2001:db8:9::/64'])], { prune: true }).failures.length, 0);
      check('ingress', { ...syn, sport: 62101 }, null, TC_ACT_SHOT);
      assert.equal(LbProgrammer.adopt(maps).programmedFrontends()[0]?.sourceRanges.join(), '2001:db8:9::/64', 'adopted back from the map');
      p.apply([], { prune: true });
      assert.equal([...v6.sourceRanges.entries()].length, 0, 'removed with the frontend');
    } finally {
      maps.close();
    }
  });
});

describe('ICMPv6 errors about translated flows', () => {
  test('Packet Too Big from a router toward the backend (SNATed flow) reaches the client quoting client -> frontend', () => {
    v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 8, backends: [REMOTE_BE] });
    const data: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62010, dport: NODE_PORT, tcpFlags: TCP_ACK | TCP_PSH, payload: Buffer.alloc(1400, 0x61) };
    h.run('ingress', frame6({ ...data, tcpFlags: TCP_SYN, payload: undefined }));
    // What the backend's side saw, as a router on the way quotes it (1280-byte PTB).
    const sent = ip6Packet({ ...data, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const ptb = packetTooBig(ROUTER, NODE, 1280, sent);
    const want = packetTooBig(ROUTER, CLIENT, 1280, rewriteQuoted6(sent, { src: CLIENT, dst: NODE, sport: 62010, dport: NODE_PORT }));
    const before = h.counter(abi.LB_CNT_TC_REV_XLATED);
    const { verdict, out } = h.run('ingress', ptb);
    assert.equal(verdict, TC_ACT_OK);
    expectPacket(out, want, 'translated Packet Too Big');
    assert.equal(h.counter(abi.LB_CNT_TC_REV_XLATED) - before, 1n);
  });

  test('the node\'s own Packet Too Big about a DNAT-only flow is fixed on egress (quote client -> frontend)', () => {
    v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT | LOCAL_POLICY, revNatId: 7, backends: [LOCAL_BE] });
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40200, dport: NODE_PORT, tcpFlags: TCP_SYN };
    h.run('ingress', frame6(syn));
    const forwarded = ip6Packet({ ...syn, tcpFlags: TCP_ACK, payload: Buffer.alloc(1400, 0x62), dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    const ptb = packetTooBig(NODE, CLIENT, 1280, forwarded);
    const want = packetTooBig(NODE, CLIENT, 1280, rewriteQuoted6(forwarded, { src: CLIENT, dst: NODE, sport: 40200, dport: NODE_PORT }));
    const { verdict, out } = h.run('egress', ptb);
    assert.equal(verdict, TC_ACT_OK);
    expectPacket(out, want, 'egress Packet Too Big');
  });

  test('Destination Unreachable from the backend itself shows the frontend as its source', () => {
    v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: NODEPORT, revNatId: 8, backends: [REMOTE_BE] });
    const q: L4Spec6 = { proto: 'udp', src: CLIENT, dst: NODE, sport: 62020, dport: NODE_PORT, payload: Buffer.from('x') };
    h.run('ingress', frame6(q));
    const sent = ip6Packet({ ...q, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const unreach = ethernet6(icmp6(REMOTE_BE.address, NODE, 1, 4, Buffer.alloc(4), sent));
    const want = ethernet6(icmp6(NODE, CLIENT, 1, 4, Buffer.alloc(4), rewriteQuoted6(sent, { src: CLIENT, dst: NODE, sport: 62020, dport: NODE_PORT })));
    const { out } = h.run('ingress', unreach);
    expectPacket(out, want, 'port unreachable');
  });

  test('Packet Too Big about a reply (router toward the client) goes on to the backend quoting what it sent', () => {
    v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 8, backends: [REMOTE_BE] });
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62030, dport: NODE_PORT, tcpFlags: TCP_SYN };
    h.run('ingress', frame6(syn));
    const replyToClient = ip6Packet({ proto: 'tcp', src: NODE, dst: CLIENT, sport: NODE_PORT, dport: 62030, tcpFlags: TCP_ACK, payload: Buffer.alloc(1400, 0x63) });
    const ptb = packetTooBig(ROUTER, NODE, 1280, replyToClient);
    const want = packetTooBig(ROUTER, REMOTE_BE.address, 1280, rewriteQuoted6(replyToClient, { src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 62030 }));
    const { verdict, out } = h.run('ingress', ptb);
    assert.equal(verdict, TC_ACT_OK);
    expectPacket(out, want, 'Packet Too Big toward the backend');
  });

  test('an ICMPv6 error about no known flow passes untouched', () => {
    const other = ip6Packet({ proto: 'tcp', src: NODE, dst: '2001:db8:5::5', sport: 1000, dport: 2000 });
    const ptb = packetTooBig(ROUTER, NODE, 1280, other);
    const { verdict, out } = h.run('ingress', ptb);
    assert.equal(verdict, TC_ACT_OK);
    expectPacket(out, ptb, 'unrelated error');
  });
});

describe('non-Service ICMPv6 and extension headers', () => {
  beforeEach(() => v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT | LOCAL_POLICY, revNatId: 7, backends: [LOCAL_BE] }));

  test('Neighbor Solicitation / Advertisement and echo pass untouched, both hooks', () => {
    const ns = neighborSolicitation(CLIENT, NODE);
    const na = ethernet6(icmp6(NODE, CLIENT, 136, 0, Buffer.from([0x60, 0, 0, 0]), Buffer.concat([Buffer.alloc(16)]), 255));
    const echo = ethernet6(icmp6(CLIENT, NODE, 128, 0, Buffer.from([0, 1, 0, 1]), Buffer.from('ping')));
    for (const pkt of [ns, na, echo]) {
      for (const dir of ['ingress', 'egress'] as const) {
        const { verdict, out } = h.run(dir, pkt);
        assert.equal(verdict, TC_ACT_OK);
        expectPacket(out, pkt, `ICMPv6 type ${pkt[14 + 40]} on ${dir}`);
      }
    }
    assert.equal(v6.rows().length, 0);
  });

  test('hop-by-hop + destination options before TCP: walked, the NodePort is translated after them', () => {
    const ext = [exthdr(0, Buffer.from([1, 4, 0, 0, 0, 0])), exthdr(60, Buffer.from([1, 12, ...Buffer.alloc(12)]))];
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40300, dport: NODE_PORT, tcpFlags: TCP_SYN, ext };
    check('ingress', syn, { ...syn, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
  });

  test('a routing header with segments left and too many headers pass untouched and are counted; a first fragment is translated', () => {
    const base: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40301, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const extBefore = h.counter(abi.LB_CNT_TC6_EXTHDR_PASSED);
    const trackedBefore = h.counter(abi.LB_CNT_TC6_FRAG_TRACKED);
    // Segment routing header (type 4), 1 segment left: NODE is not the final destination.
    check('ingress', { ...base, ext: [exthdr(43, Buffer.from([4, 1, 0, 0, 0, 0, ...Buffer.alloc(16)]))] }, null);
    // Five destination-options headers: more than the walk reads.
    check('ingress', { ...base, ext: Array.from({ length: 5 }, () => exthdr(60, Buffer.from([1, 4, 0, 0, 0, 0]))) }, null);
    assert.equal(h.counter(abi.LB_CNT_TC6_EXTHDR_PASSED) - extBefore, 2n);
    // A first fragment (offset 0, M set): translated, its ports remembered
    // for the later ones (test/bpf/tc_frag6.test.ts).
    const first: L4Spec6 = { ...base, sport: 40303, ext: [{ type: 44, body: Buffer.from([0, 1, 0, 0, 0x12, 0x34]) }] };
    check('ingress', first, { ...first, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    assert.equal(h.counter(abi.LB_CNT_TC6_FRAG_TRACKED) - trackedBefore, 1n);
    // A routing header with no segments left is walked like any other.
    const done: L4Spec6 = { ...base, sport: 40302, ext: [exthdr(43, Buffer.from([4, 0, 0, 0, 0, 0, ...Buffer.alloc(16)]))] };
    check('ingress', done, { ...done, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    assert.equal(v6.rows().length, 4, 'the first fragment and the last SYN opened a flow each');
  });
});

describe('the agent forgets the IPv6 flows of deleted backends', () => {
  test('purgeBackends on sluice_ct6 deletes both entries of the backend\'s flows only', () => {
    v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: NODEPORT, revNatId: 8, backends: [REMOTE_BE] });
    v6.upsertFrontend({ address: EXTERNAL_IP, port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_EXTERNAL_IP | LOCAL_POLICY, revNatId: 9, backends: [LOCAL_BE] });
    h.run('ingress', frame6({ proto: 'udp', src: CLIENT, dst: NODE, sport: 5001, dport: NODE_PORT }));
    h.run('ingress', frame6({ proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 5002, dport: 53 }));
    assert.equal(v6.rows().length, 4);
    assert.equal(purgeBackends(v6.conntrack, [REMOTE_BE.id]), 2);
    assert.deepEqual(v6.rows().map((r) => r.backend), [`[${LOCAL_BE.address}]:8080`, `[${LOCAL_BE.address}]:8080`]);
  });
});

describe('conntrack GC covers the IPv6 table', () => {
  test('an expired IPv6 flow is deleted by sluice_ct_gc', () => {
    v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: NODEPORT | LOCAL_POLICY, revNatId: 7, backends: [LOCAL_BE] });
    h.run('ingress', frame6({ proto: 'udp', src: CLIENT, dst: NODE, sport: 5000, dport: NODE_PORT }));
    assert.equal(v6.rows().length, 2);
    for (const [k, e] of [...v6.conntrack.entries()]) v6.conntrack.set(k, { ...e, expires_ns: 2n });
    assert.equal(h.gc(), 2);
    assert.equal(v6.rows().length, 0);
  });
});

describe('sluice ct list shows IPv6 flows (sluice_ct6) beside IPv4 ones', () => {
  test('text and -o json: the flow with its family, [address]:port endpoints and SNAT', () => {
    v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 8, backends: [REMOTE_BE] });
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62010, dport: NODE_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const cli = (...args: string[]) => execFileSync(sluiceBin, ['ct', 'list', '--bpffs', h.pinDir, ...args], { encoding: 'utf8' });
    const rows = JSON.parse(cli('-o', 'json')) as Array<Record<string, unknown>>;
    const row = rows.find((r) => r.client === `[${CLIENT}]:62010`);
    assert.ok(row, `no IPv6 flow in ${JSON.stringify(rows)}`);
    assert.equal(row.family, 6);
    assert.equal(row.frontend, `[${NODE}]:${NODE_PORT}`);
    assert.equal(row.backend, `[${REMOTE_BE.address}]:${REMOTE_BE.port}`);
    assert.equal(row.snat, `[${NODE}]:62010`);
    assert.equal(row.state, 'syn');
    assert.deepEqual(row.entries, ['original', 'reply']);
    const text = cli();
    assert.match(text, new RegExp(`\\[${CLIENT}\\]:62010 +\\[${NODE}\\]:${NODE_PORT} +\\[${REMOTE_BE.address}\\]:${REMOTE_BE.port}`), text);
  });
});
