// Pod-veth data path (bpf/pod_lb.bpf.c) on crafted packets through
// BPF_PROG_TEST_RUN: ClusterIP DNAT from a pod, reverse translation on the
// way back, hairpin, rejection of frontends without backends, and what must
// stay untouched. The maps are the TC harness's (tc_lb loaded in a throwaway
// bpffs directory); pod_lb is loaded against the same pinned maps, as on a
// node. Every output is compared byte by byte with a packet built from
// scratch with all checksums recomputed (test/bpf/tc_packet.ts).
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber, numberToIp4 } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { listConntrack } from '../../src/datapath/tc/conntrack';
import { counterIndex } from '../../src/datapath/counters';
import { BpfMap } from '../../src/bpf';
import { nodeIpMap, syncNodeAddresses } from '../../src/datapath/sockConfig';
import { TcHarness } from './tc_harness';
import { PodPrograms, POD_OBJECT, bounced, expectPacket } from './pod_harness';
import { PodFrontendSet, podSlot } from '../../src/datapath/pod/frontendSet';
import { readWords, writeWord } from '../../src/datapath/bitmap';
import {
  TC_ACT_OK, TC_ACT_REDIRECT, TC_ACT_SHOT, TCP_ACK, TCP_PSH, TCP_SYN,
  frame, icmpError, icmpReply, ipPacket, rewriteQuoted, withOptions, type L4Spec,
} from './tc_packet';


const POD = '198.18.10.5'; // the client pod behind the veth
const VIP = '10.96.0.10'; // ClusterIP (exists only as map entries here)
const VIP_PORT = 80;
const BE1 = { id: 11, address: '198.18.10.20', port: 8080, local: true };
const BE2 = { id: 12, address: '198.18.20.30', port: 8080, local: false };
const SELF = { id: 13, address: POD, port: 8080, local: true }; // the client pod is a backend too
const CLUSTER_IP = abi.LB_SVC_FLAG_CLUSTER_IP;

let h: TcHarness;
let pod: PodPrograms;

before(() => {
  h = TcHarness.create('sluice-podtest');
  pod = PodPrograms.load(h, POD_OBJECT);
});
after(() => {
  pod?.close();
  h?.close();
});
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, {});
});

const run = (direction: 'ingress' | 'egress', packet: Buffer) => pod.run(direction, packet);

function check(direction: 'ingress' | 'egress', input: L4Spec, expected: L4Spec | null, verdict = TC_ACT_OK): Buffer {
  const packet = frame(input);
  const { verdict: got, out } = run(direction, packet);
  assert.equal(got, verdict, `verdict for ${input.src}:${input.sport} -> ${input.dst}:${input.dport} on ${direction}`);
  expectPacket(out, expected ? frame(expected) : packet, `${direction} ${input.proto}`);
  return out;
}

/** ICMP port unreachable from `from` to `to` quoting the first 28 bytes of `quoted`, as pod_lb builds it. */
function portUnreachable(from: string, to: string, quoted: Buffer): Buffer {
  return icmpReply(from, to, 3, 3, Buffer.alloc(4), quoted);
}

