// The bench report: a markdown table on stdout (and in results/), the full
// JSON (every round), an SVG chart, and PASS/FAIL per target of issue 6.
import * as fs from 'node:fs';
import { algorithmMarkdown, algorithmTargets, type AlgorithmBenchResult } from './algorithms';
import * as path from 'node:path';
import type { MachineInfo } from './machine';
import type { LoadOutcome } from './modes';
import type { Family } from './services';
import { median, RoundResult, Summary, summarize } from './stats';
import { controlPlaneMarkdown, controlPlaneTargets } from './report-controlplane';
import type { UpstreamResult } from './upstream';
import type { ControlPlaneResult } from './controlplane';
import type { NodePortResult } from './nodeport';
import type { DsrCostResult } from './dsrcost';
import { dsrMarkdown } from './report-dsr';
import type { RuleUpdateResult } from './ruleupdates';
import { PROGRAM_TARGETS, type ProgStatRow } from './progstats';

export interface SeriesResult {
  mode: string;
  label: string;
  kind: 'service' | 'non-service';
  /** Address family of the traffic (absent in results from before issue 14: IPv4). */
  family?: Family;
  proto: 'tcp' | 'udp';
  summary: Summary;
  rounds: RoundResult[];
  /** The direct round run right next to each of these rounds (same index);
   *  the ratios to direct are paired with these when present. */
  baseline?: RoundResult[];
}

export interface ScaleResult {
  services: number;
  servicePorts: number;
  loads: Record<string, LoadOutcome>;
  series: SeriesResult[];
  facts: Record<string, Record<string, number | string>>;
}

export interface TargetResult {
  target: string;
  verdict: 'PASS' | 'FAIL' | 'n/a';
  detail: string;
}

export interface BenchReport {
  quick: boolean;
  machine: MachineInfo;
  plan: object;
  scales: ScaleResult[];
  targets: TargetResult[];
  notes: string[];
  startedAt: string;
  durationS: number;
  /** The commit measured (`git rev-parse HEAD`, "+dirty" when the tree had changes), so a result names its code. */
  commit?: string;
  /** The control-plane half and NodePort throughput (bench/controlplane.ts, ruleupdates.ts, nodeport.ts). */
  controlPlane?: ControlPlaneResult;
  ruleUpdates?: RuleUpdateResult;
  nodePort?: NodePortResult;
  /** DSR's sluice_tc_ingress ns per packet against SNAT and eTP Local (bench/dsrcost.ts); the live DSR rows are nodePort.dsr. */
  dsrCost?: DsrCostResult;
  upstream?: UpstreamResult;
  /** h-maglev: algorithms (bench/algorithms.ts). */
  algorithms?: AlgorithmBenchResult;
  /** Program time per run under each series' traffic (bench/progstats.ts). */
  programs?: { rows: ProgStatRow[]; notes: string[] };
}

const SLUICE_MODES = ['sluice-sock', 'sluice-tc'];
const MODE_ORDER = ['direct', 'sluice-sock', 'sluice-tc', 'iptables-legacy', 'iptables-nft', 'nftables'];
const LABELS: Record<string, string> = {
  direct: 'direct (no rules)',
  'sluice-sock': 'Sluice socket LB',
  'sluice-tc': 'Sluice per-packet (pod veth TC)',
  'iptables-legacy': 'kube-proxy iptables (legacy)',
  'iptables-nft': 'kube-proxy iptables (nft)',
  nftables: 'kube-proxy nftables',
};

const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '–');
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '–');
const f3 = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : '–');

function find(sr: ScaleResult, mode: string, proto: string, kind: 'service' | 'non-service' = 'service', family: Family = 4): SeriesResult | undefined {
  return sr.series.find((s) => s.mode === mode && s.proto === proto && s.kind === kind && (s.family ?? 4) === family);
}

function directOf(sr: ScaleResult, proto: string, family: Family = 4): Summary | undefined {
  return find(sr, 'direct', proto, 'service', family)?.summary;
}

