// Direct Server Return (issue 17 item 2, bpf/lib/dsr.h) on crafted packets
// (BPF_PROG_TEST_RUN), byte for byte: the ingress node's IPIP encapsulation
// (client -> frontend kept inside, node -> backend outside), the backend
// node's decapsulation + DNAT, and its reply leaving with the frontend as
// source. --nodeport-mode snat leaves everything as before (tc_nat.test.ts).
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber } from '../../src/datapath/addr';
import { writeNodePortMode, writeTcConfig, type NodePortMode } from '../../src/datapath/tc/config';
import { listConntrack } from '../../src/datapath/tc/conntrack';
import { TcHarness } from './tc_harness';
import { TC_ACT_OK, TCP_ACK, TCP_SYN, diffHex, frame, ipPacket, ipip, type L4Spec } from './tc_packet';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1'; // ingress node: NodePort address, SNAT address, outer source
const NODE_PORT = 30080;
const REMOTE_BE = { id: 2, address: '198.18.2.20', port: 8080, local: false };
const LOCAL_BE = { id: 3, address: '198.18.2.20', port: 8080, local: true }; // the same pod, seen from its own node
const NODEPORT = abi.LB_SVC_FLAG_NODEPORT;

let h: TcHarness;

before(() => {
  h = TcHarness.create('sluice-dsrtest');
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: NODE });
});

function mode(m: NodePortMode): void {
  assert.ok(h.tc.dsr, 'sluice_dsr_cfg is pinned');
  writeNodePortMode(h.tc.dsr, m);
}


function expectPacket(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

function run(direction: 'ingress' | 'egress', input: Buffer, expected: Buffer, what: string): void {
  const { verdict, out } = h.run(direction, input);
  // No route exists in the test's namespace for the FIB lookup: the program
  // leaves the (encapsulated) packet to the stack after building it.
  assert.equal(verdict, TC_ACT_OK, `${what}: verdict`);
  expectPacket(out, expected, what);
}

describe('ingress node: an externalTrafficPolicy: Cluster flow to a remote backend', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`dsr ${proto}: the client's packet is sent unchanged inside IPIP node -> backend; no SNAT`, () => {
      mode('dsr');
      h.upsertFrontend({ address: NODE, port: NODE_PORT, proto, flags: NODEPORT, revNatId: 20, backends: [REMOTE_BE] });
      const first: L4Spec = { proto, src: CLIENT, dst: NODE, sport: 40000, dport: NODE_PORT, tcpFlags: TCP_SYN, payload: Buffer.from('hello') };
      const before = h.counter(abi.LB_CNT_TC_DSR_ENCAP);
      run('ingress', frame(first), ipip(NODE, REMOTE_BE.address, ipPacket(first)), `${proto} first packet`);
      const next: L4Spec = { ...first, tcpFlags: TCP_ACK };
      run('ingress', frame(next), ipip(NODE, REMOTE_BE.address, ipPacket(next)), `${proto} next packet (conntrack)`);
      assert.equal(h.counter(abi.LB_CNT_TC_DSR_ENCAP) - before, 2n);
      const rows = listConntrack(h.tc.conntrack);
      assert.equal(rows.length, 1, JSON.stringify(rows));
      assert.equal(rows[0]!.snat, undefined, 'no SNAT');
      const [, original] = [...h.tc.conntrack.entries()].find(([k]) => k.dir === abi.LB_CT_DIR_ORIGINAL)!;
      assert.ok(original.flags & abi.LB_CT_FLAG_DSR);
      assert.equal(original.nat_address, ip4ToNumber(NODE), 'outer source kept in nat_address');
      if (proto === 'tcp') assert.ok(original.flags & abi.LB_CT_FLAG_ESTABLISHED, 'the ACK after the SYN establishes (no reply passes here)');
    });
  }

  test('hybrid: TCP by DSR, UDP SNATed as in snat mode', () => {
    mode('hybrid');
    for (const proto of ['tcp', 'udp'] as const) {
      h.upsertFrontend({ address: NODE, port: NODE_PORT, proto, flags: NODEPORT, revNatId: 21, backends: [REMOTE_BE] });
    }
    const tcp: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62001, dport: NODE_PORT, tcpFlags: TCP_SYN };
    run('ingress', frame(tcp), ipip(NODE, REMOTE_BE.address, ipPacket(tcp)), 'tcp');
    const udp: L4Spec = { proto: 'udp', src: CLIENT, dst: NODE, sport: 62001, dport: NODE_PORT };
    run('ingress', frame(udp), frame({ ...udp, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }), 'udp');
  });

  test('snat (the default): the same TCP packet is SNATed, not encapsulated', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 22, backends: [REMOTE_BE] });
    const tcp: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62002, dport: NODE_PORT, tcpFlags: TCP_SYN };
    run('ingress', frame(tcp), frame({ ...tcp, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }), 'tcp');
  });

  test('dsr with externalTrafficPolicy: Local: unchanged (DNAT to the local backend)', () => {
    mode('dsr');
    const local = { id: 4, address: '198.18.1.10', port: 8080, local: true };
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES, revNatId: 23, backends: [local] });
    const tcp: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40003, dport: NODE_PORT, tcpFlags: TCP_SYN };
    run('ingress', frame(tcp), frame({ ...tcp, dst: local.address, dport: local.port }), 'tcp');
  });
});

