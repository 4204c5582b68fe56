// Nanoseconds per packet of the XDP program against the TC one, as the
// kernel measures a program run (BPF_PROG_TEST_RUN duration; nothing
// attached, no sysctl), inside a throwaway namespace whose FIB both consult:
//
//   non-Service   a packet to an address that is no frontend: sluice_xdp
//                 (XDP_PASS after the frontend-address check) against
//                 sluice_xdp_pass (a program that only returns XDP_PASS:
//                 the floor of any XDP program) and sluice_tc_ingress
//   known flow    a data packet of a NodePort flow SNATed to a backend on
//                 another node: sluice_xdp (XDP_TX) against
//                 sluice_tc_ingress (bpf_redirect), same translation
//   non-Service6  the IPv6 twin of non-Service (XDP only)
//   known flow6   the IPv6 twin of known flow: sluice_xdp against
//                 sluice_tc_ingress, [fd00:18::1]:30080 -> [fd00:2::20]:8080
//
// With kernel.bpf_stats_enabled=1, the non-Service rows also carry the
// kernel's own run_time_ns / run_cnt over the same test runs (`bpfStatsNs`):
// the program's time without the test-run loop around it.
//
// The program run is only part of a packet's cost: XDP's gain is mostly what
// happens before TC (skb allocation, GRO, the stack up to tc ingress), which
// this does not measure; `make bench` (bench/nodeport.ts) is where pps lives.
//
//   node dist/bench/xdpcost.js [--runs 15] [--calls 2000]
import * as abi from '../src/abi/generated';
import { progInfo, progTestRun } from '../src/bpf';
import { syncFrontendAddresses } from '../src/datapath/xdp/xdp';
import { XdpHarness } from '../test/bpf/xdp_harness';
import { NODE, NODE6, NODE_PORT, setUpCostNode, setUpCostNode6 } from './costNode';
import { frame, TCP_ACK, TCP_SYN } from '../test/bpf/tc_packet';
import { frame6 } from '../test/bpf/tc_packet6';

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const RUNS = arg('runs', 15);
const CALLS = arg('calls', 2000);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function main(): void {
  const h = new XdpHarness();
  try {
    const { ifindex, tcCtx } = setUpCostNode(h);
    syncFrontendAddresses(h.maps, [{ address: NODE, flags: abi.LB_SVC_FLAG_NODEPORT }]);
    setUpCostNode6(h);

    const xdpCtx = (len: number) => {
      const ctx = Buffer.alloc(24);
      ctx.writeUInt32LE(len, 4);
      ctx.writeUInt32LE(ifindex, 12);
      return ctx;
    };
    const progs = {
      xdp: h.xdp.program(abi.SLUICE_PROG_XDP).fd,
      xdpPass: h.xdp.program(abi.SLUICE_PROG_XDP_PASS).fd,
      tc: h.tc.obj.program('sluice_tc_ingress').fd,
    };
    const ctxFor = (p: keyof typeof progs, pkt: Buffer) => (p === 'tc' ? tcCtx : xdpCtx(pkt.length));

    // Unchanged by every program: one test run repeated CALLS times.
    const other = frame({ proto: 'tcp', src: '198.18.0.10', dst: '198.18.0.99', sport: 40000, dport: 80, tcpFlags: TCP_ACK });
    const other6 = frame6({ proto: 'tcp', src: 'fd00:18::10', dst: 'fd00:18::99', sport: 40000, dport: 80, tcpFlags: TCP_ACK });
    const stats: Record<string, { ns: bigint; cnt: bigint }> = {};
    const repeated = (p: keyof typeof progs, pkt = other, row = '') => h.inside(() => {
      const before = progInfo({ fd: progs[p] });
      const d = progTestRun(progs[p], { dataIn: pkt, ctxIn: ctxFor(p, pkt), repeat: CALLS }).duration;
      const after = progInfo({ fd: progs[p] });
      const st = (stats[row || p] ??= { ns: 0n, cnt: 0n });
      st.ns += after.runTimeNs - before.runTimeNs;
      st.cnt += BigInt(after.runCount) - BigInt(before.runCount);
      return d;
    });
    // Rewritten by the program: a fresh copy per run, CALLS runs averaged.
    const syn = frame({ proto: 'tcp', src: '198.18.0.10', dst: NODE, sport: 62000, dport: NODE_PORT, tcpFlags: TCP_SYN });
    const data = frame({ proto: 'tcp', src: '198.18.0.10', dst: NODE, sport: 62000, dport: NODE_PORT, tcpFlags: TCP_ACK });
    const syn6 = frame6({ proto: 'tcp', src: 'fd00:18::10', dst: NODE6, sport: 62000, dport: NODE_PORT, tcpFlags: TCP_SYN });
    const data6 = frame6({ proto: 'tcp', src: 'fd00:18::10', dst: NODE6, sport: 62000, dport: NODE_PORT, tcpFlags: TCP_ACK });
    h.runXdp(syn, ifindex); // the flows exist from here on (shared conntrack)
    if (h.runXdp(syn6, ifindex).verdict !== 3 /* XDP_TX */) throw new Error('IPv6 SYN: not sent by XDP (set-up)');
    const fresh = (p: keyof typeof progs, expect: number, pkt = data) => h.inside(() => {
      let sum = 0;
      for (let i = 0; i < CALLS; i++) {
        const r = progTestRun(progs[p], { dataIn: pkt, ctxIn: ctxFor(p, pkt) });
        if (r.retval !== expect) throw new Error(`${p}: verdict ${r.retval}, expected ${expect}`);
        sum += r.duration;
      }
      return sum / CALLS;
    });

    const rows: Record<string, number[]> = { nonServiceXdpPass: [], nonServiceXdp: [], nonServiceTc: [], nonService6XdpPass: [], nonService6Xdp: [], knownFlowXdp: [], knownFlowTc: [], knownFlow6Xdp: [], knownFlow6Tc: [] };
    for (let run = 0; run < RUNS; run++) {
      rows.nonServiceXdpPass!.push(repeated('xdpPass', other, 'nonServiceXdpPass'));
      rows.nonServiceXdp!.push(repeated('xdp', other, 'nonServiceXdp'));
      rows.nonServiceTc!.push(repeated('tc', other, 'nonServiceTc'));
      rows.nonService6XdpPass!.push(repeated('xdpPass', other6, 'nonService6XdpPass'));
      rows.nonService6Xdp!.push(repeated('xdp', other6, 'nonService6Xdp'));
      rows.knownFlowXdp!.push(fresh('xdp', 3 /* XDP_TX */));
      rows.knownFlowTc!.push(fresh('tc', 7 /* TC_ACT_REDIRECT */));
      rows.knownFlow6Xdp!.push(fresh('xdp', 3, data6));
      rows.knownFlow6Tc!.push(fresh('tc', 7, data6));
    }
    const ns = Object.fromEntries(Object.entries(rows).map(([k, v]) => [k, Math.round(median(v) * 10) / 10]));
    const bpfStatsNs = Object.fromEntries(Object.entries(stats).filter(([, v]) => v.cnt > 0n).map(([k, v]) => [k, Math.round(Number(v.ns * 10n / v.cnt)) / 10]));
    process.stdout.write(`${JSON.stringify({
      nsPerRun: ns,
      ratios: {
        knownFlowXdpOverTc: +(ns.knownFlowXdp! / ns.knownFlowTc!).toFixed(3),
        knownFlow6XdpOverTc: +(ns.knownFlow6Xdp! / ns.knownFlow6Tc!).toFixed(3),
        nonServiceXdpOverPassOnly: +(ns.nonServiceXdp! / ns.nonServiceXdpPass!).toFixed(3),
        nonServiceXdpOverTc: +(ns.nonServiceXdp! / ns.nonServiceTc!).toFixed(3),
        nonService6XdpOverPassOnly: +(ns.nonService6Xdp! / ns.nonService6XdpPass!).toFixed(3),
      },
      bpfStatsNs,
      runs: RUNS,
      calls: CALLS,
    })}\n`);
  } finally {
    h.close();
  }
}

main();