/** ScaleResult.loads key of a mode's load of one family: the mode id for IPv4 (as before issue 14), id@ipv6 for IPv6. */
export function loadKey(mode: string, family: Family): string {
  return family === 4 ? mode : `${mode}@ipv6`;
}

/**
 * The ratio of a series to direct, paired by round: the median over rounds of
 * (series value in round r) / (the direct round run right next to it: the
 * series' own baseline, docs/bench.md). Without a baseline (results from
 * before it), direct's round r; falls back to the ratio of medians when the
 * rounds do not pair up.
 */
export function pairedRatio(sr: ScaleResult, s: SeriesResult | undefined, key: 'p50_us' | 'p99_us'): number {
  if (s?.mode === 'direct') return 1;
  const base = s?.baseline ?? (s && find(sr, 'direct', s.proto, 'service', s.family ?? 4)?.rounds);
  if (!s || !base) return NaN;
  if (s.rounds.length !== base.length || s.rounds.length === 0) return s.summary[key] / summarize(base)[key];
  return median(s.rounds.map((r, i) => r[key] / base[i]![key]));
}

/** Evaluate the data-path targets of issue 6 that this half measures. */
/** Connect targets per Sluice mode (issue 12): the socket LB at the physical
 * limit, the per-packet pod-veth path within 1.15x (p99 not set there). */
const CONNECT_TARGETS: Record<string, { p50: number; p99: number }> = {
  'sluice-sock': { p50: 1.03, p99: 1.10 },
  'sluice-tc': { p50: 1.15, p99: Infinity },
};

/** The families each Sluice mode's connect target is judged in (issue 14: the socket LB over IPv6 too, same targets). */
const CONNECT_FAMILIES: Record<string, Family[]> = { 'sluice-sock': [4, 6], 'sluice-tc': [4] };

/** Whether a report measured IPv6 at all (results from before issue 14 did not). */
function hasIpv6(rep: BenchReport): boolean {
  return rep.scales.some((sr) => sr.series.some((s) => s.family === 6));
}

