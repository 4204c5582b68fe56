// Packet fuzzing of the TC (bpf/tc_lb.bpf.c) and pod-veth (bpf/pod_lb.bpf.c)
// programs through BPF_PROG_TEST_RUN (#13 item 3), seeded and reproducible:
//
// * a packet that is not for a Service (random bytes, random headers, valid
//   TCP/UDP/ICMP to addresses and ports that are no frontend, replies of no
//   flow) leaves byte-identical with TC_ACT_OK;
// * every truncation length of valid Service packets (TCP SYN, TCP data,
//   UDP, UDP without checksum, IP options, a first fragment, an ICMP error
//   quoting a flow), with the IPv4 total length left as it was or fixed to
//   the cut, and random byte flips of the same packets, are passed unchanged,
//   dropped, or fully translated: the output then differs from the input
//   only in addresses, ports, MACs and checksums, the IPv4 header checksum
//   is valid, the L4 checksum's residue is that of the input (a correct
//   incremental update; an invalid input stays exactly as invalid), and the
//   new destination is a backend (or the new source the frontend, replies).
//
// Short form in `make test` (FUZZ_RUNS=6: 600 flips, 1 200 random packets);
// FUZZ_RUNS=N gives N*100 flips and N*200 random packets;
// FUZZ_SEED=S replays. Counts go to build/fuzz-results.json.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import fc from 'fast-check';
import { BpfObject, progTestRun } from '../../src/bpf';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TcHarness, type TcFrontend } from './tc_harness';
import { TC_ACT_OK, TC_ACT_SHOT, TCP_ACK, TCP_PSH, TCP_SYN, checksum, diffHex, fragment, frame, icmpError, ipPacket, onesSum, withOptions, type L4Spec } from './tc_packet';
import { fuzzRuns, fuzzSeed, recordFuzzResults } from '../helpers/fuzzResults';

const POD_OBJECT = path.resolve(__dirname, '../../../build/pod_lb.bpf.o');

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1';
const VIP = '10.96.0.10';
const POD = '198.18.10.5';
const LOCAL_BE = { id: 1, address: '198.18.1.10', port: 8080, local: true };
const REMOTE_BE = { id: 2, address: '198.18.2.20', port: 8081, local: false };
const LOCAL_POLICY = abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;

/** One backend per frontend: the translation of a packet does not depend on earlier runs. */
const FRONTENDS: TcFrontend[] = [
  { address: NODE, port: 30080, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT | LOCAL_POLICY, revNatId: 7, backends: [LOCAL_BE] },
  { address: NODE, port: 30080, proto: 'udp', flags: abi.LB_SVC_FLAG_NODEPORT | LOCAL_POLICY, revNatId: 7, backends: [LOCAL_BE] },
  { address: NODE, port: 30081, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 8, backends: [REMOTE_BE] },
  { address: NODE, port: 30081, proto: 'udp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 8, backends: [REMOTE_BE] },
  { address: VIP, port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 9, backends: [LOCAL_BE] },
  { address: VIP, port: 80, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 9, backends: [LOCAL_BE] },
];
const BACKEND_TUPLES = new Set([LOCAL_BE, REMOTE_BE].map((b) => `${b.address}:${b.port}`));
const FRONTEND_TUPLES = new Set(FRONTENDS.map((f) => `${f.address}:${f.port}`));

let h: TcHarness;
let pod: BpfObject;

type Prog = 'tc ingress' | 'tc egress' | 'pod ingress' | 'pod egress';
function run(prog: Prog, packet: Buffer): { verdict: number; out: Buffer } {
  const p = prog === 'tc ingress' ? h.obj.program('sluice_tc_ingress')
    : prog === 'tc egress' ? h.obj.program('sluice_tc_egress')
      : pod.program(prog === 'pod ingress' ? abi.SLUICE_PROG_POD_INGRESS : abi.SLUICE_PROG_POD_EGRESS);
  const r = progTestRun(p.fd, { dataIn: packet });
  return { verdict: r.retval, out: r.dataOut };
}

function resetMaps(): void {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: NODE });
  for (const f of FRONTENDS) h.upsertFrontend(f);
}

