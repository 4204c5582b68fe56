// Load-balancing algorithms in `make bench` (issue 15):
//
// * Maglev table build time (1 Service x 1 000 backends; 10 000 Services x
//   10 backends, each a distinct backend set so nothing is shared) and the
//   kernel memory of 10 000 tables at the default M, plus the other
//   candidate sizes (the numbers that chose the default; docs/algorithms.md).
//   Built by the agent's writer (src/datapath/maglev.ts) into a scratch
//   ARRAY_OF_MAPS of our own: no data path, no traffic.
// * Socket connect latency per algorithm at the bench's tax scale
//   (measureAlgorithmConnect): Maglev tables are written once, then every
//   round visits every algorithm (order reversed on odd rounds), re-marking
//   the socket-LB masters and running a direct and a Sluice round back to
//   back, as the main rows interleave their series: a load change on the
//   shared machine hits every algorithm alike. The Sluice rounds run under
//   bpf_stats, so each row carries connect4's (and sock_release's) ns per
//   run next to its ratio. ALGORITHM_ROWS is the list: a new algorithm is
//   one row.
import * as abi from '../src/abi/generated';
import { BpfMap } from '../src/bpf/map';
import { MapType } from '../src/bpf/constants';
import { MaglevTables } from '../src/datapath/maglev';
import { DEFAULT_MAGLEV_TABLE_SIZE } from '../src/datapath/maglevTable';
import { openSockLbMaps } from '../src/datapath/maps';
import { numberToIp4, protoName } from '../src/datapath/addr';
import { median, type RoundResult } from './stats';
import type { ProgRef, ProgStats } from './progstats';

/** NodePortResult.maglev (bench/nodeport.ts). */
export interface NodePortMaglev {
  rounds: number;
  rrPerS: number;
  failed: number;
  vsRandom: number;
  switchS: number;
}

export interface AlgorithmRow {
  name: string;
  code: number;
}

/** The algorithms measured per row; append new ones here. */
export const ALGORITHM_ROWS: AlgorithmRow[] = [
  { name: 'random', code: abi.LB_ALG_RANDOM },
  { name: 'round-robin', code: abi.LB_ALG_ROUND_ROBIN },
  { name: 'source-hash', code: abi.LB_ALG_SOURCE_HASH },
  { name: 'least-connection', code: abi.LB_ALG_LEAST_CONN },
  { name: 'maglev', code: abi.LB_ALG_MAGLEV },
];

export interface MaglevBuildResult {
  m: number;
  /** ms per table, 1 Service x 1 000 backends (median of 5). */
  oneByThousandMs: number;
  /** 10 000 Services x 10 backends: total seconds and kernel bytes at M. */
  services: number;
  manyTotalS: number;
  manyBytes: number;
  /** Kernel bytes per table at other sizes (measured on `sampleTables` tables, per table). */
  bytesPerTableBySize: Record<string, number>;
  sampleTables: number;
}

export interface AlgorithmConnectRow {
  algorithm: string;
  rounds: number;
  /** Median over rounds of (Sluice p50 / direct p50), each pair measured back to back. */
  p50Ratio: number;
  sluiceP50Us: number;
  directP50Us: number;
  failed: number;
  /** bpf_stats over this algorithm's Sluice rounds: ns per run of connect4 and of sock_release. */
  connect4Ns?: number;
  releaseNs?: number;
  /** Per pair, in round order: [direct p50, Sluice p50] in µs (an outlier ratio is read from these: docs/bench.md, the two p50 states). */
  pairsP50Us?: Array<[number, number]>;
}

export interface AlgorithmBenchResult {
  maglev?: MaglevBuildResult;
  connect: AlgorithmConnectRow[];
  /** Services of the connect rows (the bench's largest data-path scale). */
  connectServices?: number;
  /** Seconds the algorithm part added to the run. */
  addedS: number;
  notes: string[];
}

