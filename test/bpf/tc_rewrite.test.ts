// Byte-exact fixtures of the TC IPv4 rewrite (issue 12: lb4_rewrite_packed).
// Each case runs the first packet of a flow (new-flow path) and a later one
// (known-flow path) through sluice_tc_ingress/egress and compares the output
// frame with bytes pinned from main's helper-based rewrite (bpf_skb_store_bytes
// + bpf_l3/l4_csum_replace, commit 61708a1), so a rewrite that computes the
// checksums another way must produce the very same bytes, including the
// one's-complement corner cases (a checksum landing on 0x0000, a UDP sum of 0
// sent as 0xffff, a UDP checksum 0 left 0). The pinned bytes are also checked
// against a packet built from scratch (tc_packet.ts) where one exists.
//
// BPF_PROG_TEST_RUN builds its skb with ip_summed CHECKSUM_NONE and offers no
// way to set CHECKSUM_PARTIAL or CHECKSUM_COMPLETE; those states are covered by
// the e2e veth tests (tc_northsouth, pod_lb, ...) where a local socket's
// packets really are CHECKSUM_PARTIAL.
//
// SLUICE_PRINT_FIXTURES=1 prints the actual bytes as a JSON map (to re-pin).
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { writeTcConfig, type TcConfig } from '../../src/datapath/tc/config';
import { TcHarness, type TcFrontend } from './tc_harness';
import {
  TC_ACT_OK, TCP_ACK, TCP_PSH, TCP_SYN, diffHex, fragment, frame, ipPacket, type L4Spec,
} from './tc_packet';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1';
const EXTERNAL_IP = '198.18.100.10';
const LOCAL_BE = { id: 1, address: '198.18.1.10', port: 8080, local: true };
const REMOTE_BE = { id: 2, address: '198.18.2.20', port: 8080, local: false };
const LOCAL_POLICY = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;

interface Step {
  direction: 'ingress' | 'egress';
  /** The input frame (from a spec, or raw for fragments). */
  input: Buffer;
  /** The same translation built from scratch, when one can be (not for fragments). */
  scratch?: Buffer;
}

interface Fixture {
  name: string;
  frontend: TcFrontend;
  config?: TcConfig;
  steps: Step[];
}

const step = (direction: 'ingress' | 'egress', input: L4Spec, expected: L4Spec): Step =>
  ({ direction, input: frame(input), scratch: frame(expected) });

/** A 2-byte payload word for which `translated` (a spec) gets the L4 checksum `want` from scratch. */
function payloadFor(translated: (payload: Buffer) => L4Spec, want: number): Buffer {
  for (let word = 0; word <= 0xffff; word++) {
    const payload = Buffer.alloc(2);
    payload.writeUInt16BE(word);
    const s = translated(payload);
    const seg = ipPacket(s).subarray(20);
    if (seg.readUInt16BE(s.proto === 'tcp' ? 16 : 6) === want) return payload;
  }
  throw new Error(`no payload gives checksum ${want.toString(16)}`);
}