before(() => {
  h = TcHarness.create('sluice-fuzz-pkt');
  pod = BpfObject.open(POD_OBJECT, { pinDir: h.pinDir });
  pod.load();
  resetMaps();
});
after(() => {
  pod?.close();
  h?.close();
});

const tally = { generated: 0, unchanged: 0, dropped: 0, translated: 0, crashed: 0 };

// ---- the invariant -------------------------------------------------------

const ETH = 14;
const u16 = (b: Buffer, off: number) => (off + 2 <= b.length ? b.readUInt16BE(off) : undefined);
const ipText = (b: Buffer, off: number) => `${b[off]}.${b[off + 1]}.${b[off + 2]}.${b[off + 3]}`;

/** Folded one's-complement sum of the L4 bytes present plus the pseudo header (as the header's lengths say). */
function l4Residue(b: Buffer, ihl: number, proto: number): number {
  const totLen = b.readUInt16BE(ETH + 2);
  const pseudo = Buffer.alloc(12);
  b.copy(pseudo, 0, ETH + 12, ETH + 20);
  pseudo.writeUInt8(proto, 9);
  pseudo.writeUInt16BE((totLen - ihl) & 0xffff, 10);
  const seg = b.subarray(ETH + ihl);
  let sum = onesSum(pseudo) + onesSum(seg.length % 2 ? Buffer.concat([seg, Buffer.alloc(1)]) : seg);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum === 0 ? 0xffff : sum; // +0 and -0 are one value
}

/**
 * Why `out` is neither the input unchanged, nor a drop, nor a fully and
 * validly translated `input`; undefined when it is one of those.
 */
