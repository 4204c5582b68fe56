// Nanoseconds per packet of a known north-south flow through sluice_tc_ingress
// by BPF_PROG_TEST_RUN (issue 12: the in-place rewrite, rewrite4.h), for two
// builds of tc_lb.bpf.o alternated in one run, plus each build's verified
// instruction counts. No traffic leaves the process: the packets are crafted
// and run by the kernel against a throwaway bpffs directory.
//
//   node dist/bench/tcrewrite.js --a /work/main/build/tc_lb.bpf.o --b build/tc_lb.bpf.o [--rounds 6] [--samples 2000]
//
// Flows: a NodePort to a remote backend (SNAT + DNAT): the TCP original
// direction (client ACK) and reply (backend ACK on ingress), and the UDP
// original direction; the same over IPv6 (tcp6Original, tcp6Reply); and new
// UDP flows of each family (udpNew, udp6New: every sample a new client port
// from below the SNAT range, each a new flow with its SNAT port picked).
// Each round loads A then B (B then A on odd rounds),
// opens the flows with a first packet, then runs each packet `samples` times
// with repeat 1 and keeps the median of the kernel's per-run duration. (With
// repeat > 1 the kernel runs the program again on the already rewritten
// skb: from the second run on it would time a packet of no flow.)
import * as path from 'node:path';
import { alternateAB, arg } from './abrounds';
import * as abi from '../src/abi/generated';
import { progInfo, progTestRun } from '../src/bpf/program';
import { writeTcConfig } from '../src/datapath/tc/config';
import { TcHarness } from '../test/bpf/tc_harness';
import { Tc6Maps } from '../test/bpf/tc_harness6';
import { TCP_ACK, TCP_SYN, frame, type L4Spec } from '../test/bpf/tc_packet';
import { frame6, type L4Spec6 } from '../test/bpf/tc_packet6';

const CLIENT = '198.18.0.10';
const NODE = '198.18.0.1';
const BACKEND = { id: 2, address: '198.18.2.20', port: 8080, local: false };
const CLIENT6 = '2001:db8::10';
const NODE6 = '2001:db8::1';
const BACKEND6 = { id: 12, address: 'fd00:2::20', port: 8080, local: false };

const CASES: Record<string, { open: L4Spec; packet: L4Spec } | { open: L4Spec6; packet: L4Spec6; v6: true }> = {
  tcpOriginal: {
    open: { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62000, dport: 30080, tcpFlags: TCP_SYN },
    packet: { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62000, dport: 30080, tcpFlags: TCP_ACK, payload: Buffer.alloc(64, 1) },
  },
  tcpReply: {
    open: { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62001, dport: 30080, tcpFlags: TCP_SYN },
    packet: { proto: 'tcp', src: BACKEND.address, dst: NODE, sport: BACKEND.port, dport: 62001, tcpFlags: TCP_ACK, payload: Buffer.alloc(64, 2) },
  },
  udpOriginal: {
    open: { proto: 'udp', src: CLIENT, dst: NODE, sport: 62002, dport: 30053, payload: Buffer.alloc(64, 3) },
    packet: { proto: 'udp', src: CLIENT, dst: NODE, sport: 62002, dport: 30053, payload: Buffer.alloc(64, 3) },
  },
  tcp6Original: {
    v6: true,
    open: { proto: 'tcp', src: CLIENT6, dst: NODE6, sport: 62000, dport: 30080, tcpFlags: TCP_SYN },
    packet: { proto: 'tcp', src: CLIENT6, dst: NODE6, sport: 62000, dport: 30080, tcpFlags: TCP_ACK, payload: Buffer.alloc(64, 1) },
  },
  tcp6Reply: {
    v6: true,
    open: { proto: 'tcp', src: CLIENT6, dst: NODE6, sport: 62001, dport: 30080, tcpFlags: TCP_SYN },
    packet: { proto: 'tcp', src: BACKEND6.address, dst: NODE6, sport: BACKEND6.port, dport: 62001, tcpFlags: TCP_ACK, payload: Buffer.alloc(64, 2) },
  },
};

/** New flows: every sample its own client port (below the SNAT range, as most clients' are). */
const NEW_FLOWS: Record<string, (i: number) => Buffer> = {
  udpNew: (i) => frame({ proto: 'udp', src: CLIENT, dst: NODE, sport: 20000 + i, dport: 30053, payload: Buffer.alloc(64, 3) }),
  udp6New: (i) => frame6({ proto: 'udp', src: CLIENT6, dst: NODE6, sport: 20000 + i, dport: 30053, payload: Buffer.alloc(64, 3) }),
};

function measure(object: string, samples: number): { ns: Record<string, number>; verified: Record<string, number> } {
  const h = TcHarness.create('sluice-rwbench', object);
  try {
    writeTcConfig(h.tc.config, { snatAddress: NODE });
    h.upsertFrontend({ address: NODE, port: 30080, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, backends: [BACKEND] });
    h.upsertFrontend({ address: NODE, port: 30053, proto: 'udp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 2, backends: [{ ...BACKEND, id: 3 }] });
    const v6 = new Tc6Maps(h);
    v6.setSnat(NODE6);
    v6.upsertFrontend({ address: NODE6, port: 30080, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 11, backends: [BACKEND6] });
    v6.upsertFrontend({ address: NODE6, port: 30053, proto: 'udp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 12, backends: [{ ...BACKEND6, id: 13 }] });
    const prog = h.obj.program('sluice_tc_ingress');
    const ns: Record<string, number> = {};
    const median = (input: (i: number) => Buffer) => {
      const runs: number[] = [];
      for (let i = 0; i < samples; i++) runs.push(progTestRun(prog.fd, { dataIn: input(i) }).duration);
      runs.sort((x, y) => x - y);
      return runs[Math.floor(runs.length / 2)]!;
    };
    for (const [name, c] of Object.entries(CASES)) {
      const build = (s: L4Spec | L4Spec6) => ('v6' in c ? frame6(s as L4Spec6) : frame(s as L4Spec));
      h.run('ingress', build(c.open));
      const input = build(c.packet);
      ns[name] = median(() => input);
    }
    for (const [name, make] of Object.entries(NEW_FLOWS)) {
      const inputs = Array.from({ length: samples }, (_, i) => make(i));
      ns[name] = median((i) => inputs[i]!);
    }
    const verified: Record<string, number> = {};
    for (const p of ['sluice_tc_ingress', 'sluice_tc_egress']) verified[p] = progInfo(h.obj.program(p)).verifiedInsns;
    return { ns, verified };
  } finally {
    h.close();
  }
}

function main(argv: string[]): void {
  const objects = { A: path.resolve(arg(argv, 'a')), B: path.resolve(arg(argv, 'b')) };
  const samples = Number(arg(argv, 'samples', '2000'));
  alternateAB(objects, Number(arg(argv, 'rounds', '6')), (object) => measure(object, samples), { samples });
}

main(process.argv.slice(2));