describe('ClusterIP from a pod: DNAT, pod address kept', () => {
  beforeEach(() => h.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 21, backends: [BE1] }));

  test('SYN is DNATed to the backend; checksums match a from-scratch packet', () => {
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 40000, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE1.address, dport: BE1.port });
  });

  test('the flow keeps its backend, the reply gets the ClusterIP back on egress, conntrack shows a pod flow', () => {
    const before = h.counter(abi.LB_CNT_TC_TRANSLATED + abi.LB_CNT_POD_OFFSET);
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 40001, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE1.address, dport: BE1.port });
    const data: L4Spec = { ...syn, tcpFlags: TCP_ACK | TCP_PSH, payload: Buffer.from('GET / HTTP/1.0\r\n\r\n') };
    check('ingress', data, { ...data, dst: BE1.address, dport: BE1.port });
    assert.equal(h.counter(abi.LB_CNT_TC_TRANSLATED + abi.LB_CNT_POD_OFFSET) - before, 1n, 'one new flow');

    const reply: L4Spec = { proto: 'tcp', src: BE1.address, dst: POD, sport: BE1.port, dport: 40001, tcpFlags: TCP_SYN | TCP_ACK, payload: Buffer.from('hello') };
    check('egress', reply, { ...reply, src: VIP, sport: VIP_PORT });

    const rows = listConntrack(h.tc.conntrack);
    assert.equal(rows.length, 1);
    assert.equal(rows[0]?.client, `${POD}:40001`);
    assert.equal(rows[0]?.frontend, `${VIP}:${VIP_PORT}`);
    assert.equal(rows[0]?.backend, `${BE1.address}:${BE1.port}`);
    assert.equal(rows[0]?.snat, undefined);
    const raw = [...h.tc.conntrack.entries()].map(([, v]) => v);
    assert.ok(raw.every((v) => (v.flags & abi.LB_CT_FLAG_POD) !== 0), 'both entries are flagged LB_CT_FLAG_POD');
  });

  test('a reply is not touched on ingress, a request not on egress', () => {
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 40002, dport: VIP_PORT, tcpFlags: TCP_SYN };
    run('ingress', frame(syn));
    check('ingress', { proto: 'tcp', src: BE1.address, dst: POD, sport: BE1.port, dport: 40002, tcpFlags: TCP_ACK }, null);
    check('egress', syn, null);
  });

  test('traffic to other addresses and ports passes untouched in both directions', () => {
    check('ingress', { proto: 'tcp', src: POD, dst: BE1.address, sport: 40003, dport: BE1.port, tcpFlags: TCP_SYN }, null);
    check('ingress', { proto: 'tcp', src: POD, dst: VIP, sport: 40003, dport: 81, tcpFlags: TCP_SYN }, null);
    check('ingress', { proto: 'udp', src: POD, dst: VIP, sport: 40003, dport: VIP_PORT }, null);
    check('egress', { proto: 'tcp', src: BE2.address, dst: POD, sport: 443, dport: 40003, tcpFlags: TCP_ACK }, null);
  });

  test('a backend that went away: the flow is balanced again', () => {
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 40004, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE1.address, dport: BE1.port });
    h.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 21, backends: [BE2] });
    h.backends.delete(BE1.id);
    const before = h.counter(abi.LB_CNT_TC_BACKEND_GONE + abi.LB_CNT_POD_OFFSET);
    const data: L4Spec = { ...syn, tcpFlags: TCP_ACK };
    check('ingress', data, { ...data, dst: BE2.address, dport: BE2.port });
    assert.equal(h.counter(abi.LB_CNT_TC_BACKEND_GONE + abi.LB_CNT_POD_OFFSET) - before, 1n);
  });
});

describe('conntrack of pod flows (shared with the north-south path)', () => {
  test('two ClusterIPs on one backend, one pod port: the second flow gets another source port; a lost reply entry comes back', () => {
    const VIP2 = '10.96.0.11';
    h.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 25, backends: [BE1] });
    h.upsertFrontend({ address: VIP2, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 26, backends: [BE1] });
    const one: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 40010, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', one, { ...one, dst: BE1.address, dport: BE1.port });
    const remapped = h.counter(counterIndex('pod', 'source_port_remapped'));
    const two: L4Spec = { ...one, dst: VIP2 };
    const { verdict, out } = run('ingress', frame(two));
    assert.equal(verdict, TC_ACT_OK);
    const port = out.readUInt16BE(14 + 20);
    assert.notEqual(port, 40010, 'the second flow took the first flow\'s tuple');
    expectPacket(out, frame({ ...two, sport: port, dst: BE1.address, dport: BE1.port }), 'remapped source port');
    assert.equal(h.counter(counterIndex('pod', 'source_port_remapped')) - remapped, 1n);
    const r1: L4Spec = { proto: 'tcp', src: BE1.address, dst: POD, sport: BE1.port, dport: 40010, tcpFlags: TCP_SYN | TCP_ACK };
    check('egress', r1, { ...r1, src: VIP, sport: VIP_PORT });
    check('egress', { ...r1, dport: port }, { ...r1, src: VIP2, sport: VIP_PORT, dport: 40010 });

    // The first flow's reply entry is evicted; the pod's next packet puts it back.
    assert.ok(h.tc.conntrack.delete({ saddr: ip4ToNumber(BE1.address), daddr: ip4ToNumber(POD), sport: BE1.port, dport: 40010, proto: abi.LB_PROTO_TCP, dir: abi.LB_CT_DIR_REPLY }));
    const restored = h.counter(counterIndex('pod', 'conntrack_restored', 'reply'));
    const ack: L4Spec = { ...one, tcpFlags: TCP_ACK };
    check('ingress', ack, { ...ack, dst: BE1.address, dport: BE1.port });
    assert.equal(h.counter(counterIndex('pod', 'conntrack_restored', 'reply')) - restored, 1n);
    check('egress', r1, { ...r1, src: VIP, sport: VIP_PORT });
  });
});