export function evaluateTargets(rep: BenchReport): TargetResult[] {
  const out: TargetResult[] = [];
  const largest = Math.max(...rep.scales.map((s) => s.services));
  // IPv4: TCP, as since issue 6; IPv6 (issue 14): TCP and UDP, against the same limits.
  const judged = SLUICE_MODES.flatMap((m) => CONNECT_FAMILIES[m]!.filter((f) => f === 4 || hasIpv6(rep))
    .flatMap((f) => (f === 6 ? (['tcp', 'udp'] as const) : (['tcp'] as const)).map((proto) => [m, f, proto] as const)));
  for (const [mode, family, proto] of judged) {
    const parts: string[] = [];
    let fail = false;
    let measured = 0;
    for (const sr of rep.scales) {
      const d = directOf(sr, proto, family);
      const series = find(sr, mode, proto, 'service', family);
      const s = series?.summary;
      if (!d || !s) {
        parts.push(`${sr.services}: not measured (${sr.loads[loadKey(mode, family)]?.reason ?? 'no data'})`);
        continue;
      }
      measured++;
      const r50 = pairedRatio(sr, series, 'p50_us');
      const r99 = pairedRatio(sr, series, 'p99_us');
      const want = CONNECT_TARGETS[mode]!;
      if (!(r50 <= want.p50 && r99 <= want.p99) || s.failed > 0 || s.wrong_peer > 0) fail = true;
      parts.push(`${sr.services}: p50 ${f3(r50)}x, p99 ${f3(r99)}x${s.failed ? `, ${s.failed} failed` : ''}${s.wrong_peer ? `, ${s.wrong_peer} wrong peer` : ''}`);
    }
    const all = measured === rep.scales.length;
    out.push({
      target: `${LABELS[mode]}: ${family === 6 ? 'IPv6 ' : ''}ClusterIP ${proto === 'tcp' ? 'TCP connect' : 'UDP request/reply'} p50 <= ${CONNECT_TARGETS[mode]!.p50}x${Number.isFinite(CONNECT_TARGETS[mode]!.p99) ? ` and p99 <= ${CONNECT_TARGETS[mode]!.p99}x` : ''} direct at every scale (up to ${largest})`,
      verdict: measured === 0 ? 'n/a' : fail || !all ? 'FAIL' : 'PASS',
      detail: parts.join('; ') + (measured > 0 && !all ? ' (not every scale measured)' : ''),
    });
  }
  const taxScale = rep.scales.find((s) => s.series.some((x) => x.kind === 'non-service'));
  for (const mode of MODE_ORDER.filter((m) => m !== 'direct')) {
    const isSluice = SLUICE_MODES.includes(mode);
    if (!taxScale) break;
    const d = directOf(taxScale, 'tcp');
    const ts = find(taxScale, mode, 'tcp', 'non-service');
    const s = ts?.summary;
    const us = find(taxScale, mode, 'udp', 'non-service');
    if (!d || !s) {
      if (isSluice) out.push({ target: `${LABELS[mode]}: non-Service traffic tax <= 1.02x at ${taxScale.services} Services`, verdict: 'n/a', detail: taxScale.loads[mode]?.reason ?? 'not measured' });
      continue;
    }
    const r = pairedRatio(taxScale, ts, 'p50_us');
    const ru = pairedRatio(taxScale, us, 'p50_us');
    out.push({
      target: `${LABELS[mode]}: non-Service traffic tax <= 1.02x at ${taxScale.services} Services${isSluice ? '' : ' (baseline, for comparison)'}`,
      verdict: isSluice ? (r <= 1.02 && ru <= 1.02 ? 'PASS' : 'FAIL') : 'n/a',
      detail: `TCP connect p50 ${f3(r)}x, UDP request/reply p50 ${f3(ru)}x of direct with no rules (both must be <= 1.02)`,
    });
  }
  const withCpu = rep.scales.filter((s) => s.services <= 10000);
  const cpuScale = withCpu[withCpu.length - 1];
  if (cpuScale) {
    for (const mode of SLUICE_MODES) {
      const s = find(cpuScale, mode, 'tcp')?.summary;
      const d = directOf(cpuScale, 'tcp');
      const ipts = ['iptables-legacy', 'iptables-nft'].map((m) => ({ m, s: find(cpuScale, m, 'tcp')?.summary })).filter((x) => x.s);
      const target = `${LABELS[mode]}: CPU per new connection <= 0.1x of iptables mode at ${cpuScale.services} Services`;
      if (!s || ipts.length === 0 || !d) {
        out.push({ target, verdict: 'n/a', detail: !s ? (cpuScale.loads[mode]?.reason ?? 'not measured') : 'no iptables baseline at this scale' });
        continue;
      }
      const ratios = ipts.map((x) => ({ m: x.m, total: s.host_cpu_ms_per_1000 / x.s!.host_cpu_ms_per_1000, excess: (s.host_cpu_ms_per_1000 - d.host_cpu_ms_per_1000) / (x.s!.host_cpu_ms_per_1000 - d.host_cpu_ms_per_1000) }));
      out.push({
        target,
        verdict: ratios.every((r) => r.total <= 0.1) ? 'PASS' : 'FAIL',
        detail: `CPU ms (client + server processes) per 1000 connections: ${LABELS[mode]} ${f1(s.host_cpu_ms_per_1000)}, direct ${f1(d.host_cpu_ms_per_1000)}, ` +
          ipts.map((x) => `${x.m} ${f1(x.s!.host_cpu_ms_per_1000)}`).join(', ') + '; ratio of totals ' +
          ratios.map((r) => `${f2(r.total)}x vs ${r.m}`).join(', ') + '; ratio of the cost above direct ' +
          ratios.map((r) => `${f2(r.excess)}x vs ${r.m}`).join(', '),
      });
    }
  }
  const withMem = rep.scales.filter((s) => s.facts['sluice-sock'] && s.services <= 10000);
  const memScale = withMem[withMem.length - 1];
  const mem = memScale?.facts['sluice-sock']?.map_bytes_total;
  out.push({
    target: `Sluice BPF map memory <= 100 MiB at ${memScale?.services ?? 10000} Services x 10 endpoints`,
    verdict: typeof mem === 'number' ? (mem <= 100 * 1048576 ? 'PASS' : 'FAIL') : 'n/a',
    detail: typeof mem === 'number'
      ? `${(mem / 1048576).toFixed(1)} MiB (bpftool bytes_memlock of every pinned map: ` +
        Object.entries(memScale!.facts['sluice-sock']!).filter(([k]) => k.startsWith('map_bytes_sluice')).sort((a, b) => Number(b[1]) - Number(a[1]))
          .map(([k, v]) => `${k.slice('map_bytes_'.length)} ${(Number(v) / 1048576).toFixed(1)}`).join(', ') + ' MiB)'
      : 'socket LB not loaded at this scale',
  });
  out.push(...controlPlaneTargets(rep));
  out.push(...programTargets(rep));
  out.push(...upstreamTargets(rep.upstream));
  return out;
}

