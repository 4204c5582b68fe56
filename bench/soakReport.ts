// `make soak`: runs bench/soak.ts and prints one table (issue 13 item 2),
// written to build/soak-results.md and .json. Scale from the environment:
// SOAK_S (churn seconds, default 180), SOAK_SERVICES (10000), SOAK_RATE
// (EndpointSlice updates/s, 1000), SOAK_SAMPLED (16).
//
// The table is open to the other reliability tests: each JSON file in
// build/soak-rows/ ({figure, value, required?, ok?}, or an array of them)
// becomes a row, e.g. the property-based input test's count of generated
// cases or the map-migration test's failed connections. A figure the issue
// asks for that no file gives is printed as "not run".
import * as fs from 'node:fs';
import * as path from 'node:path';
import { SOAK_DEFAULTS, runSoak, type SoakResult } from './soak';

export interface SoakRow {
  figure: string;
  value: string;
  /** What it must be ("0", "~0 after warm-up"); empty: informational. */
  required?: string;
  /** Whether it met `required`; undefined: informational. */
  ok?: boolean;
}

const ROWS_DIR = path.resolve(__dirname, '../../build/soak-rows');
/** Figures other tests contribute; shown as "not run" when their file is missing. */
const EXPECTED_EXTRA = [
  { match: /bad input/i, figure: 'bad inputs tried (property-based API objects, packet fuzzing)' },
  { match: /migration/i, figure: 'live map migration: failed connections' },
];

const f1 = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : '-');

export function soakRows(r: SoakResult): SoakRow[] {
  const o = r.options;
  const appliedRate = r.updatesApplied / r.churnSeconds;
  return [
    {
      figure: 'load held',
      value: `${o.services} Services x ${o.endpointsPerService} endpoints; ${appliedRate.toFixed(0)} EndpointSlice updates/s applied (asked ${o.rate}/s; each removes one endpoint and adds one) for ${r.churnSeconds.toFixed(0)} s, ${(o.sampledShare * 100).toFixed(0)}% of them on the ${o.sampled} sampled Services; the agent counted ${r.agentEndpointChanges} changes (${(r.agentEndpointChanges / r.churnSeconds).toFixed(0)}/s) and its maps equaled the API ${r.convergeMs} ms after the churn stopped; at most ${r.maxBacklog} updates written but not yet seen by the agent (sampled every 5 s)`,
    },
    {
      figure: 'programming latency (N)',
      value: `agent p99 <= ${r.programmingP99Ms} ms (histogram bucket bound, ${r.programmingSamples} samples); API write -> removal seen in the map (polled every 5 ms): p50 ${f1(r.removalSeenP50Ms)} ms, p99 ${f1(r.removalSeenP99Ms)} ms over ${r.removalsSeen} removals`,
    },
    { figure: 'connections through the socket LB to the sampled Services', value: String(r.connections) },
    { figure: `connections that reached a backend more than N = ${r.programmingP99Ms} ms after its removal was in the map`, value: String(r.staleAfterN), required: '0', ok: r.staleAfterN === 0 },
    { figure: 'the same with N = 0 (any connection after the removal was in the map)', value: `${r.staleAfterZero}; besides, ${r.staleUndecided} connections reached a backend the poll saw gone but the API had added back meanwhile (a presence between two polls; longest poll gap ${f1(r.pollMaxGapMs)} ms)${r.staleExamples.length ? `; e.g. ${r.staleExamples.join('; ')}` : ''}`, required: '0', ok: r.staleAfterZero === 0 },
    { figure: 'failed connections (Services that always had 10 live backends)', value: `${r.failedConnections}${r.failedConnections ? ` ${JSON.stringify(r.failedReasons)}` : ''}`, required: '0', ok: r.failedConnections === 0 },
    { figure: 'agent RSS', value: `${f1(r.rssStartMib)} MiB at the start of the churn, ${f1(r.rssEndMib)} at its end, ${f1(r.rssAfterDeleteMib)} after every Service was deleted; slope after warm-up (last 2/3 of the churn) ${r.rssSlopeMibPerMin.toFixed(2)} MiB/min; V8 heap in use ${f1(r.heapMib.start)} -> ${f1(r.heapMib.end)} -> ${f1(r.heapMib.afterDelete)} MiB, V8 heap reserved at the end of the churn ${f1(r.memory.at(-1)?.heapTotalMib ?? NaN)} MiB (every 5 s: build/soak-results.json, result.memory)` },
    { figure: 'agent CPU per update', value: `${r.cpuMsPerUpdate.toFixed(2)} ms (${(r.agentCpuMs / 1000).toFixed(1)} s CPU for ${r.updatesApplied} updates)` },
    { figure: 'leaks after every Service was deleted (map entries, id allocators) vs. the baseline', value: r.leaked === 0 ? `0 (${Object.entries(r.afterDelete).map(([k, v]) => `${k} ${v}`).join(', ')})` : `${r.leaked}: ${r.leakDetail.join('; ')}`, required: '0', ok: r.leaked === 0 },
  ];
}

