// The report's DSR section (issue 17 item 2, docs/dsr.md): the live NodePort
// mode's ratios and where its replies went (bench/nodeportDsr.ts), and the
// program cost per packet from BPF_PROG_TEST_RUN (bench/dsrcost.ts).
import type { DsrCostResult } from './dsrcost';
import type { NodePortResult } from './nodeport';

const x2 = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? '–' : `${v.toFixed(2)}x`);

export function dsrMarkdown(np: NodePortResult | undefined, cost: DsrCostResult | undefined): string[] {
  const d = np?.dsr;
  if (!d && !cost) return [];
  const lines = ['## Direct Server Return (--nodeport-mode dsr)', ''];
  if (d) {
    lines.push(`NodePort section's DSR mode at ${np!.services} Services: the ingress node's agent runs with \`--nodeport-mode dsr\`, the backend namespace runs the agent of the endpoints' node (it opens the IPIP packets and gives the replies the NodePort address), and the replies reach the client over a link of their own. Median of per-round ratios, same rounds as the other modes:`, '');
    lines.push('| ratio | requests/s (TCP, new connection each) | request p50 latency | UDP echo replies/s |');
    lines.push('|---|---:|---:|---:|');
    for (const k of [...new Set([...Object.keys(d.rr), ...Object.keys(d.echo)])]) lines.push(`| ${k} | ${x2(d.rr[k])} | ${x2(d.rrP50?.[k])} | ${x2(d.echo[k])} |`);
    lines.push('');
    const p = d.path;
    lines.push(`Where the replies went during the DSR series: the ingress node's client-facing veth sent ${p.ingressToClient} packets and its backend-facing veth received ${p.ingressFromBackend} (sent ${p.ingressToBackend} IPIP); the client received ${p.clientDirect} on its direct link from the backend node. Ingress node's agent: dsr_encapsulated ${d.ingress.encapsulated}, reverse_translated ${d.ingress.reverseTranslated}; backend node's agent: dsr_decapsulated ${d.backend.decapsulated}, reverse_translated ${d.backend.reverseTranslated}. Replies around the ingress node: **${d.repliesBypassedIngress ? 'yes' : 'NO'}**.`, '');
  }
  if (cost) {
    const n = cost.nsPerRun;
    lines.push(`DSR program cost: sluice_tc_ingress under BPF_PROG_TEST_RUN (bench/dsrcost.ts; median of ${cost.runs} runs x ${cost.calls} calls, test-run overhead included, known TCP flow, 64-byte payload):`, '');
    lines.push('| node | packet | ns per packet | ratio |');
    lines.push('|---|---|---:|---:|');
    lines.push(`| ingress | SNAT (rewrite, FIB, redirect) | ${n.ingressSnat.toFixed(1)} | 1.00x |`);
    lines.push(`| ingress | DSR (FIB with the encapsulated length, IPIP header, redirect) | ${n.ingressDsr.toFixed(1)} | ${x2(cost.ratios.ingressDsrOverSnat)} |`);
    lines.push(`| backend | externalTrafficPolicy: Local (DNAT) | ${n.backendLocal.toFixed(1)} | 1.00x |`);
    lines.push(`| backend | DSR received (IPIP opened, DNAT) | ${n.backendDsrRx.toFixed(1)} | ${x2(cost.ratios.backendDsrRxOverLocal)} |`);
    lines.push('');
  }
  return lines;
}
