// The XDP north-south program on crafted IPv6 packets (issues 17 and 14;
// BPF_PROG_TEST_RUN inside a throwaway namespace whose IPv6 routes and
// neighbours the FIB lookup reads). Outputs are compared byte for byte with
// packets built from scratch (TCP/UDP checksums recomputed over the IPv6
// pseudo-header), and with what the TC program makes of the same packet:
// the two share sluice_ct6, so a flow moves between them.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { MaglevTables, maglevEntry, maglevFlowHash6, readMaglevTable } from '../../src/datapath/maglev';
import { syncFrontendAddresses6 } from '../../src/datapath/xdp/xdp';
import { TCP_ACK, TCP_PSH, TCP_SYN, TC_ACT_REDIRECT, TC_ACT_SHOT, diffHex } from './tc_packet';
import { exthdr, frame6, neighborSolicitation, ethernet6, icmp6, type L4Spec6 } from './tc_packet6';
import { Tc6Maps } from './tc_harness6';
import type { TcBackend } from './tc_harness';
import { XDP_DROP, XDP_PASS, XDP_REDIRECT, XDP_TX, XdpHarness } from './xdp_harness';
import { ip6ToBytes } from '../../src/datapath/addr';

const CLIENT = '2001:db8::10';
const NODE = '2001:db8::1'; // NodePort address (on ext0) and IPv6 SNAT address
const NODE_PORT = 30080;
const EXT_MAC = '02:00:00:00:00:01'; // ext0
const GW = '2001:db8::2'; // next hop to the backends' network
const GW_MAC = '02:00:00:00:00:22';
const INT_MAC = '02:00:00:00:00:31'; // int0
const BE_INT_MAC = '02:00:00:00:00:33';
const REMOTE_BE: TcBackend = { id: 2, address: 'fd00:2::20', port: 8080, local: false }; // via GW on ext0
const INT_BE: TcBackend = { id: 3, address: 'fd00:3::20', port: 8080, local: false }; // on int0
const NO_NEIGH_BE: TcBackend = { id: 4, address: '2001:db8::30', port: 8080, local: false }; // on ext0, neighbour unknown
const NODEPORT = abi.LB_SVC_FLAG_NODEPORT;

let h: XdpHarness;
let v6: Tc6Maps;
let ext0: number;
let int0: number;

const mac = (m: string) => Buffer.from(m.replace(/:/g, ''), 'hex');

/** The frame as sent: built from scratch for `spec`, hop limit one lower, next-hop MACs. */
function forwarded(spec: L4Spec6, dst: string, src: string): Buffer {
  const out = frame6({ ...spec, hopLimit: (spec.hopLimit ?? 64) - 1 });
  mac(dst).copy(out, 0);
  mac(src).copy(out, 6);
  return out;
}

