// The prefilter in front of the XDP frontend-address sets (sluice_xdp_pf,
// native/sluice_abi.h): an ARRAY bitmap checked before the hash lookup, kept
// by the agent a superset of both sets. Shown here:
//   - a frontend added through the agent's path (startXdp().frontends, what
//     the syncer's north-south index calls) is served, and passes once removed;
//   - the bits are exactly the slots of the addresses the sets hold, and the
//     program and the agent compute the same slot (IPv4 and IPv6, 64 random
//     addresses each: every one reaches the hash lookup, counted per device);
//   - the filter is consulted first: an address put in the hash without its
//     bit is passed as a non-Service packet;
//   - make-before-break: at every write of a set, the bit of the address
//     written is set.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import * as abi from '../../src/abi/generated';
import { bytesToIp6, ip4ToNumber, numberToIp4 } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { prefilterSlot, readPrefilter, syncFrontendAddresses, syncFrontendAddresses6, type XdpFrontendMaps } from '../../src/datapath/xdp/xdp';
import { startXdp } from '../../src/agent/xdp';
import { AgentMetrics } from '../../src/agent/metrics';
import type { TypedMap } from '../../src/datapath/typedMap';
import { TCP_SYN, frame } from './tc_packet';
import { frame6 } from './tc_packet6';
import { XDP_PASS, XDP_TX, XdpHarness } from './xdp_harness';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1';
const NODE_PORT = 30080;
const GW = '198.18.0.2';
const REMOTE_BE = { id: 2, address: '198.18.2.20', port: 8080, local: false };
const LB = abi.LB_SVC_FLAG_LOADBALANCER;

let h: XdpHarness;
let ext0: number;

/** Packets of ext0 that reached the per-device hash (past prefilter and set) and that left as non-Service (the array). */
function counts(): { checked: bigint; filtered: bigint } {
  const key = Buffer.alloc(4);
  key.writeUInt32LE(ext0);
  const sum = (vs: Buffer[] | undefined, read: (b: Buffer) => bigint) => (vs ?? []).reduce((a, v) => a + read(v), 0n);
  return {
    checked: sum(h.maps.stats.lookupPerCpu(key), (v) => abi.lb_xdp_statsCodec.decode(v).packets),
    filtered: sum(h.maps.passed!.lookupPerCpu(key), (v) => v.readBigUInt64LE(0)),
  };
}

/** Where the program sent `pkt`: 'checked' (the set lookup ran) or 'filtered' (no Service packet). */
function path(pkt: Buffer): { verdict: number; went: 'checked' | 'filtered' } {
  const b = counts();
  const { verdict } = h.runXdp(pkt, ext0);
  const a = counts();
  assert.equal(a.checked - b.checked + a.filtered - b.filtered, 1n, 'counted once');
  return { verdict, went: a.checked > b.checked ? 'checked' : 'filtered' };
}

const udp4 = (dst: string) => frame({ proto: 'udp', src: CLIENT, dst, sport: 40000, dport: 9 });
const udp6 = (dst: string) => frame6({ proto: 'udp', src: 'fd00:18::10', dst, sport: 40000, dport: 9 });

/** The set bits of the prefilter, as slot numbers. */
function bits(): number[] {
  const words = readPrefilter(h.maps.prefilter!);
  const out: number[] = [];
  words.forEach((w, i) => { for (let b = 0; b < 64; b++) if ((w >> BigInt(b)) & 1n) out.push(64 * i + b); });
  return out;
}

const slots = (addrs: Array<number | string>) => [...new Set(addrs.map(prefilterSlot))].sort((a, b) => a - b);

/** A small deterministic generator (xorshift32). */
function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x;
  };
}
const next = rng(0x5eed17);
const rand4 = () => numberToIp4(((198 << 24) | (18 << 16)) + (next() & 0x1ffff)); // 198.18.0.0/15
const rand6 = () => `fd00:${(next() & 0xffff).toString(16)}:${(next() & 0xffff).toString(16)}::${(next() & 0xffff).toString(16)}:${(next() & 0xffff).toString(16)}`;

before(() => {
  h = new XdpHarness();
  h.ip('link', 'add', 'ext0', 'type', 'veth', 'peer', 'name', 'ext0p');
  h.ip('link', 'set', 'ext0p', 'up');
  h.ip('addr', 'add', `${NODE}/24`, 'dev', 'ext0');
  h.ip('link', 'set', 'ext0', 'up');
  h.ip('neigh', 'add', GW, 'lladdr', '02:00:00:00:00:22', 'dev', 'ext0', 'nud', 'permanent');
  h.ip('route', 'add', '198.18.2.0/24', 'via', GW, 'dev', 'ext0');
  ext0 = h.ifindex('ext0');
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.tc.config, { snatAddress: NODE });
});