function violation(input: Buffer, verdict: number, out: Buffer, direction: 'forward' | 'reply'): string | undefined {
  if (verdict === TC_ACT_SHOT) return undefined;
  if (out.equals(input)) return verdict === TC_ACT_OK || verdict === 7 ? undefined : `unchanged with verdict ${verdict}`;
  if (out.length !== input.length) return `length ${input.length} -> ${out.length}`;
  if (input.length < ETH + 20 || input.readUInt16BE(12) !== 0x0800) return 'rewrote a frame that holds no IPv4 header';
  const ihl = (input[ETH]! & 0x0f) * 4;
  if (input.length < ETH + ihl) return 'rewrote a packet whose IPv4 header is cut';
  const proto = input[ETH + 9]!;
  const l4 = ETH + ihl;
  const fragOffset = input.readUInt16BE(ETH + 6) & 0x1fff;
  // Bytes a translation may change.
  const allowed = new Set<number>();
  for (let i = 0; i < 12; i++) allowed.add(i); // MACs (redirects)
  for (const i of [8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]) allowed.add(ETH + i); // TTL (forwarding), checksum, addresses
  const l4Csum = proto === 6 ? l4 + 16 : proto === 17 ? l4 + 6 : proto === 1 ? l4 + 2 : -1;
  if (fragOffset === 0 && (proto === 6 || proto === 17)) for (const i of [0, 1, 2, 3]) allowed.add(l4 + i);
  if (l4Csum >= 0 && fragOffset === 0) [l4Csum, l4Csum + 1].forEach((i) => allowed.add(i));
  if (proto === 1 && fragOffset === 0) for (let i = l4 + 8; i < input.length && i < l4 + 8 + 60 + 8; i++) allowed.add(i); // the quoted headers
  for (let i = 0; i < input.length; i++) if (input[i] !== out[i] && !allowed.has(i)) return `byte ${i} changed (not an address, port or checksum)`;
  // A valid header stays valid; a broken one (a flipped byte) stays exactly as broken (incremental update).
  const ipResidue = (b: Buffer) => { const r = onesSum(b.subarray(ETH, ETH + ihl)); return r === 0 ? 0xffff : r; };
  if (ipResidue(out) !== ipResidue(input)) return checksum(input.subarray(ETH, ETH + ihl)) === 0 ? 'IPv4 header checksum invalid' : 'IPv4 header checksum not updated with the rewrite';
  const portsChanged = [0, 1, 2, 3].some((i) => input[l4 + i] !== out[l4 + i]);
  const addrsChanged = [12, 13, 14, 15, 16, 17, 18, 19].some((i) => input[ETH + i] !== out[ETH + i]);
  if (fragOffset === 0 && (proto === 6 || proto === 17 || proto === 1) && (portsChanged || addrsChanged)) {
    if (out.length < l4Csum + 2) return 'addresses or ports rewritten, but the L4 checksum is cut off (cannot be right)';
    const udpNoCsum = proto === 17 && input.readUInt16BE(l4Csum) === 0;
    if (udpNoCsum) {
      if (out.readUInt16BE(l4Csum) !== 0) return 'UDP without checksum got one';
    } else if (proto !== 1 && l4Residue(input, ihl, proto) !== l4Residue(out, ihl, proto)) {
      return 'L4 checksum not updated with the rewrite';
    } else if (proto === 1) {
      const sum = (b: Buffer) => onesSum(b.subarray(l4).length % 2 ? Buffer.concat([b.subarray(l4), Buffer.alloc(1)]) : b.subarray(l4));
      const fold = (n: number) => { while (n > 0xffff) n = (n & 0xffff) + (n >>> 16); return n === 0 ? 0xffff : n; };
      if (fold(sum(input)) !== fold(sum(out))) return 'ICMP checksum not updated with the rewrite';
    }
  }
  if (proto === 6 || proto === 17) {
    const dst = `${ipText(out, ETH + 16)}:${fragOffset === 0 ? u16(out, l4 + 2) : '?'}`;
    const src = `${ipText(out, ETH + 12)}:${fragOffset === 0 ? u16(out, l4) : '?'}`;
    if (fragOffset === 0 && direction === 'forward' && !BACKEND_TUPLES.has(dst)) return `forward packet sent to ${dst}, not a backend`;
    if (fragOffset === 0 && direction === 'reply' && !FRONTEND_TUPLES.has(src)) return `reply from ${src}, not a frontend`;
  }
  return undefined;
}

/**
 * BPF_PROG_TEST_RUN refuses (EINVAL) an IPv4 frame shorter than an IPv4
 * header (the kernel pulls one before the run): such frames cannot be fed,
 * and are counted apart. On a real device the programs' bounds checks
 * (verified by the verifier) are what cover them.
 */
const tooShortForTestRun = (p: Buffer) => p.length < ETH + 20 && p.length >= ETH && p.readUInt16BE(12) === 0x0800;
let kernelRefused = 0;

function expectSafe(prog: Prog, input: Buffer, direction: 'forward' | 'reply', what: string): void {
  let r: { verdict: number; out: Buffer };
  if (tooShortForTestRun(input)) {
    kernelRefused++;
    return;
  }
  try {
    r = run(prog, input);
  } catch (err) {
    tally.crashed++;
    throw new Error(`${prog} ${what}: BPF_PROG_TEST_RUN failed: ${(err as Error).message}`);
  }
  tally.generated++;
  const why = violation(input, r.verdict, r.out, direction);
  assert.equal(why, undefined, `${prog} ${what}: ${why} (verdict ${r.verdict})\n${diffHex(r.out, input)}\ninput ${input.toString('hex')}`);
  if (r.verdict === TC_ACT_SHOT) tally.dropped++;
  else if (r.out.equals(input)) tally.unchanged++;
  else tally.translated++;
}

// ---- Service packets ----------------------------------------------------

interface ServicePacket {
  name: string;
  prog: Prog;
  direction: 'forward' | 'reply';
  packet: Buffer;
  /** Packets run first (each time), so the flow this one belongs to exists. */
  setup?: Array<{ prog: Prog; packet: Buffer }>;
}