function expectPacket(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

/** The frontend in the IPv6 tables, its address in XDP's set (when this build has one). */
function serve(address: string, port: number, backends: TcBackend[], proto: 'tcp' | 'udp' = 'tcp', flags = NODEPORT, revNatId = 7, algorithm?: number): void {
  v6.upsertFrontend({ address, port, proto, flags, revNatId, backends, ...(algorithm !== undefined ? { algorithm } : {}) });
  syncFrontendAddresses6(h.maps, [{ address, flags }]);
}

const nodePort = (backends: TcBackend[], proto: 'tcp' | 'udp' = 'tcp') => serve(NODE, NODE_PORT, backends, proto);

before(() => {
  h = new XdpHarness();
  v6 = new Tc6Maps(h.tc);
  h.ip('link', 'add', 'ext0', 'address', EXT_MAC, 'type', 'veth', 'peer', 'name', 'ext0p');
  h.ip('link', 'add', 'int0', 'address', INT_MAC, 'type', 'veth', 'peer', 'name', 'int0p');
  for (const d of ['ext0p', 'int0p', 'ext0', 'int0']) h.ip('link', 'set', d, 'up');
  h.ip('-6', 'addr', 'add', `${NODE}/64`, 'dev', 'ext0', 'nodad');
  h.ip('-6', 'addr', 'add', 'fd00:3::1/64', 'dev', 'int0', 'nodad');
  h.ip('-6', 'neigh', 'add', GW, 'lladdr', GW_MAC, 'dev', 'ext0', 'nud', 'permanent');
  h.ip('-6', 'neigh', 'add', INT_BE.address, 'lladdr', BE_INT_MAC, 'dev', 'int0', 'nud', 'permanent');
  h.ip('-6', 'route', 'add', 'fd00:2::/64', 'via', GW, 'dev', 'ext0');
  h.sysctl('net.ipv6.conf.all.forwarding=1'); // bpf_fib_lookup: FWD_DISABLED otherwise
  ext0 = h.ifindex('ext0');
  int0 = h.ifindex('int0');
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  v6.reset();
  writeTcConfig(h.tc.tc.config, { snatAddress: '198.18.0.1' });
  v6.setSnat(NODE);
  h.inside(() => h.maps.targets.set(int0, int0));
});

describe('IPv6 XDP_PASS for everything that is not a Service packet', () => {
  test('a packet to an address that is no frontend leaves untouched, counted as passed (one per-CPU slot)', () => {
    nodePort([REMOTE_BE]);
    const before = h.stats(ext0);
    const pkt = frame6({ proto: 'tcp', src: CLIENT, dst: '2001:db8::99', sport: 40000, dport: NODE_PORT, tcpFlags: TCP_SYN });
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'not a frontend address');
    const after = h.stats(ext0);
    assert.equal(after.passed - before.passed, 1n);
    assert.equal(after.packets - before.packets, 1n);
  });

  test('Neighbor Discovery (to the solicited-node address and to the node itself) and an echo request pass untouched', () => {
    nodePort([REMOTE_BE]);
    const before = h.stats(ext0);
    const ns = neighborSolicitation(CLIENT, NODE);
    const nsUnicast = Buffer.from(ns);
    nsUnicast.set(frame6({ proto: 'udp', src: CLIENT, dst: NODE, sport: 1, dport: 1 }).subarray(14 + 24, 14 + 40), 14 + 24); // to NODE itself
    const echo = ethernet6(icmp6(CLIENT, NODE, 128, 0, Buffer.from([0, 1, 0, 1]), Buffer.from('ping')));
    for (const [what, pkt] of [['NS', ns], ['NS to the node', nsUnicast], ['echo', echo]] as const) {
      const { verdict, out } = h.runXdp(pkt, ext0);
      assert.equal(verdict, XDP_PASS, what);
      expectPacket(out, pkt, what);
    }
    const after = h.stats(ext0);
    assert.equal(after.passed - before.passed, 3n);
    assert.equal(after.fallback - before.fallback, 0n, 'not Service packets');
    assert.equal(v6.rows().length, 0);
  });

  test('extension headers and fragments to a frontend are TC\'s: passed untouched, nothing written', () => {
    nodePort([REMOTE_BE]);
    const spec: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40001, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const destOpts = frame6({ ...spec, ext: [exthdr(60, Buffer.alloc(4))] });
    const fragment = frame6({ ...spec, ext: [exthdr(44, Buffer.from([0, 0, 0, 0, 0, 1]))] }); // offset 0, M=0 id 1
    for (const [what, pkt] of [['destination options', destOpts], ['fragment header', fragment]] as const) {
      const { verdict, out } = h.runXdp(pkt, ext0);
      assert.equal(verdict, XDP_PASS, what);
      expectPacket(out, pkt, what);
    }
    assert.equal(v6.rows().length, 0);
  });

  test('a reply to the SNAT address (a frontend address, another port) is TC\'s: passed untouched', () => {
    nodePort([REMOTE_BE]);
    const reply = frame6({ proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: 8080, dport: 62000, tcpFlags: TCP_SYN | TCP_ACK });
    const { verdict, out } = h.runXdp(reply, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, reply, 'reply');
  });
});