/** Issue 12's program-time targets: every series a target covers must be within it. */
export function programTargets(rep: BenchReport): TargetResult[] {
  const rows = rep.programs?.rows ?? [];
  return PROGRAM_TARGETS.map((t) => {
    const mine = rows.filter((r) => r.program === t.program && t.series.test(r.series));
    return {
      target: `${t.what}: <= ${t.maxNs} ns per run (kernel.bpf_stats_enabled run_time_ns / run_cnt)`,
      verdict: mine.length === 0 ? 'n/a' : mine.every((r) => r.nsPerRun <= t.maxNs) ? 'PASS' : 'FAIL',
      detail: mine.length === 0 ? 'not measured' : mine.map((r) => `${r.series}: ${r.nsPerRun.toFixed(0)} ns (${r.runs} runs)`).join('; '),
    } as TargetResult;
  });
}

/** Short column names of the programs the bench times. */
const PROGRAM_COLUMNS: Array<[string, string]> = [
  ['sluice_connect4', 'connect4'], ['sluice_getpeer4', 'getpeername4'], ['sluice_sendmsg4', 'sendmsg4'], ['sluice_recvmsg4', 'recvmsg4'],
  ['sluice_connect6', 'connect6'], ['sluice_getpeer6', 'getpeername6'], ['sluice_sendmsg6', 'sendmsg6'], ['sluice_recvmsg6', 'recvmsg6'],
  ['sluice_release4', 'sock_release'], ['sluice_pod_ingr', 'pod ingress'], ['sluice_pod_egre', 'pod egress'], ['sluice_tc_ingre', 'tc ingress'], ['sluice_tc_egres', 'tc egress'],
];

function programMarkdown(rep: BenchReport): string[] {
  const rows = rep.programs?.rows ?? [];
  if (!rows.length) return rep.programs?.notes.length ? ['## Program time per run', '', ...rep.programs.notes.map((n) => `- ${n}`), ''] : [];
  const lines = ['## Program time per run (ns, kernel.bpf_stats_enabled=1 during the bench: run_time_ns / run_cnt, stats overhead included)', ''];
  const seriesNames = [...new Set(rows.map((r) => r.series))];
  const cols = PROGRAM_COLUMNS.filter(([p]) => rows.some((r) => r.program === p));
  const ratioOf = (series: string): string => {
    const sr = rep.scales.find((x) => series.includes(`, ${x.services} Services,`));
    const mode = series.startsWith('socket LB') ? 'sluice-sock' : series.startsWith('per-packet') ? 'sluice-tc' : undefined;
    if (!sr || !mode) return '';
    const proto = series.endsWith('UDP') ? 'udp' : 'tcp';
    return f3(pairedRatio(sr, find(sr, mode, proto, 'service', series.includes('(IPv6)') ? 6 : 4), 'p50_us'));
  };
  lines.push(`| traffic | p50 ratio to direct | ${cols.map(([, c]) => c).join(' | ')} |`);
  lines.push(`|---|---:|${cols.map(() => '---:').join('|')}|`);
  for (const name of seriesNames) {
    const cell = (p: string) => {
      const r = rows.find((x) => x.series === name && x.program === p);
      return r ? r.nsPerRun.toFixed(0) : '';
    };
    lines.push(`| ${name} | ${ratioOf(name)} | ${cols.map(([p]) => cell(p)).join(' | ')} |`);
  }
  lines.push('');
  lines.push(`Targets (issue 12): ${PROGRAM_TARGETS.map((t) => `${t.what} <= ${t.maxNs} ns`).join(', ')}. Only the programs this run attached are read, before and after each series' rounds.`);
  for (const n of rep.programs?.notes ?? []) lines.push(`- ${n}`);
  lines.push('');
  return lines;
}

