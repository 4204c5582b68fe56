// The XDP north-south program on crafted packets (BPF_PROG_TEST_RUN inside a
// throwaway namespace whose routes and neighbours the FIB lookup reads).
// Outputs are compared byte for byte with packets built from scratch (all
// checksums recomputed), and with what the TC program makes of the same
// packet: the two paths share conntrack, so a flow moves between them.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { syncSourceRanges } from '../../src/datapath/tc/sourceRanges';
import { listConntrack } from '../../src/datapath/tc/conntrack';
import { attachXdp, detachXdp, listXdp, syncFrontendAddresses } from '../../src/datapath/xdp/xdp';
import { xdpStatus } from '../../src/datapath/xdp/status';
import { TCP_ACK, TCP_PSH, TCP_SYN, TC_ACT_REDIRECT, diffHex, frame, type L4Spec } from './tc_packet';
import { XDP_DROP, XDP_PASS, XDP_REDIRECT, XDP_TX, XdpHarness } from './xdp_harness';
import { fibCacheSlotsOf, writeFibCacheSlot } from './fib_cache_slots';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1';
const NODE_PORT = 30080;
const EXT_MAC = '02:00:00:00:00:01'; // the ingress device (ext0)
const GW = '198.18.0.2'; // the next hop to the backends' network
const GW_MAC = '02:00:00:00:00:22';
const INT_MAC = '02:00:00:00:00:31'; // a second device (int0)
const BE_INT_MAC = '02:00:00:00:00:33';
const REMOTE_BE = { id: 2, address: '198.18.2.20', port: 8080, local: false }; // via GW on ext0
const INT_BE = { id: 3, address: '198.18.3.20', port: 8080, local: false }; // on int0
const NO_NEIGH_BE = { id: 4, address: '198.18.0.30', port: 8080, local: false }; // on ext0, neighbour unknown
const NODEPORT = abi.LB_SVC_FLAG_NODEPORT;

let h: XdpHarness;
let ext0: number;
let int0: number;

const mac = (m: string) => Buffer.from(m.replace(/:/g, ''), 'hex');

/** The frame as sent: built from scratch for `spec`, TTL one lower, next-hop MACs. */
function forwarded(spec: L4Spec, dst: string, src: string): Buffer {
  const out = frame({ ...spec, ttl: (spec.ttl ?? 64) - 1 });
  mac(dst).copy(out, 0);
  mac(src).copy(out, 6);
  return out;
}

function expectPacket(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

function nodePort(backends: typeof REMOTE_BE[], proto: 'tcp' | 'udp' = 'tcp', flags = NODEPORT, revNatId = 7): void {
  h.tc.upsertFrontend({ address: NODE, port: NODE_PORT, proto, flags, revNatId, backends });
  syncFrontendAddresses(h.maps, [{ address: NODE, flags }]);
}

before(() => {
  h = new XdpHarness();
  h.addNodeDevices(EXT_MAC, INT_MAC, NODE);
  h.ip('neigh', 'add', GW, 'lladdr', GW_MAC, 'dev', 'ext0', 'nud', 'permanent');
  h.ip('neigh', 'add', INT_BE.address, 'lladdr', BE_INT_MAC, 'dev', 'int0', 'nud', 'permanent');
  h.ip('route', 'add', '198.18.2.0/24', 'via', GW, 'dev', 'ext0');
  ext0 = h.ifindex('ext0');
  int0 = h.ifindex('int0');
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.tc.config, { snatAddress: NODE });
  h.inside(() => h.maps.targets.set(int0, int0));
});

