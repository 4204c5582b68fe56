// least-connection and Maglev on the IPv6 TC north-south path
// (BPF_PROG_TEST_RUN, issue 15), the twins of tc_lc.test.ts and
// tc_maglev.test.ts: a new IPv6 flow of a least-connection frontend takes a
// count on the backend with the fewest and gives it back exactly once (TCP
// close, or the conntrack GC for flows that end without one); a Maglev
// frontend sends every new flow to table[hash(5-tuple) % M] (hash computed
// in TypeScript, maglevFlowHash6), and two nodes (two loaded tc_lb objects,
// each with its own maps, backend ids and table writer) programmed from the
// same backends send the same 5-tuples to the same backends.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { bytesToIp6 } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { MaglevTables, maglevEntry, maglevFlowHash6, readMaglevTable } from '../../src/datapath/maglev';
import { TypedMap, u32Codec } from '../../src/datapath/typedMap';
import { TcHarness, type TcBackend } from './tc_harness';
import { Tc6Maps } from './tc_harness6';
import { TC_ACT_OK, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN } from './tc_packet';
import { frame6, type L4Spec6 } from './tc_packet6';

const NODE = '2001:db8::1';
const CLIENT = '2001:db8:5::10';
const NODE_PORT = 30080;
const FLAGS = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;
const backendsOf = (n: number, firstId = 1): TcBackend[] =>
  Array.from({ length: n }, (_, i) => ({ id: firstId + i, address: `fd00:1::${(0x10 + i).toString(16)}`, port: 8080, local: true }));

interface Node {
  h: TcHarness;
  v6: Tc6Maps;
}

function openNode(name: string): Node {
  const h = TcHarness.create(name);
  return { h, v6: new Tc6Maps(h) };
}

function resetNode(n: Node): void {
  n.h.reset();
  n.v6.reset();
  writeTcConfig(n.h.tc.config, { snatAddress: '198.18.0.1', tcpSynTimeout: 1, tcpEstablishedTimeout: 1000, tcpClosingTimeout: 1, udpTimeout: 1 });
  n.v6.setSnat(NODE);
}

/** A packet from the client; for a new flow, the backend it was DNATed to. */
function send(n: Node, backends: TcBackend[], s: L4Spec6): TcBackend {
  const { verdict, out } = n.h.run('ingress', frame6(s));
  assert.equal(verdict, TC_ACT_OK);
  const b = backends.find((x) => frame6({ ...s, dst: x.address, dport: x.port }).equals(out));
  assert.ok(b, `[${s.src}]:${s.sport}: output is no backend's DNAT of the input`);
  return b;
}