export function markdown(rep: BenchReport): string {
  const m = rep.machine;
  const lines: string[] = [];
  lines.push(`# Sluice bench (${rep.quick ? 'QUICK' : 'full'}), ${rep.startedAt}`);
  lines.push('');
  if (rep.commit) lines.push(`Commit: ${rep.commit}.`, '');
  lines.push(`Machine: ${m.cpuModel}, ${m.nproc} CPUs, ${m.memoryMiB} MiB, ${m.kernel}; ${m.tools.iptables}; ${m.tools.nft}; node ${m.tools.node}. Run took ${rep.durationS.toFixed(0)} s.`);
  lines.push('');
  lines.push('New-connection latency to a ClusterIP, a random Service per connection, 10 endpoints each; p50, p99 and rate are medians over interleaved rounds. TCP: connect() to established. UDP: request/reply on a fresh socket. Ratios are against direct connections to the backends with no rules, paired by round (median of per-round ratios). CPU: user+system ms of the client and server processes per 1000 connections.');
  lines.push('');
  const families: Family[] = hasIpv6(rep) ? [4, 6] : [4];
  for (const [family, proto] of families.flatMap((f) => (['tcp', 'udp'] as const).map((pr) => [f, pr] as const))) {
    lines.push(`## ${proto === 'tcp' ? 'TCP connect' : 'UDP request/reply'}${family === 6 ? ', IPv6 (ip6tables, nftables ip6, socket LB connect6/sendmsg6)' : ''}`);
    lines.push('');
    lines.push('| Services | mode | load s | p50 µs | p99 µs | conn/s | p50 ratio | p99 ratio | CPU ms/1000 | failed |');
    lines.push('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const sr of rep.scales) {
      for (const mode of MODE_ORDER) {
        const series = find(sr, mode, proto, 'service', family);
        const s = series?.summary;
        const load = sr.loads[loadKey(mode, family)];
        if (!s) {
          if (family === 6 && !load && mode !== 'direct') continue; // not an IPv6 mode (the pod-veth path)
          lines.push(`| ${sr.services} | ${LABELS[mode]} | | | | | | | | ${load?.reason ?? 'not measured'} |`);
          continue;
        }
        lines.push(`| ${sr.services} | ${LABELS[mode]} | ${load ? f2(load.ms / 1000) : ''} | ${f1(s.p50_us)} | ${f1(s.p99_us)} | ${s.per_s.toFixed(0)} | ${f2(pairedRatio(sr, series, 'p50_us'))} | ${f2(pairedRatio(sr, series, 'p99_us'))} | ${f1(s.host_cpu_ms_per_1000)} | ${s.failed}${s.wrong_peer ? ` (${s.wrong_peer} wrong peer)` : ''} |`);
      }
    }
    lines.push('');
  }
  const tax = rep.scales.find((s) => s.series.some((x) => x.kind === 'non-service'));
  if (tax) {
    lines.push(`## Tax on non-Service traffic at ${tax.services} Services (connections straight to the backends, rules loaded)`);
    lines.push('');
    lines.push('| mode | TCP p50 µs | TCP p50 ratio | TCP p99 ratio | UDP p50 µs | UDP p50 ratio |');
    lines.push('|---|---:|---:|---:|---:|---:|');
    const dt = directOf(tax, 'tcp');
    const du = directOf(tax, 'udp');
    if (dt && du) lines.push(`| direct (no rules) | ${f1(dt.p50_us)} | 1.00 | 1.00 | ${f1(du.p50_us)} | 1.00 |`);
    for (const mode of MODE_ORDER) {
      const ts = find(tax, mode, 'tcp', 'non-service');
      const us = find(tax, mode, 'udp', 'non-service');
      if (!ts || !us || !dt || !du) continue;
      lines.push(`| ${LABELS[mode]} | ${f1(ts.summary.p50_us)} | ${f2(pairedRatio(tax, ts, 'p50_us'))} | ${f2(pairedRatio(tax, ts, 'p99_us'))} | ${f1(us.summary.p50_us)} | ${f2(pairedRatio(tax, us, 'p50_us'))} |`);
    }
    lines.push('');
  }
  lines.push(...programMarkdown(rep));
  lines.push(...controlPlaneMarkdown(rep));
  lines.push(...dsrMarkdown(rep.nodePort, rep.dsrCost));
  lines.push(...algorithmMarkdown(rep.algorithms)); // h-maglev
  lines.push(...upstreamMarkdown(rep.upstream));
  lines.push('## Targets');
  lines.push('');
  lines.push('| target | verdict | measured |');
  lines.push('|---|---|---|');
  for (const t of rep.targets) lines.push(`| ${t.target} | **${t.verdict}** | ${t.detail} |`);
  lines.push('');
  if (rep.notes.length) {
    lines.push('## Notes');
    lines.push('');
    for (const n of rep.notes) lines.push(`- ${n}`);
    lines.push('');
  }
  return lines.join('\n');
}