function fixtures(): Fixture[] {
  const out: Fixture[] = [];

  // 1. TCP original, DNAT only (externalTrafficPolicy Local): daddr + dport change.
  {
    const fe = { address: NODE, port: 30080, proto: 'tcp' as const, flags: LOCAL_POLICY, revNatId: 1, backends: [LOCAL_BE] };
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 40000, dport: 30080, tcpFlags: TCP_SYN };
    const data: L4Spec = { ...syn, tcpFlags: TCP_ACK | TCP_PSH, seq: 1001, payload: Buffer.from('GET / HTTP/1.0\r\n\r\n') };
    out.push({ name: 'tcp original dnat-only', frontend: fe, steps: [
      step('ingress', syn, { ...syn, dst: LOCAL_BE.address, dport: LOCAL_BE.port }),
      step('ingress', data, { ...data, dst: LOCAL_BE.address, dport: LOCAL_BE.port }),
    ] });
    // 2. Its reply on egress: saddr + sport change.
    const reply: L4Spec = { proto: 'tcp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 40000, tcpFlags: TCP_ACK | TCP_PSH, payload: Buffer.from('hello') };
    out.push({ name: 'tcp reply dnat-only (egress)', frontend: fe, steps: [
      step('ingress', syn, { ...syn, dst: LOCAL_BE.address, dport: LOCAL_BE.port }),
      step('egress', reply, { ...reply, src: NODE, sport: 30080 }),
      step('egress', { ...reply, seq: 1006 }, { ...reply, seq: 1006, src: NODE, sport: 30080 }),
    ] });
  }

  // 3. TCP SNAT + DNAT to a remote backend, client port kept: saddr, daddr, dport change.
  {
    const fe = { address: NODE, port: 30080, proto: 'tcp' as const, flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 2, backends: [REMOTE_BE] };
    const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62000, dport: 30080, tcpFlags: TCP_SYN };
    const ack: L4Spec = { ...syn, tcpFlags: TCP_ACK, seq: 1001, payload: Buffer.from('x') };
    out.push({ name: 'tcp original snat+dnat', frontend: fe, steps: [
      step('ingress', syn, { ...syn, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }),
      step('ingress', ack, { ...ack, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }),
    ] });
    // 4. Its reply on ingress: saddr, sport, daddr change, dport kept.
    const reply: L4Spec = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 62000, tcpFlags: TCP_ACK, payload: Buffer.from('answer') };
    out.push({ name: 'tcp reply snat+dnat (ingress)', frontend: fe, steps: [
      step('ingress', syn, { ...syn, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }),
      step('ingress', reply, { ...reply, src: NODE, sport: 30080, dst: CLIENT }),
      step('ingress', { ...reply, seq: 1007 }, { ...reply, seq: 1007, src: NODE, sport: 30080, dst: CLIENT }),
    ] });
    // 5. The translated TCP checksum lands on 0x0000 (from scratch; an incremental update must not give 0xffff).
    const zero = payloadFor((payload) => ({ ...ack, payload, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }), 0);
    out.push({ name: 'tcp checksum becomes 0x0000', frontend: fe, steps: [
      step('ingress', syn, { ...syn, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }),
      step('ingress', { ...ack, payload: zero }, { ...ack, payload: zero, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port }),
    ] });
  }

  // 6. UDP SNAT + DNAT with the client port remapped (one-port range): all four fields change, both directions.
  {
    const fe = { address: EXTERNAL_IP, port: 53, proto: 'udp' as const, flags: abi.LB_SVC_FLAG_EXTERNAL_IP, revNatId: 3, backends: [REMOTE_BE] };
    const config = { snatAddress: NODE, snatPortMin: 61000, snatPortMax: 61000 };
    const q: L4Spec = { proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 5353, dport: 53, payload: Buffer.from('query') };
    const a: L4Spec = { proto: 'udp', src: REMOTE_BE.address, dst: NODE, sport: REMOTE_BE.port, dport: 61000, payload: Buffer.from('answer!') };
    const xq = (s: L4Spec): L4Spec => ({ ...s, src: NODE, sport: 61000, dst: REMOTE_BE.address, dport: REMOTE_BE.port });
    out.push({ name: 'udp original+reply snat+dnat, port remapped', frontend: fe, config, steps: [
      step('ingress', q, xq(q)),
      step('ingress', { ...q, payload: Buffer.from('again') }, xq({ ...q, payload: Buffer.from('again') })),
      step('ingress', a, { ...a, src: EXTERNAL_IP, sport: 53, dst: CLIENT, dport: 5353 }),
    ] });
    // 7. UDP checksum 0 ("none") stays 0 in both directions.
    out.push({ name: 'udp checksum 0 stays 0', frontend: fe, config, steps: [
      step('ingress', { ...q, udpNoChecksum: true }, xq({ ...q, udpNoChecksum: true })),
      step('ingress', { ...q, udpNoChecksum: true, payload: Buffer.from('b') }, xq({ ...q, udpNoChecksum: true, payload: Buffer.from('b') })),
      step('ingress', { ...a, udpNoChecksum: true }, { ...a, udpNoChecksum: true, src: EXTERNAL_IP, sport: 53, dst: CLIENT, dport: 5353 }),
    ] });
    // 8. A translated UDP sum of 0 is sent as 0xffff (RFC 768), original and reply.
    const zq = payloadFor((payload) => xq({ ...q, payload }), 0xffff);
    const za = payloadFor((payload) => ({ ...a, payload, src: EXTERNAL_IP, sport: 53, dst: CLIENT, dport: 5353 }), 0xffff);
    out.push({ name: 'udp checksum 0 becomes 0xffff', frontend: fe, config, steps: [
      step('ingress', q, xq(q)),
      step('ingress', { ...q, payload: zq }, xq({ ...q, payload: zq })),
      step('ingress', { ...a, payload: za }, { ...a, payload: za, src: EXTERNAL_IP, sport: 53, dst: CLIENT, dport: 5353 }),
    ] });
  }

  // 9. Ports unchanged (frontend port = backend port, client port kept): addresses only.
  {
    const fe = { address: EXTERNAL_IP, port: 8080, proto: 'udp' as const, flags: abi.LB_SVC_FLAG_EXTERNAL_IP, revNatId: 4, backends: [REMOTE_BE] };
    const q: L4Spec = { proto: 'udp', src: CLIENT, dst: EXTERNAL_IP, sport: 62500, dport: 8080, payload: Buffer.from('ping') };
    const a: L4Spec = { proto: 'udp', src: REMOTE_BE.address, dst: NODE, sport: 8080, dport: 62500, payload: Buffer.from('pong') };
    out.push({ name: 'udp addresses only', frontend: fe, steps: [
      step('ingress', q, { ...q, src: NODE, dst: REMOTE_BE.address }),
      step('ingress', q, { ...q, src: NODE, dst: REMOTE_BE.address }),
      step('ingress', a, { ...a, src: EXTERNAL_IP, dst: CLIENT }),
    ] });
  }

  // 10. DNAT-only UDP with the client's address kept: daddr + dport (original), saddr + sport (reply on egress).
  {
    const fe = { address: NODE, port: 30053, proto: 'udp' as const, flags: LOCAL_POLICY, revNatId: 5, backends: [LOCAL_BE] };
    const q: L4Spec = { proto: 'udp', src: CLIENT, dst: NODE, sport: 40053, dport: 30053, payload: Buffer.from('q1') };
    const a: L4Spec = { proto: 'udp', src: LOCAL_BE.address, dst: CLIENT, sport: LOCAL_BE.port, dport: 40053, payload: Buffer.from('a1') };
    out.push({ name: 'udp dnat-only', frontend: fe, steps: [
      step('ingress', q, { ...q, dst: LOCAL_BE.address, dport: LOCAL_BE.port }),
      step('ingress', { ...q, payload: Buffer.from('q2') }, { ...q, payload: Buffer.from('q2'), dst: LOCAL_BE.address, dport: LOCAL_BE.port }),
      step('egress', a, { ...a, src: NODE, sport: 30053 }),
    ] });
  }

  // 11. Fragments: the first carries the ports, the later one only addresses (no L4 header to fix).
  {
    const fe = { address: NODE, port: 30053, proto: 'udp' as const, flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 6, backends: [REMOTE_BE] };
    const payload = Buffer.alloc(64);
    for (let i = 0; i < payload.length; i++) payload[i] = (i * 7 + 3) & 0xff;
    const [first, later] = fragment(ipPacket({ proto: 'udp', src: CLIENT, dst: NODE, sport: 62600, dport: 30053, payload, id: 0x2222 }), 32);
    out.push({ name: 'udp fragments', frontend: fe, steps: [
      { direction: 'ingress', input: first },
      { direction: 'ingress', input: later },
    ] });
  }
  return out;
}

