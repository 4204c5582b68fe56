// bench/report.ts: a series' ratio to direct is paired with the direct round
// run right next to each of its rounds (its baseline), not with direct's
// round of the same index run several series away (docs/bench.md, "Why the
// pairing and the fixed CPUs").
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pairedRatio, type ScaleResult, type SeriesResult } from '../../bench/report';
import { summarize, type RoundResult } from '../../bench/stats';

function round(p50: number): RoundResult {
  return {
    proto: 'tcp', attempted: 1, ok: 1, timeouts: 0, refused: 0, other_errors: 0, last_errno: 0, wrong_peer: 0, warmup_failed: 0,
    elapsed_s: 1, per_s: 1, p50_us: p50, p90_us: p50, p99_us: 2 * p50, max_us: 2 * p50, mean_us: p50,
    client_cpu_s: 0, ops_total: 1, client_cpu_total_s: 0, host_cpu_ms_per_1000: 1,
  };
}

function series(mode: string, p50s: number[], baseline?: number[]): SeriesResult {
  const rounds = p50s.map(round);
  return { mode, label: mode, kind: 'service', proto: 'tcp', summary: summarize(rounds), rounds, ...(baseline ? { baseline: baseline.map(round) } : {}) };
}

test('the ratio pairs each round with its own adjacent direct round', () => {
  // The machine flips between a fast (8 µs) and a slow (24 µs) state; the
  // Sluice round and the direct round next to it share the state, a direct
  // round several series earlier (direct's own list) does not.
  const sluice = series('sluice-sock', [8.4, 25.2, 8.4, 25.2, 8.4], [8, 24, 8, 24, 8]);
  const direct = series('direct', [24, 8, 24, 8, 24, 8, 24, 8, 24, 8]);
  const sr: ScaleResult = { services: 1000, servicePorts: 2000, loads: {}, series: [direct, sluice], facts: {} };
  assert.equal(pairedRatio(sr, sluice, 'p50_us').toFixed(3), '1.050');
  assert.equal(pairedRatio(sr, direct, 'p50_us'), 1);
});

test('results without a baseline still pair with direct by round index', () => {
  const sluice = series('sluice-sock', [10, 20, 30]);
  const direct = series('direct', [10, 10, 10]);
  const sr: ScaleResult = { services: 1, servicePorts: 2, loads: {}, series: [direct, sluice], facts: {} };
  assert.equal(pairedRatio(sr, sluice, 'p50_us'), 2);
});