describe('least-connection, IPv6 TC flows', () => {
  const BACKENDS = backendsOf(4);
  let n: Node;
  let counts: TypedMap<number, number>;
  let sport = 42000;
  const markers = () => new TypedMap(n.h.obj.map(abi.SLUICE_MAP_LC_FLOW6), abi.lb6_ct_keyCodec, abi.lb_lc_flowCodec);
  const active = () => BACKENDS.map((b) => counts.get(b.id) ?? 0);
  const syn = (port = sport++): L4Spec6 => ({ proto: 'tcp', src: CLIENT, dst: NODE, sport: port, dport: NODE_PORT, tcpFlags: TCP_SYN });

  before(() => {
    n = openNode('sluice-lc6-tc');
    counts = new TypedMap(n.h.obj.map(abi.SLUICE_MAP_LC_COUNT4), u32Codec, u32Codec);
  });
  after(() => n?.h.close());
  beforeEach(() => {
    resetNode(n);
    for (const b of BACKENDS) counts.set(b.id, 0);
    const m = (() => { try { return markers(); } catch { return undefined; } })(); // absent before the IPv6 markers
    for (const [k] of [...m?.entries() ?? []]) m!.delete(k);
    n.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: FLAGS, revNatId: 11, backends: BACKENDS, algorithm: abi.LB_ALG_LEAST_CONN });
    n.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'udp', flags: FLAGS, revNatId: 12, backends: BACKENDS, algorithm: abi.LB_ALG_LEAST_CONN });
  });

  test('new flows take a count on the least loaded backend; an RST gives it back exactly once', () => {
    const held0 = n.h.counter(abi.LB_CNT_LC_HELD);
    const flows = Array.from({ length: 40 }, () => syn()).map((s) => ({ s, backend: send(n, BACKENDS, s) }));
    assert.deepEqual(active(), [10, 10, 10, 10], 'each new flow took the least, and holds a count');
    assert.equal([...markers().entries()].length, 40);
    const ended = flows.filter((f) => f.backend.id === BACKENDS[0]!.id);
    for (const f of ended) send(n, BACKENDS, { ...f.s, tcpFlags: TCP_RST });
    assert.deepEqual(active(), [0, 10, 10, 10]);
    for (const f of ended) send(n, BACKENDS, { ...f.s, tcpFlags: TCP_RST | TCP_ACK });
    n.h.gc();
    assert.deepEqual(active(), [0, 10, 10, 10], 'a second RST and a GC pass give nothing back twice');
    const refill = Array.from({ length: 10 }, () => send(n, BACKENDS, syn()).id);
    assert.deepEqual([...new Set(refill)], [BACKENDS[0]!.id], 'the next flows fill the emptied backend');
    assert.equal(n.h.counter(abi.LB_CNT_LC_HELD) - held0, 50n);
  });

  test('FIN both ways closes; a SYN on the closing tuple is a new flow with its own count', () => {
    const s = syn();
    const backend = send(n, BACKENDS, s);
    const reply = (flags: number): L4Spec6 => ({ proto: 'tcp', src: backend.address, dst: CLIENT, sport: backend.port, dport: s.sport, tcpFlags: flags });
    n.h.run('egress', frame6(reply(TCP_SYN | TCP_ACK)));
    send(n, BACKENDS, { ...s, tcpFlags: TCP_ACK });
    send(n, BACKENDS, { ...s, tcpFlags: TCP_FIN | TCP_ACK });
    assert.equal(counts.get(backend.id), 1, 'half-closed: still active');
    assert.equal(n.h.run('egress', frame6(reply(TCP_FIN | TCP_ACK))).verdict, TC_ACT_OK);
    assert.deepEqual(active(), [0, 0, 0, 0], 'FIN both ways: released');
    const again = send(n, BACKENDS, s);
    assert.equal(counts.get(again.id), 1, 'the reopened tuple holds one count');
    assert.equal([...markers().entries()].length, 1, 'one marker per tuple, re-used');
    send(n, BACKENDS, { ...s, tcpFlags: TCP_RST });
    n.h.gc();
    assert.equal([...markers().entries()].length, 0, 'GC deletes released markers');
    assert.deepEqual(active(), [0, 0, 0, 0]);
  });

  test('externalTrafficPolicy Cluster (SNAT): the reply comes back at ingress, and FIN both ways gives the count back', () => {
    n.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 11, backends: BACKENDS, algorithm: abi.LB_ALG_LEAST_CONN });
    const s = syn();
    const { verdict, out } = n.h.run('ingress', frame6(s));
    assert.ok(verdict === TC_ACT_OK || verdict === 7 /* TC_ACT_REDIRECT */, `verdict ${verdict}`);
    const held = BACKENDS.filter((b) => counts.get(b.id) === 1);
    assert.equal(held.length, 1, `one count held: ${active()}`);
    const e = [...n.v6.conntrack.entries()].find(([k]) => k.dir === abi.LB_CT_DIR_ORIGINAL)![1];
    assert.ok(e.flags & abi.LB_CT_FLAG_SNAT, 'SNATed');
    assert.ok(e.flags & abi.LB_CT_FLAG_LC, 'the flow carries LB_CT_FLAG_LC');
    assert.ok(out.length > 0);
    const reply = (flags: number): L4Spec6 => ({ proto: 'tcp', src: bytesToIp6(e.backend_address), dst: NODE, sport: e.backend_port, dport: e.nat_port, tcpFlags: flags });
    n.h.run('ingress', frame6(reply(TCP_SYN | TCP_ACK)));
    n.h.run('ingress', frame6({ ...s, tcpFlags: TCP_FIN | TCP_ACK }));
    assert.equal(counts.get(held[0]!.id), 1, 'half-closed: still active');
    n.h.run('ingress', frame6(reply(TCP_FIN | TCP_ACK)));
    assert.deepEqual(active(), [0, 0, 0, 0], 'FIN both ways (the reply at ingress): released');
  });

  test('flows that end without a close (SYN only, UDP, a lost conntrack entry) come back at the GC', async () => {
    for (let i = 0; i < 6; i++) send(n, BACKENDS, syn());
    for (let i = 0; i < 6; i++) send(n, BACKENDS, { proto: 'udp', src: CLIENT, dst: NODE, sport: 43000 + i, dport: NODE_PORT, payload: Buffer.from('q') });
    assert.deepEqual(active(), [3, 3, 3, 3], 'TCP and UDP frontends share the backends\' counts');
    n.h.gc();
    assert.deepEqual(active(), [3, 3, 3, 3], 'GC before expiry gives nothing back');
    // One live flow loses its conntrack entries (as LRU eviction would).
    const lost = syn();
    send(n, BACKENDS, lost);
    for (const [k, e] of [...n.v6.conntrack.entries()]) if (e.client_port === lost.sport) n.v6.conntrack.delete(k);
    n.h.gc();
    assert.equal(active().reduce((a, b) => a + b), 12, 'the flow without conntrack entries was released');
    await new Promise((r) => setTimeout(r, 1200));
    const gcReleased0 = n.h.counter(abi.LB_CNT_LC_GC_RELEASED);
    n.h.gc();
    assert.deepEqual(active(), [0, 0, 0, 0], 'expired: every count back');
    assert.equal(n.h.counter(abi.LB_CNT_LC_GC_RELEASED) - gcReleased0, 12n);
    assert.equal([...markers().entries()].length, 0);
    n.h.gc();
    assert.deepEqual(active(), [0, 0, 0, 0], 'a second pass changes nothing');
  });
});