describe('the XDP prefilter (sluice_xdp_pf)', () => {
  test('through the agent path: a frontend added is served, removed it passes; the bits are exactly the two sets\' slots', () => {
    assert.ok(h.maps.prefilter, `${abi.SLUICE_MAP_XDP_PF} pinned`);
    // The agent's XDP side, sharing the harness's pins (its own object load, no device).
    const agent = startXdp('generic', h.tc.pinDir, [], {}, new AgentMetrics(), pino({ level: 'silent' }));
    assert.ok(agent);
    try {
      h.tc.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: LB, revNatId: 7, backends: [REMOTE_BE] });
      const syn = (sport: number) => frame({ proto: 'tcp', src: CLIENT, dst: NODE, sport, dport: NODE_PORT, tcpFlags: TCP_SYN });
      assert.deepEqual(path(syn(62000)), { verdict: XDP_PASS, went: 'filtered' }, 'no frontend yet');

      const v4 = Array.from({ length: 64 }, rand4).filter((a) => a !== NODE);
      const v6 = Array.from({ length: 64 }, rand6);
      const list = [NODE, ...v4, ...v6].map((address) => ({ address, flags: LB }));
      agent.frontends(list);
      assert.deepEqual(path(syn(62001)), { verdict: XDP_TX, went: 'checked' }, 'added: served at XDP');
      assert.deepEqual(bits(), slots([ip4ToNumber(NODE), ...v4.map(ip4ToNumber), ...v6]), 'exactly the slots of both sets');
      // The program's slot is the agent's: every address reaches the set lookup.
      for (const a of v4) assert.equal(path(udp4(a)).went, 'checked', a);
      for (const a of v6) assert.equal(path(udp6(a)).went, 'checked', a);
      // Addresses whose slot is clear leave before the hash lookup.
      const set = new Set(bits());
      const clear4 = Array.from({ length: 200 }, rand4).filter((a) => !set.has(prefilterSlot(ip4ToNumber(a)))).slice(0, 32);
      const clear6 = Array.from({ length: 200 }, rand6).filter((a) => !set.has(prefilterSlot(a))).slice(0, 32);
      for (const a of clear4) assert.deepEqual(path(udp4(a)), { verdict: XDP_PASS, went: 'filtered' }, a);
      for (const a of clear6) assert.deepEqual(path(udp6(a)), { verdict: XDP_PASS, went: 'filtered' }, a);

      // Removed (with half the others): passed again, its bit gone unless another address shares it.
      const kept = [...v4.slice(0, 32), ...v6.slice(0, 32)];
      agent.frontends(kept.map((address) => ({ address, flags: LB })));
      const expected = slots([...v4.slice(0, 32).map(ip4ToNumber), ...v6.slice(0, 32)]);
      assert.deepEqual(bits(), expected, 'removals cleared their bits');
      const nodeShared = expected.includes(prefilterSlot(ip4ToNumber(NODE)));
      assert.deepEqual(path(syn(62002)), { verdict: XDP_PASS, went: nodeShared ? 'checked' : 'filtered' }, 'removed: passed to TC');
      for (const a of kept) assert.equal(path(a.includes(':') ? udp6(a) : udp4(a)).went, 'checked', a);
    } finally {
      agent.stop();
    }
  });

  test('the filter comes first: an address in the set without its bit is passed as a non-Service packet', () => {
    h.tc.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: LB, revNatId: 7, backends: [REMOTE_BE] });
    h.maps.frontends.set(ip4ToNumber(NODE), 1); // behind the agent's back: no bit
    const syn = frame({ proto: 'tcp', src: CLIENT, dst: NODE, sport: 62010, dport: NODE_PORT, tcpFlags: TCP_SYN });
    assert.deepEqual(path(syn), { verdict: XDP_PASS, went: 'filtered' });
    syncFrontendAddresses(h.maps, [{ address: NODE, flags: LB }]); // the agent repairs it
    assert.deepEqual(path(syn), { verdict: XDP_TX, went: 'checked' });
  });

  test('make before break: at each write of a set, the bit of the address written is set', () => {
    const checkedWrites: string[] = [];
    const isSet = (a: number | string) => bits().includes(prefilterSlot(a));
    function watch<K>(m: TypedMap<K, number>, addr: (k: K) => number | string): TypedMap<K, number> {
      return new Proxy(m, {
        get(target, prop, recv) {
          if (prop === 'set' || prop === 'delete') {
            return (k: K, ...rest: unknown[]) => {
              assert.ok(isSet(addr(k)), `${String(prop)} ${addr(k)}: its bit is set`);
              checkedWrites.push(`${String(prop)} ${addr(k)}`);
              return (Reflect.get(target, prop, recv) as (...a: unknown[]) => unknown).call(target, k, ...rest);
            };
          }
          const v = Reflect.get(target, prop, recv);
          return typeof v === 'function' ? v.bind(target) : v;
        },
      });
    }
    const maps: XdpFrontendMaps = {
      frontends: watch(h.maps.frontends, (k) => k),
      frontends6: watch(h.maps.frontends6!, (k) => bytesToIp6(k.address)),
      prefilter: h.maps.prefilter,
    };
    const a = ['198.18.7.1', '198.18.7.2', '2001:db8::7'];
    const b = ['198.18.7.2', '198.18.7.3', '2001:db8::8'];
    for (const list of [a, b, []]) {
      syncFrontendAddresses(maps, list.map((address) => ({ address, flags: LB })));
      syncFrontendAddresses6(maps, list.map((address) => ({ address, flags: LB })));
    }
    assert.equal(checkedWrites.length, 3 + 4 + 3, checkedWrites.join(', '));
    assert.deepEqual(bits(), [], 'nothing left: every bit cleared after its address');
  });
});
