// Fragments, PMTU and the SNAT address of the egress device on the TC path,
// on crafted packets (BPF_PROG_TEST_RUN), byte by byte against packets built
// from scratch (test/bpf/tc_packet.ts).
//
// The FIB-dependent cases (a packet too big for the next hop; a flow leaving
// by a device with its own SNAT address) run in a throwaway namespace with
// routes (test/bpf/tc_netns.ts): in0 (198.18.0.1/24, where packets arrive),
// out0 (198.18.21.1/24, MTU 1280) with the route to the backends' subnet.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TcHarness } from './tc_harness';
import { TcNetns } from './tc_netns';
import {
  TC_ACT_OK, TC_ACT_REDIRECT, TC_ACT_SHOT, TCP_ACK, TCP_SYN,
  checksum, diffHex, fragment, frame, icmpReply, ipPacket, type L4Spec,
} from './tc_packet';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1';
const NODE_PRIVATE = '198.18.21.1';
const NODE_PORT = 30080;
const REMOTE_BE = { id: 2, address: '198.18.2.20', port: 8080, local: false };
const LOCAL_BE = { id: 1, address: '198.18.1.10', port: 8080, local: true };
const LOCAL_POLICY = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;

let h: TcHarness;

before(() => {
  h = TcHarness.create('sluice-tcfrag');
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: NODE });
});

function expectFrame(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

const payload = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7 + seed) & 0xff));

/** A 2 000-byte UDP datagram as two fragments (1 480 + the rest). */
const udpFragments = (s: Omit<L4Spec, 'proto' | 'payload'>) =>
  fragment(ipPacket({ proto: 'udp', payload: payload(2000, s.id ?? 0), ...s }), 1480);

describe('fragments of a UDP datagram: the later ones take the first one\'s ports', () => {
  test('NodePort to a remote backend: both fragments DNATed + SNATed, the reply\'s fragments restored', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 3, backends: [REMOTE_BE] });
    const found = h.counter(abi.LB_CNT_TC_FRAG_FOUND);
    const request = { src: CLIENT, dst: NODE, sport: 62000, dport: NODE_PORT, id: 0x5151 };
    const translated = udpFragments({ ...request, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    udpFragments(request).forEach((f, i) => {
      const { verdict, out } = h.run('ingress', f);
      assert.equal(verdict, TC_ACT_OK);
      expectFrame(out, translated[i]!, `request fragment ${i}`);
    });
    const reply = { src: REMOTE_BE.address, sport: REMOTE_BE.port, dst: NODE, dport: 62000, id: 0x6262 };
    const restored = udpFragments({ ...reply, src: NODE, sport: NODE_PORT, dst: CLIENT });
    udpFragments(reply).forEach((f, i) => {
      expectFrame(h.run('ingress', f).out, restored[i]!, `reply fragment ${i}`);
    });
    assert.equal(h.counter(abi.LB_CNT_TC_FRAG_FOUND) - found, 2n);
  });

  test('externalTrafficPolicy Local: the reply\'s fragments get the frontend back on egress', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: LOCAL_POLICY, revNatId: 4, backends: [LOCAL_BE] });
    const request = { src: CLIENT, dst: NODE, sport: 40000, dport: NODE_PORT, id: 0x1111 };
    const dnat = udpFragments({ ...request, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    udpFragments(request).forEach((f, i) => expectFrame(h.run('ingress', f).out, dnat[i]!, `request fragment ${i}`));
    const reply = { src: LOCAL_BE.address, sport: LOCAL_BE.port, dst: CLIENT, dport: 40000, id: 0x2222 };
    const restored = udpFragments({ ...reply, src: NODE, sport: NODE_PORT });
    udpFragments(reply).forEach((f, i) => expectFrame(h.run('egress', f).out, restored[i]!, `reply fragment ${i}`));
  });

  test('a later fragment whose first was not seen, or of a datagram that is no flow, passes untouched', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 3, backends: [REMOTE_BE] });
    const unknown = h.counter(abi.LB_CNT_TC_FRAG_UNKNOWN);
    const [, orphan] = udpFragments({ src: CLIENT, dst: NODE, sport: 62000, dport: NODE_PORT, id: 0x7777 });
    expectFrame(h.run('ingress', orphan!).out, orphan!, 'orphan fragment');
    assert.equal(h.counter(abi.LB_CNT_TC_FRAG_UNKNOWN) - unknown, 1n);
    // Ports known, but port 9 is no frontend: no flow is opened by either fragment.
    for (const f of udpFragments({ src: CLIENT, dst: NODE, sport: 62000, dport: 9, id: 0x7778 })) {
      const { verdict, out } = h.run('ingress', f);
      assert.equal(verdict, TC_ACT_OK);
      expectFrame(out, f, 'fragment of a datagram to no frontend');
    }
    assert.equal([...h.tc.conntrack.entries()].length, 0);
  });
});