/** Grouped bars: TCP connect p50 (bar) and p99 (tick) per mode, per scale. */
export function svgChart(rep: BenchReport): string {
  const colors: Record<string, string> = {
    direct: '#555555', 'sluice-sock': '#1b9e77', 'sluice-tc': '#66a61e', 'iptables-legacy': '#d95f02', 'iptables-nft': '#e7298a', nftables: '#7570b3',
  };
  const W = 900, H = 460, left = 70, right = 220, top = 50, bottom = 60;
  const plotW = W - left - right, plotH = H - top - bottom;
  const groups = rep.scales;
  let maxY = 1;
  for (const sr of groups) for (const s of sr.series) if (s.kind === 'service' && s.proto === 'tcp') maxY = Math.max(maxY, s.summary.p99_us || 0);
  maxY = Math.ceil(maxY / 10) * 10;
  const y = (v: number) => top + plotH - (Math.min(v, maxY) / maxY) * plotH;
  const gw = plotW / Math.max(1, groups.length);
  const bw = (gw * 0.8) / MODE_ORDER.length;
  const el: string[] = [];
  el.push(`<text x="${W / 2}" y="24" text-anchor="middle" font-size="16">TCP connect latency to a ClusterIP (bar: p50, tick: p99), µs</text>`);
  for (let i = 0; i <= 5; i++) {
    const v = (maxY * i) / 5;
    el.push(`<line x1="${left}" x2="${left + plotW}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>`);
    el.push(`<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end" font-size="11">${v.toFixed(0)}</text>`);
  }
  groups.forEach((sr, gi) => {
    const gx = left + gi * gw + gw * 0.1;
    el.push(`<text x="${left + gi * gw + gw / 2}" y="${top + plotH + 20}" text-anchor="middle" font-size="12">${sr.services} Services</text>`);
    MODE_ORDER.forEach((mode, mi) => {
      const s = find(sr, mode, 'tcp')?.summary;
      if (!s) return;
      const x = gx + mi * bw;
      el.push(`<rect x="${x.toFixed(1)}" y="${y(s.p50_us).toFixed(1)}" width="${(bw - 2).toFixed(1)}" height="${(top + plotH - y(s.p50_us)).toFixed(1)}" fill="${colors[mode]}"><title>${LABELS[mode]} @ ${sr.services}: p50 ${f1(s.p50_us)} µs, p99 ${f1(s.p99_us)} µs</title></rect>`);
      el.push(`<line x1="${x.toFixed(1)}" x2="${(x + bw - 2).toFixed(1)}" y1="${y(s.p99_us).toFixed(1)}" y2="${y(s.p99_us).toFixed(1)}" stroke="${colors[mode]}" stroke-width="3"/>`);
    });
  });
  el.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${top + plotH}" stroke="#000"/>`);
  el.push(`<line x1="${left}" x2="${left + plotW}" y1="${top + plotH}" y2="${top + plotH}" stroke="#000"/>`);
  MODE_ORDER.forEach((mode, i) => {
    const ly = top + 10 + i * 22;
    el.push(`<rect x="${W - right + 20}" y="${ly}" width="14" height="14" fill="${colors[mode]}"/>`);
    el.push(`<text x="${W - right + 40}" y="${ly + 12}" font-size="12">${LABELS[mode]}</text>`);
  });
  const m = rep.machine;
  el.push(`<text x="${left}" y="${H - 12}" font-size="11" fill="#555">${m.cpuModel}, ${m.nproc} CPUs, ${m.kernel}; ${rep.quick ? 'QUICK' : 'full'} run ${rep.startedAt}</text>`);
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif">\n<rect width="100%" height="100%" fill="#fff"/>\n${el.join('\n')}\n</svg>\n`;
}