// Pinned from main (61708a1) with SLUICE_PRINT_FIXTURES=1: fixture name -> one hex frame per step.
const PINNED: Record<string, string[]> = {
  "tcp original dnat-only": [
    '02000000000b02000000000a0800450000281234400040069b63c612000ac612010a9c401f90000003e8000000005002faf068000000',
    '02000000000b02000000000a08004500003a1234400040069b51c612000ac612010a9c401f90000003e9000007d05018faf081670000474554202f20485454502f312e300d0a0d0a',
  ],
  "tcp reply dnat-only (egress)": [
    '02000000000b02000000000a0800450000281234400040069b63c612000ac612010a9c401f90000003e8000000005002faf068000000',
    '02000000000b02000000000a08004500002d1234400040069c67c6120001c612000a75809c40000003e8000007d05018faf0c75b000068656c6c6f',
    '02000000000b02000000000a08004500002d1234400040069c67c6120001c612000a75809c40000003ee000007d05018faf0c755000068656c6c6f',
  ],
  "tcp original snat+dnat": [
    '02000000000b02000000000a0800450000281234400040069a62c6120001c6120214f2301f90000003e8000000005002faf0110f0000',
    '02000000000b02000000000a0800450000291234400040069a61c6120001c6120214f2301f90000003e9000007d05010faf0912e000078',
  ],
  "tcp reply snat+dnat (ingress)": [
    '02000000000b02000000000a0800450000281234400040069a62c6120001c6120214f2301f90000003e8000000005002faf0110f0000',
    '02000000000b02000000000a08004500002e1234400040069c66c6120001c612000a7580f230000003e8000007d05010faf07aec0000616e73776572',
    '02000000000b02000000000a08004500002e1234400040069c66c6120001c612000a7580f230000003ef000007d05010faf07ae50000616e73776572',
  ],
  "tcp checksum becomes 0x0000": [
    '02000000000b02000000000a0800450000281234400040069a62c6120001c6120214f2301f90000003e8000000005002faf0110f0000',
    '02000000000b02000000000a08004500002a1234400040069a60c6120001c6120214f2301f90000003e9000007d05010faf000000000092e',
  ],
  "udp original+reply snat+dnat, port remapped": [
    '02000000000b02000000000a0800450000211234400040119a5ec6120001c6120214ee481f90000d13d97175657279',
    '02000000000b02000000000a0800450000211234400040119a5ec6120001c6120214ee481f90000d32f0616761696e',
    '02000000000b02000000000a080045000023123440004011385dc612640ac612000a003514e9000f9f20616e7377657221',
  ],
  "udp checksum 0 stays 0": [
    '02000000000b02000000000a0800450000211234400040119a5ec6120001c6120214ee481f90000d00007175657279',
    '02000000000b02000000000a08004500001d1234400040119a62c6120001c6120214ee481f900009000062',
    '02000000000b02000000000a080045000023123440004011385dc612640ac612000a003514e9000f0000616e7377657221',
  ],
  "udp checksum 0 becomes 0xffff": [
    '02000000000b02000000000a0800450000211234400040119a5ec6120001c6120214ee481f90000d13d97175657279',
    '02000000000b02000000000a08004500001e1234400040119a61c6120001c6120214ee481f90000affff63c7',
    '02000000000b02000000000a08004500001e1234400040113862c612640ac612000a003514e9000afffffa82',
  ],
  "udp addresses only": [
    '02000000000b02000000000a0800450000201234400040119a5fc6120001c6120214f4241f90000c7f1670696e67',
    '02000000000b02000000000a0800450000201234400040119a5fc6120001c6120214f4241f90000c7f1670696e67',
    '02000000000b02000000000a0800450000201234400040113860c612640ac612000a1f90f424000c1d11706f6e67',
  ],
  "udp dnat-only": [
    '02000000000b02000000000a08004500001e1234400040119b62c612000ac612010a9c751f90000a456a7131',
    '02000000000b02000000000a08004500001e1234400040119b62c612000ac612010a9c751f90000a45697132',
    '02000000000b02000000000a08004500001e1234400040119c6bc6120001c612000a75659c75000a009e6131',
  ],
  "udp fragments": [
    '02000000000b02000000000a080045000034222220004011aa5dc6120001c6120214f4881f900048ce9c030a11181f262d343b424950575e656c737a81888f969da4',
    '02000000000b02000000000a08004500003c222200044011ca51c6120001c6120214abb2b9c0c7ced5dce3eaf1f8ff060d141b222930373e454c535a61686f767d848b9299a0a7aeb5bc',
  ],
};