describe('routes in a namespace: SNAT address of the egress device, ICMP fragmentation needed', () => {
  let ns: TcNetns;
  let in0 = 0;
  let out0 = 0;

  before(() => {
    ns = new TcNetns(h.pinDir);
    ns.ip('link', 'add', 'in0', 'type', 'veth', 'peer', 'name', 'in0p');
    ns.ip('link', 'add', 'out0', 'mtu', '1280', 'type', 'veth', 'peer', 'name', 'out0p', 'mtu', '1280');
    for (const dev of ['in0', 'in0p', 'out0', 'out0p']) ns.ip('link', 'set', dev, 'up');
    ns.ip('addr', 'add', `${NODE}/24`, 'dev', 'in0');
    ns.ip('addr', 'add', `${NODE_PRIVATE}/24`, 'dev', 'out0');
    ns.ip('route', 'add', '198.18.2.0/24', 'via', '198.18.21.2', 'dev', 'out0');
    // Far clients behind a 1 280-byte link: a backend's full-size reply does not fit.
    ns.ip('link', 'add', 'far0', 'mtu', '1280', 'type', 'veth', 'peer', 'name', 'far0p', 'mtu', '1280');
    for (const dev of ['far0', 'far0p']) ns.ip('link', 'set', dev, 'up');
    ns.ip('addr', 'add', '198.18.40.1/24', 'dev', 'far0');
    in0 = ns.ifindex('in0');
    out0 = ns.ifindex('out0');
  });
  after(() => ns?.destroy());
  beforeEach(() => h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 5, backends: [REMOTE_BE] }));

  test('a flow leaving by a device with its own SNAT address takes it; others take the configured one', () => {
    h.tc.snatDevices.set(out0, { address: ip4ToNumber(NODE_PRIVATE) });
    const before = h.counter(abi.LB_CNT_TC_SNAT_EGRESS_DEV);
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62001, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const r = ns.run('ingress', frame(syn), in0);
    assert.equal(r.verdict, TC_ACT_REDIRECT, 'forwarded by the program (redirect to out0)');
    // Forwarded by us: the TTL drops by one, as through any router.
    expectFrame(r.out, frame({ ...syn, src: NODE_PRIVATE, dst: REMOTE_BE.address, dport: REMOTE_BE.port, ttl: 63 }), 'SNAT to out0\'s address');
    assert.equal(h.counter(abi.LB_CNT_TC_SNAT_EGRESS_DEV) - before, 1n);

    h.tc.snatDevices.delete(out0);
    const syn2 = { ...syn, sport: 62002 };
    expectFrame(ns.run('ingress', frame(syn2), in0).out, frame({ ...syn2, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port, ttl: 63 }), 'SNAT to the configured address');
  });

  test('too big for out0 with DF: the client gets ICMP fragmentation needed (MTU 1280) quoting its own packet', () => {
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62003, dport: NODE_PORT, tcpFlags: TCP_SYN };
    assert.equal(ns.run('ingress', frame(syn), in0).verdict, TC_ACT_REDIRECT);
    const big: L4Spec = { ...syn, tcpFlags: TCP_ACK, payload: payload(1460, 1) };
    const before = h.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT);
    const r = ns.run('ingress', frame(big), in0);
    assert.equal(r.verdict, TC_ACT_REDIRECT, 'sent back out of the device it came in on');

    // From the frontend, TOS internetwork control (as Linux's ICMP errors), next-hop MTU 1280.
    const expected = icmpReply(NODE, CLIENT, 3, 4, Buffer.from([0, 0, 0x05, 0x00]), ipPacket(big), 0xc0);
    expectFrame(r.out, expected, 'ICMP fragmentation needed');
    assert.equal(h.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT) - before, 1n);
  });

  test('a backend\'s reply too big for the client\'s link: the backend gets fragmentation needed from the SNAT address', () => {
    const FAR_CLIENT = '198.18.40.10';
    const syn: L4Spec = { proto: 'tcp', src: FAR_CLIENT, dst: NODE, sport: 62005, dport: NODE_PORT, tcpFlags: TCP_SYN };
    assert.equal(ns.run('ingress', frame(syn), ns.ifindex('far0')).verdict, TC_ACT_REDIRECT);
    const reply: L4Spec = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 62005, tcpFlags: TCP_ACK, payload: payload(1460, 3) };
    const r = ns.run('ingress', frame(reply), out0);
    assert.equal(r.verdict, TC_ACT_REDIRECT, 'sent back out of out0, where the reply came in');
    expectFrame(r.out, icmpReply(NODE, REMOTE_BE.address, 3, 4, Buffer.from([0, 0, 0x05, 0x00]), ipPacket(reply), 0xc0), 'ICMP to the backend');
  });

  test('too big without DF (TC cannot fragment): dropped and counted', () => {
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62004, dport: NODE_PORT, tcpFlags: TCP_SYN };
    assert.equal(ns.run('ingress', frame(syn), in0).verdict, TC_ACT_REDIRECT);
    const big = frame({ ...syn, tcpFlags: TCP_ACK, payload: payload(1460, 2) });
    big.writeUInt16BE(0, 14 + 6);
    big.writeUInt16BE(0, 14 + 10);
    big.writeUInt16BE(checksum(big.subarray(14, 34)), 14 + 10);
    const before = h.counter(abi.LB_CNT_TC_TOO_BIG_DROP);
    assert.equal(ns.run('ingress', big, in0).verdict, TC_ACT_SHOT);
    assert.equal(h.counter(abi.LB_CNT_TC_TOO_BIG_DROP) - before, 1n);
  });
});
