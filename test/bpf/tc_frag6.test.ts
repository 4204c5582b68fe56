// IPv6 fragments and Packet Too Big on the north-south TC path (issue 14
// item 3, issue 10 item 8; bpf/lib/frag6.h), on crafted packets
// (BPF_PROG_TEST_RUN) compared byte by byte with packets built from scratch
// (test/bpf/tc_packet6.ts: checksums over the IPv6 pseudo-header).
//
// A 4 000-byte UDP datagram is cut into fragments of 1 448 bytes of payload
// (a 1 500-byte link): only the first carries the UDP header; the later ones
// must be translated with the first one's ports (sluice_frag6).
//
// The Packet Too Big case runs in a throwaway namespace with routes
// (test/bpf/tc_netns.ts): in0 (2001:db8::1/64, where packets arrive), out0
// (fd00:21::1/64, MTU 1280) with the route to the backends' prefix.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as abi from '../../src/abi/generated';
import { bounced, expectPacket as expectFrame } from './pod_harness';
import { tc6Fixture } from './tc_harness6';
import { TcNetns } from './tc_netns';
import { TC_ACT_OK, TC_ACT_REDIRECT, TCP_ACK, TCP_SYN } from './tc_packet';
import { ethernet6, exthdr, fragment6, frame6, icmp6, ip6Packet, type L4Spec6 } from './tc_packet6';

const CLIENT = '2001:db8::10';
const NODE = '2001:db8::1'; // NodePort address and IPv6 SNAT address
const NODE_PORT = 30080;
const LOCAL_BE = { id: 1, address: 'fd00:1::10', port: 8080, local: true };
const REMOTE_BE = { id: 2, address: 'fd00:2::20', port: 8080, local: false };
const LOCAL_POLICY = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;
const CHUNK = 1448; // 40 + 8 + 1 448 = 1 496 bytes: fits a 1 500-byte link

const fx = tc6Fixture('sluice-tcfrag6', NODE);

const payload = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7 + seed) & 0xff));

type Dgram = Omit<L4Spec6, 'proto' | 'payload'>;
/** A 4 000-byte UDP datagram as three fragments (1 448, 1 448, 1 112 bytes of payload). */
const udpFragments = (s: Dgram, id: number) => fragment6(ip6Packet({ proto: 'udp', payload: payload(4000, id & 0xff), ...s }), CHUNK, id);

const delta = (row: number, before: bigint) => fx.h.counter(row) - before;

describe('IPv6 fragments of a UDP datagram: the later ones take the first one\'s ports', () => {
  test('NodePort to a remote backend: every fragment DNATed + SNATed, the reply\'s fragments restored', () => {
    fx.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 3, backends: [REMOTE_BE] });
    const tracked = fx.h.counter(abi.LB_CNT_TC6_FRAG_TRACKED);
    const found = fx.h.counter(abi.LB_CNT_TC6_FRAG_FOUND);
    const request: Dgram = { src: CLIENT, dst: NODE, sport: 62000, dport: NODE_PORT };
    const sent = udpFragments(request, 0x51515151);
    assert.equal(sent.length, 3);
    const translated = udpFragments({ ...request, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }, 0x51515151);
    sent.forEach((f, i) => {
      const { verdict, out } = fx.h.run('ingress', f);
      assert.equal(verdict, TC_ACT_OK, `verdict of request fragment ${i}`);
      expectFrame(out, translated[i]!, `request fragment ${i}`);
    });
    const reply: Dgram = { src: REMOTE_BE.address, sport: REMOTE_BE.port, dst: NODE, dport: 62000 };
    const restored = udpFragments({ ...reply, src: NODE, sport: NODE_PORT, dst: CLIENT }, 0x62626262);
    udpFragments(reply, 0x62626262).forEach((f, i) => expectFrame(fx.h.run('ingress', f).out, restored[i]!, `reply fragment ${i}`));
    assert.equal(delta(abi.LB_CNT_TC6_FRAG_TRACKED, tracked), 2n, 'two first fragments remembered');
    assert.equal(delta(abi.LB_CNT_TC6_FRAG_FOUND, found), 4n, 'four later fragments translated');
    assert.equal(fx.v6.rows().length, 2, 'one flow');
  });

  test('externalTrafficPolicy Local: DNAT only, the reply\'s fragments get the frontend back on egress', () => {
    fx.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: LOCAL_POLICY, revNatId: 4, backends: [LOCAL_BE] });
    const request: Dgram = { src: CLIENT, dst: NODE, sport: 40000, dport: NODE_PORT };
    const dnat = udpFragments({ ...request, dst: LOCAL_BE.address, dport: LOCAL_BE.port }, 0x1111);
    udpFragments(request, 0x1111).forEach((f, i) => expectFrame(fx.h.run('ingress', f).out, dnat[i]!, `request fragment ${i}`));
    const reply: Dgram = { src: LOCAL_BE.address, sport: LOCAL_BE.port, dst: CLIENT, dport: 40000 };
    const restored = udpFragments({ ...reply, src: NODE, sport: NODE_PORT }, 0x2222);
    udpFragments(reply, 0x2222).forEach((f, i) => expectFrame(fx.h.run('egress', f).out, restored[i]!, `reply fragment ${i}`));
  });

  test('a later fragment whose first was not seen, or of a datagram that is no flow, passes untouched', () => {
    fx.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 3, backends: [REMOTE_BE] });
    const unknown = fx.h.counter(abi.LB_CNT_TC6_FRAG_UNKNOWN);
    const [, orphan] = udpFragments({ src: CLIENT, dst: NODE, sport: 62000, dport: NODE_PORT }, 0x7777);
    const r = fx.h.run('ingress', orphan!);
    assert.equal(r.verdict, TC_ACT_OK);
    expectFrame(r.out, orphan!, 'orphan fragment');
    assert.equal(delta(abi.LB_CNT_TC6_FRAG_UNKNOWN, unknown), 1n);
    // Ports known, but port 9 is no frontend: no flow is opened by any fragment.
    for (const f of udpFragments({ src: CLIENT, dst: NODE, sport: 62000, dport: 9 }, 0x7778)) {
      const { verdict, out } = fx.h.run('ingress', f);
      assert.equal(verdict, TC_ACT_OK);
      expectFrame(out, f, 'fragment of a datagram to no frontend');
    }
    assert.equal(fx.v6.rows().length, 0);
  });

  test('a later fragment not followed by TCP/UDP passes untouched (ipv6_fragment_passed); an atomic fragment is a whole packet', () => {
    fx.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: LOCAL_POLICY, revNatId: 4, backends: [LOCAL_BE] });
    const passed = fx.h.counter(abi.LB_CNT_TC6_FRAG_PASSED);
    // Offset 8, M clear, next header destination options (60).
    const later = ethernet6(Buffer.concat([
      ip6Packet({ proto: 'udp', src: CLIENT, dst: NODE, sport: 1, dport: 2 }).subarray(0, 40),
      Buffer.from([60, 0, 0, 8, 0, 0, 0x12, 0x34]), Buffer.alloc(16),
    ]));
    later.writeUInt16BE(24, 14 + 4);
    later.writeUInt8(44, 14 + 6);
    expectFrame(fx.h.run('ingress', later).out, later, 'later fragment with a destination options header');
    assert.equal(delta(abi.LB_CNT_TC6_FRAG_PASSED, passed), 1n);
    // Atomic fragment (RFC 6946: offset 0, M clear): translated like any packet.
    const atomic: L4Spec6 = {
      proto: 'udp', src: CLIENT, dst: NODE, sport: 40001, dport: NODE_PORT, payload: Buffer.from('whole'),
      ext: [exthdr(44, Buffer.from([0, 0, 0, 0, 0, 9]))],
    };
    expectFrame(fx.h.run('ingress', frame6(atomic)).out, frame6({ ...atomic, dst: LOCAL_BE.address, dport: LOCAL_BE.port }), 'atomic fragment');
  });

  test('a TCP first fragment opens the flow like a whole SYN would; its later fragment follows it', () => {
    fx.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: LOCAL_POLICY, revNatId: 5, backends: [LOCAL_BE] });
    const seg = { proto: 'tcp' as const, src: CLIENT, dst: NODE, sport: 40002, dport: NODE_PORT, tcpFlags: TCP_SYN, payload: payload(2000, 3) };
    const sent = fragment6(ip6Packet(seg), CHUNK, 0xabcdef01);
    const want = fragment6(ip6Packet({ ...seg, dst: LOCAL_BE.address, dport: LOCAL_BE.port }), CHUNK, 0xabcdef01);
    sent.forEach((f, i) => expectFrame(fx.h.run('ingress', f).out, want[i]!, `TCP fragment ${i}`));
  });
});

