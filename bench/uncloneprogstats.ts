// Nanoseconds per run of the EGRESS programs (sluice_tc_egress on node1's
// eth0, sluice_pod_egress on pod p1's host veth) on non-Service TCP sent by
// node1's own sockets, from the kernel's run_time_ns / run_cnt. TCP transmits
// clones (tcp_transmit_skb), so this is the traffic that pays the verifier's
// unclone prologue (bpf_skb_pull_data(skb, 0) on a cloned skb) in a TC program
// that writes the packet directly. Compare two builds:
//
//   node dist/bench/uncloneprogstats.js --tc-object A/tc_lb.bpf.o --pod-object A/pod_lb.bpf.o [--messages 3000] [--bulk-mb 32] [--label A]
//
// Traffic, all bounded: node1 echoes --messages 64-byte messages with an echo
// server on node2 (eth0 egress) and on p1 (vp1 egress), one at a time (each
// write a data segment of its own), then sends --bulk-mb MB to each (GSO
// segments). None of it is Service traffic. kernel.bpf_stats_enabled is set
// to 1 only while the traffic runs and back to 0 after, unless it was on.
// Also prints whether the egress program's translated code starts with the
// prologue's call to bpf_skb_pull_data (bpftool prog dump xlated).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import * as abi from '../src/abi/generated';
import { progInfo } from '../src/bpf/program';
import { writeTcConfig } from '../src/datapath/tc/config';
import { TcHarness } from '../test/bpf/tc_harness';
import { ADDR, Topology } from '../test/e2e/tc_topology';

const STATS_SYSCTL = '/proc/sys/kernel/bpf_stats_enabled';

/** Echo server: writes back what it reads; prints "ready". */
const ECHO = `
const net = require('net');
net.createServer((s) => { s.on('data', (d) => s.write(d)); s.on('error', () => {}); })
  .listen(Number(process.argv[1]), '0.0.0.0', () => process.stdout.write('ready\\n'));
`;

/** Ping-pong of `count` 64-byte messages, then `mb` MB one way; bounded by maxMs. Prints messages answered. */
const CLIENT = `
const net = require('net');
const [host, port, count, mb, maxMs] = process.argv.slice(1).map((v, i) => (i ? Number(v) : v));
const end = Date.now() + maxMs; let n = 0, got = 0;
const s = net.connect(port, host, () => { s.setNoDelay(true); s.write(Buffer.alloc(64, 1)); });
s.on('error', () => process.exit(1));
const bulk = () => {
  s.removeAllListeners('data'); s.on('data', () => {});
  const chunk = Buffer.alloc(65536, 2); let left = mb * 16;
  const pump = () => { while (left > 0 && Date.now() < end) { left--; if (!s.write(chunk)) return s.once('drain', pump); }
    s.end(); process.stdout.write(String(n)); };
  pump();
};
s.on('data', (d) => { got += d.length; while (got >= 64) { got -= 64; n++;
  if (n >= count || Date.now() > end) return bulk(); s.write(Buffer.alloc(64, 1)); } });
setTimeout(() => process.exit(2), maxMs + 5000).unref();
`;

function arg(argv: string[], name: string, fallback?: string): string {
  const i = argv.indexOf(`--${name}`);
  const v = i >= 0 ? argv[i + 1] : fallback;
  if (v === undefined) throw new Error(`uncloneprogstats: --${name} is required`);
  return v;
}

function attachEgress(topo: Topology, script: string, args: string[]): number {
  const r = spawnSync('nsenter', [`--net=${topo.netnsPath('n1')}`, process.execPath, script, ...args], { encoding: 'utf8', timeout: 15000 });
  if (r.status !== 0) throw new Error(`attach ${args.join(' ')}: ${r.stderr}`);
  const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as { direction: string; programId: number });
  const egress = lines.find((l) => l.direction === 'egress');
  if (!egress) throw new Error(`attach: no egress program in ${r.stdout}`);
  return egress.programId;
}