describe('UDP from a pod', () => {
  beforeEach(() => h.upsertFrontend({ address: VIP, port: 53, proto: 'udp', flags: CLUSTER_IP, revNatId: 22, backends: [BE2] }));

  test('datagram DNATed to a backend on another node, reply restored', () => {
    const q: L4Spec = { proto: 'udp', src: POD, dst: VIP, sport: 45000, dport: 53, payload: Buffer.from('query') };
    check('ingress', q, { ...q, dst: BE2.address, dport: BE2.port });
    const a: L4Spec = { proto: 'udp', src: BE2.address, dst: POD, sport: BE2.port, dport: 45000, payload: Buffer.from('answer!') };
    check('egress', a, { ...a, src: VIP, sport: 53 });
  });

  test('a zero UDP checksum stays zero', () => {
    const q: L4Spec = { proto: 'udp', src: POD, dst: VIP, sport: 45001, dport: 53, payload: Buffer.from('q'), udpNoChecksum: true };
    check('ingress', q, { ...q, dst: BE2.address, dport: BE2.port });
  });

  test('port unreachable from the backend reaches the pod as from the ClusterIP', () => {
    const q: L4Spec = { proto: 'udp', src: POD, dst: VIP, sport: 45002, dport: 53, payload: Buffer.from('q') };
    run('ingress', frame(q));
    const quoted = ipPacket({ ...q, dst: BE2.address, dport: BE2.port });
    const input = icmpError(BE2.address, POD, quoted);
    const expected = icmpError(VIP, POD, rewriteQuoted(quoted, { src: POD, dst: VIP, sport: 45002, dport: 53 }));
    const { verdict, out } = run('egress', input);
    assert.equal(verdict, TC_ACT_OK);
    expectPacket(out, expected, 'ICMP error egress');
  });
});

// bpf/lib/rewrite4.h writes a DNAT of the original direction (source kept)
// as one store of daddr and both ports, which are adjacent only without IP
// options: with options the ports are written at the L4 header.
describe('DNAT from a pod, with and without IP options: every byte where it belongs', () => {
  beforeEach(() => {
    h.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 21, backends: [BE1] });
    h.upsertFrontend({ address: VIP, port: 53, proto: 'udp', flags: CLUSTER_IP, revNatId: 25, backends: [{ ...BE1, id: 14, port: 5353 }] });
  });

  for (const words of [0, 1, 3]) {
    test(`TCP and UDP with ${words} words of IP options`, () => {
      const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 40600 + words, dport: VIP_PORT, tcpFlags: TCP_SYN, payload: Buffer.from('x') };
      let r = run('ingress', withOptions(syn, words));
      assert.equal(r.verdict, TC_ACT_OK);
      expectPacket(r.out, withOptions({ ...syn, dst: BE1.address, dport: BE1.port }, words), `TCP, ${words} option words`);
      const q: L4Spec = { proto: 'udp', src: POD, dst: VIP, sport: 40700 + words, dport: 53, payload: Buffer.from('q') };
      r = run('ingress', withOptions(q, words));
      assert.equal(r.verdict, TC_ACT_OK);
      expectPacket(r.out, withOptions({ ...q, dst: BE1.address, dport: 5353 }, words), `UDP, ${words} option words`);
    });
  }
});

