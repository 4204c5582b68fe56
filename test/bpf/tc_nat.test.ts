// North-south TC data path on crafted packets (BPF_PROG_TEST_RUN): DNAT,
// SNAT, reverse translation, ICMP errors, source ranges, conntrack state.
// Every output packet is compared byte by byte with the packet built from
// scratch (all checksums recomputed) for the expected tuple.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { syncSourceRanges } from '../../src/datapath/tc/sourceRanges';
import { formatConntrack, listConntrack, purgeBackends } from '../../src/datapath/tc/conntrack';
import * as path from 'node:path';
import { BpfMap } from '../../src/bpf';
import { nodeIpMap, syncNodeAddresses } from '../../src/datapath/sockConfig';
import { TcHarness } from './tc_harness';
import {
  TC_ACT_OK, TC_ACT_REDIRECT, TC_ACT_SHOT, TCP_ACK, TCP_PSH, TCP_RST, TCP_SYN,
  checksum, diffHex, frame, icmpError, icmpReply, ipPacket, rewriteQuoted, type L4Spec,
} from './tc_packet';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1'; // NodePort address and SNAT address
const NODE_PORT = 30080;
const EXTERNAL_IP = '198.18.100.10';
const LOCAL_BE = { id: 1, address: '198.18.1.10', port: 8080, local: true };
const REMOTE_BE = { id: 2, address: '198.18.2.20', port: 8080, local: false };
const NODEPORT = abi.LB_SVC_FLAG_NODEPORT;
/** externalTrafficPolicy: Local (what the agent sets): DNAT only, the client's address kept. */
const LOCAL_POLICY = abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;

let h: TcHarness;

before(() => {
  h = TcHarness.create();
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: NODE });
});

