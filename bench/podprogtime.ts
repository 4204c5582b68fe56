// Nanoseconds per packet of the pod-veth programs (build/pod_lb.bpf.o) by
// BPF_PROG_TEST_RUN (issue 12: pod ingress/egress far above their targets),
// for two builds alternated in one run. No traffic leaves the process: the
// packets are crafted and run by the kernel against a throwaway bpffs
// directory (TcHarness maps, pod_lb loaded against them as on a node).
//
//   node dist/bench/podprogtime.js --a /work/main/build/pod_lb.bpf.o --b build/pod_lb.bpf.o \
//     [--services 1000] [--rounds 6] [--samples 2000]
//
// Cases (ingress = packets from the pod, egress = packets to the pod):
//   udpNew          ingress, a new UDP flow to a ClusterIP (every sample a new client port)
//   tcpKnown        ingress, an ACK of a TCP flow opened by a SYN
//   egressReply     egress, the backend's reply of that TCP flow
//   egressNonSvc    egress, a TCP packet of no Service flow (conntrack miss)
//   ingressNonSvc   ingress, a TCP packet to an address whose bitmap bit is clear
//   udp6New         ingress, a new UDP flow to an IPv6 ClusterIP (every sample a new client port)
//   tcp6Known       ingress, an ACK of a TCP flow to an IPv6 ClusterIP opened by a SYN
// `--services` ClusterIPs of each family (TCP 80 and UDP 53 each, one remote
// backend) are loaded and the IPv4 frontend-address bitmap is maintained, as
// the agent does (the IPv6 path has none).
// Each round loads A then B (B then A on odd rounds), runs each packet
// `samples` times with repeat 1 and keeps the median of the kernel's per-run
// duration; a build's figure is the range of its round medians.
import * as path from 'node:path';
import { alternateAB, arg, type RoundResult } from './abrounds';
import * as abi from '../src/abi/generated';
import { progInfo, progTestRun } from '../src/bpf/program';
import { ip4ToNumber, numberToIp4 } from '../src/datapath/addr';
import { writeTcConfig } from '../src/datapath/tc/config';
import { podSlot } from '../src/datapath/pod/frontendSet';
import { readWords, writeWord } from '../src/datapath/bitmap';
import { TcHarness } from '../test/bpf/tc_harness';
import { PodPrograms } from '../test/bpf/pod_harness';
import { Tc6Maps } from '../test/bpf/tc_harness6';
import { TCP_ACK, TCP_SYN, frame, type L4Spec } from '../test/bpf/tc_packet';
import { frame6, type L4Spec6 } from '../test/bpf/tc_packet6';

const POD = '198.18.10.5';
const OTHER = '198.18.30.1'; // no frontend: non-Service traffic
const BACKEND = { id: 2, address: '198.18.20.30', port: 8080, local: false };
const POD6 = 'fd00:10:1::5';
const BACKEND6 = { id: 2, address: 'fd00:10:2::30', port: 8080, local: false };

const vip = (i: number) => numberToIp4((ip4ToNumber('10.96.0.0') + 1 + i) >>> 0);
const vip6 = (i: number) => `fd00:10:96::${(i + 1).toString(16)}`;

function median(run: () => number, samples: number): number {
  const xs: number[] = [];
  for (let i = 0; i < samples; i++) xs.push(run());
  xs.sort((x, y) => x - y);
  return xs[Math.floor(xs.length / 2)]!;
}