describe('hairpin: a pod that reaches itself through its Service', () => {
  beforeEach(() => h.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 23, backends: [SELF] }));

  test('request and reply are SNATed to the ClusterIP and bounced back into the pod', () => {
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 62100, dport: VIP_PORT, tcpFlags: TCP_SYN };
    // The client port lies in the SNAT range (61000-65535) and is kept.
    const { verdict, out } = run('ingress', frame(syn));
    assert.equal(verdict, TC_ACT_REDIRECT);
    expectPacket(out, bounced(frame({ ...syn, src: VIP, sport: 62100, dst: POD, dport: SELF.port, ttl: 63 })), 'hairpin request');

    const reply: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: SELF.port, dport: 62100, tcpFlags: TCP_SYN | TCP_ACK };
    const r = run('ingress', frame(reply));
    assert.equal(r.verdict, TC_ACT_REDIRECT);
    expectPacket(r.out, bounced(frame({ ...reply, src: VIP, sport: VIP_PORT, dst: POD, dport: 62100, ttl: 63 })), 'hairpin reply');
    const [row] = listConntrack(h.tc.conntrack);
    assert.equal(row?.snat, `${VIP}:62100`);
  });

  test('a client port outside the SNAT range gets one from the range', () => {
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 40100, dport: VIP_PORT, tcpFlags: TCP_SYN };
    const { verdict, out } = run('ingress', frame(syn));
    assert.equal(verdict, TC_ACT_REDIRECT);
    const sport = out.readUInt16BE(14 + 20);
    assert.ok(sport >= 61000 && sport <= 65535, `SNAT port ${sport} in range`);
    expectPacket(out, bounced(frame({ ...syn, src: VIP, sport, dst: POD, dport: SELF.port, ttl: 63 })), 'hairpin request');
  });

  // Ingress looks a hairpin reply up only when its destination port lies in
  // the SNAT range (pod_lb.h, lb4_pod_maybe_hairpin_reply): the configured
  // range, both ends included, not the default one.
  test('with a configured SNAT range, the replies to its first and last ports are found', () => {
    writeTcConfig(h.tc.config, { snatPortMin: 40200, snatPortMax: 40201 });
    for (const port of [40200, 40201]) {
      const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: port, dport: VIP_PORT, tcpFlags: TCP_SYN };
      const { verdict, out } = run('ingress', frame(syn));
      assert.equal(verdict, TC_ACT_REDIRECT);
      expectPacket(out, bounced(frame({ ...syn, src: VIP, dst: POD, dport: SELF.port, ttl: 63 })), `hairpin request from ${port}`);
      const reply: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: SELF.port, dport: port, tcpFlags: TCP_SYN | TCP_ACK };
      const r = run('ingress', frame(reply));
      assert.equal(r.verdict, TC_ACT_REDIRECT, `hairpin reply to ${port}`);
      expectPacket(r.out, bounced(frame({ ...reply, src: VIP, sport: VIP_PORT, dst: POD, dport: port, ttl: 63 })), `hairpin reply to ${port}`);
    }
    assert.deepEqual(listConntrack(h.tc.conntrack).map((row) => row.snat).sort(), [`${VIP}:40200`, `${VIP}:40201`]);
  });

  test('a UDP hairpin reply is found too; a Service port inside the SNAT range still opens a flow', () => {
    h.upsertFrontend({ address: VIP, port: 62000, proto: 'udp', flags: CLUSTER_IP, revNatId: 24, backends: [SELF, BE2] });
    const q: L4Spec = { proto: 'udp', src: POD, dst: VIP, sport: 63000, dport: 62000, payload: Buffer.from('q') };
    let hairpin = false;
    for (let sport = 63000; sport < 63064 && !hairpin; sport++) {
      const { verdict, out } = run('ingress', frame({ ...q, sport }));
      if (verdict === TC_ACT_OK) {
        expectPacket(out, frame({ ...q, sport, dst: BE2.address, dport: BE2.port }), 'UDP to the other backend');
        continue;
      }
      hairpin = true;
      assert.equal(verdict, TC_ACT_REDIRECT);
      const reply: L4Spec = { proto: 'udp', src: POD, dst: VIP, sport: SELF.port, dport: sport, payload: Buffer.from('a') };
      const r = run('ingress', frame(reply));
      assert.equal(r.verdict, TC_ACT_REDIRECT);
      expectPacket(r.out, bounced(frame({ ...reply, src: VIP, sport: 62000, dst: POD, dport: sport, ttl: 63 })), 'UDP hairpin reply');
    }
    assert.ok(hairpin, 'one of 64 flows picked the pod itself');
  });
});