describe('IPv6 Packet Too Big from Sluice (routes in a namespace)', () => {
  let ns: TcNetns;
  let in0 = 0;

  before(() => {
    ns = new TcNetns(fx.h.pinDir);
    // bpf_fib_lookup answers FWD_DISABLED for IPv6 on a device that does not forward.
    execFileSync('ip', ['netns', 'exec', ns.name, 'sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1']);
    ns.ip('link', 'add', 'in0', 'type', 'veth', 'peer', 'name', 'in0p');
    ns.ip('link', 'add', 'out0', 'mtu', '1280', 'type', 'veth', 'peer', 'name', 'out0p', 'mtu', '1280');
    for (const dev of ['in0', 'in0p', 'out0', 'out0p']) ns.ip('link', 'set', dev, 'up');
    ns.ip('addr', 'add', `${NODE}/64`, 'dev', 'in0', 'nodad');
    ns.ip('addr', 'add', 'fd00:21::1/64', 'dev', 'out0', 'nodad');
    ns.ip('-6', 'route', 'add', 'fd00:2::/64', 'via', 'fd00:21::2', 'dev', 'out0');
    in0 = ns.ifindex('in0');
  });
  after(() => ns?.destroy());
  beforeEach(() => fx.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 6, backends: [REMOTE_BE] }));

  test('too big for out0 once SNATed: the client gets Packet Too Big (MTU 1280) from the frontend quoting 1 232 bytes of its packet', () => {
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62003, dport: NODE_PORT, tcpFlags: TCP_SYN };
    assert.equal(ns.run('ingress', frame6(syn), in0).verdict, TC_ACT_REDIRECT, 'the SYN is forwarded by the program');
    const big: L4Spec6 = { ...syn, tcpFlags: TCP_ACK, payload: payload(1400, 1) };
    const before = fx.h.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT);
    const r = ns.run('ingress', frame6(big), in0);
    assert.equal(r.verdict, TC_ACT_REDIRECT, 'sent back out of the device it came in on');
    const mtu = Buffer.alloc(4);
    mtu.writeUInt32BE(1280, 0);
    // RFC 4443 2.4 (c): as much of the packet as fits in 1 280 bytes.
    const expected = bounced(ethernet6(icmp6(NODE, CLIENT, 2, 0, mtu, ip6Packet(big).subarray(0, 1232))));
    expectFrame(r.out, expected, 'Packet Too Big');
    assert.equal(r.out.length, 14 + 1280);
    assert.equal(fx.h.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT) - before, 1n);
  });
});