function scratchOuter(): BpfMap {
  const inner = BpfMap.create({ type: MapType.ARRAY, name: 'sl_bench_mg_in', keySize: 4, valueSize: abi.LB_MAGLEV_ROW * 4, maxEntries: 1, flags: 1 << 12 });
  try {
    return BpfMap.create({ type: MapType.ARRAY_OF_MAPS, name: 'sl_bench_mg', keySize: 4, valueSize: 4, maxEntries: abi.SLUICE_MAX_MAGLEV4, innerMapFd: inner.fd });
  } finally {
    inner.close();
  }
}

const backendsFor = (service: number, n: number, base = 0) =>
  Array.from({ length: n }, (_, i) => ({ id: base + i + 1, address: `10.${64 + (service >> 16)}.${(service >> 8) & 255}.${service & 255}`, port: 1024 + i }));

/** Build `count` tables of distinct backend sets at size m; seconds and kernel bytes. */
function buildMany(m: number, count: number, perService: number): { seconds: number; bytes: number } {
  const outer = scratchOuter();
  const tables = new MaglevTables(outer, m);
  try {
    const t0 = process.hrtime.bigint();
    // As the agent writes them: queued per apply batch, flushed per batch.
    for (let s = 0; s < count; s++) {
      tables.queue({ revNatId: s + 1, proto: 'tcp', scope: 'external' }, backendsFor(s, perService, s * perService));
      if (s % 1000 === 999) tables.flush();
    }
    tables.flush();
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    return { seconds, bytes: tables.stats().bytes };
  } finally {
    tables.close();
    outer.close(); // the kernel frees every inner table with it
  }
}

export function measureMaglevBuild(services: number, log: (m: string) => void): MaglevBuildResult {
  const m = DEFAULT_MAGLEV_TABLE_SIZE;
  const one: number[] = [];
  for (let r = 0; r < 5; r++) one.push(buildMany(m, 1, 1000).seconds * 1000);
  const many = buildMany(m, services, 10);
  const sampleTables = Math.min(1000, services);
  const bytesPerTableBySize: Record<string, number> = {};
  for (const size of [1021, 4093, 16381]) bytesPerTableBySize[size] = buildMany(size, sampleTables, 10).bytes / sampleTables;
  log(`maglev: M=${m}: 1x1000 backends ${median(one).toFixed(2)} ms; ${services}x10 in ${many.seconds.toFixed(2)} s, ${(many.bytes / 2 ** 20).toFixed(1)} MiB`);
  return { m, oneByThousandMs: median(one), services, manyTotalS: many.seconds, manyBytes: many.bytes, bytesPerTableBySize, sampleTables };
}

/**
 * Re-mark every master entry of the bench's socket-LB maps with `code`; for
 * Maglev first write each frontend's table (make-before-break, as the agent)
 * unless `tables` is false (written already: they stay in the outer map
 * whatever the masters say).
 */
export function markAlgorithm(bpffs: string, code: number, tables = true): void {
  const maps = openSockLbMaps(bpffs);
  try {
    const masters = maps.services.readAll();
    // Each master names its backend ids' range (backend_id: first index).
    const idsOf = (v: abi.Lb4Service) => Array.from({ length: v.count }, (_, i) => maps.ranges.get(v.backend_id + i) ?? 0);
    if (code === abi.LB_ALG_MAGLEV && tables) {
      if (!maps.maglev) throw new Error(`${bpffs}: no ${abi.SLUICE_MAP_MAGLEV4} pinned`);
      const tables = new MaglevTables(maps.maglev);
      for (const [k, v] of masters) {
        const backends = idsOf(v).map((id) => {
          const b = maps.backends.get(id)!;
          return { id, address: numberToIp4(b.address), port: b.port };
        });
        tables.queue({ revNatId: v.rev_nat_id, proto: protoName(k.proto), scope: k.scope === abi.LB_SCOPE_INTERNAL ? 'internal' : 'external' }, backends);
      }
      tables.flush();
      tables.close();
    }
    maps.services.setMany(masters.map(([k, v]) => [k, { ...v, algorithm: code }]));
  } finally {
    maps.close();
  }
}