let h: TcHarness;
const printed: Record<string, string[]> = {};

before(() => {
  h = TcHarness.create('sluice-tcrw');
});
after(() => {
  h?.close();
  if (process.env.SLUICE_PRINT_FIXTURES) process.stdout.write(`${JSON.stringify(printed, null, 2)}\n`);
});
beforeEach(() => h.reset());

describe('TC IPv4 rewrite: output bytes pinned', () => {
  for (const f of fixtures()) {
    test(f.name, () => {
      writeTcConfig(h.tc.config, f.config ?? { snatAddress: NODE });
      h.upsertFrontend(f.frontend);
      const pinned = PINNED[f.name];
      printed[f.name] = [];
      f.steps.forEach((s, i) => {
        const { verdict, out } = h.run(s.direction, s.input);
        printed[f.name]!.push(out.toString('hex'));
        if (process.env.SLUICE_PRINT_FIXTURES) return;
        // No route in the test's namespace: every translated packet is left to the stack.
        assert.equal(verdict, TC_ACT_OK, `${f.name} step ${i}: verdict`);
        assert.ok(!out.equals(s.input), `${f.name} step ${i}: the packet was translated`);
        const want = Buffer.from(pinned?.[i] ?? '', 'hex');
        assert.ok(out.equals(want), `${f.name} step ${i}: output differs from the pinned bytes\n${diffHex(out, want)}`);
        if (s.scratch) assert.ok(want.equals(s.scratch), `${f.name} step ${i}: pinned bytes differ from the from-scratch packet\n${diffHex(want, s.scratch)}`);
      });
    });
  }
});