/** Rows other tests left in build/soak-rows/, plus "not run" for expected ones that are missing. */
export function extraRows(dir = ROWS_DIR): SoakRow[] {
  const rows: SoakRow[] = [];
  if (fs.existsSync(dir)) {
    for (const name of fs.readdirSync(dir).filter((n) => n.endsWith('.json')).sort()) {
      try {
        const data = JSON.parse(fs.readFileSync(path.join(dir, name), 'utf8')) as SoakRow | SoakRow[];
        for (const row of Array.isArray(data) ? data : [data]) if (row.figure && row.value !== undefined) rows.push({ ...row, value: `${row.value} (build/soak-rows/${name})` });
      } catch (err) {
        rows.push({ figure: `build/soak-rows/${name}`, value: `unreadable: ${(err as Error).message}`, ok: false });
      }
    }
  }
  for (const e of EXPECTED_EXTRA) if (!rows.some((r) => e.match.test(r.figure))) rows.push({ figure: e.figure, value: 'not run' });
  rows.push({ figure: 'faults survived', value: 'not part of make soak: agent SIGKILLed every 2 s for 60 s (test/e2e/crash_loop.test.ts, CRASH_LOOP_S=60) and API outages (test/e2e/agent.test.ts)' });
  return rows;
}

export function renderTable(rows: SoakRow[]): string {
  const cell = (s: string) => s.replace(/\|/g, '\\|');
  return ['| figure | value | must be | ok |', '|---|---|---|---|',
    ...rows.map((r) => `| ${cell(r.figure)} | ${cell(r.value)} | ${r.required ?? ''} | ${r.ok === undefined ? '' : r.ok ? 'yes' : '**NO**'} |`)].join('\n');
}

async function main(): Promise<void> {
  const env = (name: string, fallback: number) => (process.env[name] ? Number(process.env[name]) : fallback);
  const opts = {
    ...SOAK_DEFAULTS,
    seconds: env('SOAK_S', SOAK_DEFAULTS.seconds),
    services: env('SOAK_SERVICES', SOAK_DEFAULTS.services),
    rate: env('SOAK_RATE', SOAK_DEFAULTS.rate),
    sampled: env('SOAK_SAMPLED', SOAK_DEFAULTS.sampled),
  };
  const started = new Date();
  const r = await runSoak(opts);
  const rows = [...soakRows(r), ...extraRows()];
  const table = renderTable(rows);
  const md = [`# Churn soak (${started.toISOString()}, ${fs.readFileSync('/proc/loadavg', 'utf8').trim().split(' ').slice(0, 3).join(' ')} load at the end)`, '',
    `\`make soak\` with SOAK_S=${opts.seconds} SOAK_SERVICES=${opts.services} SOAK_RATE=${opts.rate} SOAK_SAMPLED=${opts.sampled} on ${require('node:os').cpus().length} CPUs.`, '', table, ''].join('\n');
  process.stdout.write(`\n${table}\n`);
  const out = path.resolve(__dirname, '../../build');
  fs.mkdirSync(out, { recursive: true });
  fs.writeFileSync(path.join(out, 'soak-results.md'), md);
  fs.writeFileSync(path.join(out, 'soak-results.json'), JSON.stringify({ started, result: r, rows }, null, 2));
  process.stdout.write(`written: build/soak-results.md, build/soak-results.json\n`);
  if (rows.some((row) => row.ok === false)) process.exitCode = 1;
}

if (require.main === module) {
  main().catch((err: Error) => {
    process.stderr.write(`soak: ${err.stack ?? err.message}\n`);
    process.exit(1);
  });
}
