// Case counts of the fuzz tests, merged into build/fuzz-results.json (one
// key per test part) for `make soak`'s table: generated, rejected, crashed.
import * as fs from 'node:fs';
import * as path from 'node:path';

/** The repository root: this file runs as dist/test/helpers/fuzzResults.js. */
const FILE = path.resolve(__dirname, '..', '..', '..', 'build', 'fuzz-results.json');

export interface FuzzCounts {
  /** Generated cases that ran. */
  generated: number;
  /** Of which rejected by name (log line + sluice_errors_total), or dropped/passed unchanged for packets. */
  rejected: number;
  /** Agent exits or program faults seen (must be 0). */
  crashed: number;
  seed: number;
  [more: string]: number | string | Record<string, number>;
}

export function recordFuzzResults(part: string, counts: FuzzCounts): void {
  let all: Record<string, unknown> = {};
  try {
    all = JSON.parse(fs.readFileSync(FILE, 'utf8')) as Record<string, unknown>;
  } catch {
    // first part written
  }
  all[part] = { ...counts, at: new Date().toISOString() };
  fs.mkdirSync(path.dirname(FILE), { recursive: true });
  fs.writeFileSync(FILE, `${JSON.stringify(all, null, 2)}\n`);
  const parts = Object.entries(all) as Array<[string, FuzzCounts]>;
  const crashed = parts.reduce((n, [, c]) => n + (c.crashed ?? 0), 0);
  recordSoakRow('bad-input', {
    figure: 'bad inputs tried (property-based API objects, packet fuzzing)',
    value: parts.map(([p, c]) => `${p}: ${c.generated} generated, ${c.rejected} rejected, ${c.crashed} crashed`).join('; '),
    required: '0 crashed', ok: crashed === 0,
  });
}

/** FUZZ_RUNS (the long form) or the short form's count. */
export function fuzzRuns(short: number): number {
  const n = Number(process.env['FUZZ_RUNS'] ?? '');
  return Number.isInteger(n) && n > 0 ? n : short;
}

/** FUZZ_SEED to replay a failure; else a fixed seed, so `make test` is reproducible. */
export function fuzzSeed(fixed: number): number {
  const text = process.env['FUZZ_SEED'] ?? '';
  return text !== '' && Number.isInteger(Number(text)) ? Number(text) : fixed;
}

/** The directory `make soak`'s table reads extra rows from (bench/soakReport.ts). */
const SOAK_ROWS = path.resolve(__dirname, '..', '..', '..', 'build', 'soak-rows');

/** One row of `make soak`'s table from a test's measured result ({figure, value, required, ok}). */
export function recordSoakRow(name: string, row: { figure: string; value: string; required?: string; ok?: boolean }): void {
  fs.mkdirSync(SOAK_ROWS, { recursive: true });
  fs.writeFileSync(path.join(SOAK_ROWS, `${name}.json`), `${JSON.stringify({ ...row, at: new Date().toISOString() })}\n`);
}
