// Nanoseconds per packet of DSR (issue 17 item 2, docs/dsr.md) against SNAT,
// as the kernel measures a TC program run (BPF_PROG_TEST_RUN duration;
// nothing attached, no sysctl), inside a throwaway namespace whose FIB the
// program consults (bench/costNode.ts, shared with bench/xdpcost.ts):
//
//   ingress node   a data packet of a known NodePort flow to a backend on
//                  another node: SNAT (rewrite, FIB, redirect) against DSR
//                  (FIB with the encapsulated length, IPIP header, redirect)
//   backend node   a data packet of a known flow to a local backend: DSR
//                  received (IPIP opened, DNAT) against externalTrafficPolicy:
//                  Local (DNAT only)
//
// The reply path is not measured here: under DSR the ingress node has none.
//
//   node dist/bench/dsrcost.js [--runs 15] [--calls 2000]
//
// `make bench` calls measureDsrCost (bench/main.ts) before it turns
// kernel.bpf_stats_enabled on, and reports it as "DSR program cost".
import * as abi from '../src/abi/generated';
import { progTestRun } from '../src/bpf';
import { writeNodePortMode } from '../src/datapath/tc/config';
import { XdpHarness } from '../test/bpf/xdp_harness';
import { NODE, NODE_PORT, setUpCostNode } from './costNode';
import { frame, ipip, ipPacket, TCP_ACK, TCP_SYN, type L4Spec } from '../test/bpf/tc_packet';

const CLIENT = '198.18.0.10';
const LOCAL_BE = { id: 5, address: '198.18.1.10', port: 8080, local: true };

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export type DsrCostRow = 'ingressSnat' | 'ingressDsr' | 'backendDsrRx' | 'backendLocal';

export interface DsrCostResult {
  /** Median over runs of the mean ns per BPF_PROG_TEST_RUN of sluice_tc_ingress, per packet kind. */
  nsPerRun: Record<DsrCostRow, number>;
  ratios: { ingressDsrOverSnat: number; backendDsrRxOverLocal: number };
  runs: number;
  calls: number;
}

/** Runs of `calls` test runs each, the four packets alternating run by run. */
export function measureDsrCost(runs = 15, calls = 2000): DsrCostResult {
  const h = new XdpHarness();
  try {
    const { tcCtx } = setUpCostNode(h);
    h.tc.upsertFrontend({ address: '198.18.100.10', port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_EXTERNAL_IP, revNatId: 8, backends: [LOCAL_BE] });
    h.tc.upsertFrontend({ address: '198.18.100.11', port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_EXTERNAL_IP | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES, revNatId: 9, backends: [LOCAL_BE] });
    const prog = h.tc.obj.program('sluice_tc_ingress').fd;
    const once = (pkt: Buffer) => h.inside(() => progTestRun(prog, { dataIn: pkt, ctxIn: tcCtx }));

    const flow = (sport: number, dst: string, dport: number): [L4Spec, L4Spec] => {
      const syn: L4Spec = { proto: 'tcp', src: CLIENT, dst, sport, dport, tcpFlags: TCP_SYN };
      return [syn, { ...syn, tcpFlags: TCP_ACK, payload: Buffer.alloc(64) }];
    };
    // The flows exist from here on; the mode counts at a flow's first packet only.
    const [snatSyn, snatData] = flow(62000, NODE, NODE_PORT);
    once(frame(snatSyn));
    if (!h.tc.tc.dsr) throw new Error('no sluice_dsr_cfg in this TC object');
    writeNodePortMode(h.tc.tc.dsr, 'dsr');
    const [dsrSyn, dsrData] = flow(62001, NODE, NODE_PORT);
    once(frame(dsrSyn));
    const [rxSyn, rxData] = flow(62002, '198.18.100.10', 80);
    once(ipip('198.18.0.2', LOCAL_BE.address, ipPacket(rxSyn)));
    const [localSyn, localData] = flow(62003, '198.18.100.11', 80);
    once(frame(localSyn));

    const packets = {
      ingressSnat: [frame(snatData), 7 /* TC_ACT_REDIRECT */],
      ingressDsr: [frame(dsrData), 7],
      backendDsrRx: [ipip('198.18.0.2', LOCAL_BE.address, ipPacket(rxData)), 0 /* TC_ACT_OK */],
      backendLocal: [frame(localData), 0],
    } as const;
    const fresh = (name: keyof typeof packets) => h.inside(() => {
      const [pkt, expect] = packets[name];
      let sum = 0;
      for (let i = 0; i < calls; i++) {
        const r = progTestRun(prog, { dataIn: pkt, ctxIn: tcCtx });
        if (r.retval !== expect) throw new Error(`${name}: verdict ${r.retval}, expected ${expect}`);
        sum += r.duration;
      }
      return sum / calls;
    });
    const rows: Record<DsrCostRow, number[]> = { ingressSnat: [], ingressDsr: [], backendDsrRx: [], backendLocal: [] };
    for (let run = 0; run < runs; run++) {
      for (const name of Object.keys(rows) as Array<keyof typeof packets>) rows[name].push(fresh(name));
    }
    const ns = Object.fromEntries(Object.entries(rows).map(([k, v]) => [k, Math.round(median(v) * 10) / 10])) as Record<keyof typeof packets, number>;
    return {
      nsPerRun: ns,
      ratios: {
        ingressDsrOverSnat: +(ns.ingressDsr / ns.ingressSnat).toFixed(3),
        backendDsrRxOverLocal: +(ns.backendDsrRx / ns.backendLocal).toFixed(3),
      },
      runs,
      calls,
    };
  } finally {
    h.close();
  }
}

if (require.main === module) {
  const arg = (name: string, def: number) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? Number(process.argv[i + 1]) : def;
  };
  process.stdout.write(`${JSON.stringify(measureDsrCost(arg('runs', 15), arg('calls', 2000)))}\n`);
}