/** Prints the table and writes results/bench[-quick]-<time>.{md,json,svg} plus latest copies. */
export function writeReport(rep: BenchReport, dir: string, docsDir?: string): string[] {
  rep.targets = [...evaluateTargets(rep), ...algorithmTargets(rep.algorithms, rep.nodePort?.maglev)]; // h-maglev: algorithm rows
  fs.mkdirSync(dir, { recursive: true });
  const md = markdown(rep);
  process.stdout.write(md + '\n');
  const stamp = rep.startedAt.replace(/[:.]/g, '-');
  const base = `bench-${rep.quick ? 'quick' : 'full'}`;
  const files: string[] = [];
  const write = (name: string, body: string) => {
    const p = path.join(dir, name);
    fs.writeFileSync(p, body);
    files.push(p);
  };
  write(`${base}-${stamp}.json`, JSON.stringify(rep, null, 1));
  write(`${base}-${stamp}.md`, md);
  write(`${base}-${stamp}.svg`, svgChart(rep));
  write(`${base}-latest.json`, JSON.stringify(rep, null, 1));
  write(`${base}-latest.md`, md);
  write(`${base}-latest.svg`, svgChart(rep));
  // A full run is the one the documents quote: its report goes under docs/,
  // to be committed with the code it measured (README and docs/bench.md cite
  // it, never a number typed by hand).
  if (!rep.quick && docsDir) {
    const doc = path.join(docsDir, 'bench-results.md');
    fs.writeFileSync(doc, md);
    fs.writeFileSync(path.join(docsDir, 'bench-results.json'), JSON.stringify(rep, null, 1));
    files.push(doc);
  }
  return files;
}