describe('IPv6 NodePort to a remote backend: DNAT + SNAT at XDP', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: XDP_TX out of the arrival device, byte for byte; sluice_ct6 as TC writes it`, () => {
      nodePort([REMOTE_BE], proto);
      const translatedBefore = h.tc.counter(abi.LB_CNT_TC_TRANSLATED);
      const before = h.stats(ext0);
      const spec: L4Spec6 = { proto, src: CLIENT, dst: NODE, sport: 62000, dport: NODE_PORT, tcpFlags: TCP_SYN, payload: Buffer.from('hello') };
      const { verdict, out } = h.runXdp(frame6(spec), ext0);
      assert.equal(verdict, XDP_TX);
      expectPacket(out, forwarded({ ...spec, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }, GW_MAC, EXT_MAC), proto);
      assert.equal(h.stats(ext0).tx - before.tx, 1n);
      assert.equal(h.tc.counter(abi.LB_CNT_TC_TRANSLATED) - translatedBefore, 1n, 'one new flow, counted as TC counts it');
      const rows = v6.rows();
      assert.equal(rows.length, 2, JSON.stringify(rows));
      assert.ok(rows.every((r) => r.client === `[${CLIENT}]:62000` && r.backend === `[${REMOTE_BE.address}]:8080` && r.nat === `[${NODE}]:62000`
        && (r.flags & abi.LB_CT_FLAG_SNAT) && !(r.flags & abi.LB_CT_FLAG_POD)), JSON.stringify(rows));
    });
  }

  test('a flow started under XDP continues under TC (XDP off) with the same translation, and back', () => {
    nodePort([REMOTE_BE]);
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62002, dport: NODE_PORT, tcpFlags: TCP_SYN };
    assert.equal(h.runXdp(frame6(syn), ext0).verdict, XDP_TX);
    const translated = h.tc.counter(abi.LB_CNT_TC_TRANSLATED);
    const data: L4Spec6 = { ...syn, tcpFlags: TCP_ACK | TCP_PSH, payload: Buffer.from('GET / HTTP/1.0\r\n\r\n') };
    const expected = forwarded({ ...data, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }, GW_MAC, EXT_MAC);
    const tc = h.runTc(frame6(data), ext0);
    assert.equal(tc.verdict, TC_ACT_REDIRECT);
    expectPacket(tc.out, expected, 'TC on the XDP flow');
    const xdp = h.runXdp(frame6(data), ext0);
    assert.equal(xdp.verdict, XDP_TX);
    expectPacket(xdp.out, expected, 'XDP again');
    assert.equal(h.tc.counter(abi.LB_CNT_TC_TRANSLATED), translated, 'no new flow: both found the shared entry');
    const original = [...v6.conntrack.entries()].find(([k]) => k.dir === abi.LB_CT_DIR_ORIGINAL)![1];
    assert.equal(original.packets, 3n, 'SYN under XDP, data under TC, data under XDP');
  });

  test('a flow TC started is continued by XDP', () => {
    nodePort([REMOTE_BE]);
    const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62003, dport: NODE_PORT, tcpFlags: TCP_SYN };
    assert.equal(h.runTc(frame6(syn), ext0).verdict, TC_ACT_REDIRECT);
    const data: L4Spec6 = { ...syn, tcpFlags: TCP_ACK };
    const { verdict, out } = h.runXdp(frame6(data), ext0);
    assert.equal(verdict, XDP_TX);
    expectPacket(out, forwarded({ ...data, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }, GW_MAC, EXT_MAC), 'XDP on a TC flow');
  });

  test('an ExternalIP / LoadBalancer address works the same way', () => {
    const vip = '2001:db8:100::10';
    serve(vip, 80, [REMOTE_BE], 'udp', abi.LB_SVC_FLAG_EXTERNAL_IP, 8);
    const spec: L4Spec6 = { proto: 'udp', src: CLIENT, dst: vip, sport: 62004, dport: 80, payload: Buffer.from('q') };
    const { verdict, out } = h.runXdp(frame6(spec), ext0);
    assert.equal(verdict, XDP_TX);
    expectPacket(out, forwarded({ ...spec, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }, GW_MAC, EXT_MAC), 'ExternalIP');
  });
});

describe('IPv6 routing: XDP_REDIRECT to an XDP device, XDP_PASS when TC must send it', () => {
  test('a backend behind another XDP device: XDP_REDIRECT with that device\'s MAC', () => {
    nodePort([INT_BE]);
    const before = h.stats(ext0);
    const spec: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62010, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const { verdict, out } = h.runXdp(frame6(spec), ext0);
    assert.equal(verdict, XDP_REDIRECT);
    expectPacket(out, forwarded({ ...spec, src: NODE, dst: INT_BE.address, dport: INT_BE.port }, BE_INT_MAC, INT_MAC), 'redirect');
    assert.equal(h.stats(ext0).redirected - before.redirected, 1n);
  });

  test('externalTrafficPolicy Local, a local backend behind an XDP device: DNAT only (the client\'s address kept), the reply is TC\'s', () => {
    const local: TcBackend = { ...INT_BE, local: true };
    serve(NODE, NODE_PORT, [local], 'tcp', NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES);
    const spec: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40100, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const { verdict, out } = h.runXdp(frame6(spec), ext0);
    assert.equal(verdict, XDP_REDIRECT);
    expectPacket(out, forwarded({ ...spec, dst: local.address, dport: local.port }, BE_INT_MAC, INT_MAC), 'DNAT only');
    const rows = v6.rows();
    assert.equal(rows.length, 2, JSON.stringify(rows));
    assert.ok(rows.every((r) => !(r.flags & abi.LB_CT_FLAG_SNAT)), JSON.stringify(rows));
  });

  test('no neighbour for the next hop: XDP_PASS untouched (counted as fallback), nothing written; TC then translates it', () => {
    nodePort([NO_NEIGH_BE]);
    const before = h.stats(ext0);
    const pkt = frame6({ proto: 'tcp', src: CLIENT, dst: NODE, sport: 62012, dport: NODE_PORT, tcpFlags: TCP_SYN });
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'no neighbour');
    assert.equal(h.stats(ext0).fallback - before.fallback, 1n);
    assert.equal(v6.rows().length, 0, 'nothing written before the route was known');
    const tc = h.runTc(pkt, ext0); // TC resolves the neighbour itself (bpf_redirect_neigh)
    assert.equal(tc.verdict, TC_ACT_REDIRECT);
    assert.equal(v6.rows().length, 2);
  });

  test('hop limit 1: XDP_PASS untouched (the stack answers time exceeded)', () => {
    nodePort([REMOTE_BE]);
    const pkt = frame6({ proto: 'tcp', src: CLIENT, dst: NODE, sport: 62013, dport: NODE_PORT, tcpFlags: TCP_SYN, hopLimit: 1 });
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'hop limit 1');
  });
});

describe('the FIB cache of known IPv6 flows (sluice_xdp_fc6, bpf/lib/xdp_fc6.h)', () => {
  const CACHED_BE: TcBackend = { id: 5, address: '2001:db8::40', port: 8080, local: false }; // on ext0, neighbour added per test
  const CACHED_BE_MAC = '02:00:00:00:00:40';
  const BOGUS_MAC = '02:00:00:00:0b:ad';
  const SLOT_SIZE = 72; // struct lb6_xdp_fib_cache

  /** Every CPU's copy of the slots holding `backend` (the program runs on any CPU). */
  function slotsOf(backend: string): Array<{ slot: number; perCpu: abi.Lb6XdpFibCache[] }> {
    const fc = h.xdp.map(abi.SLUICE_MAP_XDP_FC6);
    const key = Buffer.alloc(4);
    const found = [];
    for (let slot = 0; slot < abi.SLUICE_XDP_FC_SLOTS; slot++) {
      key.writeUInt32LE(slot);
      const perCpu = fc.lookupPerCpu(key)!.map((b) => abi.decodeLb6XdpFibCache(b));
      if (perCpu.some((c) => c.expires_ns !== 0n && c.daddr.equals(ip6ToBytes(backend)))) found.push({ slot, perCpu });
    }
    return found;
  }

  /** Put `entry` in `slot` on every CPU. */
  function writeSlot(slot: number, entry: abi.Lb6XdpFibCache): void {
    const fc = h.xdp.map(abi.SLUICE_MAP_XDP_FC6);
    const key = Buffer.alloc(4);
    key.writeUInt32LE(slot);
    fc.updatePerCpu(key, Array.from({ length: fc.valueBufferSize / SLOT_SIZE }, () => abi.encodeLb6XdpFibCache(entry)));
  }

  const filled = (found: { perCpu: abi.Lb6XdpFibCache[] }) => found.perCpu.find((c) => c.expires_ns !== 0n)!;
  const original = () => [...v6.conntrack.entries()].find(([k]) => k.dir === abi.LB_CT_DIR_ORIGINAL)![1];

  /** A UDP flow to CACHED_BE opened at XDP, one known-flow packet sent (the slot filled between `filledAfter` and `filledBefore`). */
  let filledAfter = 0n;
  let filledBefore = 0n;
  function openFlow(sport: number): L4Spec6 {
    h.ip('-6', 'neigh', 'replace', CACHED_BE.address, 'lladdr', CACHED_BE_MAC, 'dev', 'ext0', 'nud', 'permanent');
    nodePort([CACHED_BE], 'udp');
    const spec: L4Spec6 = { proto: 'udp', src: CLIENT, dst: NODE, sport, dport: NODE_PORT, payload: Buffer.from('data') };
    assert.equal(h.runXdp(frame6(spec), ext0).verdict, XDP_TX, 'new flow');
    const lookups = h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP);
    filledAfter = process.hrtime.bigint();
    assert.equal(h.runXdp(frame6(spec), ext0).verdict, XDP_TX, 'known flow');
    filledBefore = process.hrtime.bigint();
    assert.equal(h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP) - lookups, 1n, 'the first known-flow packet looks the route up');
    return spec;
  }

  const sent = (spec: L4Spec6, dmac: string) => forwarded({ ...spec, src: NODE, dst: CACHED_BE.address, dport: CACHED_BE.port }, dmac, EXT_MAC);

  test('a known flow\'s lookup fills a slot tagged with its inputs; a fresh slot answers instead of bpf_fib_lookup', () => {
    const spec = openFlow(62100);
    const [found, ...more] = slotsOf(CACHED_BE.address);
    assert.ok(found && more.length === 0, 'one slot for the flow');
    const c = filled(found);
    const ttl = BigInt(abi.SLUICE_XDP_FC_TTL_NS);
    assert.ok(c.expires_ns >= filledAfter + ttl && c.expires_ns <= filledBefore + ttl, 'answers for the TTL from its lookup');
    assert.deepEqual([c.saddr.equals(ip6ToBytes(NODE)), c.sport, c.dport, c.flowinfo, c.in_ifindex, c.out_ifindex, c.proto, c.action, c.dmac.toString('hex'), c.smac.toString('hex')],
      [true, 62100, CACHED_BE.port, 0, ext0, ext0, 17, XDP_TX, mac(CACHED_BE_MAC).toString('hex'), mac(EXT_MAC).toString('hex')]);
    assert.equal(c.max_len, frame6(spec).length - 14, 'the IPv6 packet length the MTU check passed');
    // A fresh slot with another MAC: the packet leaves with it, and no lookup is made.
    writeSlot(found.slot, { ...c, dmac: mac(BOGUS_MAC), expires_ns: process.hrtime.bigint() + 10_000_000_000n });
    const lookups = h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP);
    const cached = h.tc.counter(abi.LB_CNT_XDP_FIB_CACHED);
    const { verdict, out } = h.runXdp(frame6(spec), ext0);
    assert.equal(verdict, XDP_TX);
    expectPacket(out, sent(spec, BOGUS_MAC), 'sent with the cached answer');
    assert.equal(h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP), lookups);
    assert.equal(h.tc.counter(abi.LB_CNT_XDP_FIB_CACHED) - cached, 1n);
    assert.equal(original().packets, 3n, 'conntrack still counts every packet');
  });

  test('a stale slot, another flow\'s tag, another arrival device or a longer packet: the full lookup (the neighbour\'s MAC of now)', () => {
    const spec = openFlow(62101);
    const [found] = slotsOf(CACHED_BE.address);
    const c = filled(found!);
    const later = process.hrtime.bigint() + 10_000_000_000n;
    const otherSource = Buffer.from(c.saddr);
    otherSource.writeUInt8(otherSource.readUInt8(15) ^ 1, 15);
    const cases: Array<[string, abi.Lb6XdpFibCache]> = [
      ['stale', { ...c, dmac: mac(BOGUS_MAC), expires_ns: process.hrtime.bigint() - 1n }],
      ['another source port', { ...c, dmac: mac(BOGUS_MAC), expires_ns: later, sport: 62999 }],
      ['another source address', { ...c, dmac: mac(BOGUS_MAC), expires_ns: later, saddr: otherSource }],
      ['another flow label', { ...c, dmac: mac(BOGUS_MAC), expires_ns: later, flowinfo: 0x12345 }],
      ['another arrival device', { ...c, dmac: mac(BOGUS_MAC), expires_ns: later, in_ifindex: int0 }],
      ['a shorter length checked', { ...c, dmac: mac(BOGUS_MAC), expires_ns: later, max_len: c.max_len - 1 }],
    ];
    for (const [what, entry] of cases) {
      writeSlot(found!.slot, entry);
      const lookups = h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP);
      const { verdict, out } = h.runXdp(frame6(spec), ext0);
      assert.equal(verdict, XDP_TX, what);
      expectPacket(out, sent(spec, CACHED_BE_MAC), what);
      assert.equal(h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP) - lookups, 1n, `${what}: looked up`);
      // Refilled on the CPU the packet ran on (the others keep what was written).
      const refilled = slotsOf(CACHED_BE.address)[0]!.perCpu.filter((e) => e.expires_ns !== entry.expires_ns);
      assert.deepEqual(refilled.map((e) => e.dmac.toString('hex')), [mac(CACHED_BE_MAC).toString('hex')], `${what}: the slot refilled`);
    }
    assert.equal(original().packets, 2n + BigInt(cases.length), 'conntrack counts every packet');
  });

  test('the neighbour gone and the slot stale: XDP_PASS untouched (fallback), as without the cache; TC sends it', () => {
    const spec = openFlow(62102);
    const [found] = slotsOf(CACHED_BE.address);
    h.ip('-6', 'neigh', 'del', CACHED_BE.address, 'dev', 'ext0');
    writeSlot(found!.slot, { ...filled(found!), expires_ns: process.hrtime.bigint() - 1n });
    const before = h.stats(ext0);
    const pkt = frame6(spec);
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'no neighbour');
    assert.equal(h.stats(ext0).fallback - before.fallback, 1n);
    assert.equal(original().packets, 2n, 'not touched: TC handles the packet');
    assert.equal(h.runTc(pkt, ext0).verdict, TC_ACT_REDIRECT, 'TC continues the flow');
    assert.equal(original().packets, 3n);
  });

  test('a cached XDP_REDIRECT to a device no longer among the XDP devices: XDP_PASS untouched', () => {
    nodePort([INT_BE], 'udp');
    const spec: L4Spec6 = { proto: 'udp', src: CLIENT, dst: NODE, sport: 62103, dport: NODE_PORT, payload: Buffer.from('x') };
    for (let i = 0; i < 3; i++) assert.equal(h.runXdp(frame6(spec), ext0).verdict, XDP_REDIRECT);
    const [found, ...more] = slotsOf(INT_BE.address);
    assert.ok(found && more.length === 0, 'cached');
    const c = filled(found);
    assert.equal(c.action, XDP_REDIRECT);
    writeSlot(found.slot, { ...c, expires_ns: process.hrtime.bigint() + 10_000_000_000n }); // fresh however slow the machine
    h.inside(() => h.maps.targets.delete(int0));
    const pkt = frame6(spec);
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'not an XDP target any more');
    h.inside(() => h.maps.targets.set(int0, int0));
    const lookups = h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP);
    assert.equal(h.runXdp(frame6(spec), ext0).verdict, XDP_REDIRECT, 'listed again: sent from the cache');
    assert.equal(h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP), lookups);
  });
});

describe('IPv6 loadBalancerSourceRanges and no endpoint at XDP', () => {
  test('a client outside the IPv6 ranges is dropped at XDP (counted as TC counts it); one inside is sent', () => {
    const flags = abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE;
    const vip = '2001:db8:100::20';
    v6.addSourceRange(9, '2001:db8::/120');
    serve(vip, 80, [REMOTE_BE], 'tcp', flags, 9);
    const dropsBefore = h.tc.counter(abi.LB_CNT_TC_SRC_RANGE_DROP);
    const before = h.stats(ext0);
    const outside = h.runXdp(frame6({ proto: 'tcp', src: '2001:db8:7::77', dst: vip, sport: 40000, dport: 80, tcpFlags: TCP_SYN }), ext0);
    assert.equal(outside.verdict, XDP_DROP);
    assert.equal(h.tc.counter(abi.LB_CNT_TC_SRC_RANGE_DROP) - dropsBefore, 1n);
    assert.equal(h.stats(ext0).dropped - before.dropped, 1n);
    const inside = h.runXdp(frame6({ proto: 'tcp', src: CLIENT, dst: vip, sport: 62020, dport: 80, tcpFlags: TCP_SYN }), ext0);
    assert.equal(inside.verdict, XDP_TX);
  });

  test('externalTrafficPolicy Local without a local endpoint: dropped at XDP, as TC drops it', () => {
    serve(NODE, NODE_PORT, [], 'tcp', NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL);
    const pkt = frame6({ proto: 'tcp', src: CLIENT, dst: NODE, sport: 62021, dport: NODE_PORT, tcpFlags: TCP_SYN });
    assert.equal(h.runXdp(pkt, ext0).verdict, XDP_DROP);
    assert.equal(h.runTc(pkt, ext0).verdict, TC_ACT_SHOT);
  });
});

describe('IPv6 Maglev at XDP', () => {
  test('new flows go to table[hash(5-tuple) % M], the backend TC picks for the same 5-tuple', () => {
    const backends: TcBackend[] = [0, 1, 2, 3, 4].map((i) => ({ id: 10 + i, address: `fd00:2::${(0x30 + i).toString(16)}`, port: 8080, local: false }));
    const frontend = { revNatId: 12, proto: 'tcp', scope: 'external' as const };
    const outer = h.tc.obj.map(abi.SLUICE_MAP_MAGLEV4);
    const tables = new MaglevTables(outer, 251);
    try {
      tables.sync(frontend, backends);
      serve(NODE, NODE_PORT, backends, 'tcp', NODEPORT, 12, abi.LB_ALG_MAGLEV);
      const t = readMaglevTable(outer, frontend)!;
      const seen = new Set<string>();
      for (let sport = 62100; sport < 62124; sport++) { // in the SNAT port range: the client port is kept
        const spec: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport, dport: NODE_PORT, tcpFlags: TCP_SYN };
        const id = t.ids[maglevEntry(maglevFlowHash6({ saddr: CLIENT, daddr: NODE, sport, dport: NODE_PORT, proto: 'tcp' }), t.m)]!;
        const be = backends.find((b) => b.id === id)!;
        const { verdict, out } = h.runXdp(frame6(spec), ext0);
        assert.equal(verdict, XDP_TX);
        expectPacket(out, forwarded({ ...spec, src: NODE, dst: be.address, dport: be.port }, GW_MAC, EXT_MAC), `sport ${sport}`);
        seen.add(be.address);
      }
      assert.ok(seen.size >= 3, `flows spread over ${seen.size} backends`);
    } finally {
      tables.close();
      for (const k of [...outer.keys()]) outer.delete(k);
    }
  });
});

describe('the IPv6 frontend-address set', () => {
  test('holds the IPv6 addresses of north-south frontends only, and follows changes', () => {
    const set = h.maps.frontends6!;
    assert.ok(set, `${abi.SLUICE_MAP_XDP_FE6} pinned`);
    const r1 = syncFrontendAddresses6(h.maps, [
      { address: NODE, flags: NODEPORT },
      { address: '2001:db8:100::10', flags: abi.LB_SVC_FLAG_LOADBALANCER },
      { address: 'fd00:96::1', flags: 0 }, // a ClusterIP
      { address: '198.18.0.1', flags: NODEPORT },
    ]);
    assert.deepEqual(r1, { added: 2, removed: 0 });
    assert.deepEqual(syncFrontendAddresses6(h.maps, [{ address: NODE, flags: NODEPORT }]), { added: 0, removed: 1 });
    assert.equal([...set.entries()].length, 1);
  });
});
