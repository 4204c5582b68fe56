// Conntrack of the per-packet paths on crafted packets (BPF_PROG_TEST_RUN),
// issue 10 items 5-7: the TCP state machine per direction, the two entries
// of a flow living and dying together, SNAT port and tuple allocation
// without overwriting another flow, and in-kernel GC. Every translated
// packet is compared byte by byte with one built from scratch.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber } from '../../src/datapath/addr';
import { writeTcConfig, type TcConfig } from '../../src/datapath/tc/config';
import { listConntrack, monotonicNs, type ConntrackRow } from '../../src/datapath/tc/conntrack';
import { counterIndex } from '../../src/datapath/counters';
import { TcHarness } from './tc_harness';
import { TC_ACT_OK, TCP_ACK, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN, diffHex, frame, type L4Spec } from './tc_packet';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1';
const LOCAL_BE = { id: 1, address: '198.18.1.10', port: 8080, local: true };
const REMOTE_BE = { id: 2, address: '198.18.2.20', port: 8080, local: false };
const NODEPORT = abi.LB_SVC_FLAG_NODEPORT;
const LOCAL_POLICY = abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;
const TIMEOUTS: TcConfig = { snatAddress: NODE, tcpSynTimeout: 5, tcpEstablishedTimeout: 1000, tcpClosingTimeout: 7 };

let h: TcHarness;

before(() => {
  h = TcHarness.create('sluice-cttest');
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, TIMEOUTS);
});

/** Runs `input` and expects TC_ACT_OK with exactly the frame built from `expected`. */
function check(direction: 'ingress' | 'egress', input: L4Spec, expected: L4Spec): Buffer {
  const { verdict, out } = h.run(direction, frame(input));
  assert.equal(verdict, TC_ACT_OK, `verdict for ${input.src}:${input.sport} -> ${input.dst}:${input.dport} on ${direction}`);
  const want = frame(expected);
  assert.ok(out.equals(want), `${direction}: output differs from the expected packet\n${diffHex(out, want)}`);
  return out;
}

function flow(client: string, sport: number): ConntrackRow {
  const row = listConntrack(h.tc.conntrack).find((r) => r.client === `${client}:${sport}`);
  assert.ok(row, `a flow of ${client}:${sport}`);
  return row;
}

function assertExpires(row: ConntrackRow, seconds: number, what: string): void {
  assert.ok(row.expiresInSeconds > seconds - 1.5 && row.expiresInSeconds <= seconds, `${what}: expected ~${seconds}s, got ${row.expiresInSeconds.toFixed(2)}s (state ${row.state})`);
}