/** Upstream kube-proxy and the Sluice agent, measured alike on one real API server. */
export function upstreamMarkdown(u: UpstreamResult | undefined): string[] {
  if (!u) return [];
  const lines = [`## Upstream kube-proxy ${u.kubernetesVersion ?? ''} and the Sluice agent on one real API server (${u.services} Services x ${u.endpointsPerService} endpoints)`, ''];
  if (u.skipped) return [...lines, `Not measured: ${u.skipped}`, ''];
  const pct = (xs: number[], q: number) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))]! : undefined;
  };
  const sl = u.rows.find((r) => r.id === 'sluice');
  const f = (v: number | undefined, d = 0) => (v === undefined || !Number.isFinite(v) ? '–' : v.toFixed(d));
  const x = (mine: number | undefined, theirs: number | undefined) => (mine !== undefined && theirs !== undefined && theirs > 0 ? ` (${(mine / theirs).toFixed(2)}x)` : '');
  lines.push('Each proxy on its own node namespace, one after the other, on the same objects of one etcd-backed kube-apiserver. Cold start: process start to every Service programmed. A change: one EndpointSlice replaced, the next written once the previous is visible. CPU: user + system of the process and its waited-for children (iptables-restore, nft) from start to programmed. Own metrics: kubeproxy_sync_proxy_rules_duration_seconds (the agent exports the same name). Ratios in parentheses: Sluice / that row.');
  lines.push('');
  lines.push('| proxy | minSyncPeriod | cold start ms | CPU to programmed s | first (full) sync s | change p50 ms | change p99 ms | sync mean ms (changes) | RSS MiB (peak) | changes (timeouts) | stopped |');
  lines.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|');
  for (const r of u.rows) {
    const vs = r === sl || !sl ? { cold: '', cpu: '', rss: '', p50: '' } : {
      cold: x(sl.coldStartMs, r.coldStartMs), cpu: x(sl.coldCpuS, r.coldCpuS), rss: x(sl.rssMiB, r.rssMiB), p50: x(pct(sl.changeMs, 0.5), pct(r.changeMs, 0.5)),
    };
    lines.push(`| ${r.label} | ${r.minSyncPeriod ?? ''} | ${f(r.coldStartMs)}${vs.cold} | ${f(r.coldCpuS, 2)}${vs.cpu} | ${f(r.firstSyncS, 3)} | ${f(pct(r.changeMs, 0.5), 1)}${vs.p50} | ${f(pct(r.changeMs, 0.99), 1)} | ${f(r.changeSyncMeanMs, 1)} | ${f(r.rssMiB, 1)} (${f(r.peakRssMiB, 1)})${vs.rss} | ${r.changeMs.length} (${r.timeouts}) | ${r.stopped ?? ''} |`);
  }
  lines.push('');
  if (u.snapshot) lines.push(`The objects came from ${u.snapshot.cached ? 'a cached' : 'a new'} etcd snapshot (${u.snapshot.key}; creating them through the API took ${(u.snapshot.buildMs / 1000).toFixed(1)} s when it was built); each proxy's cold start had a ${u.coldBudgetS ?? '?'} s budget.`);
  else if (u.createMs !== undefined) lines.push(`Creating the objects in the API server took ${(u.createMs / 1000).toFixed(1)} s; each proxy's cold start had a ${u.coldBudgetS ?? '?'} s budget.`);
  for (const n of u.notes) lines.push(`- ${n}`);
  lines.push('');
  return lines;
}

/** Issue 12: the agent against upstream kube-proxy on the same objects (real kube-apiserver). */
export function upstreamTargets(u: UpstreamResult | undefined): TargetResult[] {
  if (!u || u.skipped || !u.rows.length) return [];
  const sl = u.rows.find((r) => r.id === 'sluice');
  const kps = u.rows.filter((r) => r.id !== 'sluice' && r.rssMiB !== undefined);
  const out: TargetResult[] = [];
  out.push({
    target: `Sluice agent RSS <= 0.5x upstream kube-proxy's on the same API objects (${u.services} Services x ${u.endpointsPerService}, real kube-apiserver)`,
    verdict: !sl?.rssMiB || !kps.length ? 'n/a' : kps.every((k) => sl.rssMiB! <= 0.5 * k.rssMiB!) ? 'PASS' : 'FAIL',
    detail: !sl?.rssMiB ? (sl?.stopped ?? 'agent not measured') : `agent ${sl.rssMiB.toFixed(1)} MiB; ` + kps.map((k) => `${k.label} ${k.rssMiB!.toFixed(1)} MiB (${(sl.rssMiB! / k.rssMiB!).toFixed(2)}x)`).join('; '),
  });
  const coldMax = u.services >= 100000 ? 10_000 : u.services >= 10000 ? 1000 : undefined;
  out.push({
    target: `Sluice cold start (agent start -> every frontend programmed) on the real kube-apiserver <= ${coldMax !== undefined ? coldMax / 1000 : '1 (at 10 000) / 10 (at 100 000)'} s at ${u.services} Services`,
    verdict: sl?.coldStartMs === undefined || coldMax === undefined ? 'n/a' : sl.coldStartMs <= coldMax ? 'PASS' : 'FAIL',
    detail: sl?.coldStartMs === undefined ? (sl?.stopped ?? 'not measured') : `${sl.coldStartMs} ms` + (coldMax === undefined ? ' (the target is set at 10 000 and 100 000)' : ''),
  });
  return out;
}
