// Direct Server Return for IPv6 (issue 17 item 2; bpf/lib/dsr6.h and
// lb6_dsr_forward in bpf/lib/nat_flow6.h) on crafted packets
// (BPF_PROG_TEST_RUN), byte for byte: the ingress node's ip6ip6
// encapsulation (client -> frontend kept inside, node -> backend outside),
// the backend node's decapsulation + DNAT (TCP/UDP checksums over the IPv6
// pseudo-header), and its reply leaving with the frontend as source. The
// IPv6 twin of tc_dsr.test.ts; --nodeport-mode snat leaves IPv6 as before
// (tc_nat6.test.ts).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { ip6ToBytes } from '../../src/datapath/addr';
import { writeNodePortMode, type NodePortMode } from '../../src/datapath/tc/config';
import { TypedMap, u8Codec } from '../../src/datapath/typedMap';
import { tc6Fixture } from './tc_harness6';
import { TC_ACT_OK, TCP_ACK, TCP_SYN, diffHex } from './tc_packet';
import { fragment6, frame6, ip6Packet, ip6ip6, type L4Spec6 } from './tc_packet6';

const CLIENT = '2001:db8::10';
const NODE = '2001:db8::1'; // ingress node: NodePort address, IPv6 SNAT address, outer source
const BACKEND_NODE = '2001:db8::2'; // the backend's node (its own NodePort address)
const LB_IP = '2001:db8:100::10'; // a LoadBalancer IP: the same frontend on every node
const NODE_PORT = 30080;
const REMOTE_BE = { id: 2, address: 'fd00:2::20', port: 8080, local: false };
const LOCAL_BE = { id: 3, address: 'fd00:2::20', port: 8080, local: true }; // the same pod, seen from its own node
const NODEPORT = abi.LB_SVC_FLAG_NODEPORT;
const LB = abi.LB_SVC_FLAG_LOADBALANCER;

const fx = tc6Fixture('sluice-dsr6test', NODE);

function mode(m: NodePortMode): void {
  assert.ok(fx.h.tc.dsr, 'sluice_dsr_cfg is pinned');
  writeNodePortMode(fx.h.tc.dsr, m);
}

function run(direction: 'ingress' | 'egress', input: Buffer, expected: Buffer, what: string): void {
  const { verdict, out } = fx.h.run(direction, input);
  // No route in the test's namespace: the FIB lookup fails and the program
  // leaves the (encapsulated) packet to the stack after building it.
  assert.equal(verdict, TC_ACT_OK, `${what}: verdict`);
  assert.ok(out.equals(expected), `${what}: output differs from the expected packet\n${diffHex(out, expected)}`);
}

const originalEntry = () => [...fx.v6.conntrack.entries()].find(([k]) => k.dir === abi.LB_CT_DIR_ORIGINAL)![1];