describe('a pod reaches a NodePort on a node address through the wildcard entry (bpf/lib/nodeport.h)', () => {
  test('DNAT to the backend; a node address outside sluice_nodeip4 passes', () => {
    h.upsertFrontend({ address: '0.0.0.0', port: 30080, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 30, backends: [BE2] });
    const m = BpfMap.fromPinned(path.join(h.pinDir, abi.SLUICE_MAP_NODEIP4));
    try {
      syncNodeAddresses(nodeIpMap(m), ['198.18.0.1']);
      const syn: L4Spec = { proto: 'tcp', src: POD, dst: '198.18.0.1', sport: 40500, dport: 30080, tcpFlags: TCP_SYN };
      check('ingress', syn, { ...syn, dst: BE2.address, dport: BE2.port });
      check('ingress', { ...syn, dst: '198.18.0.2', sport: 40501 }, null);
    } finally {
      syncNodeAddresses(nodeIpMap(m), []);
      m.close();
    }
  });
});

describe('frontends without backends are rejected with ICMP port unreachable', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: the packet becomes an ICMP error from the frontend, sent back into the pod`, () => {
      h.upsertFrontend({ address: VIP, port: VIP_PORT, proto, flags: CLUSTER_IP, revNatId: 24, backends: [] });
      const before = h.counter(abi.LB_CNT_TC_NO_BACKEND + abi.LB_CNT_POD_OFFSET);
      const input: L4Spec = { proto, src: POD, dst: VIP, sport: 40200, dport: VIP_PORT, tcpFlags: TCP_SYN, payload: Buffer.from('some payload') };
      const { verdict, out } = run('ingress', frame(input));
      assert.equal(verdict, TC_ACT_REDIRECT);
      expectPacket(out, portUnreachable(VIP, POD, ipPacket(input)), `${proto} reject`);
      assert.equal(h.counter(abi.LB_CNT_TC_NO_BACKEND + abi.LB_CNT_POD_OFFSET) - before, 1n);
      assert.equal(listConntrack(h.tc.conntrack).length, 0, 'no conntrack entry');
    });
  }
});

describe('frontends flagged DROP_NO_BACKEND drop silently, as kube-proxy does for a Local policy with endpoints elsewhere', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: dropped, no ICMP, counted, no conntrack entry`, () => {
      const flags = CLUSTER_IP | abi.LB_SVC_FLAG_INT_LOCAL | abi.LB_SVC_FLAG_DROP_NO_BACKEND;
      h.upsertFrontend({ address: VIP, port: VIP_PORT, proto, flags, revNatId: 29, backends: [] });
      const before = h.counter(abi.LB_CNT_TC_NO_BACKEND);
      const input: L4Spec = { proto, src: POD, dst: VIP, sport: 40300, dport: VIP_PORT, tcpFlags: TCP_SYN, payload: Buffer.from('x') };
      const { verdict } = run('ingress', frame(input));
      assert.equal(verdict, TC_ACT_SHOT);
      assert.equal(h.counter(abi.LB_CNT_TC_NO_BACKEND) - before, 1n);
      assert.equal(listConntrack(h.tc.conntrack).length, 0, 'no conntrack entry');
    });
  }
});