/** Whether the first instructions of the translated program call bpf_skb_pull_data (the unclone prologue). */
function prologue(id: number): boolean {
  const r = spawnSync('bpftool', ['prog', 'dump', 'xlated', 'id', String(id)], { encoding: 'utf8', timeout: 30000, maxBuffer: 64 << 20 });
  return r.stdout.split('\n').slice(0, 12).some((l) => l.includes('bpf_skb_pull_data'));
}

function stats(id: number): { runs: bigint; ns: bigint } {
  const info = progInfo(id);
  return { runs: info.runCount, ns: info.runTimeNs };
}

const per = (a: { runs: bigint; ns: bigint }, b: { runs: bigint; ns: bigint }) => ({
  runs: Number(b.runs - a.runs),
  nsPerRun: b.runs > a.runs ? Math.round(Number(b.ns - a.ns) / Number(b.runs - a.runs)) : NaN,
});

async function main(argv: string[]): Promise<void> {
  const tcObject = path.resolve(arg(argv, 'tc-object'));
  const podObject = path.resolve(arg(argv, 'pod-object'));
  const messages = arg(argv, 'messages', '3000');
  const bulkMb = arg(argv, 'bulk-mb', '32');
  const label = arg(argv, 'label', path.dirname(tcObject));
  const dist = path.resolve(__dirname, '..');
  const topo = new Topology('slucl');
  let h: TcHarness | undefined;
  const statsBefore = fs.readFileSync(STATS_SYSCTL, 'utf8').trim();
  try {
    topo.create();
    h = TcHarness.create('sluice-uncl');
    const tcId = attachEgress(topo, path.join(dist, 'src/datapath/tc/attachMain.js'), ['--object', tcObject, '--bpffs', h.pinDir, '--device', 'eth0']);
    const podId = attachEgress(topo, path.join(dist, 'src/datapath/pod/attachMain.js'), ['--object', podObject, '--bpffs', h.pinDir, '--device', 'vp1', '--container', 'perf', '--ifname', 'eth0']);
    // A Service exists (the programs' lookups are the normal ones), but none of the traffic is to it.
    writeTcConfig(h.tc.config, { snatAddress: ADDR.node1 });
    h.upsertFrontend({ address: ADDR.node1, port: 30080, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, backends: [{ id: 1, address: ADDR.pod2, port: 8080, local: false }] });
    await topo.start('n2', ECHO, ['9000']);
    await topo.start('p1', ECHO, ['9000']);

    if (statsBefore === '0') fs.writeFileSync(STATS_SYSCTL, '1');
    const t0 = { tc: stats(tcId), pod: stats(podId) };
    const okTc = Number(topo.node('n1', CLIENT, [ADDR.node2, '9000', messages, bulkMb, '60000'], 70000));
    const t1 = { tc: stats(tcId), pod: stats(podId) };
    const okPod = Number(topo.node('n1', CLIENT, [ADDR.pod1, '9000', messages, bulkMb, '60000'], 70000));
    const t2 = { tc: stats(tcId), pod: stats(podId) };
    process.stdout.write(`${JSON.stringify({
      label, messages: Number(messages), bulkMb: Number(bulkMb),
      answered: { node2: okTc, pod1: okPod },
      tcEgress: { ...per(t0.tc, t1.tc), prologue: prologue(tcId) },
      podEgress: { ...per(t1.pod, t2.pod), prologue: prologue(podId) },
    })}\n`);
  } finally {
    // Back to 0 only if it was 0: another measurement may have turned it on.
    if (statsBefore === '0') fs.writeFileSync(STATS_SYSCTL, '0');
    topo.destroy();
    h?.close();
  }
}

main(process.argv.slice(2)).catch((err: Error) => {
  process.stderr.write(`uncloneprogstats: ${err.message}\n`);
  process.exit(1);
});