/** externalTrafficPolicy Local to a local backend: DNAT only, replies seen at egress. */
describe('TCP state machine, per direction', () => {
  const fwd: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 41000, dport: 30080, tcpFlags: TCP_SYN };
  const toBackend = (s: L4Spec): L4Spec => ({ ...s, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
  const reply = (flags: number, payload?: Buffer): L4Spec => ({ proto: 'tcp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: fwd.sport, tcpFlags: flags, payload });
  const toClient = (s: L4Spec): L4Spec => ({ ...s, src: NODE, sport: 30080 });
  const handshake = () => {
    check('ingress', fwd, toBackend(fwd));
    check('egress', reply(TCP_SYN | TCP_ACK), toClient(reply(TCP_SYN | TCP_ACK)));
    check('ingress', { ...fwd, tcpFlags: TCP_ACK }, toBackend({ ...fwd, tcpFlags: TCP_ACK }));
  };

  beforeEach(() => h.upsertFrontend({ address: NODE, port: 30080, proto: 'tcp', flags: NODEPORT | LOCAL_POLICY, revNatId: 30, backends: [LOCAL_BE] }));

  test('a SYN gets the SYN timeout; a reply alone does not establish; the client ACK after it does', () => {
    check('ingress', fwd, toBackend(fwd));
    assertExpires(flow(CLIENT, fwd.sport), 5, 'after the SYN');
    assert.equal(flow(CLIENT, fwd.sport).state, 'syn');
    // A SYN-ACK to a spoofed source is all a SYN flood ever gets: still the SYN timeout.
    check('egress', reply(TCP_SYN | TCP_ACK), toClient(reply(TCP_SYN | TCP_ACK)));
    assertExpires(flow(CLIENT, fwd.sport), 5, 'after the SYN-ACK');
    check('ingress', { ...fwd, tcpFlags: TCP_ACK }, toBackend({ ...fwd, tcpFlags: TCP_ACK }));
    const row = flow(CLIENT, fwd.sport);
    assert.equal(row.state, 'established');
    assertExpires(row, 1000, 'after the handshake');
  });

  test('a half-closed stream keeps the established timeout until both sides sent FIN', () => {
    handshake();
    const fin = { ...fwd, tcpFlags: TCP_FIN | TCP_ACK };
    check('ingress', fin, toBackend(fin));
    let row = flow(CLIENT, fwd.sport);
    assert.equal(row.state, 'fin-wait');
    assertExpires(row, 1000, 'client FIN only (half-close)');
    // The backend keeps streaming into the half-closed connection.
    const data = reply(TCP_ACK | TCP_PSH, Buffer.from('still streaming'));
    check('egress', data, toClient(data));
    assertExpires(flow(CLIENT, fwd.sport), 1000, 'data after the half-close');
    check('egress', reply(TCP_FIN | TCP_ACK), toClient(reply(TCP_FIN | TCP_ACK)));
    row = flow(CLIENT, fwd.sport);
    assert.equal(row.state, 'closing');
    assertExpires(row, 7, 'FIN both ways');
  });

  test('an RST from the backend ends the flow (closing timeout); a new SYN on the tuple opens a new flow', () => {
    handshake();
    check('egress', reply(TCP_RST), toClient(reply(TCP_RST)));
    assertExpires(flow(CLIENT, fwd.sport), 7, 'after RST');
    const before = h.counter(abi.LB_CNT_TC_TRANSLATED);
    check('ingress', fwd, toBackend(fwd));
    assert.equal(h.counter(abi.LB_CNT_TC_TRANSLATED) - before, 1n);
    assert.equal(flow(CLIENT, fwd.sport).state, 'syn');
  });

  test('GC reclaims a SYN flood after the SYN timeout; an established flow stays', async () => {
    writeTcConfig(h.tc.config, { ...TIMEOUTS, tcpSynTimeout: 1 });
    handshake();
    for (let i = 0; i < 200; i++) {
      const syn: L4Spec = { ...fwd, src: `198.19.${i >> 8}.${i & 255}`, sport: 1024 + i };
      check('ingress', syn, toBackend(syn));
    }
    assert.equal(listConntrack(h.tc.conntrack).length, 201);
    await new Promise((r) => setTimeout(r, 1200));
    assert.equal(h.gc(), 400, 'both entries of the 200 half-open flows');
    assert.deepEqual(listConntrack(h.tc.conntrack).map((r) => r.client), [`${CLIENT}:${fwd.sport}`]);
    const data = { ...fwd, tcpFlags: TCP_ACK | TCP_PSH, payload: Buffer.from('x') };
    check('ingress', data, toBackend(data));
  });
});

describe('the two entries of a flow live and die together', () => {
  const A: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62000, dport: 30080, tcpFlags: TCP_SYN };
  const snated = (s: L4Spec, port: number): L4Spec => ({ ...s, src: NODE, sport: port, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
  const replyKey = (port: number): abi.Lb4CtKey => ({ saddr: ip4ToNumber(REMOTE_BE.address), daddr: ip4ToNumber(NODE), sport: REMOTE_BE.port, dport: port, proto: abi.LB_PROTO_TCP, dir: abi.LB_CT_DIR_REPLY });

  beforeEach(() => h.upsertFrontend({ address: NODE, port: 30080, proto: 'tcp', flags: NODEPORT, revNatId: 31, backends: [REMOTE_BE] }));

  test('a lost reply entry (SNAT port) is restored by the next original packet; the port is not handed to another flow', () => {
    check('ingress', A, snated(A, 62000));
    assert.ok(h.tc.conntrack.delete(replyKey(62000)), 'the reply entry existed; deleted as LRU eviction would');
    const restored = h.counter(counterIndex('north_south', 'conntrack_restored', 'reply'));
    const data = { ...A, tcpFlags: TCP_ACK | TCP_PSH, payload: Buffer.from('more') };
    check('ingress', data, snated(data, 62000));
    assert.ok(h.tc.conntrack.get(replyKey(62000)), 'the reply entry is back');
    assert.equal(h.counter(counterIndex('north_south', 'conntrack_restored', 'reply')) - restored, 1n);
    // Another client with the same source port: it must get another SNAT port.
    const B: L4Spec = { ...A, src: '198.18.0.11' };
    const { out } = h.run('ingress', frame(B));
    const bPort = out.readUInt16BE(14 + 20);
    assert.notEqual(bPort, 62000, 'the SNAT port of the live flow was handed to another client');
    // The backend's reply to port 62000 still reaches client A.
    const r: L4Spec = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 62000, tcpFlags: TCP_ACK, payload: Buffer.from('for A') };
    check('ingress', r, { ...r, src: NODE, sport: 30080, dst: CLIENT, dport: 62000 });
  });

  test('a lost original entry is restored by the reply; the flow continues without being balanced again', () => {
    check('ingress', A, snated(A, 62000));
    assert.ok(h.tc.conntrack.delete({ saddr: ip4ToNumber(CLIENT), daddr: ip4ToNumber(NODE), sport: 62000, dport: 30080, proto: abi.LB_PROTO_TCP, dir: abi.LB_CT_DIR_ORIGINAL }));
    const r: L4Spec = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 62000, tcpFlags: TCP_SYN | TCP_ACK };
    check('ingress', r, { ...r, src: NODE, sport: 30080, dst: CLIENT, dport: 62000 });
    const newFlows = h.counter(abi.LB_CNT_TC_TRANSLATED);
    const ack = { ...A, tcpFlags: TCP_ACK };
    check('ingress', ack, snated(ack, 62000));
    assert.equal(h.counter(abi.LB_CNT_TC_TRANSLATED) - newFlows, 0n, 'no new flow');
    assert.deepEqual(flow(CLIENT, 62000).entries, ['original', 'reply']);
  });
});

describe('tuples and SNAT ports are never taken from another flow', () => {
  test('two frontends on one backend, one client port: the second flow gets another source port (as netfilter remaps)', () => {
    for (const [port, revNatId] of [[30080, 32], [30081, 33]] as const) {
      h.upsertFrontend({ address: NODE, port, proto: 'tcp', flags: NODEPORT | LOCAL_POLICY, revNatId, backends: [LOCAL_BE] });
    }
    const one: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40500, dport: 30080, tcpFlags: TCP_SYN };
    const two: L4Spec = { ...one, dport: 30081 };
    check('ingress', one, { ...one, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    const remapped = h.counter(counterIndex('north_south', 'source_port_remapped'));
    const { verdict, out } = h.run('ingress', frame(two));
    assert.equal(verdict, TC_ACT_OK);
    const port = out.readUInt16BE(14 + 20);
    assert.notEqual(port, 40500, 'the second flow reuses the first flow\'s tuple backend <- client:40500');
    assert.ok(port >= abi.LB_TC_DEFAULT_SNAT_PORT_MIN, `remapped port ${port} from the SNAT range`);
    const want = frame({ ...two, sport: port, dst: LOCAL_BE.address, dport: LOCAL_BE.port });
    assert.ok(out.equals(want), diffHex(out, want));
    assert.equal(h.counter(counterIndex('north_south', 'source_port_remapped')) - remapped, 1n);
    // Each reply goes back from its own frontend.
    const r1: L4Spec = { proto: 'tcp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 40500, tcpFlags: TCP_SYN | TCP_ACK };
    check('egress', r1, { ...r1, src: NODE, sport: 30080 });
    const r2: L4Spec = { ...r1, dport: port };
    check('egress', r2, { ...r2, src: NODE, sport: 30081, dport: 40500 });
    assert.equal(flow(CLIENT, 40500).entries.length, 2);
  });

  test('an entry another CPU is replacing (claimed) is neither taken by a new flow nor deleted by GC', () => {
    h.upsertFrontend({ address: NODE, port: 30080, proto: 'tcp', flags: NODEPORT, revNatId: 34, backends: [REMOTE_BE] });
    const key: abi.Lb4CtKey = { saddr: ip4ToNumber(REMOTE_BE.address), daddr: ip4ToNumber(NODE), sport: REMOTE_BE.port, dport: 62100, proto: abi.LB_PROTO_TCP, dir: abi.LB_CT_DIR_REPLY };
    const holder: abi.Lb4CtEntry = {
      expires_ns: BigInt(abi.LB_CT_EXPIRES_CLAIMED), packets: 0n, bytes: 0n,
      client_address: ip4ToNumber('198.18.0.77'), frontend_address: ip4ToNumber(NODE), backend_address: ip4ToNumber(REMOTE_BE.address), nat_address: ip4ToNumber(NODE),
      client_port: 62100, frontend_port: 30080, backend_port: REMOTE_BE.port, nat_port: 62100,
      backend_id: REMOTE_BE.id, rev_nat_id: 34, flags: abi.LB_CT_FLAG_SNAT, proto: abi.LB_PROTO_TCP, dir: abi.LB_CT_DIR_REPLY, ifindex: 0,
    };
    h.tc.conntrack.set(key, holder);
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62100, dport: 30080, tcpFlags: TCP_SYN };
    const { out } = h.run('ingress', frame(syn));
    assert.notEqual(out.readUInt16BE(14 + 20), 62100, 'a claimed port was taken');
    assert.equal(h.gc(), 0, 'GC leaves a claimed entry to its claimer');
    assert.equal(h.tc.conntrack.get(key)?.client_address, ip4ToNumber('198.18.0.77'));
  });

  test('GC deletes only what expired: a flow re-created on the same tuple after expiry survives', async () => {
    h.upsertFrontend({ address: NODE, port: 53, proto: 'udp', flags: NODEPORT, revNatId: 35, backends: [REMOTE_BE] });
    writeTcConfig(h.tc.config, { ...TIMEOUTS, udpTimeout: 1 });
    const q: L4Spec = { proto: 'udp', src: CLIENT, dst: NODE, sport: 63100, dport: 53, payload: Buffer.from('q') };
    check('ingress', q, { ...q, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    await new Promise((r) => setTimeout(r, 1100));
    const expiredAt = monotonicNs();
    check('ingress', q, { ...q, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    assert.equal(h.gc(), 0);
    const row = flow(CLIENT, 63100);
    assert.deepEqual(row.entries, ['original', 'reply']);
    assert.ok(row.expiresInSeconds > 0 && monotonicNs() > expiredAt);
  });
});