function servicePackets(): ServicePacket[] {
  const out: ServicePacket[] = [];
  const payload = Buffer.from('GET / HTTP/1.0\r\nHost: fuzz\r\n\r\n');
  for (const [prog, dst, port] of [['tc ingress', NODE, 30080], ['tc ingress', NODE, 30081], ['pod ingress', VIP, 80]] as const) {
    const src = prog === 'pod ingress' ? POD : CLIENT;
    const syn: L4Spec = { proto: 'tcp', src, dst, sport: 40000 + port % 100, dport: port, tcpFlags: TCP_SYN };
    const udp: L4Spec = { proto: 'udp', src, dst, sport: 41000 + port % 100, dport: port, payload };
    out.push(
      { name: `TCP SYN to ${dst}:${port}`, prog, direction: 'forward', packet: frame(syn) },
      { name: `TCP data to ${dst}:${port}`, prog, direction: 'forward', packet: frame({ ...syn, tcpFlags: TCP_ACK | TCP_PSH, payload }) },
      { name: `UDP to ${dst}:${port}`, prog, direction: 'forward', packet: frame(udp) },
      { name: `UDP without checksum to ${dst}:${port}`, prog, direction: 'forward', packet: frame({ ...udp, udpNoChecksum: true }) },
      { name: `TCP SYN with 3 words of IP options to ${dst}:${port}`, prog, direction: 'forward', packet: withOptions(syn, 3) },
      { name: `UDP with 10 words of IP options to ${dst}:${port}`, prog, direction: 'forward', packet: withOptions(udp, 10) },
      { name: `first fragment of UDP to ${dst}:${port}`, prog, direction: 'forward', packet: fragment(ipPacket({ ...udp, payload: Buffer.alloc(600, 7), id: 77 }), 256)[0] },
    );
  }
  // Replies of a flow, and an ICMP error about it, after the flow's first packet.
  const synLocal: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 42000, dport: 30080, tcpFlags: TCP_SYN };
  const replyLocal: L4Spec = { proto: 'tcp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 42000, tcpFlags: TCP_SYN | TCP_ACK, payload };
  out.push({ name: 'backend reply (externalTrafficPolicy Local)', prog: 'tc egress', direction: 'reply', packet: frame(replyLocal), setup: [{ prog: 'tc ingress', packet: frame(synLocal) }] });
  // An ICMP error from a router on the client's side about the reply (NODE:30080 -> CLIENT), back to the node.
  const quotedReply = ipPacket({ proto: 'tcp', src: NODE, dst: CLIENT, sport: 30080, dport: 42000, tcpFlags: TCP_SYN | TCP_ACK });
  out.push({ name: 'ICMP error quoting a reply of a flow', prog: 'tc ingress', direction: 'forward', packet: icmpError('198.18.0.99', NODE, quotedReply), setup: [{ prog: 'tc ingress', packet: frame(synLocal) }] });
  const synPod: L4Spec = { proto: 'udp', src: POD, dst: VIP, sport: 43000, dport: 80, payload };
  const replyPod: L4Spec = { proto: 'udp', src: LOCAL_BE.address, dst: POD, sport: LOCAL_BE.port, dport: 43000, payload };
  out.push({ name: 'backend reply to a pod (UDP)', prog: 'pod egress', direction: 'reply', packet: frame(replyPod), setup: [{ prog: 'pod ingress', packet: frame(synPod) }] });
  return out;
}

/** The packet cut to `length` bytes; with `fixLength`, the IPv4 total length says so (header checksum recomputed). */
function cut(packet: Buffer, length: number, fixLength: boolean): Buffer {
  const c = Buffer.from(packet.subarray(0, length));
  if (fixLength && c.length >= ETH + 20 && c.readUInt16BE(12) === 0x0800) {
    const ihl = (c[ETH]! & 0x0f) * 4;
    c.writeUInt16BE(c.length - ETH, ETH + 2);
    if (c.length >= ETH + ihl) {
      c.writeUInt16BE(0, ETH + 10);
      c.writeUInt16BE(checksum(c.subarray(ETH, ETH + ihl)), ETH + 10);
    }
  }
  return c;
}

