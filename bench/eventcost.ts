// What the monitor's events cost the TC program, in ns per run as the kernel
// measures it (BPF_PROG_TEST_RUN duration: no sysctl, nothing attached):
//   - compiled out  (tc_lb built with -DSLUICE_NO_EVENTS: no event code at all)
//   - no listener   (the shipped object, sluice_ev_on = 0: one array lookup per event point)
//   - listener      (sluice_ev_on set, the ring drained between batches as `sluice monitor` does)
// The packet is one that emits an event every run: a SYN to a NodePort whose
// externalTrafficPolicy Local has no local backend (a drop with its reason).
// Packets that emit nothing (established flows) never reach an event point.
//
//   node dist/bench/eventcost.js [--runs 20] [--repeat 2000]
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import * as abi from '../src/abi/generated';
import { BpfMap, RingBuffer, progTestRun } from '../src/bpf';
import { TypedMap, u32Codec } from '../src/datapath/typedMap';
import { TcHarness, TC_OBJECT } from '../test/bpf/tc_harness';
import { frame, TCP_SYN } from '../test/bpf/tc_packet';

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const RUNS = arg('runs', 20);
const REPEAT = arg('repeat', 2000); // 2000 x 112-byte records (104 + the ring header) < the 256 KiB ring: none lost

function buildWithoutEvents(): string {
  const repo = path.resolve(__dirname, '..', '..');
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-eventcost-')), 'tc_lb_noevents.bpf.o');
  execFileSync('clang', ['-O2', '-g', '-target', 'bpf', '-Wall', '-Werror', '-DSLUICE_NO_EVENTS', `-I${repo}/build`, `-I${repo}/native`, `-I${repo}/bpf`, '-c', `${repo}/bpf/tc_lb.bpf.c`, '-o', out]);
  return out;
}

function measure(object: string | undefined, listen: boolean): number {
  const h = TcHarness.create('sluice-eventcost', object);
  try {
    h.reset();
    // LB_SVC_FLAG_DROP_NO_BACKEND is what the agent writes for eTP Local
    // without a local endpoint: a drop. Without it the program rejects, which
    // rewrites the packet in place, so every later repeat of a batch would
    // see the ICMP reply instead of the SYN (one event per batch).
    h.upsertFrontend({ address: '198.18.0.1', port: 30081, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_DROP_NO_BACKEND, revNatId: 4, backends: [] });
    const ctlMap = BpfMap.fromPinned(path.join(h.pinDir, abi.SLUICE_MAP_EVENTS_ON));
    const ringMap = BpfMap.fromPinned(path.join(h.pinDir, abi.SLUICE_MAP_EVENTS));
    let records = 0;
    const ring = new RingBuffer(ringMap, () => records++);
    try {
      new TypedMap(ctlMap, u32Codec, abi.lb_events_ctlCodec).set(0, { listener_pid: listen ? process.pid : 0 });
      const prog = h.obj.program('sluice_tc_ingress');
      const pkt = frame({ proto: 'tcp', src: '198.18.9.9', dst: '198.18.0.1', sport: 40000, dport: 30081, tcpFlags: TCP_SYN });
      const samples: number[] = [];
      for (let i = 0; i < RUNS; i++) {
        samples.push(progTestRun(prog.fd, { dataIn: pkt, repeat: REPEAT }).duration);
        ring.consume();
      }
      if (listen && records !== RUNS * REPEAT) throw new Error(`expected ${RUNS * REPEAT} events, read ${records}`);
      if (!listen && records !== 0) throw new Error(`no listener, yet ${records} events`);
      samples.sort((a, b) => a - b);
      return samples[Math.floor(samples.length / 2)]!; // median of the per-batch averages
    } finally {
      ring.close();
      ringMap.close();
      ctlMap.close();
    }
  } finally {
    h.close();
  }
}

const noEvents = buildWithoutEvents();
try {
  // Interleaved rounds, so drift (other load on the machine) hits every variant alike.
  const rounds = { compiledOut: [] as number[], noListener: [] as number[], listener: [] as number[] };
  for (let r = 0; r < 3; r++) {
    rounds.compiledOut.push(measure(noEvents, false));
    rounds.noListener.push(measure(TC_OBJECT, false));
    rounds.listener.push(measure(TC_OBJECT, true));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[1]!;
  const base = median(rounds.compiledOut);
  const result = {
    packet: 'SYN to a NodePort without local backends (drop event every run)',
    runs: RUNS, repeat: REPEAT,
    nsPerRun: { compiledOut: base, noListener: median(rounds.noListener), listener: median(rounds.listener) },
    ratioToCompiledOut: { noListener: +(median(rounds.noListener) / base).toFixed(3), listener: +(median(rounds.listener) / base).toFixed(3) },
  };
  process.stdout.write(JSON.stringify(result) + '\n');
} finally {
  fs.rmSync(path.dirname(noEvents), { recursive: true, force: true });
}