describe('backend node: the IPIP packet is opened, DNATed, and the reply carries the frontend', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: decapsulated + DNAT to the local backend; the reply leaves as frontend -> client`, () => {
      // The backend node runs snat mode: receiving DSR does not depend on it.
      h.upsertFrontend({ address: NODE, port: NODE_PORT, proto, flags: NODEPORT, revNatId: 24, backends: [LOCAL_BE] });
      const inner: L4Spec = { proto, src: CLIENT, dst: NODE, sport: 40010, dport: NODE_PORT, tcpFlags: TCP_SYN, payload: Buffer.from('hello') };
      const before = h.counter(abi.LB_CNT_TC_DSR_DECAP);
      run('ingress', ipip(NODE, LOCAL_BE.address, ipPacket(inner)), frame({ ...inner, dst: LOCAL_BE.address, dport: LOCAL_BE.port }), 'decap');
      assert.equal(h.counter(abi.LB_CNT_TC_DSR_DECAP) - before, 1n);
      const reply: L4Spec = { proto, src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 40010, tcpFlags: TCP_SYN | TCP_ACK, payload: Buffer.from('answer') };
      run('egress', frame(reply), frame({ ...reply, src: NODE, sport: NODE_PORT }), 'reply');
      const [, original] = [...h.tc.conntrack.entries()].find(([k]) => k.dir === abi.LB_CT_DIR_ORIGINAL)!;
      assert.ok(original.flags & abi.LB_CT_FLAG_DSR_RX);
      // The next packet of the flow goes through conntrack.
      const next: L4Spec = { ...inner, tcpFlags: TCP_ACK };
      run('ingress', ipip(NODE, LOCAL_BE.address, ipPacket(next)), frame({ ...next, dst: LOCAL_BE.address, dport: LOCAL_BE.port }), 'decap, known flow');
    });
  }

  test('a NodePort found through the wildcard 0.0.0.0:<port> (the ingress node address is not ours)', () => {
    h.upsertFrontend({ address: '0.0.0.0', port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 25, backends: [LOCAL_BE] });
    const inner: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40011, dport: NODE_PORT, tcpFlags: TCP_SYN };
    run('ingress', ipip(NODE, LOCAL_BE.address, ipPacket(inner)), frame({ ...inner, dst: LOCAL_BE.address, dport: LOCAL_BE.port }), 'decap');
    const reply: L4Spec = { proto: 'tcp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 40011, tcpFlags: TCP_SYN | TCP_ACK };
    run('egress', frame(reply), frame({ ...reply, src: NODE, sport: NODE_PORT }), 'reply');
  });

  test('IPIP that is not ours (outer destination not a local backend, or no frontend) passes untouched', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 26, backends: [REMOTE_BE] });
    const inner: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40012, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const notLocal = ipip(NODE, REMOTE_BE.address, ipPacket(inner));
    run('ingress', notLocal, notLocal, 'backend not local');
    const noFrontend = ipip(NODE, REMOTE_BE.address, ipPacket({ ...inner, dport: 9 }));
    run('ingress', noFrontend, noFrontend, 'no frontend');
    assert.equal(listConntrack(h.tc.conntrack).length, 0);
  });
});