test('Service packets are translated whole: the full packets first', () => {
  for (const sp of servicePackets()) {
    resetMaps();
    for (const s of sp.setup ?? []) run(s.prog, s.packet);
    const r = run(sp.prog, sp.packet);
    assert.notEqual(r.verdict, TC_ACT_SHOT, `${sp.name}: dropped`);
    // Each must be a real Service packet the program translates, else its truncations prove nothing.
    assert.ok(!r.out.equals(sp.packet), `${sp.name}: left unchanged`);
    assert.equal(violation(sp.packet, r.verdict, r.out, sp.direction), undefined, sp.name);
  }
});

test('every truncation of a Service packet is passed unchanged, dropped, or fully translated', () => {
  for (const sp of servicePackets()) {
    // Up to 14 bytes (an Ethernet header and nothing behind it) the kernel refuses the run (EINVAL): such a frame never reaches a TC program.
    // One backend per frontend: a cut packet's run cannot change where the next one goes.
    resetMaps();
    for (const s of sp.setup ?? []) run(s.prog, s.packet);
    for (let length = ETH + 1; length < sp.packet.length; length++) {
      for (const fixLength of [false, true]) {
        expectSafe(sp.prog, cut(sp.packet, length, fixLength), sp.direction, `${sp.name} cut to ${length} bytes${fixLength ? ' (total length fixed)' : ''}`);
      }
    }
  }
});

test('random byte flips of Service packets are passed unchanged, dropped, or fully translated', () => {
  const packets = servicePackets();
  resetMaps();
  const seed = fuzzSeed(1301);
  fc.assert(fc.property(
    fc.nat(packets.length - 1), fc.array(fc.tuple(fc.nat(), fc.integer({ min: 1, max: 255 })), { minLength: 1, maxLength: 4 }),
    (which, flips) => {
      const sp = packets[which]!;
      const p = Buffer.from(sp.packet);
      for (const [at, x] of flips) p[ETH + (at % (p.length - ETH))]! ^= x;
      for (const s of sp.setup ?? []) run(s.prog, s.packet);
      expectSafe(sp.prog, p, sp.direction, `${sp.name} with flips ${JSON.stringify(flips)}`);
    },
  ), { numRuns: fuzzRuns(6) * 100, seed, includeErrorInReport: true });
});

// ---- packets that are not for a Service ------------------------------------

const notFrontend = (addr: string, port: number, proto: 'tcp' | 'udp') =>
  !FRONTENDS.some((f) => f.address === addr && f.port === port && f.proto === proto);

const ipv4 = fc.tuple(fc.integer({ min: 1, max: 223 }), fc.nat(255), fc.nat(255), fc.integer({ min: 1, max: 254 })).map((a) => a.join('.'));
const anyAddress = fc.oneof(ipv4, fc.constantFrom(NODE, VIP, CLIENT, POD, LOCAL_BE.address, REMOTE_BE.address));