describe('XDP_PASS for everything that is not a Service packet', () => {
  test('a packet to an address that is no frontend leaves untouched, counted as passed', () => {
    nodePort([REMOTE_BE]);
    const before = h.stats(ext0);
    const pkt = frame({ proto: 'tcp', src: CLIENT, dst: '198.18.0.99', sport: 40000, dport: NODE_PORT, tcpFlags: TCP_SYN });
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'not a frontend address');
    const after = h.stats(ext0);
    assert.equal(after.passed - before.passed, 1n);
    assert.equal(after.packets - before.packets, 1n);
  });

  test('a non-Service packet costs one per-CPU slot, not the per-device hash (an ifindex past the array still counts, in the hash)', () => {
    nodePort([REMOTE_BE]);
    h.ip('link', 'add', 'np0', 'type', 'veth', 'peer', 'name', 'np0p');
    h.ip('link', 'add', 'np1', 'index', String(abi.SLUICE_MAX_XDP_IFINDEX + 10), 'type', 'veth', 'peer', 'name', 'np1p');
    const np0 = h.ifindex('np0');
    const np1 = h.ifindex('np1');
    assert.ok(np0 < abi.SLUICE_MAX_XDP_IFINDEX && np1 >= abi.SLUICE_MAX_XDP_IFINDEX);
    const key = (i: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(i); return b; };
    const pkt = frame({ proto: 'udp', src: CLIENT, dst: '198.18.0.99', sport: 40000, dport: 53 });
    for (const dev of [np0, np1]) assert.equal(h.runXdp(pkt, dev).verdict, XDP_PASS);
    assert.equal(h.maps.stats.lookupPerCpu(key(np0)), undefined, 'the per-device hash was touched by a non-Service packet');
    assert.ok(h.maps.stats.lookupPerCpu(key(np1)), 'an ifindex past the array counts in the hash');
    for (const dev of [np0, np1]) {
      const st = h.stats(dev);
      assert.equal(st.passed, 1n);
      assert.equal(st.packets, 1n);
    }
    h.ip('link', 'del', 'np0');
    h.ip('link', 'del', 'np1');
  });

  test('a frontend address on another port (a reply to the SNAT address) is TC\'s: passed untouched', () => {
    nodePort([REMOTE_BE]);
    const before = h.stats(ext0);
    const reply = frame({ proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: 8080, dport: 62000, tcpFlags: TCP_SYN | TCP_ACK });
    const { verdict, out } = h.runXdp(reply, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, reply, 'reply');
    assert.equal(h.stats(ext0).passed - before.passed, 1n);
    assert.equal(listConntrack(h.tc.tc.conntrack).length, 0);
  });

  test('an ARP frame and an IPv4 fragment are passed untouched', () => {
    nodePort([REMOTE_BE]);
    const arp = Buffer.alloc(42);
    arp.writeUInt16BE(0x0806, 12);
    assert.equal(h.runXdp(arp, ext0).verdict, XDP_PASS);
    const frag = frame({ proto: 'udp', src: CLIENT, dst: NODE, sport: 40000, dport: NODE_PORT });
    frag.writeUInt16BE(0x2000, 20); // MF: TC's fragment tracking handles it
    const { verdict, out } = h.runXdp(frag, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, frag, 'fragment');
  });
});