function expectPacket(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

/** Runs `input`, expects `verdict` and the frame built from `expected` (or the input unchanged). */
function check(direction: 'ingress' | 'egress', input: L4Spec, expected: L4Spec | null, verdict = TC_ACT_OK): Buffer {
  const packet = frame(input);
  const { verdict: got, out } = h.run(direction, packet);
  assert.equal(got, verdict, `verdict for ${input.src}:${input.sport} -> ${input.dst}:${input.dport}`);
  expectPacket(out, expected ? frame(expected) : packet, `${direction} ${input.proto}`);
  return out;
}

describe('packet builder', () => {
  test('IPv4 header checksum matches the RFC 1071 example', () => {
    const hdr = Buffer.from('450000730000400040110000c0a80001c0a800c7', 'hex');
    assert.equal(checksum(hdr), 0xb861);
  });
});

describe('NodePort (externalTrafficPolicy Local) to a local backend: DNAT only, client address kept', () => {
  beforeEach(() => h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT | LOCAL_POLICY, revNatId: 7, backends: [LOCAL_BE] }));

  test('SYN is DNATed; checksums match a from-scratch packet', () => {
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40000, dport: NODE_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
  });

  test('the flow keeps its backend; the reply is restored on egress; conntrack shows it', () => {
    const fwd: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40001, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const before = h.counter(abi.LB_CNT_TC_TRANSLATED);
    check('ingress', fwd, { ...fwd, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    const data = { ...fwd, tcpFlags: TCP_ACK | TCP_PSH, payload: Buffer.from('GET / HTTP/1.0\r\n\r\n') };
    check('ingress', data, { ...data, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    assert.equal(h.counter(abi.LB_CNT_TC_TRANSLATED) - before, 1n, 'one new flow');

    const reply: L4Spec = { proto: 'tcp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 40001, tcpFlags: TCP_SYN | TCP_ACK, payload: Buffer.from('hello') };
    check('egress', reply, { ...reply, src: NODE, sport: NODE_PORT });
    // The client's ACK after the reply completes the handshake: established timeout.
    const ack = { ...fwd, tcpFlags: TCP_ACK };
    check('ingress', ack, { ...ack, dst: LOCAL_BE.address, dport: LOCAL_BE.port });

    const rows = listConntrack(h.tc.conntrack);
    assert.equal(rows.length, 1);
    const row = rows[0]!;
    assert.equal(row.client, `${CLIENT}:40001`);
    assert.equal(row.frontend, `${NODE}:${NODE_PORT}`);
    assert.equal(row.backend, `${LOCAL_BE.address}:${LOCAL_BE.port}`);
    assert.equal(row.snat, undefined);
    assert.deepEqual(row.entries, ['original', 'reply']);
    assert.equal(row.packetsOriginal, 3);
    assert.equal(row.packetsReply, 1);
    assert.ok(row.expiresInSeconds > 21000 && row.expiresInSeconds <= 21600, `TCP established timeout, got ${row.expiresInSeconds}`);
    const table = formatConntrack(rows).split('\n');
    assert.equal(row.path, 'external');
    assert.match(table[0]!, /^PROTO\s+PATH\s+CLIENT\s+FRONTEND\s+BACKEND\s+SNAT/);
    assert.match(table[1]!, new RegExp(`^tcp\\s+external\\s+${CLIENT}:40001\\s+${NODE}:${NODE_PORT}\\s+${LOCAL_BE.address}:8080\\s+-\\s+established`));
  });

  test('a reply on ingress of a DNAT-only flow is not touched (it belongs on egress)', () => {
    const fwd: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40002, dport: NODE_PORT, tcpFlags: TCP_SYN };
    h.run('ingress', frame(fwd));
    const reply: L4Spec = { proto: 'tcp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 40002, tcpFlags: TCP_ACK };
    check('ingress', reply, null);
  });

  test('RST shortens the timeout to the closing one; a new SYN on the same tuple re-balances', () => {
    writeTcConfig(h.tc.config, { snatAddress: NODE, tcpClosingTimeout: 7 });
    const fwd: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40003, dport: NODE_PORT, tcpFlags: TCP_SYN };
    h.run('ingress', frame(fwd));
    h.run('ingress', frame({ ...fwd, tcpFlags: TCP_RST | TCP_ACK }));
    const [row] = listConntrack(h.tc.conntrack);
    assert.ok(row?.closing);
    assert.ok(row.expiresInSeconds > 6 && row.expiresInSeconds <= 7, `closing timeout, got ${row.expiresInSeconds}`);
    const before = h.counter(abi.LB_CNT_TC_TRANSLATED);
    check('ingress', fwd, { ...fwd, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    assert.equal(h.counter(abi.LB_CNT_TC_TRANSLATED) - before, 1n, 'the SYN opened a new flow');
    assert.equal(listConntrack(h.tc.conntrack)[0]?.closing, false);
  });
});

describe('NodePort (externalTrafficPolicy Cluster) to a local backend: SNAT to the node, as kube-proxy masquerades', () => {
  test('the local backend sees the node; its reply (arriving on the pod device ingress) is restored byte for byte', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 18, backends: [LOCAL_BE] });
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62900, dport: NODE_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, src: NODE, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    const reply: L4Spec = { proto: 'tcp', src: LOCAL_BE.address, dst: NODE, sport: LOCAL_BE.port, dport: 62900, tcpFlags: TCP_SYN | TCP_ACK };
    check('ingress', reply, { ...reply, src: NODE, sport: NODE_PORT, dst: CLIENT, dport: 62900 });
    const [row] = listConntrack(h.tc.conntrack);
    assert.equal(row?.snat, `${NODE}:62900`);
  });
});

describe('NodePort to a remote backend: DNAT + SNAT to the node address', () => {
  beforeEach(() => h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 8, backends: [REMOTE_BE] }));

  test('client port inside the SNAT range is kept; reply on ingress restored byte for byte', () => {
    const fwd: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62000, dport: NODE_PORT, tcpFlags: TCP_SYN };
    // No route exists in the test's namespace for the FIB lookup: the program
    // leaves the packet to the stack (TC_ACT_OK) after translating it.
    check('ingress', fwd, { ...fwd, src: NODE, sport: 62000, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const reply: L4Spec = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 62000, tcpFlags: TCP_SYN | TCP_ACK };
    check('ingress', reply, { ...reply, src: NODE, sport: NODE_PORT, dst: CLIENT, dport: 62000 });
    const [row] = listConntrack(h.tc.conntrack);
    assert.equal(row?.snat, `${NODE}:62000`);
  });

  test('client port outside the range gets a port from the range; two clients on one port do not collide', () => {
    writeTcConfig(h.tc.config, { snatAddress: NODE, snatPortMin: 61000, snatPortMax: 61003 });
    const ports = new Set<number>();
    for (const client of ['198.18.0.11', '198.18.0.12', '198.18.0.13', '198.18.0.14']) {
      const fwd: L4Spec = { proto: 'tcp', src: client, dst: NODE, sport: 61001, dport: NODE_PORT, tcpFlags: TCP_SYN };
      const { verdict, out } = h.run('ingress', frame(fwd));
      assert.equal(verdict, TC_ACT_OK);
      const sport = out.readUInt16BE(14 + 20);
      ports.add(sport);
      expectPacket(out, frame({ ...fwd, src: NODE, sport, dst: REMOTE_BE.address, dport: REMOTE_BE.port }), `SNAT of ${client}`);
    }
    assert.deepEqual([...ports].sort(), [61000, 61001, 61002, 61003], 'four flows took the four ports of the range');
    // The range is exhausted: a fifth client is dropped and counted, not mis-translated.
    const before = h.counter(abi.LB_CNT_TC_SNAT_FAILED);
    check('ingress', { proto: 'tcp', src: '198.18.0.15', dst: NODE, sport: 50000, dport: NODE_PORT, tcpFlags: TCP_SYN }, null, TC_ACT_SHOT);
    // A dropped packet is left as it came (the drop is the verdict).
    assert.equal(h.counter(abi.LB_CNT_TC_SNAT_FAILED) - before, 1n);
  });

  // Ingress looks a SNATed flow's reply up only when its destination port
  // lies in the SNAT range (nat_flow.h, lb4_maybe_snat_reply): the
  // configured range, both ends included, not the default one.
  test('with a configured SNAT range, the replies to its first and last ports are restored', () => {
    writeTcConfig(h.tc.config, { snatAddress: NODE, snatPortMin: 40200, snatPortMax: 40201 });
    for (const port of [40200, 40201]) {
      const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: port, dport: NODE_PORT, tcpFlags: TCP_SYN };
      check('ingress', syn, { ...syn, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
      const reply: L4Spec = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: port, tcpFlags: TCP_SYN | TCP_ACK };
      check('ingress', reply, { ...reply, src: NODE, sport: NODE_PORT, dst: CLIENT, dport: port });
    }
    assert.deepEqual(listConntrack(h.tc.conntrack).map((row) => row.snat).sort(), [`${NODE}:40200`, `${NODE}:40201`]);
  });

  test('a UDP Service port inside the SNAT range opens and follows its flow; a reply to a port outside the range passes untouched', () => {
    h.upsertFrontend({ address: EXTERNAL_IP, port: 62000, proto: 'udp', flags: abi.LB_SVC_FLAG_EXTERNAL_IP, revNatId: 19, backends: [REMOTE_BE] });
    const q: L4Spec = { proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 63100, dport: 62000, payload: Buffer.from('q') };
    check('ingress', q, { ...q, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const q2: L4Spec = { ...q, payload: Buffer.from('second') };
    check('ingress', q2, { ...q2, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const a: L4Spec = { proto: 'udp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 63100, payload: Buffer.from('a') };
    check('ingress', a, { ...a, src: EXTERNAL_IP, sport: 62000, dst: CLIENT });
    assert.equal(listConntrack(h.tc.conntrack).length, 1, 'one flow');
    // The node's own connection (an ephemeral port below the range): not ours.
    const own: L4Spec = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 40000, tcpFlags: TCP_SYN | TCP_ACK };
    check('ingress', own, null);
  });

  test('without a SNAT address remote backends are dropped and counted', () => {
    writeTcConfig(h.tc.config, {});
    const before = h.counter(abi.LB_CNT_TC_SNAT_FAILED);
    check('ingress', { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40100, dport: NODE_PORT, tcpFlags: TCP_SYN }, null, TC_ACT_SHOT);
    assert.equal(h.counter(abi.LB_CNT_TC_SNAT_FAILED) - before, 1n);
  });
});

describe('UDP', () => {
  beforeEach(() => h.upsertFrontend({ address: EXTERNAL_IP, port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_EXTERNAL_IP, revNatId: 9, backends: [REMOTE_BE] }));

  test('ExternalIP UDP: DNAT + SNAT and reverse, with payload', () => {
    const q: L4Spec = { proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 63000, dport: 53, payload: Buffer.from('query') };
    check('ingress', q, { ...q, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const a: L4Spec = { proto: 'udp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 63000, payload: Buffer.from('answer!') };
    check('ingress', a, { ...a, src: EXTERNAL_IP, sport: 53, dst: CLIENT });
  });

  test('a zero UDP checksum stays zero', () => {
    const q: L4Spec = { proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 63001, dport: 53, payload: Buffer.from('x'), udpNoChecksum: true };
    check('ingress', q, { ...q, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
  });

  test('a translated checksum that computes to 0 is sent as 0xffff', () => {
    // Find a 2-byte payload whose translated datagram sums to 0xffff (checksum 0).
    let found: L4Spec | undefined;
    for (let word = 0; word <= 0xffff && !found; word++) {
      const payload = Buffer.alloc(2);
      payload.writeUInt16BE(word);
      const out: L4Spec = { proto: 'udp', src: NODE, dst: REMOTE_BE.address, sport: 61000, dport: REMOTE_BE.port, payload };
      const seg = ipPacket(out).subarray(20);
      if (seg.readUInt16BE(6) === 0xffff) found = { ...out, src: CLIENT, dst: EXTERNAL_IP, dport: 53 };
    }
    assert.ok(found, 'a payload with a zero translated checksum exists');
    check('ingress', found, { ...found, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
  });

  test('when the backend goes away the next datagram goes to a live backend (no stale UDP conntrack)', () => {
    const q: L4Spec = { proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 63002, dport: 53, payload: Buffer.from('1') };
    check('ingress', q, { ...q, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    // The agent replaces the backend: new backend written, frontend rewritten, old backend deleted.
    const NEW_BE = { id: 3, address: '198.18.2.30', port: 5353, local: true };
    h.upsertFrontend({ address: EXTERNAL_IP, port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_EXTERNAL_IP, revNatId: 9, backends: [NEW_BE] });
    h.backends.delete(REMOTE_BE.id);
    const before = h.counter(abi.LB_CNT_TC_BACKEND_GONE);
    // externalTrafficPolicy Cluster: SNAT to the node, local backend too (the client's port 63002 is in the range).
    check('ingress', q, { ...q, src: NODE, dst: NEW_BE.address, dport: NEW_BE.port });
    assert.equal(h.counter(abi.LB_CNT_TC_BACKEND_GONE) - before, 1n);
    const rows = listConntrack(h.tc.conntrack);
    assert.equal(rows.length, 1, 'the old flow was deleted with both entries');
    assert.equal(rows[0]?.backend, `${NEW_BE.address}:${NEW_BE.port}`);
  });

  test('UDP timeout is configurable; GC removes expired entries; purgeBackends removes a backend\'s flows', async () => {
    writeTcConfig(h.tc.config, { snatAddress: NODE, udpTimeout: 1 });
    h.run('ingress', frame({ proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 63003, dport: 53 }));
    const [row] = listConntrack(h.tc.conntrack);
    assert.ok(row && row.expiresInSeconds > 0 && row.expiresInSeconds <= 1);
    assert.equal(h.gc(), 0, 'nothing expired yet');
    await new Promise((r) => setTimeout(r, 1100));
    assert.equal(h.gc(), 2, 'both entries of the expired flow');
    h.run('ingress', frame({ proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 63004, dport: 53 }));
    assert.equal(purgeBackends(h.tc.conntrack, [REMOTE_BE.id]), 2);
    assert.equal(listConntrack(h.tc.conntrack).length, 0);
  });
});

describe('externalTrafficPolicy: Local', () => {
  test('no local backend (endpoints elsewhere: DROP_NO_BACKEND): dropped as kube-proxy does, and counted', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES | abi.LB_SVC_FLAG_DROP_NO_BACKEND, revNatId: 10, backends: [] });
    const before = h.counter(abi.LB_CNT_TC_NO_BACKEND);
    check('ingress', { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40200, dport: NODE_PORT, tcpFlags: TCP_SYN }, null, TC_ACT_SHOT);
    assert.equal(h.counter(abi.LB_CNT_TC_NO_BACKEND) - before, 1n);
  });

  test('a local backend: the client address is preserved', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES, revNatId: 10, backends: [LOCAL_BE] });
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40201, dport: NODE_PORT, tcpFlags: TCP_SYN };
    check('ingress', syn, { ...syn, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
  });
});

// kube-proxy (iptables: KUBE-EXTERNAL-SERVICES "has no endpoints" -j REJECT;
// nftables: the no-endpoint-services verdict map -> reject) answers a
// NodePort / ExternalIP / LoadBalancer without any endpoint with ICMP port
// unreachable, TCP included; it drops only when endpoints exist but none may
// be used from here (LB_SVC_FLAG_DROP_NO_BACKEND, above).
describe('a north-south frontend without any endpoint is rejected with ICMP port unreachable', () => {
  for (const [name, address, flags] of [['NodePort', NODE, NODEPORT], ['ExternalIP', EXTERNAL_IP, abi.LB_SVC_FLAG_EXTERNAL_IP], ['Local NodePort, no endpoint at all', NODE, NODEPORT | LOCAL_POLICY]] as const) {
    for (const proto of ['tcp', 'udp'] as const) {
      test(`${name} ${proto}: the packet becomes an ICMP error from the frontend, sent back out of the device`, () => {
        h.upsertFrontend({ address, port: NODE_PORT, proto, flags, revNatId: 13, backends: [] });
        const before = h.counter(abi.LB_CNT_TC_NO_BACKEND);
        const input: L4Spec = { proto, src: CLIENT, dst: address, sport: 40210, dport: NODE_PORT, tcpFlags: TCP_SYN, payload: Buffer.from('some payload') };
        const { verdict, out } = h.run('ingress', frame(input));
        assert.equal(verdict, TC_ACT_REDIRECT);
        expectPacket(out, icmpReply(address, CLIENT, 3, 3, Buffer.alloc(4), ipPacket(input)), `${proto} reject`);
        assert.equal(h.counter(abi.LB_CNT_TC_NO_BACKEND) - before, 1n);
        assert.equal(listConntrack(h.tc.conntrack).length, 0, 'no conntrack entry');
      });
    }
  }

  test('a packet with IPv4 options is dropped instead (no reply built), still counted', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: NODEPORT, revNatId: 13, backends: [] });
    const input = frame({ proto: 'udp', src: CLIENT, dst: NODE, sport: 40211, dport: NODE_PORT });
    const withOptions = Buffer.concat([input.subarray(0, 34), Buffer.from([1, 1, 1, 0]), input.subarray(34)]);
    withOptions.writeUInt8(0x46, 14);
    withOptions.writeUInt16BE(withOptions.length - 14, 16);
    withOptions.writeUInt16BE(0, 24);
    withOptions.writeUInt16BE(checksum(withOptions.subarray(14, 38)), 24);
    const before = h.counter(abi.LB_CNT_TC_NO_BACKEND);
    assert.equal(h.run('ingress', withOptions).verdict, TC_ACT_SHOT);
    assert.equal(h.counter(abi.LB_CNT_TC_NO_BACKEND) - before, 1n);
  });
});

// One wildcard entry per NodePort (address 0.0.0.0, bpf/lib/nodeport.h),
// served on every address of sluice_nodeip4.
describe('NodePort wildcard frontend', () => {
  const NODE2 = '198.18.0.2';
  const withNodeIps = (addresses: string[], fn: () => void) => {
    const m = BpfMap.fromPinned(path.join(h.pinDir, abi.SLUICE_MAP_NODEIP4));
    try {
      syncNodeAddresses(nodeIpMap(m), addresses);
      fn();
    } finally {
      syncNodeAddresses(nodeIpMap(m), []);
      m.close();
    }
  };
  beforeEach(() => h.upsertFrontend({ address: '0.0.0.0', port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 14, backends: [REMOTE_BE] }));

  test('a SYN to any node address is translated; the reply gets that address back; other addresses pass', () => {
    withNodeIps([NODE, NODE2], () => {
      for (const [i, address] of [NODE, NODE2].entries()) {
        const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: address, sport: 40400 + i, dport: NODE_PORT, tcpFlags: TCP_SYN };
        const out = h.run('ingress', frame(syn)).out;
        const sport = out.readUInt16BE(34);
        expectPacket(out, frame({ ...syn, src: NODE, sport, dst: REMOTE_BE.address, dport: REMOTE_BE.port }), `SYN to ${address}`);
        const reply: L4Spec = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: sport, tcpFlags: TCP_SYN | TCP_ACK };
        const back = h.run('ingress', frame(reply)).out;
        expectPacket(back, frame({ ...reply, src: address, sport: NODE_PORT, dst: CLIENT, dport: 40400 + i }), `reply via ${address}`);
      }
      check('ingress', { proto: 'tcp', src: CLIENT, dst: '198.18.0.3', sport: 40410, dport: NODE_PORT, tcpFlags: TCP_SYN }, null);
    });
  });

  test('without the address in sluice_nodeip4 the wildcard serves nothing', () => {
    withNodeIps([NODE2], () => check('ingress', { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40420, dport: NODE_PORT, tcpFlags: TCP_SYN }, null));
  });
});

describe('loadBalancerSourceRanges', () => {
  const LB_IP = '198.18.200.1';
  beforeEach(() => {
    // Ranges first, then the flag (make-before-break).
    syncSourceRanges(h.tc.sourceRanges, 11, ['198.18.0.0/28', '198.19.5.0/24']);
    h.upsertFrontend({ address: LB_IP, port: 443, proto: 'tcp', flags: abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE | LOCAL_POLICY, revNatId: 11, backends: [LOCAL_BE] });
  });

  test('a client inside a range is served, one outside is dropped and counted', () => {
    const ok: L4Spec = { proto: 'tcp', src: '198.18.0.14', dst: LB_IP, sport: 40300, dport: 443, tcpFlags: TCP_SYN };
    check('ingress', ok, { ...ok, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    const ok2: L4Spec = { ...ok, src: '198.19.5.77' };
    check('ingress', ok2, { ...ok2, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    const before = h.counter(abi.LB_CNT_TC_SRC_RANGE_DROP);
    check('ingress', { ...ok, src: '198.18.0.16' }, null, TC_ACT_SHOT);
    assert.equal(h.counter(abi.LB_CNT_TC_SRC_RANGE_DROP) - before, 1n);
  });

  test('ranges of another frontend do not apply', () => {
    syncSourceRanges(h.tc.sourceRanges, 11, []);
    syncSourceRanges(h.tc.sourceRanges, 12, ['0.0.0.0/0']);
    check('ingress', { proto: 'tcp', src: CLIENT, dst: LB_IP, sport: 40301, dport: 443, tcpFlags: TCP_SYN }, null, TC_ACT_SHOT);
  });
});

describe('packets that are not ours pass untouched', () => {
  test('unknown destination, ClusterIP-only frontend, non-IP frame', () => {
    h.upsertFrontend({ address: '10.96.0.10', port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 13, backends: [LOCAL_BE] });
    check('ingress', { proto: 'tcp', src: CLIENT, dst: '198.18.0.99', sport: 1234, dport: 80, tcpFlags: TCP_SYN }, null);
    check('ingress', { proto: 'tcp', src: CLIENT, dst: '10.96.0.10', sport: 1234, dport: 80, tcpFlags: TCP_SYN }, null);
    check('egress', { proto: 'udp', src: LOCAL_BE.address, dst: CLIENT, sport: 8080, dport: 9 }, null);
    const arp = Buffer.alloc(60);
    arp.writeUInt16BE(0x0806, 12);
    const { verdict, out } = h.run('ingress', arp);
    assert.equal(verdict, TC_ACT_OK);
    assert.ok(out.equals(arp));
  });
});

describe('ICMP errors about translated flows', () => {
  test('port unreachable from a local backend (egress): outer source and quoted packet restored', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: NODEPORT | LOCAL_POLICY, revNatId: 14, backends: [LOCAL_BE] });
    const q: L4Spec = { proto: 'udp', src: CLIENT, dst: NODE, sport: 40400, dport: NODE_PORT, payload: Buffer.from('ping') };
    h.run('ingress', frame(q));
    // What the backend received, quoted in its error.
    const quoted = ipPacket({ ...q, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    const input = icmpError(LOCAL_BE.address, CLIENT, quoted);
    const expected = icmpError(NODE, CLIENT, rewriteQuoted(quoted, { src: CLIENT, dst: NODE, sport: 40400, dport: NODE_PORT }));
    const { verdict, out } = h.run('egress', input);
    assert.equal(verdict, TC_ACT_OK);
    expectPacket(out, expected, 'ICMP error egress');
  });

  test('fragmentation needed from a router for a SNATed flow (ingress)', () => {
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT, revNatId: 15, backends: [REMOTE_BE] });
    const fwd: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62500, dport: NODE_PORT, tcpFlags: TCP_ACK, payload: Buffer.alloc(100, 1) };
    h.run('ingress', frame(fwd));
    const quoted = ipPacket({ ...fwd, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    const ROUTER = '198.18.0.254';
    const input = icmpError(ROUTER, NODE, quoted, 3, 4);
    const expected = icmpError(ROUTER, CLIENT, rewriteQuoted(quoted, { src: CLIENT, dst: NODE, sport: 62500, dport: NODE_PORT }), 3, 4);
    const { verdict, out } = h.run('ingress', input);
    assert.equal(verdict, TC_ACT_OK);
    expectPacket(out, expected, 'ICMP error ingress');
  });
});

describe('ICMP errors about replies (PMTU towards the client)', () => {
  for (const [what, backend, flags] of [['local backend', LOCAL_BE, 0], ['remote backend (SNAT)', REMOTE_BE, 1]] as const) {
    test(`fragmentation needed about a reply is sent on to the ${what}`, () => {
      h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT | (flags ? 0 : LOCAL_POLICY), revNatId: 17, backends: [backend] });
      const fwd: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62600, dport: NODE_PORT, tcpFlags: TCP_SYN };
      h.run('ingress', frame(fwd));
      // The reply as it left this node (frontend -> client), too big for a router on the way.
      const quoted = ipPacket({ proto: 'tcp', src: NODE, dst: CLIENT, sport: NODE_PORT, dport: 62600, tcpFlags: TCP_ACK, payload: Buffer.alloc(64, 2) });
      const ROUTER = '198.18.0.254';
      const input = icmpError(ROUTER, NODE, quoted, 3, 4);
      // What the backend sent: backend -> client (DNAT only) or backend -> SNAT address:port.
      const to = flags ? { src: backend.address, dst: NODE, sport: backend.port, dport: 62600 } : { src: backend.address, dst: CLIENT, sport: backend.port, dport: 62600 };
      const expected = icmpError(ROUTER, backend.address, rewriteQuoted(quoted, to), 3, 4);
      const { verdict, out } = h.run('ingress', input);
      assert.equal(verdict, TC_ACT_OK);
      expectPacket(out, expected, 'ICMP error about a reply');
    });
  }
});

describe('session affinity ClientIP', () => {
  test('new flows of one client stick to one backend', () => {
    const backends = [1, 2, 3, 4].map((i) => ({ id: 20 + i, address: `198.18.1.${20 + i}`, port: 8080, local: true }));
    h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: NODEPORT | abi.LB_SVC_FLAG_AFFINITY, revNatId: 16, backends, affinityTimeout: 10800 });
    const seen = new Set<number>();
    for (let sport = 41000; sport < 41020; sport++) {
      const { out } = h.run('ingress', frame({ proto: 'tcp', src: CLIENT, dst: NODE, sport, dport: NODE_PORT, tcpFlags: TCP_SYN }));
      seen.add(out.readUInt32BE(14 + 16));
    }
    assert.equal(seen.size, 1, 'one backend for all 20 connections');
    assert.ok([...seen].every((a) => backends.some((b) => ip4ToNumber(b.address) === a)));
  });
});