describe('sessionAffinity ClientIP', () => {
  test('every new flow of the pod goes to the backend it used first', () => {
    h.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP | abi.LB_SVC_FLAG_AFFINITY, revNatId: 28, backends: [BE1, BE2], affinityTimeout: 600 });
    const chosen = new Set<number>();
    for (let i = 0; i < 12; i++) {
      const { out } = run('ingress', frame({ proto: 'tcp', src: POD, dst: VIP, sport: 41000 + i, dport: VIP_PORT, tcpFlags: TCP_SYN }));
      chosen.add(out.readUInt32BE(14 + 16));
    }
    assert.equal(chosen.size, 1, 'one backend for all flows');
    const [key] = [...h.affinity.entries()].map(([k]) => k);
    // client_id holds the IPv4 address as the packet carries it (network order), as on the north-south path.
    const wire = Buffer.alloc(4);
    wire.writeUInt32BE(ip4ToNumber(POD));
    assert.equal(key?.client_id, BigInt(wire.readUInt32LE(0)), 'affinity keyed by the pod address');
    assert.equal(key?.netns_cookie, 0);
  });
});

describe('scopes and frontend kinds', () => {
  test('externalTrafficPolicy Local without a local endpoint: the pod uses the internal scope', () => {
    const flags = abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;
    const lbIp = '198.18.200.1';
    h.upsertFrontend({ address: lbIp, port: 443, proto: 'tcp', flags, revNatId: 25, backends: [] }, abi.LB_SCOPE_EXTERNAL);
    h.upsertFrontend({ address: lbIp, port: 443, proto: 'tcp', flags, revNatId: 25, backends: [BE2] }, abi.LB_SCOPE_INTERNAL);
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: lbIp, sport: 40300, dport: 443, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE2.address, dport: BE2.port });
  });

  test('a NodePort reached from a pod is translated too', () => {
    const node = '198.18.0.1';
    h.upsertFrontend({ address: node, port: 30080, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 26, backends: [BE1] });
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: node, sport: 40301, dport: 30080, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE1.address, dport: BE1.port });
  });

  test('north-south flows are not taken for pod flows', () => {
    // tc_lb's NodePort flow to a pod on this node that is SNATed (the
    // backend is its own client): its reply leaves that pod through the pod
    // veth and must pass pod_lb untouched.
    const node = '198.18.0.1';
    writeTcConfig(h.tc.config, { snatAddress: node });
    h.upsertFrontend({ address: node, port: 30081, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 27, backends: [SELF] });
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: node, sport: 62200, dport: 30081, tcpFlags: TCP_SYN };
    const ns = h.run('ingress', frame(syn));
    assert.equal(ns.out.readUInt32BE(14 + 12), ip4ToNumber(node), 'tc_lb SNATed the flow');
    check('ingress', { proto: 'tcp', src: POD, dst: node, sport: SELF.port, dport: 62200, tcpFlags: TCP_SYN | TCP_ACK }, null);
    check('egress', { proto: 'tcp', src: node, dst: POD, sport: 62200, dport: SELF.port, tcpFlags: TCP_SYN }, null);
  });
});

// Issue 12: the pod path's frontend-address bitmap. A packet whose
// destination's bit is clear leaves after one array load, before the
// conntrack lookups and the services map (counted on row
// LB_CNT_POD_NOT_FRONTEND); a bitmap whose writer never marked it maintained
// is not trusted (the full lookups run), and a set bit only sends the packet
// to the full lookups, which are the exact check.
const bitOf = (a: string) => podSlot(ip4ToNumber(a));

/** An address (10.0.0.0/8: map entries and test_run packets only) whose bit is `a`'s. */
function collidingWith(a: string): string {
  const slot = bitOf(a);
  for (let x = (10 << 24) >>> 0; x < (11 << 24) >>> 0; x++) {
    if (x !== ip4ToNumber(a) && podSlot(x) === slot) return numberToIp4(x);
  }
  throw new Error(`no address of 10.0.0.0/8 shares the bit of ${a}`);
}

