// TC's FIB cache (sluice_tc_fc, bpf/lib/tc_fc.h) on crafted packets
// (BPF_PROG_TEST_RUN inside a throwaway namespace whose routes and
// neighbours bpf_fib_lookup reads). A SNATed NodePort flow's packets are
// routed by TC: the first lookup fills a slot, a fresh slot with the same tag
// answers instead of the lookup, and anything else (stale, another flow, a
// longer packet, another arrival device) takes the full lookup with the
// kernel's tables of now. Outputs are compared byte for byte with packets
// built from scratch.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TC_ACT_REDIRECT, diffHex, frame, type L4Spec } from './tc_packet';
import { XdpHarness } from './xdp_harness';
import { fibCacheSlotsOf, writeFibCacheSlot } from './fib_cache_slots';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1';
const NODE_PORT = 30080;
const EXT_MAC = '02:00:00:00:00:01';
const INT_MAC = '02:00:00:00:00:31';
const GW = '198.18.0.2';
const GW_MAC = '02:00:00:00:00:22';
const GW_MAC2 = '02:00:00:00:00:23';
const INT_GW = '198.18.3.2';
const INT_GW_MAC = '02:00:00:00:00:32';
const BOGUS_MAC = '02:00:00:00:0b:ad';
const BACKEND = { id: 2, address: '198.18.2.20', port: 8080, local: false }; // via GW on ext0
const NO_NEIGH_BE = { id: 4, address: '198.18.0.30', port: 8080, local: false }; // on ext0, neighbour unknown

let h: XdpHarness;
let ext0: number;
let int0: number;

const mac = (m: string) => Buffer.from(m.replace(/:/g, ''), 'hex');

function nodePort(backend: typeof BACKEND, proto: 'tcp' | 'udp' = 'udp'): void {
  h.tc.upsertFrontend({ address: NODE, port: NODE_PORT, proto, flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 7, backends: [backend] });
}

/** The client's packet as TC sends it: SNATed to the node, TTL one lower, the next hop's MACs. */
function sent(spec: L4Spec, backend: typeof BACKEND, dmac: string, smac = EXT_MAC): Buffer {
  const out = frame({ ...spec, src: NODE, dst: backend.address, dport: backend.port, ttl: (spec.ttl ?? 64) - 1 });
  mac(dmac).copy(out, 0);
  mac(smac).copy(out, 6);
  return out;
}

function expectPacket(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

const slotsOf = (backend: string) => fibCacheSlotsOf(h.tc.obj.map(abi.SLUICE_MAP_TC_FC), backend);
const writeSlot = (slot: number, entry: abi.Lb4XdpFibCache) => writeFibCacheSlot(h.tc.obj.map(abi.SLUICE_MAP_TC_FC), slot, entry);
const lookups = () => h.tc.counter(abi.LB_CNT_TC_FIB_LOOKUP);
const cachedSends = () => h.tc.counter(abi.LB_CNT_TC_FIB_CACHED);

/** A UDP flow to BACKEND opened at TC (its first packet's lookup fills the slot, between `filledAfter` and `filledBefore`). */
let filledAfter = 0n;
let filledBefore = 0n;
function openFlow(sport: number): { spec: L4Spec; slot: number; filled: abi.Lb4XdpFibCache } {
  nodePort(BACKEND);
  const spec: L4Spec = { proto: 'udp', src: CLIENT, dst: NODE, sport, dport: NODE_PORT, payload: Buffer.from('data') };
  const before = lookups();
  filledAfter = process.hrtime.bigint();
  const { verdict, out } = h.runTc(frame(spec), ext0);
  filledBefore = process.hrtime.bigint();
  assert.equal(verdict, TC_ACT_REDIRECT, 'new flow');
  expectPacket(out, sent(spec, BACKEND, GW_MAC), 'new flow');
  assert.equal(lookups() - before, 1n, 'the first packet looks the route up');
  const [found, ...more] = slotsOf(BACKEND.address);
  assert.ok(found && more.length === 0, 'one slot for the flow');
  return { spec, slot: found.slot, filled: found.perCpu.find((c) => c.expires_ns !== 0n)! };
}

before(() => {
  h = new XdpHarness();
  h.addNodeDevices(EXT_MAC, INT_MAC, NODE);
  h.ip('neigh', 'add', INT_GW, 'lladdr', INT_GW_MAC, 'dev', 'int0', 'nud', 'permanent');
  ext0 = h.ifindex('ext0');
  int0 = h.ifindex('int0');
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.tc.config, { snatAddress: NODE });
  h.ip('neigh', 'replace', GW, 'lladdr', GW_MAC, 'dev', 'ext0', 'nud', 'permanent');
  h.ip('route', 'replace', '198.18.2.0/24', 'via', GW, 'dev', 'ext0');
});