describe('IPv6 ingress node: an externalTrafficPolicy: Cluster flow to a remote backend', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`dsr ${proto}: the client's packet is sent unchanged inside ip6ip6 node -> backend; no SNAT`, () => {
      mode('dsr');
      fx.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto, flags: NODEPORT, revNatId: 20, backends: [REMOTE_BE] });
      const first: L4Spec6 = { proto, src: CLIENT, dst: NODE, sport: 40000, dport: NODE_PORT, tcpFlags: TCP_SYN, payload: Buffer.from('hello') };
      const before = fx.h.counter(abi.LB_CNT_TC_DSR_ENCAP);
      run('ingress', frame6(first), ip6ip6(NODE, REMOTE_BE.address, ip6Packet(first)), `${proto} first packet`);
      const next: L4Spec6 = { ...first, tcpFlags: TCP_ACK };
      run('ingress', frame6(next), ip6ip6(NODE, REMOTE_BE.address, ip6Packet(next)), `${proto} next packet (conntrack)`);
      assert.equal(fx.h.counter(abi.LB_CNT_TC_DSR_ENCAP) - before, 2n);
      const rows = fx.v6.rows();
      assert.equal(rows.length, 2, JSON.stringify(rows));
      const original = originalEntry();
      assert.ok(original.flags & abi.LB_CT_FLAG_DSR, 'LB_CT_FLAG_DSR');
      assert.ok(!(original.flags & abi.LB_CT_FLAG_SNAT), 'no SNAT');
      assert.deepEqual(original.nat_address, ip6ToBytes(NODE), 'outer source kept in nat_address');
      if (proto === 'tcp') assert.ok(original.flags & abi.LB_CT_FLAG_ESTABLISHED, 'the ACK after the SYN establishes (no reply passes here)');
    });
  }

  test('a LoadBalancer IP: the same encapsulation', () => {
    mode('dsr');
    fx.v6.upsertFrontend({ address: LB_IP, port: 80, proto: 'tcp', flags: LB, revNatId: 27, backends: [REMOTE_BE] });
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: LB_IP, sport: 40100, dport: 80, tcpFlags: TCP_SYN };
    run('ingress', frame6(syn), ip6ip6(NODE, REMOTE_BE.address, ip6Packet(syn)), 'tcp to the LB IP');
  });

  test('hybrid: TCP by DSR, UDP SNATed as in snat mode', () => {
    mode('hybrid');
    for (const proto of ['tcp', 'udp'] as const) {
      fx.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto, flags: NODEPORT, revNatId: 21, backends: [REMOTE_BE] });
    }
    const tcp: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62001, dport: NODE_PORT, tcpFlags: TCP_SYN };
    run('ingress', frame6(tcp), ip6ip6(NODE, REMOTE_BE.address, ip6Packet(tcp)), 'tcp');
    const udp: L4Spec6 = { proto: 'udp', src: CLIENT, dst: NODE, sport: 62001, dport: NODE_PORT };
    run('ingress', frame6(udp), frame6({ ...udp, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }), 'udp');
  });

  test('snat (the default): the same TCP packet is SNATed, not encapsulated', () => {
    fx.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 22, backends: [REMOTE_BE] });
    const tcp: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62002, dport: NODE_PORT, tcpFlags: TCP_SYN };
    run('ingress', frame6(tcp), frame6({ ...tcp, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }), 'tcp');
  });

  test('dsr with externalTrafficPolicy: Local: unchanged (DNAT to the local backend)', () => {
    mode('dsr');
    const local = { id: 4, address: 'fd00:1::10', port: 8080, local: true };
    fx.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES, revNatId: 23, backends: [local] });
    const tcp: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40003, dport: NODE_PORT, tcpFlags: TCP_SYN };
    run('ingress', frame6(tcp), frame6({ ...tcp, dst: local.address, dport: local.port }), 'tcp');
  });
});

