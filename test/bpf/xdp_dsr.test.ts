// DSR (issue 17 item 2, docs/dsr.md) with a real FIB (the namespace of
// xdp_harness.ts): TC sends the IPIP frame to the next hop byte for byte
// (next-hop MACs, bpf_redirect), answers "fragmentation needed" with MTU - 20
// when the encapsulated packet would not fit, and XDP leaves DSR flows to TC
// (XDP_PASS, untouched, nothing written).
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { writeNodePortMode, writeTcConfig } from '../../src/datapath/tc/config';
import { listConntrack } from '../../src/datapath/tc/conntrack';
import { syncFrontendAddresses } from '../../src/datapath/xdp/xdp';
import { TCP_ACK, TCP_SYN, TC_ACT_REDIRECT, diffHex, frame, icmpReply, ipPacket, ipip, type L4Spec } from './tc_packet';
import { XDP_PASS, XdpHarness } from './xdp_harness';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1';
const NODE_PORT = 30080;
const EXT_MAC = '02:00:00:00:00:01';
const GW = '198.18.0.2';
const GW_MAC = '02:00:00:00:00:22';
const REMOTE_BE = { id: 2, address: '198.18.2.20', port: 8080, local: false };

let h: XdpHarness;
let ext0: number;

const mac = (m: string) => Buffer.from(m.replace(/:/g, ''), 'hex');

function expectPacket(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

before(() => {
  h = new XdpHarness();
  h.ip('link', 'add', 'ext0', 'address', EXT_MAC, 'type', 'veth', 'peer', 'name', 'ext0p');
  h.ip('link', 'set', 'ext0p', 'up');
  h.ip('addr', 'add', `${NODE}/24`, 'dev', 'ext0');
  h.ip('link', 'set', 'ext0', 'up');
  h.ip('neigh', 'add', GW, 'lladdr', GW_MAC, 'dev', 'ext0', 'nud', 'permanent');
  h.ip('route', 'add', '198.18.2.0/24', 'via', GW, 'dev', 'ext0');
  ext0 = h.ifindex('ext0');
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.tc.config, { snatAddress: NODE });
  assert.ok(h.tc.tc.dsr);
  writeNodePortMode(h.tc.tc.dsr, 'dsr');
  h.tc.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 7, backends: [REMOTE_BE] });
  syncFrontendAddresses(h.maps, [{ address: NODE, flags: abi.LB_SVC_FLAG_NODEPORT }]);
});

describe('TC on the ingress node, with a route to the backend', () => {
  test('the IPIP frame goes to the next hop: its MACs, redirected; the inner packet unchanged (TTL too)', () => {
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40000, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const { verdict, out } = h.runTc(frame(syn), ext0);
    assert.equal(verdict, TC_ACT_REDIRECT);
    const expected = ipip(NODE, REMOTE_BE.address, ipPacket(syn));
    mac(GW_MAC).copy(expected, 0);
    mac(EXT_MAC).copy(expected, 6);
    expectPacket(out, expected, 'IPIP to the next hop');
  });

  test('1500 bytes with DF: ICMP fragmentation needed with MTU 1480 back to the client', () => {
    const big: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40001, dport: NODE_PORT, tcpFlags: TCP_ACK, payload: Buffer.alloc(1460, 7) };
    const sent = h.tc.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT);
    const { verdict, out } = h.runTc(frame(big), ext0);
    assert.equal(verdict, TC_ACT_REDIRECT);
    const mtu = Buffer.from([0, 0, 0x05, 0xc8]); // unused 16 bits, next-hop MTU 1480
    const expected = icmpReply(NODE, CLIENT, 3, 4, mtu, ipPacket(big), 0xc0);
    expectPacket(out.subarray(14), expected.subarray(14), 'ICMP fragmentation needed');
    assert.equal(h.tc.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT) - sent, 1n);
  });
});

describe('XDP leaves DSR to TC', () => {
  test('a new flow that goes by DSR: XDP_PASS untouched, no conntrack written; TC then encapsulates it', () => {
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40002, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const { verdict, out } = h.runXdp(frame(syn), ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, frame(syn), 'untouched');
    assert.equal(listConntrack(h.tc.tc.conntrack).length, 0);
    assert.equal(h.runTc(frame(syn), ext0).verdict, TC_ACT_REDIRECT);
    const data: L4Spec = { ...syn, tcpFlags: TCP_ACK };
    const known = h.runXdp(frame(data), ext0);
    assert.equal(known.verdict, XDP_PASS, 'a known DSR flow is TC\'s too');
    expectPacket(known.out, frame(data), 'untouched');
  });
});