export interface AlgorithmConnectPlan {
  bpffs: string;
  services: number;
  rounds: number;
  /** One connect round through direct (the backends) or Sluice (the VIPs). */
  round: (via: 'direct' | 'sluice', round: number) => Promise<RoundResult>;
  progStats: ProgStats;
  /** The socket-LB programs (bpf_stats); empty: ratios only. */
  progs: ProgRef[];
  log: (m: string) => void;
}

/**
 * Connect p50 per algorithm against direct, interleaved (see the header):
 * round r visits every algorithm, each a direct and a Sluice round back to
 * back, which comes first alternating. Leaves the masters on random.
 */
export async function measureAlgorithmConnect(p: AlgorithmConnectPlan): Promise<AlgorithmConnectRow[]> {
  const pairs = new Map<string, Array<[RoundResult, RoundResult]>>(ALGORITHM_ROWS.map((r) => [r.name, []]));
  const series = (name: string) => `algorithm ${name}: socket LB, ${p.services} Services, TCP`;
  try {
    markAlgorithm(p.bpffs, abi.LB_ALG_MAGLEV); // the tables, once
    for (let r = 0; r < p.rounds; r++) {
      const order = r % 2 === 0 ? ALGORITHM_ROWS : [...ALGORITHM_ROWS].reverse();
      for (const [i, row] of order.entries()) {
        markAlgorithm(p.bpffs, row.code, false);
        const sluice = () => p.progStats.measure(series(row.name), p.progs, () => p.round('sluice', r), p.services);
        if ((r + i) % 2 === 0) {
          const d = await p.round('direct', r);
          pairs.get(row.name)!.push([d, await sluice()]);
        } else {
          const s = await sluice();
          pairs.get(row.name)!.push([await p.round('direct', r), s]);
        }
      }
    }
  } finally {
    markAlgorithm(p.bpffs, abi.LB_ALG_RANDOM, false);
  }
  const stat = (name: string, program: RegExp) =>
    p.progStats.rows().find((x) => x.series === series(name) && program.test(x.program))?.nsPerRun;
  return ALGORITHM_ROWS.map((row) => {
    const ps = pairs.get(row.name)!;
    const out: AlgorithmConnectRow = {
      algorithm: row.name, rounds: ps.length,
      p50Ratio: median(ps.map(([d, s]) => s.p50_us / d.p50_us)),
      sluiceP50Us: median(ps.map(([, s]) => s.p50_us)), directP50Us: median(ps.map(([d]) => d.p50_us)),
      failed: ps.reduce((n, [, s]) => n + (s.attempted - s.ok) + s.wrong_peer, 0),
      connect4Ns: stat(row.name, /connect4/), releaseNs: stat(row.name, /release|sock_rel/),
      pairsP50Us: ps.map(([d, s]) => [d.p50_us, s.p50_us]),
    };
    p.log(`algorithm ${row.name}: connect p50 ${out.p50Ratio.toFixed(3)}x direct over ${ps.length} pairs; connect4 ${nsText(out.connect4Ns)}${out.releaseNs ? `, sock_release ${nsText(out.releaseNs)}` : ''}`);
    return out;
  });
}

const nsText = (ns?: number) => (ns === undefined || Number.isNaN(ns) ? 'n/a' : `${ns.toFixed(0)} ns`);

const mib = (b: number) => (b / 2 ** 20).toFixed(1);