describe('IPv6 backend node: the ip6ip6 packet is opened, DNATed, and the reply carries the frontend', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: decapsulated + DNAT to the local backend; the reply leaves as frontend -> client`, () => {
      // The backend node runs snat mode: receiving DSR does not depend on it.
      fx.v6.upsertFrontend({ address: LB_IP, port: 80, proto, flags: LB, revNatId: 24, backends: [LOCAL_BE] });
      const inner: L4Spec6 = { proto, src: CLIENT, dst: LB_IP, sport: 40010, dport: 80, tcpFlags: TCP_SYN, payload: Buffer.from('hello') };
      const before = fx.h.counter(abi.LB_CNT_TC_DSR_DECAP);
      run('ingress', ip6ip6(NODE, LOCAL_BE.address, ip6Packet(inner)), frame6({ ...inner, dst: LOCAL_BE.address, dport: LOCAL_BE.port }), 'decap');
      assert.equal(fx.h.counter(abi.LB_CNT_TC_DSR_DECAP) - before, 1n);
      const reply: L4Spec6 = { proto, src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 40010, tcpFlags: TCP_SYN | TCP_ACK, payload: Buffer.from('answer') };
      run('egress', frame6(reply), frame6({ ...reply, src: LB_IP, sport: 80 }), 'reply');
      const original = originalEntry();
      assert.ok(original.flags & abi.LB_CT_FLAG_DSR_RX, 'LB_CT_FLAG_DSR_RX');
      assert.ok(!(original.flags & abi.LB_CT_FLAG_SNAT), 'client address kept');
      // The next packet of the flow goes through conntrack.
      const next: L4Spec6 = { ...inner, tcpFlags: TCP_ACK };
      run('ingress', ip6ip6(NODE, LOCAL_BE.address, ip6Packet(next)), frame6({ ...next, dst: LOCAL_BE.address, dport: LOCAL_BE.port }), 'decap, known flow');
      assert.equal(fx.h.counter(abi.LB_CNT_TC_DSR_DECAP) - before, 2n);
    });
  }

  test('a NodePort of the ingress node: found as the same port on one of this node\'s addresses (sluice_nodeip6)', () => {
    const nodeIps = new TypedMap(fx.h.obj.map(abi.SLUICE_MAP_NODEIP6), abi.lb6_node_ipCodec, u8Codec);
    nodeIps.set({ address: ip6ToBytes(BACKEND_NODE) }, 1);
    try {
      fx.v6.upsertFrontend({ address: BACKEND_NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 25, backends: [LOCAL_BE] });
      const inner: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40011, dport: NODE_PORT, tcpFlags: TCP_SYN };
      run('ingress', ip6ip6(NODE, LOCAL_BE.address, ip6Packet(inner)), frame6({ ...inner, dst: LOCAL_BE.address, dport: LOCAL_BE.port }), 'decap');
      const reply: L4Spec6 = { proto: 'tcp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 40011, tcpFlags: TCP_SYN | TCP_ACK };
      run('egress', frame6(reply), frame6({ ...reply, src: NODE, sport: NODE_PORT }), 'reply: from the address the client talked to');
    } finally {
      nodeIps.delete({ address: ip6ToBytes(BACKEND_NODE) });
    }
  });

  test('a datagram the client fragmented: the first fragment opens the flow, the later ones follow by its ports', () => {
    fx.v6.upsertFrontend({ address: LB_IP, port: 53, proto: 'udp', flags: LB, revNatId: 28, backends: [LOCAL_BE] });
    const inner: L4Spec6 = { proto: 'udp', src: CLIENT, dst: LB_IP, sport: 40013, dport: 53, payload: Buffer.alloc(600, 5) };
    const arrived = fragment6(ip6Packet(inner), 256, 0x1234);
    const delivered = fragment6(ip6Packet({ ...inner, dst: LOCAL_BE.address, dport: LOCAL_BE.port }), 256, 0x1234);
    assert.equal(arrived.length, 3);
    arrived.forEach((f, i) => run('ingress', ip6ip6(NODE, LOCAL_BE.address, f.subarray(14)), delivered[i]!, `fragment ${i}`));
    assert.ok(originalEntry().flags & abi.LB_CT_FLAG_DSR_RX);
  });

  test('ip6ip6 that is not ours (outer destination not a local backend, or no frontend) passes untouched', () => {
    fx.v6.upsertFrontend({ address: LB_IP, port: 80, proto: 'tcp', flags: LB, revNatId: 26, backends: [REMOTE_BE] });
    const inner: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: LB_IP, sport: 40012, dport: 80, tcpFlags: TCP_SYN };
    const notLocal = ip6ip6(NODE, REMOTE_BE.address, ip6Packet(inner));
    run('ingress', notLocal, notLocal, 'backend not local');
    const noFrontend = ip6ip6(NODE, REMOTE_BE.address, ip6Packet({ ...inner, dport: 9 }));
    run('ingress', noFrontend, noFrontend, 'no frontend');
    assert.equal(fx.v6.rows().length, 0);
  });
});