describe('NodePort to a remote backend: DNAT + SNAT at XDP', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: XDP_TX out of the arrival device, byte for byte; conntrack as TC writes it`, () => {
      nodePort([REMOTE_BE], proto);
      const translatedBefore = h.tc.counter(abi.LB_CNT_TC_TRANSLATED);
      const before = h.stats(ext0);
      const spec: L4Spec = { proto, src: CLIENT, dst: NODE, sport: 62000, dport: NODE_PORT, tcpFlags: TCP_SYN, payload: Buffer.from('hello') };
      const { verdict, out } = h.runXdp(frame(spec), ext0);
      assert.equal(verdict, XDP_TX);
      expectPacket(out, forwarded({ ...spec, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }, GW_MAC, EXT_MAC), proto);
      assert.equal(h.stats(ext0).tx - before.tx, 1n);
      assert.equal(h.tc.counter(abi.LB_CNT_TC_TRANSLATED) - translatedBefore, 1n, 'one new flow, counted as TC counts it');
      const [row] = listConntrack(h.tc.tc.conntrack);
      assert.equal(row?.snat, `${NODE}:62000`);
      assert.deepEqual(row?.entries, ['original', 'reply']);
      assert.equal(row?.path, 'external');
    });
  }

  test('UDP without a checksum stays without one', () => {
    nodePort([REMOTE_BE], 'udp');
    const spec: L4Spec = { proto: 'udp', src: CLIENT, dst: NODE, sport: 62001, dport: NODE_PORT, udpNoChecksum: true };
    const { verdict, out } = h.runXdp(frame(spec), ext0);
    assert.equal(verdict, XDP_TX);
    expectPacket(out, forwarded({ ...spec, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }, GW_MAC, EXT_MAC), 'udp no checksum');
  });

  test('a flow started under XDP continues under TC (XDP off) with the same translation, and back', () => {
    nodePort([REMOTE_BE]);
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62002, dport: NODE_PORT, tcpFlags: TCP_SYN };
    assert.equal(h.runXdp(frame(syn), ext0).verdict, XDP_TX);
    const translated = h.tc.counter(abi.LB_CNT_TC_TRANSLATED);
    const data: L4Spec = { ...syn, tcpFlags: TCP_ACK | TCP_PSH, payload: Buffer.from('GET / HTTP/1.0\r\n\r\n') };
    const expected = forwarded({ ...data, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }, GW_MAC, EXT_MAC);
    const tc = h.runTc(frame(data), ext0);
    assert.equal(tc.verdict, TC_ACT_REDIRECT);
    expectPacket(tc.out, expected, 'TC on the XDP flow');
    const xdp = h.runXdp(frame(data), ext0);
    assert.equal(xdp.verdict, XDP_TX);
    expectPacket(xdp.out, expected, 'XDP again');
    assert.equal(h.tc.counter(abi.LB_CNT_TC_TRANSLATED), translated, 'no new flow: both found the shared entry');
    const [row] = listConntrack(h.tc.tc.conntrack);
    assert.equal(row?.packetsOriginal, 3);
  });

  test('a flow TC started is continued by XDP', () => {
    nodePort([REMOTE_BE]);
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62003, dport: NODE_PORT, tcpFlags: TCP_SYN };
    assert.equal(h.runTc(frame(syn), ext0).verdict, TC_ACT_REDIRECT);
    const data: L4Spec = { ...syn, tcpFlags: TCP_ACK };
    const { verdict, out } = h.runXdp(frame(data), ext0);
    assert.equal(verdict, XDP_TX);
    expectPacket(out, forwarded({ ...data, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }, GW_MAC, EXT_MAC), 'XDP on a TC flow');
  });
});

describe('routing: XDP_REDIRECT to an XDP device, XDP_PASS when TC must send it', () => {
  test('a backend behind another XDP device: XDP_REDIRECT with that device\'s MAC', () => {
    nodePort([INT_BE]);
    const before = h.stats(ext0);
    const spec: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62010, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const { verdict, out } = h.runXdp(frame(spec), ext0);
    assert.equal(verdict, XDP_REDIRECT);
    expectPacket(out, forwarded({ ...spec, src: NODE, dst: INT_BE.address, dport: INT_BE.port }, BE_INT_MAC, INT_MAC), 'redirect');
    assert.equal(h.stats(ext0).redirected - before.redirected, 1n);
  });

  test('the same device not listed as an XDP target: XDP_PASS untouched, no conntrack written', () => {
    nodePort([INT_BE]);
    h.inside(() => h.maps.targets.delete(int0));
    const pkt = frame({ proto: 'tcp', src: CLIENT, dst: NODE, sport: 62011, dport: NODE_PORT, tcpFlags: TCP_SYN });
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'not an XDP target');
    assert.equal(listConntrack(h.tc.tc.conntrack).length, 0);
  });

  test('no neighbour for the next hop: XDP_PASS untouched (counted as fallback); TC then translates it', () => {
    nodePort([NO_NEIGH_BE]);
    const before = h.stats(ext0);
    const spec: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62012, dport: NODE_PORT, tcpFlags: TCP_SYN };
    const pkt = frame(spec);
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'no neighbour');
    assert.equal(h.stats(ext0).fallback - before.fallback, 1n);
    assert.equal(listConntrack(h.tc.tc.conntrack).length, 0, 'nothing written before the route was known');
    // TC resolves the neighbour itself (bpf_redirect_neigh).
    const tc = h.runTc(pkt, ext0);
    assert.equal(tc.verdict, TC_ACT_REDIRECT);
    assert.equal(listConntrack(h.tc.tc.conntrack).length, 1);
  });

  test('TTL 1: XDP_PASS, the stack answers time exceeded', () => {
    nodePort([REMOTE_BE]);
    const pkt = frame({ proto: 'tcp', src: CLIENT, dst: NODE, sport: 62013, dport: NODE_PORT, tcpFlags: TCP_SYN, ttl: 1 });
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'ttl 1');
  });
});

describe('the FIB cache of known flows (sluice_xdp_fc, bpf/lib/xdp_fc.h)', () => {
  const CACHED_BE = { id: 5, address: '198.18.0.40', port: 8080, local: false }; // on ext0, neighbour added per test
  const CACHED_BE_MAC = '02:00:00:00:00:40';
  const BOGUS_MAC = '02:00:00:00:0b:ad';

  const slotsOf = (backend: string) => fibCacheSlotsOf(h.xdp.map(abi.SLUICE_MAP_XDP_FC), backend);
  const writeSlot = (slot: number, entry: abi.Lb4XdpFibCache) => writeFibCacheSlot(h.xdp.map(abi.SLUICE_MAP_XDP_FC), slot, entry);

  /** A UDP flow to CACHED_BE opened at XDP, one known-flow packet sent (the slot filled, between `filledAfter` and `filledBefore`, CLOCK_MONOTONIC as bpf_ktime_get_ns). */
  let filledAfter = 0n;
  let filledBefore = 0n;
  function openFlow(sport: number): L4Spec {
    h.ip('neigh', 'replace', CACHED_BE.address, 'lladdr', CACHED_BE_MAC, 'dev', 'ext0', 'nud', 'permanent');
    nodePort([CACHED_BE], 'udp');
    const spec: L4Spec = { proto: 'udp', src: CLIENT, dst: NODE, sport, dport: NODE_PORT, payload: Buffer.from('data') };
    assert.equal(h.runXdp(frame(spec), ext0).verdict, XDP_TX, 'new flow');
    const lookups = h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP);
    filledAfter = process.hrtime.bigint();
    assert.equal(h.runXdp(frame(spec), ext0).verdict, XDP_TX, 'known flow');
    filledBefore = process.hrtime.bigint();
    assert.equal(h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP) - lookups, 1n, 'the first known-flow packet looks the route up');
    return spec;
  }

  const sent = (spec: L4Spec, dmac: string) => forwarded({ ...spec, src: NODE, dst: CACHED_BE.address, dport: CACHED_BE.port }, dmac, EXT_MAC);

  test('a known flow\'s lookup fills a slot tagged with its inputs; a fresh slot answers instead of bpf_fib_lookup', () => {
    const spec = openFlow(62100);
    const [found, ...more] = slotsOf(CACHED_BE.address);
    assert.ok(found && more.length === 0, 'one slot for the flow');
    const filled = found.perCpu.find((c) => c.expires_ns !== 0n)!;
    const ttl = BigInt(abi.SLUICE_XDP_FC_TTL_NS);
    assert.ok(filled.expires_ns >= filledAfter + ttl && filled.expires_ns <= filledBefore + ttl, 'answers for the TTL from its lookup');
    assert.deepEqual([filled.saddr, filled.sport, filled.dport, filled.in_ifindex, filled.out_ifindex, filled.proto, filled.action, filled.dmac.toString('hex')],
      [ip4ToNumber(NODE), 62100, CACHED_BE.port, ext0, ext0, 17, XDP_TX, mac(CACHED_BE_MAC).toString('hex')]);
    assert.equal(filled.max_len, frame(spec).length - 14, 'the IPv4 total length the MTU check passed');
    // A fresh slot with another MAC: the packet leaves with it, and no lookup is made.
    writeSlot(found.slot, { ...filled, dmac: mac(BOGUS_MAC), expires_ns: process.hrtime.bigint() + 10_000_000_000n });
    const lookups = h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP);
    const cached = h.tc.counter(abi.LB_CNT_XDP_FIB_CACHED);
    const { verdict, out } = h.runXdp(frame(spec), ext0);
    assert.equal(verdict, XDP_TX);
    expectPacket(out, sent(spec, BOGUS_MAC), 'sent with the cached answer');
    assert.equal(h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP), lookups);
    assert.equal(h.tc.counter(abi.LB_CNT_XDP_FIB_CACHED) - cached, 1n);
    const [row] = listConntrack(h.tc.tc.conntrack);
    assert.equal(row?.packetsOriginal, 3, 'conntrack still counts every packet');
  });

  test('a stale slot, another flow\'s tag or a longer packet: the full lookup (the neighbour\'s MAC of now)', () => {
    const spec = openFlow(62101);
    const [found] = slotsOf(CACHED_BE.address);
    const filled = found!.perCpu.find((c) => c.expires_ns !== 0n)!;
    const later = process.hrtime.bigint() + 10_000_000_000n;
    const cases: Array<[string, abi.Lb4XdpFibCache]> = [
      ['stale', { ...filled, dmac: mac(BOGUS_MAC), expires_ns: process.hrtime.bigint() - 1n }],
      ['another source port', { ...filled, dmac: mac(BOGUS_MAC), expires_ns: later, sport: 62999 }],
      ['another arrival device', { ...filled, dmac: mac(BOGUS_MAC), expires_ns: later, in_ifindex: int0 }],
      ['a shorter length checked', { ...filled, dmac: mac(BOGUS_MAC), expires_ns: later, max_len: filled.max_len - 1 }],
    ];
    for (const [what, entry] of cases) {
      writeSlot(found!.slot, entry);
      const lookups = h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP);
      const { verdict, out } = h.runXdp(frame(spec), ext0);
      assert.equal(verdict, XDP_TX, what);
      expectPacket(out, sent(spec, CACHED_BE_MAC), what);
      assert.equal(h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP) - lookups, 1n, `${what}: looked up`);
    }
  });

  test('the neighbour gone and the slot stale: XDP_PASS untouched (fallback), as without the cache; TC sends it', () => {
    const spec = openFlow(62102);
    const [found] = slotsOf(CACHED_BE.address);
    h.ip('neigh', 'del', CACHED_BE.address, 'dev', 'ext0');
    writeSlot(found!.slot, { ...found!.perCpu.find((c) => c.expires_ns !== 0n)!, expires_ns: process.hrtime.bigint() - 1n });
    const before = h.stats(ext0);
    const pkt = frame(spec);
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'no neighbour');
    assert.equal(h.stats(ext0).fallback - before.fallback, 1n);
    assert.equal(h.runTc(pkt, ext0).verdict, TC_ACT_REDIRECT, 'TC continues the flow');
  });

  test('a cached XDP_REDIRECT to a device no longer among the XDP devices: XDP_PASS untouched', () => {
    nodePort([INT_BE], 'udp');
    const spec: L4Spec = { proto: 'udp', src: CLIENT, dst: NODE, sport: 62103, dport: NODE_PORT, payload: Buffer.from('x') };
    for (let i = 0; i < 3; i++) assert.equal(h.runXdp(frame(spec), ext0).verdict, XDP_REDIRECT);
    const [found, ...more] = slotsOf(INT_BE.address);
    assert.ok(found && more.length === 0, 'cached');
    // Fresh however slow the machine: the cached answer is what is being checked.
    const cached = found.perCpu.find((c) => c.expires_ns !== 0n)!;
    assert.equal(cached.action, XDP_REDIRECT);
    writeSlot(found.slot, { ...cached, expires_ns: process.hrtime.bigint() + 10_000_000_000n });
    h.inside(() => h.maps.targets.delete(int0));
    const pkt = frame(spec);
    const { verdict, out } = h.runXdp(pkt, ext0);
    assert.equal(verdict, XDP_PASS);
    expectPacket(out, pkt, 'not an XDP target any more');
    h.inside(() => h.maps.targets.set(int0, int0));
    const lookups = h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP);
    assert.equal(h.runXdp(frame(spec), ext0).verdict, XDP_REDIRECT, 'listed again: sent from the cache');
    assert.equal(h.tc.counter(abi.LB_CNT_XDP_FIB_LOOKUP), lookups);
  });
});

describe('loadBalancerSourceRanges at XDP', () => {
  test('a client outside the ranges is dropped at XDP (XDP_DROP, counted as TC counts it); one inside is sent', () => {
    const flags = abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE;
    const vip = '198.18.100.10';
    syncSourceRanges(h.tc.tc.sourceRanges, 9, ['198.18.0.0/28']);
    h.tc.upsertFrontend({ address: vip, port: 80, proto: 'tcp', flags, revNatId: 9, backends: [REMOTE_BE] });
    syncFrontendAddresses(h.maps, [{ address: vip, flags }]);
    const dropsBefore = h.tc.counter(abi.LB_CNT_TC_SRC_RANGE_DROP);
    const before = h.stats(ext0);
    const outside = h.runXdp(frame({ proto: 'tcp', src: '198.18.0.77', dst: vip, sport: 40000, dport: 80, tcpFlags: TCP_SYN }), ext0);
    assert.equal(outside.verdict, XDP_DROP);
    assert.equal(h.tc.counter(abi.LB_CNT_TC_SRC_RANGE_DROP) - dropsBefore, 1n);
    assert.equal(h.stats(ext0).dropped - before.dropped, 1n);
    const inside = h.runXdp(frame({ proto: 'tcp', src: CLIENT, dst: vip, sport: 62020, dport: 80, tcpFlags: TCP_SYN }), ext0);
    assert.equal(inside.verdict, XDP_TX);
  });
});

describe('the frontend-address set', () => {
  test('holds the IPv4 addresses of north-south frontends only, and follows changes', () => {
    const r1 = syncFrontendAddresses(h.maps, [
      { address: NODE, flags: NODEPORT },
      { address: '198.18.100.10', flags: abi.LB_SVC_FLAG_EXTERNAL_IP },
      { address: '198.18.50.1', flags: 0 }, // a ClusterIP
      { address: 'fd00::1', flags: NODEPORT },
    ]);
    assert.deepEqual(r1, { added: 2, removed: 0 });
    const r2 = syncFrontendAddresses(h.maps, [{ address: NODE, flags: NODEPORT }]);
    assert.deepEqual(r2, { added: 0, removed: 1 });
    assert.deepEqual([...h.maps.frontends.entries()].map(([k]) => k), [ip4ToNumber(NODE)]);
  });
});

describe('attach modes', () => {
  test('auto takes generic on a veth (CHECKSUM_PARTIAL frames), native when asked; status shows the mode; off detaches', () => {
    const pinDir = h.tc.pinDir;
    const auto = h.inside(() => attachXdp(h.xdp, 'ext0', 'auto', pinDir));
    assert.equal(auto.mode, 'generic');
    assert.deepEqual(xdpStatus(pinDir).filter((x) => x.mode !== 'off').map((x) => [x.device, x.mode]), [['ext0', 'generic']]);
    const native = h.inside(() => attachXdp(h.xdp, 'ext0', 'native', pinDir));
    assert.equal(native.mode, 'native');
    assert.deepEqual(listXdp(pinDir).map((x) => [x.device, x.mode, x.ifindex]), [['ext0', 'native', ext0]], 'the generic link was replaced');
    assert.ok(detachXdp(pinDir, 'ext0'));
    assert.deepEqual(listXdp(pinDir), []);
  });
});