describe('the FIB cache of TC\'s redirect (sluice_tc_fc, bpf/lib/tc_fc.h)', () => {
  test('a lookup fills a slot tagged with its inputs; a fresh slot answers instead of bpf_fib_lookup', () => {
    const { spec, slot, filled } = openFlow(62200);
    const ttl = BigInt(abi.SLUICE_XDP_FC_TTL_NS);
    assert.ok(filled.expires_ns >= filledAfter + ttl && filled.expires_ns <= filledBefore + ttl, 'answers for the TTL from its lookup');
    assert.deepEqual(
      [filled.saddr, filled.sport, filled.dport, filled.in_ifindex, filled.out_ifindex, filled.proto, filled.tos, filled.action, filled.dmac.toString('hex'), filled.smac.toString('hex')],
      [ip4ToNumber(NODE), 62200, BACKEND.port, ext0, ext0, 17, 0, TC_ACT_REDIRECT, mac(GW_MAC).toString('hex'), mac(EXT_MAC).toString('hex')]);
    assert.equal(filled.max_len, frame(spec).length - 14, 'the IPv4 total length the MTU check passed');
    // A fresh slot with another MAC: the packet leaves with it, and no lookup is made.
    writeSlot(slot, { ...filled, dmac: mac(BOGUS_MAC), expires_ns: process.hrtime.bigint() + 10_000_000_000n });
    const [l0, c0] = [lookups(), cachedSends()];
    const { verdict, out } = h.runTc(frame(spec), ext0);
    assert.equal(verdict, TC_ACT_REDIRECT);
    expectPacket(out, sent(spec, BACKEND, BOGUS_MAC), 'sent with the cached answer');
    assert.equal(lookups(), l0);
    assert.equal(cachedSends() - c0, 1n);
  });

  test('a stale slot, another flow\'s tag, another arrival device or a longer packet: the full lookup', () => {
    const { spec, slot, filled } = openFlow(62201);
    const later = process.hrtime.bigint() + 10_000_000_000n;
    const cases: Array<[string, abi.Lb4XdpFibCache]> = [
      ['stale', { ...filled, dmac: mac(BOGUS_MAC), expires_ns: process.hrtime.bigint() - 1n }],
      ['another source port', { ...filled, dmac: mac(BOGUS_MAC), expires_ns: later, sport: 62999 }],
      ['another destination', { ...filled, dmac: mac(BOGUS_MAC), expires_ns: later, daddr: ip4ToNumber('198.18.2.21') }],
      ['another arrival device', { ...filled, dmac: mac(BOGUS_MAC), expires_ns: later, in_ifindex: int0 }],
      ['a shorter length checked', { ...filled, dmac: mac(BOGUS_MAC), expires_ns: later, max_len: filled.max_len - 1 }],
    ];
    for (const [what, entry] of cases) {
      writeSlot(slot, entry);
      const [l0, c0] = [lookups(), cachedSends()];
      const { verdict, out } = h.runTc(frame(spec), ext0);
      assert.equal(verdict, TC_ACT_REDIRECT, what);
      expectPacket(out, sent(spec, BACKEND, GW_MAC), what);
      assert.equal(lookups() - l0, 1n, `${what}: looked up`);
      assert.equal(cachedSends(), c0, `${what}: not sent from the slot`);
    }
  });

  test('a changed neighbour or route is used once the slot is stale', () => {
    const { spec, slot, filled } = openFlow(62202);
    h.ip('neigh', 'replace', GW, 'lladdr', GW_MAC2, 'dev', 'ext0', 'nud', 'permanent');
    writeSlot(slot, { ...filled, expires_ns: process.hrtime.bigint() - 1n });
    expectPacket(h.runTc(frame(spec), ext0).out, sent(spec, BACKEND, GW_MAC2), 'the neighbour\'s new MAC');
    const [refilled] = slotsOf(BACKEND.address);
    const newest = refilled!.perCpu.reduce((a, b) => (b.expires_ns > a.expires_ns ? b : a));
    assert.equal(newest.dmac.toString('hex'), mac(GW_MAC2).toString('hex'), 'refilled with the new answer');

    h.ip('route', 'replace', '198.18.2.0/24', 'via', INT_GW, 'dev', 'int0');
    writeSlot(slot, { ...filled, expires_ns: process.hrtime.bigint() - 1n });
    expectPacket(h.runTc(frame(spec), ext0).out, sent(spec, BACKEND, INT_GW_MAC, INT_MAC), 'the new route\'s device and next hop');
    const [rerouted] = slotsOf(BACKEND.address);
    assert.ok(rerouted!.perCpu.some((c) => c.out_ifindex === int0), 'refilled with the new device');
  });

  test('no neighbour for the next hop: the kernel resolves it (bpf_redirect_neigh) every time, nothing cached', () => {
    nodePort(NO_NEIGH_BE);
    const spec: L4Spec = { proto: 'udp', src: CLIENT, dst: NODE, sport: 62203, dport: NODE_PORT, payload: Buffer.from('x') };
    const [l0, c0] = [lookups(), cachedSends()];
    for (let i = 0; i < 3; i++) assert.equal(h.runTc(frame(spec), ext0).verdict, TC_ACT_REDIRECT);
    assert.equal(lookups() - l0, 3n);
    assert.equal(cachedSends(), c0);
    assert.deepEqual(slotsOf(NO_NEIGH_BE.address), []);
  });
});