function measure(object: string, services: number, samples: number): RoundResult {
  const h = TcHarness.create('sluice-podbench');
  const pod = PodPrograms.load(h, object);
  try {
    writeTcConfig(h.tc.config, {});
    const pf = pod.obj.map(abi.SLUICE_MAP_POD_PF4);
    const words = readWords(pf, abi.SLUICE_POD_PF_WORDS);
    for (let i = 0; i < services; i++) {
      h.upsertFrontend({ address: vip(i), port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 2 * i + 1, backends: [{ ...BACKEND, id: 2 * i + 1 }] });
      h.upsertFrontend({ address: vip(i), port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 2 * i + 2, backends: [{ ...BACKEND, id: 2 * i + 2 }] });
      const slot = podSlot(ip4ToNumber(vip(i)));
      words[slot >>> 6] = words[slot >>> 6]! | (1n << BigInt(slot & 63));
    }
    words.forEach((w, i) => { if (w) writeWord(pf, i, w); });
    writeWord(pf, abi.SLUICE_POD_PF_MARKER, 1n);
    const v6 = new Tc6Maps(h);
    for (let i = 0; i < services; i++) {
      v6.upsertFrontend({ address: vip6(i), port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 2 * i + 1, backends: [{ ...BACKEND6, id: 2 * i + 1 }] });
      v6.upsertFrontend({ address: vip6(i), port: 53, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 2 * i + 2, backends: [{ ...BACKEND6, id: 2 * i + 2 }] });
    }

    const target = vip(Math.floor(services / 2));
    const ingress = pod.obj.program(abi.SLUICE_PROG_POD_INGRESS).fd;
    const egress = pod.obj.program(abi.SLUICE_PROG_POD_EGRESS).fd;
    const once = (fd: number, input: Buffer) => progTestRun(fd, { dataIn: input }).duration;
    const ns: Record<string, number> = {};

    const udp = Array.from({ length: samples }, (_, i) =>
      frame({ proto: 'udp', src: POD, dst: target, sport: 20000 + i, dport: 53, payload: Buffer.alloc(64, 3) }));
    let k = 0;
    ns.udpNew = median(() => once(ingress, udp[k++]!), samples);

    const syn: L4Spec = { proto: 'tcp', src: POD, dst: target, sport: 40000, dport: 80, tcpFlags: TCP_SYN };
    pod.run('ingress', frame(syn));
    const ack = frame({ ...syn, tcpFlags: TCP_ACK, payload: Buffer.alloc(64, 1) });
    ns.tcpKnown = median(() => once(ingress, ack), samples);
    const reply = frame({ proto: 'tcp', src: BACKEND.address, dst: POD, sport: BACKEND.port, dport: 40000, tcpFlags: TCP_ACK, payload: Buffer.alloc(64, 2) });
    ns.egressReply = median(() => once(egress, reply), samples);
    const nonSvcIn = frame({ proto: 'tcp', src: POD, dst: OTHER, sport: 40001, dport: 443, tcpFlags: TCP_ACK, payload: Buffer.alloc(64, 4) });
    ns.ingressNonSvc = median(() => once(ingress, nonSvcIn), samples);
    const nonSvcOut = frame({ proto: 'tcp', src: OTHER, dst: POD, sport: 443, dport: 40001, tcpFlags: TCP_ACK, payload: Buffer.alloc(64, 5) });
    ns.egressNonSvc = median(() => once(egress, nonSvcOut), samples);

    const target6 = vip6(Math.floor(services / 2));
    const udp6 = Array.from({ length: samples }, (_, i) =>
      frame6({ proto: 'udp', src: POD6, dst: target6, sport: 20000 + i, dport: 53, payload: Buffer.alloc(64, 3) }));
    k = 0;
    ns.udp6New = median(() => once(ingress, udp6[k++]!), samples);
    const syn6: L4Spec6 = { proto: 'tcp', src: POD6, dst: target6, sport: 40000, dport: 80, tcpFlags: TCP_SYN };
    pod.run('ingress', frame6(syn6));
    const ack6 = frame6({ ...syn6, tcpFlags: TCP_ACK, payload: Buffer.alloc(64, 1) });
    ns.tcp6Known = median(() => once(ingress, ack6), samples);

    const verified: Record<string, number> = {};
    for (const p of [abi.SLUICE_PROG_POD_INGRESS, abi.SLUICE_PROG_POD_EGRESS]) verified[p] = progInfo(pod.obj.program(p)).verifiedInsns;
    return { ns, verified };
  } finally {
    pod.close();
    h.close();
  }
}

function main(argv: string[]): void {
  const objects = { A: path.resolve(arg(argv, 'a')), B: path.resolve(arg(argv, 'b')) };
  const services = Number(arg(argv, 'services', '1000'));
  const samples = Number(arg(argv, 'samples', '2000'));
  alternateAB(objects, Number(arg(argv, 'rounds', '6')), (object) => measure(object, services, samples), { services, samples });
}

main(process.argv.slice(2));