describe('the frontend-address bitmap (sluice_podpf4) is checked before any conntrack work', () => {
  let pf: BpfMap;
  const add = (a: string) => {
    const words = readWords(pf, abi.SLUICE_POD_PF_WORDS);
    const slot = bitOf(a);
    writeWord(pf, slot >>> 6, words[slot >>> 6]! | (1n << BigInt(slot & 63)));
  };
  const mark = () => writeWord(pf, abi.SLUICE_POD_PF_MARKER, 1n);
  const clear = () => {
    for (let w = 0; w < abi.SLUICE_POD_PF_ELEMS; w++) writeWord(pf, w, 0n);
  };
  before(() => {
    pf = pod.obj.map(abi.SLUICE_MAP_POD_PF4);
  });
  beforeEach(() => {
    clear();
    h.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 21, backends: [BE1] });
  });
  after(() => clear());

  test('maintained: traffic to a non-frontend address is passed and counted, no conntrack entry; Service traffic is translated', () => {
    add(VIP);
    mark();
    const row = abi.LB_CNT_POD_NOT_FRONTEND;
    const before = h.counter(row);
    check('ingress', { proto: 'tcp', src: POD, dst: BE2.address, sport: 41000, dport: BE2.port, tcpFlags: TCP_SYN }, null);
    check('ingress', { proto: 'udp', src: POD, dst: BE2.address, sport: 41000, dport: 53 }, null);
    assert.equal(h.counter(row) - before, 2n, 'both passed by the bitmap');
    assert.equal(listConntrack(h.tc.conntrack).length, 0, 'no conntrack work for non-Service traffic');

    const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 41001, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE1.address, dport: BE1.port });
    const data: L4Spec = { ...syn, tcpFlags: TCP_ACK };
    check('ingress', data, { ...data, dst: BE1.address, dport: BE1.port });
    check('egress', { proto: 'tcp', src: BE1.address, dst: POD, sport: BE1.port, dport: 41001, tcpFlags: TCP_SYN | TCP_ACK },
      { proto: 'tcp', src: VIP, dst: POD, sport: VIP_PORT, dport: 41001, tcpFlags: TCP_SYN | TCP_ACK });
    assert.equal(h.counter(row) - before, 2n, 'Service packets are not counted as passed');
    assert.equal(listConntrack(h.tc.conntrack).length, 1);
  });

  test('maintained: the bitmap is the first check (a frontend whose bit is clear is not translated)', () => {
    mark();
    check('ingress', { proto: 'tcp', src: POD, dst: VIP, sport: 41002, dport: VIP_PORT, tcpFlags: TCP_SYN }, null);
    assert.equal(listConntrack(h.tc.conntrack).length, 0);
  });

  test('not maintained (marker word 0, e.g. maps a CNI plugin pinned before any agent ran): the full lookups run', () => {
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 41003, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE1.address, dport: BE1.port });
  });

  test('maintained: an address whose bit collides with a frontend\'s gets its verdict from the full lookups', () => {
    add(VIP);
    mark();
    const other = collidingWith(VIP);
    assert.equal(bitOf(other), bitOf(VIP));
    const row = abi.LB_CNT_POD_NOT_FRONTEND;
    const before = h.counter(row);
    // Not a frontend: passed untouched, but only after the full lookups (not counted as passed by the bitmap).
    check('ingress', { proto: 'tcp', src: POD, dst: other, sport: 41004, dport: VIP_PORT, tcpFlags: TCP_SYN }, null);
    assert.equal(h.counter(row) - before, 0n, 'a set bit is no verdict: the full lookups ran');
    assert.equal(listConntrack(h.tc.conntrack).length, 0);
    // A frontend on the colliding address is a Service of its own, translated to its own backend.
    h.upsertFrontend({ address: other, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 22, backends: [BE2] });
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: other, sport: 41005, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE2.address, dport: BE2.port });
    const vip: L4Spec = { ...syn, dst: VIP, sport: 41006 };
    check('ingress', vip, { ...vip, dst: BE1.address, dport: BE1.port });
  });

  test('maintained: a hairpin reply (to frontend:nat-port) still finds its flow', () => {
    add(VIP);
    mark();
    h.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 23, backends: [SELF] });
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 62200, dport: VIP_PORT, tcpFlags: TCP_SYN };
    assert.equal(run('ingress', frame(syn)).verdict, TC_ACT_REDIRECT);
    const reply: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: SELF.port, dport: 62200, tcpFlags: TCP_SYN | TCP_ACK };
    const r = run('ingress', frame(reply));
    assert.equal(r.verdict, TC_ACT_REDIRECT);
    expectPacket(r.out, bounced(frame({ ...reply, src: VIP, sport: VIP_PORT, dst: POD, dport: 62200, ttl: 63 })), 'hairpin reply');
  });
});