describe('Maglev, IPv6 TC flows', () => {
  const M = 4093;
  const FRONTEND = { revNatId: 9, proto: 'tcp', scope: 'external' as const };
  let a: Node;
  let b: Node;
  const tables = new Map<Node, MaglevTables>();

  function program(n: Node, backends: TcBackend[]): void {
    const outer = n.h.obj.map(abi.SLUICE_MAP_MAGLEV4);
    if (!tables.has(n)) {
      for (const k of [...outer.keys()]) outer.delete(k);
      tables.set(n, new MaglevTables(outer, M));
    }
    tables.get(n)!.sync(FRONTEND, backends);
    n.v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: FLAGS, revNatId: 9, backends, algorithm: abi.LB_ALG_MAGLEV });
  }

  /** The backend address table[hash6(5-tuple) % M] names, in TypeScript. */
  function predicted(n: Node, backends: TcBackend[], saddr: string, sport: number): string {
    const t = readMaglevTable(n.h.obj.map(abi.SLUICE_MAP_MAGLEV4), FRONTEND)!;
    const id = t.ids[maglevEntry(maglevFlowHash6({ saddr, daddr: NODE, sport, dport: NODE_PORT, proto: 'tcp' }), t.m)]!;
    return backends.find((x) => x.id === id)!.address;
  }

  before(() => {
    a = openNode('sluice-mg6-a');
    b = openNode('sluice-mg6-b');
  });
  after(() => {
    for (const t of tables.values()) t.close();
    a?.h.close();
    b?.h.close();
  });
  beforeEach(() => {
    resetNode(a);
    resetNode(b);
  });

  test('a new flow goes to table[hash(5-tuple) % M]: one client\'s flows spread, the same 5-tuple returns', () => {
    const backends = backendsOf(7);
    program(a, backends);
    const picked0 = a.h.counter(abi.LB_CNT_MAGLEV_PICKED);
    const seen = new Set<string>();
    for (let i = 0; i < 100; i++) {
      const s: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40000 + i * 7, dport: NODE_PORT, tcpFlags: TCP_SYN };
      const got = send(a, backends, s).address;
      assert.equal(got, predicted(a, backends, CLIENT, s.sport), `flow [${CLIENT}]:${s.sport}`);
      seen.add(got);
      for (const [k] of [...a.v6.conntrack.entries()]) a.v6.conntrack.delete(k); // forget the flow
      assert.equal(send(a, backends, s).address, got, `flow [${CLIENT}]:${s.sport} again`);
    }
    assert.equal(seen.size, backends.length, `100 flows of one client over 7 backends reach all: ${[...seen]}`);
    assert.equal(a.h.counter(abi.LB_CNT_MAGLEV_PICKED) - picked0, 200n);
  });

  test('cross-node: two data paths with their own backend ids and tables send the same 5-tuples to the same backends', () => {
    const onA = backendsOf(5, 1);
    // Node b: other ids, endpoints in another order (each agent allocates its own).
    const onB = backendsOf(5, 301).reverse();
    program(a, onA);
    program(b, onB);
    const ta = readMaglevTable(a.h.obj.map(abi.SLUICE_MAP_MAGLEV4), FRONTEND)!;
    const tb = readMaglevTable(b.h.obj.map(abi.SLUICE_MAP_MAGLEV4), FRONTEND)!;
    const addrOf = (bs: TcBackend[], id: number) => bs.find((x) => x.id === id)!.address;
    assert.deepEqual([...ta.ids].map((id) => addrOf(onA, id)), [...tb.ids].map((id) => addrOf(onB, id)), 'the two tables name the same backends');
    const clients = ['2001:db8:5::10', '2001:db8:7::1:2', 'fd00:99::abcd'];
    const per = new Map<string, number>();
    let flows = 0;
    for (const src of clients) {
      for (let i = 0; i < 30; i++) {
        const s: L4Spec6 = { proto: 'tcp', src, dst: NODE, sport: 20000 + i * 13, dport: NODE_PORT, tcpFlags: TCP_SYN };
        const viaA = send(a, onA, s).address;
        const viaB = send(b, onB, s).address;
        assert.equal(viaB, viaA, `flow [${src}]:${s.sport}: node a ${viaA}, node b ${viaB}`);
        assert.equal(viaA, predicted(a, onA, src, s.sport));
        per.set(viaA, (per.get(viaA) ?? 0) + 1);
        flows++;
      }
    }
    assert.equal(flows, 90);
    assert.equal(per.size, 5, `90 flows reach all 5 backends: ${JSON.stringify([...per])}`);
    // The conntrack entries name the same backend on both nodes.
    const backendsIn = (n: Node) => new Set([...n.v6.conntrack.entries()].map(([, e]) => bytesToIp6(e.backend_address)));
    assert.deepEqual([...backendsIn(a)].sort(), [...backendsIn(b)].sort());
  });
});
