// Nanoseconds per packet of the per-packet programs (sluice_tc_ingress on an
// external device, sluice_pod_ingress on a pod veth) under real traffic in
// test namespaces, from the kernel's own run_time_ns / run_cnt
// (kernel.bpf_stats_enabled=1 only while the bounded traffic runs; back to
// 0 after, unless it was already on: the sysctl is machine-wide). Used to compare two builds of the objects:
//
//   node dist/bench/tcprogstats.js --tc-object A/tc_lb.bpf.o --pod-object A/pod_lb.bpf.o [--connections 1000] [--label A]
//
// Traffic (tc_topology.ts): the client opens connections to a NodePort on
// node1 whose backend is on node2 (SNAT: requests and replies both enter
// node1's eth0 ingress), and pod p1 opens connections to a ClusterIP whose
// backend is pod p1b (p1's veth ingress runs the pod program). Each
// connection: SYN, request, FIN, ACKs. Prints one JSON line.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import * as abi from '../src/abi/generated';
import { progInfo } from '../src/bpf/program';
import { writeTcConfig } from '../src/datapath/tc/config';
import { TcHarness } from '../test/bpf/tc_harness';
import { ADDR, SERVER_SCRIPT, Topology } from '../test/e2e/tc_topology';

const STATS_SYSCTL = '/proc/sys/kernel/bpf_stats_enabled';
const VIP = '198.18.96.10';

/** `count` sequential TCP requests to host:port; prints how many got an answer. Bounded by maxMs. */
const LOOP = `
const net = require('net');
const [host, port, count, maxMs] = process.argv.slice(1).map((v, i) => (i ? Number(v) : v));
const end = Date.now() + maxMs; let ok = 0, i = 0;
const next = () => {
  if (i++ >= count || Date.now() > end) { process.stdout.write(String(ok)); process.exit(0); }
  const s = net.connect(port, host); let got = false;
  const t = setTimeout(() => s.destroy(), 1000);
  s.on('data', () => (got = true)); s.on('error', () => {});
  s.on('close', () => { clearTimeout(t); if (got) ok++; next(); });
};
next();
`;

function arg(argv: string[], name: string, fallback?: string): string {
  const i = argv.indexOf(`--${name}`);
  const v = i >= 0 ? argv[i + 1] : fallback;
  if (v === undefined) throw new Error(`tcprogstats: --${name} is required`);
  return v;
}

function attach(topo: Topology, script: string, args: string[]): number {
  const r = spawnSync('nsenter', [`--net=${topo.netnsPath('n1')}`, process.execPath, script, ...args], { encoding: 'utf8', timeout: 15000 });
  if (r.status !== 0) throw new Error(`attach ${args.join(' ')}: ${r.stderr}`);
  const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as { direction: string; programId: number });
  const ingress = lines.find((l) => l.direction === 'ingress');
  if (!ingress) throw new Error(`attach: no ingress program in ${r.stdout}`);
  return ingress.programId;
}

function stats(id: number): { runs: bigint; ns: bigint } {
  const info = progInfo(id);
  return { runs: info.runCount, ns: info.runTimeNs };
}

async function main(argv: string[]): Promise<void> {
  const tcObject = path.resolve(arg(argv, 'tc-object'));
  const podObject = path.resolve(arg(argv, 'pod-object'));
  const connections = Number(arg(argv, 'connections', '1000'));
  const label = arg(argv, 'label', path.dirname(tcObject));
  const dist = path.resolve(__dirname, '..');
  const topo = new Topology('slperf');
  let h: TcHarness | undefined;
  const statsBefore = fs.readFileSync(STATS_SYSCTL, 'utf8').trim();
  try {
    topo.create();
    h = TcHarness.create('sluice-perf');
    const tcId = attach(topo, path.join(dist, 'src/datapath/tc/attachMain.js'), ['--object', tcObject, '--bpffs', h.pinDir, '--device', 'eth0']);
    const podId = attach(topo, path.join(dist, 'src/datapath/pod/attachMain.js'), ['--object', podObject, '--bpffs', h.pinDir, '--device', 'vp1', '--container', 'perf', '--ifname', 'eth0']);
    writeTcConfig(h.tc.config, { snatAddress: ADDR.node1 });
    h.upsertFrontend({ address: ADDR.node1, port: 30080, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, backends: [{ id: 1, address: ADDR.pod2, port: 8080, local: false }] });
    h.upsertFrontend({ address: VIP, port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 2, backends: [{ id: 2, address: ADDR.pod1b, port: 8080, local: true }] });
    await topo.start('p2', SERVER_SCRIPT, ['p2', '8080']);
    await topo.start('p1b', SERVER_SCRIPT, ['p1b', '8080']);

    if (statsBefore === '0') fs.writeFileSync(STATS_SYSCTL, '1');
    const t0 = { tc: stats(tcId), pod: stats(podId) };
    const okNs = Number(topo.node('cli', LOOP, [ADDR.node1, '30080', String(connections), '60000'], 70000));
    const okPod = Number(topo.node('p1', LOOP, [VIP, '80', String(connections), '60000'], 70000));
    const t1 = { tc: stats(tcId), pod: stats(podId) };

    const per = (a: { runs: bigint; ns: bigint }, b: { runs: bigint; ns: bigint }) => ({
      runs: Number(b.runs - a.runs),
      nsPerPacket: b.runs > a.runs ? Number(b.ns - a.ns) / Number(b.runs - a.runs) : NaN,
    });
    process.stdout.write(`${JSON.stringify({ label, connections, answered: { northSouth: okNs, pod: okPod }, tcIngress: per(t0.tc, t1.tc), podIngress: per(t0.pod, t1.pod) })}\n`);
  } finally {
    // Back to 0 only if it was 0: another measurement may have turned it on.
    if (statsBefore === '0') fs.writeFileSync(STATS_SYSCTL, '0');
    topo.destroy();
    h?.close();
  }
}

main(process.argv.slice(2)).catch((err: Error) => {
  process.stderr.write(`tcprogstats: ${err.message}\n`);
  process.exit(1);
});