test('packets that are not for a Service leave byte-identical with TC_ACT_OK', () => {
  resetMaps();
  const seed = fuzzSeed(1302);
  const progs: Prog[] = ['tc ingress', 'tc egress', 'pod ingress', 'pod egress'];
  const l4 = fc.record({
    proto: fc.constantFrom('tcp' as const, 'udp' as const), src: anyAddress, dst: anyAddress, sport: fc.integer({ min: 1, max: 65535 }), dport: fc.integer({ min: 1, max: 65535 }),
    tcpFlags: fc.nat(255), payload: fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)), udpNoChecksum: fc.boolean(),
  }).filter((s) => notFrontend(s.dst, s.dport, s.proto));
  const packet = fc.oneof(
    // Random bytes, and random bytes behind an IPv4 ethertype and version nibble.
    fc.uint8Array({ minLength: ETH + 1, maxLength: 128 }).map((a) => Buffer.from(a)),
    fc.uint8Array({ minLength: 15, maxLength: 128 }).map((a) => {
      const b = Buffer.from(a);
      b.writeUInt16BE(0x0800, 12);
      b[ETH] = 0x40 | (b[ETH]! & 0x0f);
      return b;
    }),
    // Valid TCP/UDP to no frontend (and, on egress, of no flow).
    l4.map((s) => frame(s)),
    // An ICMP error quoting a packet of no flow.
    l4.map((s) => icmpError(s.src, s.dst, ipPacket({ ...s, src: s.dst, dst: s.src, sport: s.dport, dport: s.sport }))),
  ).filter((b) => !isServicePacket(b));
  fc.assert(fc.property(fc.constantFrom(...progs), packet.filter((p) => !tooShortForTestRun(p)), (prog, p) => {
    const r = run(prog, p);
    tally.generated++;
    assert.equal(r.verdict, TC_ACT_OK, `${prog}: verdict ${r.verdict} for ${p.toString('hex')}`);
    assert.ok(r.out.equals(p), `${prog}: changed a packet that is not for a Service\n${diffHex(r.out, p)}`);
    tally.unchanged++;
  }), { numRuns: fuzzRuns(6) * 200, seed, includeErrorInReport: true });
});

/** A random frame that happens to be a valid IPv4 TCP/UDP packet to a frontend (kept out of the not-a-Service set). */
function isServicePacket(b: Buffer): boolean {
  if (b.length < ETH + 20 || b.readUInt16BE(12) !== 0x0800) return false;
  const ihl = (b[ETH]! & 0x0f) * 4;
  const proto = b[ETH + 9];
  if ((proto !== 6 && proto !== 17) || b.length < ETH + ihl + 4) return false;
  const dst = ipText(b, ETH + 16);
  return !notFrontend(dst, b.readUInt16BE(ETH + ihl + 2), proto === 6 ? 'tcp' : 'udp') || ip4ToNumber(dst) === ip4ToNumber(VIP);
}

after(() => {
  recordFuzzResults('packets', { ...tally, rejected: tally.unchanged + tally.dropped, kernelRefused, seed: fuzzSeed(1301) });
  console.log(`packet fuzz: ${tally.generated} cases through BPF_PROG_TEST_RUN: ${tally.unchanged} unchanged, ${tally.dropped} dropped, ${tally.translated} fully translated, ${tally.crashed} failed runs; ${kernelRefused} IPv4 frames shorter than an IPv4 header not runnable`);
});

test('the invariant itself: a half-rewritten packet is caught', () => {
  const sp = servicePackets().find((p) => p.name.startsWith('TCP data'))!;
  resetMaps();
  const full = run(sp.prog, sp.packet).out;
  const ihl = 20;
  const portOnly = Buffer.from(sp.packet);
  full.copy(portOnly, ETH + ihl + 2, ETH + ihl + 2, ETH + ihl + 4); // the port rewritten, checksums not
  assert.match(violation(sp.packet, TC_ACT_OK, portOnly, 'forward') ?? '', /checksum/);
  const staleIpCsum = Buffer.from(full);
  staleIpCsum.writeUInt16BE(sp.packet.readUInt16BE(ETH + 10), ETH + 10);
  assert.match(violation(sp.packet, TC_ACT_OK, staleIpCsum, 'forward') ?? '', /IPv4 header checksum/);
  const elsewhere = Buffer.from(full);
  elsewhere.writeUInt16BE(9999, ETH + ihl + 2);
  assert.ok(violation(sp.packet, TC_ACT_OK, elsewhere, 'forward'));
  const payloadTouched = Buffer.from(full);
  payloadTouched[payloadTouched.length - 1]! ^= 1;
  assert.match(violation(sp.packet, TC_ACT_OK, payloadTouched, 'forward') ?? '', /not an address, port or checksum/);
  assert.equal(violation(sp.packet, TC_ACT_OK, full, 'forward'), undefined);
});
