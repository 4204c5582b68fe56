// The comparison half of the conformance check: for every frontend (kind +
// address:port/proto) on a node, kube-proxy's backend set against Sluice's,
// one table row each. Sluice's side comes from `sluice services -o json`
// mapped into the same BackendSets shape (see docs/cluster-tier.md).
import { FRONTEND_KINDS, type BackendSets, type FrontendKind } from './kubeProxyOracle';

export interface ConformanceRow {
  scenario: string;
  node: string;
  kind: FrontendKind;
  frontend: string;
  kubeProxy: string[] | undefined;
  sluice: string[] | undefined;
  /** The source-ranges column (LoadBalancer frontends): loadBalancerSourceRanges each side enforces; absent: none. */
  kubeProxyRanges?: string[];
  sluiceRanges?: string[];
  match: boolean;
}

function sameSet(a: string[] | undefined, b: string[] | undefined): boolean {
  if (!a || !b) return false;
  const x = [...new Set(a)].sort();
  const y = [...new Set(b)].sort();
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

/**
 * One row per frontend present on either side. A frontend only one side has
 * is a mismatch — except where `ignore` says the difference is known and
 * intended (e.g. a frontend kind Sluice does not program yet), which the
 * caller must then name in its report.
 */
export function compareBackendSets(scenario: string, node: string, kubeProxy: BackendSets, sluice: BackendSets,
  ignore?: (kind: FrontendKind, frontend: string) => boolean): ConformanceRow[] {
  const rows: ConformanceRow[] = [];
  for (const kind of FRONTEND_KINDS) {
    const keys = [...new Set([...Object.keys(kubeProxy[kind]), ...Object.keys(sluice[kind])])].sort();
    for (const frontend of keys) {
      if (ignore?.(kind, frontend)) continue;
      const kp = kubeProxy[kind][frontend];
      const sl = sluice[kind][frontend];
      rows.push({ scenario, node, kind, frontend, kubeProxy: kp, sluice: sl, match: sameSet(kp, sl) });
    }
  }
  return rows;
}

function cell(set: string[] | undefined): string {
  if (!set) return '(absent)';
  if (set.length === 0) return '(none)';
  return [...set].sort().join(' ');
}

/**
 * Add the source-ranges column to the LoadBalancer rows: each side's ranges
 * for the row's frontend; a row matches only if the ranges match too.
 */
export function withSourceRanges(rows: ConformanceRow[], kubeProxy: Record<string, string[]>, sluice: Record<string, string[]>): ConformanceRow[] {
  return rows.map((r) => {
    if (r.kind !== 'loadBalancerIP') return r;
    const kp = kubeProxy[r.frontend] ?? [];
    const sl = sluice[r.frontend] ?? [];
    const same = kp.length === sl.length && [...kp].sort().every((v, i) => v === [...sl].sort()[i]);
    return { ...r, kubeProxyRanges: kp, sluiceRanges: sl, match: r.match && same };
  });
}

/**
 * Rows for the frontends a Service should have on this node that neither
 * side programs: compareBackendSets only sees frontends present on one side
 * at least, so one both sides drop would pass unseen.
 */
export function missingOnBothSides(scenario: (kind: FrontendKind, frontend: string) => string, node: string,
  expected: Array<{ kind: FrontendKind; frontend: string }>, rows: ConformanceRow[]): ConformanceRow[] {
  const seen = new Set(rows.filter((r) => r.node === node).map((r) => `${r.kind} ${r.frontend}`));
  return expected.filter((e) => !seen.has(`${e.kind} ${e.frontend}`))
    .map((e) => ({ scenario: scenario(e.kind, e.frontend), node, kind: e.kind, frontend: e.frontend, kubeProxy: undefined, sluice: undefined, match: false }));
}

function rangesCell(r: ConformanceRow, side: 'kubeProxyRanges' | 'sluiceRanges'): string {
  if (r.kind !== 'loadBalancerIP' || r[side] === undefined) return '';
  return r[side]!.length === 0 ? '(all)' : [...r[side]!].sort().join(' ');
}

/** A fixed-width table, one line per row, mismatches marked; ends with a "N match, N mismatch" line. */
export function formatConformanceTable(rows: ConformanceRow[], labels = { kubeProxy: 'kube-proxy', sluice: 'sluice' }): string {
  const header = ['scenario', 'node', 'kind', 'frontend', labels.kubeProxy, labels.sluice, `${labels.kubeProxy} ranges`, `${labels.sluice} ranges`, 'result'];
  const lines = rows.map((r) => [r.scenario, r.node, r.kind, r.frontend, cell(r.kubeProxy), cell(r.sluice),
    rangesCell(r, 'kubeProxyRanges'), rangesCell(r, 'sluiceRanges'), r.match ? 'match' : 'MISMATCH']);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const fmt = (cols: string[]): string => cols.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd();
  const mismatches = rows.filter((r) => !r.match).length;
  return [fmt(header), fmt(widths.map((w) => '-'.repeat(w))), ...lines.map(fmt),
    `${rows.length - mismatches} match, ${mismatches} mismatch`].join('\n');
}