/** PASS/FAIL rows for the report's target table. */
export function algorithmTargets(a: AlgorithmBenchResult | undefined, np?: NodePortMaglev): Array<{ target: string; verdict: 'PASS' | 'FAIL' | 'n/a'; detail: string }> {
  const out: Array<{ target: string; verdict: 'PASS' | 'FAIL' | 'n/a'; detail: string }> = [];
  if (np) {
    out.push({
      target: 'NodePort TCP requests/s, Maglev vs random on the same Sluice node (informational)',
      verdict: 'n/a',
      detail: `${np.vsRandom.toFixed(3)}x (maglev ${np.rrPerS.toFixed(0)} req/s over ${np.rounds} rounds${np.failed ? `, ${np.failed} failed` : ''}; switched every Service in ${np.switchS.toFixed(1)} s)`,
    });
  }
  if (!a) return out;
  const rows = a.connect;
  const missing = ALGORITHM_ROWS.filter((r) => !rows.some((x) => x.algorithm === r.name)).map((r) => r.name);
  out.push({
    target: `Socket LB: every algorithm's ClusterIP TCP connect p50 within 1.05x direct${a.connectServices ? ` at ${a.connectServices} Services` : ''}`,
    verdict: rows.length === 0 ? 'n/a' : rows.every((r) => r.p50Ratio <= 1.05 && r.failed === 0) && missing.length === 0 ? 'PASS' : 'FAIL',
    detail: rows.map((r) => `${r.algorithm} ${r.p50Ratio.toFixed(3)}x (connect4 ${nsText(r.connect4Ns)})${r.failed ? ` (${r.failed} failed)` : ''}`).join(', ') + (missing.length ? `; not measured: ${missing.join(', ')}` : '') || a.notes.join('; '),
  });
  if (a.maglev) {
    const g = a.maglev;
    out.push({
      target: `Maglev map memory at ${g.services} Services x 10 backends, default M=${g.m} (informational: the number that chose M)`,
      verdict: 'n/a',
      detail: `${mib(g.manyBytes)} MiB; per table: ${Object.entries(g.bytesPerTableBySize).map(([m, b]) => `M=${m} ${(b / 1024).toFixed(1)} KiB (x${g.services} = ${mib(b * g.services)} MiB)`).join(', ')}`,
    });
  }
  return out;
}

export function algorithmMarkdown(a: AlgorithmBenchResult | undefined): string[] {
  if (!a) return [];
  const lines = ['## Load-balancing algorithms (issue 15)', ''];
  if (a.maglev) {
    const g = a.maglev;
    lines.push(`Maglev, default M = ${g.m} (agent writer into a scratch map; kernel memory = memlock of each inner array):`, '');
    lines.push('| measurement | value |', '|---|---|');
    lines.push(`| table build, 1 Service x 1 000 backends | ${g.oneByThousandMs.toFixed(2)} ms |`);
    lines.push(`| table build, ${g.services} Services x 10 backends (distinct sets) | ${g.manyTotalS.toFixed(2)} s (${((g.manyTotalS * 1e6) / g.services).toFixed(0)} µs per Service) |`);
    lines.push(`| map memory, ${g.services} Services at M=${g.m} | ${mib(g.manyBytes)} MiB |`);
    for (const [m, b] of Object.entries(g.bytesPerTableBySize)) lines.push(`| per table at M=${m} (over ${g.sampleTables} tables) | ${(b / 1024).toFixed(1)} KiB -> ${mib(b * g.services)} MiB at ${g.services} |`);
    lines.push('');
  }
  if (a.connect.length) {
    lines.push(`Socket LB connect per algorithm${a.connectServices ? ` at ${a.connectServices} Services` : ''} (every round visits every algorithm, each a direct and a Sluice round back to back; ratio = median of per-pair p50 ratios; ns per run from bpf_stats over the Sluice rounds):`, '');
    lines.push('| algorithm | rounds | Sluice p50 µs | direct p50 µs | p50 ratio | connect4 ns | sock_release ns | failed |', '|---|---|---|---|---|---|---|---|');
    for (const r of a.connect) lines.push(`| ${r.algorithm} | ${r.rounds} | ${r.sluiceP50Us.toFixed(1)} | ${r.directP50Us.toFixed(1)} | ${r.p50Ratio.toFixed(3)}x | ${nsText(r.connect4Ns)} | ${nsText(r.releaseNs)} | ${r.failed} |`);
    lines.push('', 'Every row has the same client -> backend pattern as its direct rounds (a random one of the Services, each over all ten backends; no TIME_WAIT: connbench resets). A ratio far from the other rows with connect4 close to theirs is the two p50 states of a round on this machine (docs/algorithms.md, "Connect ratio per algorithm"); each pair\'s p50s are in the JSON (pairsP50Us).');
    lines.push('');
  }
  lines.push(`Added to the run: ${a.addedS.toFixed(0)} s.`, '');
  for (const n of a.notes) lines.push(`- ${n}`);
  if (a.notes.length) lines.push('');
  return lines;
}