// The agent's writer of that bitmap (src/datapath/pod/frontendSet.ts), on the
// map the pod object pinned, judged by what the program then does with packets.
describe('PodFrontendSet: the agent keeps the bitmap a superset of the programmed frontends, marker last', () => {
  let set: PodFrontendSet;
  let pf: BpfMap;
  const words = () => readWords(pf, abi.SLUICE_POD_PF_ELEMS);
  const has = (a: string) => {
    const slot = bitOf(a);
    return ((words()[slot >>> 6]! >> BigInt(slot & 63)) & 1n) === 1n;
  };
  const marked = () => words()[abi.SLUICE_POD_PF_MARKER] !== 0n;
  const LEFTOVER = '198.18.99.99'; // left by an earlier run, wanted by nothing
  const zero = () => {
    for (let w = 0; w < abi.SLUICE_POD_PF_ELEMS; w++) writeWord(pf, w, 0n);
  };
  before(() => {
    pf = pod.obj.map(abi.SLUICE_MAP_POD_PF4);
    zero();
    const slot = bitOf(LEFTOVER);
    writeWord(pf, slot >>> 6, 1n << BigInt(slot & 63));
    set = PodFrontendSet.open(h.pinDir)!;
    assert.ok(set, 'the pod object pinned sluice_podpf4');
  });
  after(() => {
    set?.close();
    zero();
  });

  test('add, mark, remove: each step leaves the programs correct', () => {
    h.upsertFrontend({ address: VIP, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 21, backends: [BE1] });
    set.setNodeAddresses(['198.18.0.1', 'fd00::1']);
    set.add([`${VIP}:${VIP_PORT}/tcp`, `${VIP}:81/tcp`, '0.0.0.0:30080/tcp', '[fd00:96::1]:80/tcp']);
    assert.ok(!marked(), 'not marked before the first full pass');
    assert.ok(has(LEFTOVER), 'an earlier run\'s bit stays until the bitmap is complete');
    set.markMaintained();
    assert.ok(marked() && has(VIP) && has('198.18.0.1'));
    assert.ok(!has(LEFTOVER), 'a bit nothing wants is cleared');
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: VIP, sport: 41100, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE1.address, dport: BE1.port });

    set.removed([`${VIP}:${VIP_PORT}/tcp`]);
    assert.ok(has(VIP), 'still the address of VIP:81');
    set.removed([`${VIP}:81/tcp`], new Set([`${VIP}:81/tcp`]));
    assert.ok(has(VIP), 'removed and upserted in one pass: kept');
    set.removed([`${VIP}:81/tcp`, '0.0.0.0:30080/tcp']);
    assert.ok(!has(VIP), 'the last frontend on the address is gone');
    assert.ok(has('198.18.0.1'), 'node addresses stay (the wildcard may come back)');
    set.setNodeAddresses([]);
    assert.ok(!has('198.18.0.1'));
    assert.equal(set.failed, undefined);
  });

  test('two addresses on one bit: the bit stays until the last of them is gone', () => {
    const other = collidingWith(VIP);
    h.upsertFrontend({ address: other, port: VIP_PORT, proto: 'tcp', flags: CLUSTER_IP, revNatId: 22, backends: [BE2] });
    set.add([`${VIP}:${VIP_PORT}/tcp`, `${other}:${VIP_PORT}/tcp`]);
    set.removed([`${VIP}:${VIP_PORT}/tcp`]);
    assert.ok(has(other), 'the colliding frontend keeps the bit');
    const syn: L4Spec = { proto: 'tcp', src: POD, dst: other, sport: 41101, dport: VIP_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: BE2.address, dport: BE2.port });
    set.removed([`${other}:${VIP_PORT}/tcp`]);
    assert.ok(!has(other), 'cleared with the last address on it');
    check('ingress', { ...syn, sport: 41102 }, null);
    assert.equal(set.failed, undefined);
  });
});
