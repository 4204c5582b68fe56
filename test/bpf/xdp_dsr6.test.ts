// DSR for IPv6 (issue 17 item 2, docs/dsr.md) with a real FIB (the
// namespace of xdp_harness.ts): TC sends the ip6ip6 frame to the next hop
// byte for byte (next-hop MACs, bpf_redirect), answers a packet that no
// longer fits once 40 bytes are added with a Packet Too Big giving MTU - 40,
// and XDP leaves IPv6 DSR flows to TC (XDP_PASS, untouched, nothing written).
// The IPv6 twin of xdp_dsr.test.ts.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { writeNodePortMode, writeTcConfig } from '../../src/datapath/tc/config';
import { syncFrontendAddresses6 } from '../../src/datapath/xdp/xdp';
import { TCP_ACK, TCP_SYN, TC_ACT_REDIRECT, diffHex } from './tc_packet';
import { frame6, ip6Packet, ip6ip6, packetTooBig, type L4Spec6 } from './tc_packet6';
import { Tc6Maps } from './tc_harness6';
import { XDP_PASS, XdpHarness } from './xdp_harness';

const CLIENT = '2001:db8::10';
const NODE = '2001:db8::1';
const NODE_PORT = 30080;
const EXT_MAC = '02:00:00:00:00:01';
const GW = '2001:db8::2';
const GW_MAC = '02:00:00:00:00:22';
const REMOTE_BE = { id: 2, address: 'fd00:2::20', port: 8080, local: false };

let h: XdpHarness;
let v6: Tc6Maps;
let ext0: number;

const mac = (m: string) => Buffer.from(m.replace(/:/g, ''), 'hex');

function expectPacket(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

before(() => {
  h = new XdpHarness();
  v6 = new Tc6Maps(h.tc);
  h.ip('link', 'add', 'ext0', 'address', EXT_MAC, 'type', 'veth', 'peer', 'name', 'ext0p');
  h.ip('link', 'set', 'ext0p', 'up');
  h.ip('link', 'set', 'ext0', 'up');
  h.ip('-6', 'addr', 'add', `${NODE}/64`, 'dev', 'ext0', 'nodad');
  h.ip('-6', 'neigh', 'add', GW, 'lladdr', GW_MAC, 'dev', 'ext0', 'nud', 'permanent');
  h.ip('-6', 'route', 'add', 'fd00:2::/64', 'via', GW, 'dev', 'ext0');
  h.sysctl('net.ipv6.conf.all.forwarding=1'); // bpf_fib_lookup: FWD_DISABLED otherwise
  ext0 = h.ifindex('ext0');
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  v6.reset();
  writeTcConfig(h.tc.tc.config, { snatAddress: '198.18.0.1' });
  v6.setSnat(NODE);
  assert.ok(h.tc.tc.dsr);
  writeNodePortMode(h.tc.tc.dsr, 'dsr');
  v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 7, backends: [REMOTE_BE] });
  syncFrontendAddresses6(h.maps, [{ address: NODE, flags: abi.LB_SVC_FLAG_NODEPORT }]);
});

describe('IPv6: TC on the ingress node, with a route to the backend', () => {
  test('the ip6ip6 frame goes to the next hop: its MACs, redirected; the inner packet unchanged (hop limit too)', () => {
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40000, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const before = h.tc.counter(abi.LB_CNT_TC_DSR_ENCAP);
    const { verdict, out } = h.runTc(frame6(syn), ext0);
    assert.equal(verdict, TC_ACT_REDIRECT);
    const expected = ip6ip6(NODE, REMOTE_BE.address, ip6Packet(syn));
    mac(GW_MAC).copy(expected, 0);
    mac(EXT_MAC).copy(expected, 6);
    expectPacket(out, expected, 'ip6ip6 to the next hop');
    assert.equal(h.tc.counter(abi.LB_CNT_TC_DSR_ENCAP) - before, 1n);
  });

  test('a 1500-byte packet: Packet Too Big with MTU 1460 back to the client, from the address it talked to', () => {
    // 40 (IPv6) + 20 (TCP) + 1440 = 1500: 1540 once encapsulated, over ext0's 1500.
    const big: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40001, dport: NODE_PORT, tcpFlags: TCP_ACK, payload: Buffer.alloc(1440, 7) };
    const sent = h.tc.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT);
    const { verdict, out } = h.runTc(frame6(big), ext0);
    assert.equal(verdict, TC_ACT_REDIRECT);
    const expected = packetTooBig(NODE, CLIENT, 1460, ip6Packet(big));
    expectPacket(out.subarray(14), expected.subarray(14), 'Packet Too Big');
    assert.equal(h.tc.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT) - sent, 1n);
  });
});

describe('IPv6: XDP leaves DSR to TC', () => {
  test('a new flow that goes by DSR: XDP_PASS untouched, no conntrack written; TC then encapsulates it', () => {
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40002, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const { verdict, out } = h.runXdp(frame6(syn), ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, frame6(syn), 'untouched');
    assert.equal(v6.rows().length, 0);
    assert.equal(h.runTc(frame6(syn), ext0).verdict, TC_ACT_REDIRECT);
    const data: L4Spec6 = { ...syn, tcpFlags: TCP_ACK };
    const known = h.runXdp(frame6(data), ext0);
    assert.equal(known.verdict, XDP_PASS, 'a known DSR flow is TC\'s too');
    expectPacket(known.out, frame6(data), 'untouched');
  });
});
