// The churn soak's arithmetic and its table (bench/soak.ts, bench/soakReport.ts):
// p99 over the samples a histogram gained between two scrapes, the RSS slope,
// and rows other tests contribute through build/soak-rows/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { histogramBuckets, histogramP99, slope } from '../../bench/soak';
import { extraRows, renderTable } from '../../bench/soakReport';

const scrape = (counts: number[]) => ['0', '0.25', '0.5', '1', '+Inf'].map((le, i) => `m_bucket{ip_family="IPv4",le="${le}"} ${counts[i]}`).join('\n');

test('histogram p99 counts only the samples gained since the first scrape', () => {
  // Before: 100 slow samples (the preload's first sync). After: 1000 more, all under 0.25 s.
  const before = histogramBuckets(scrape([0, 0, 0, 0, 100]), 'm');
  const after = histogramBuckets(scrape([0, 1000, 1000, 1000, 1100]), 'm');
  assert.deepEqual(histogramP99(after, before), { p99Ms: 250, count: 1000 });
  assert.equal(histogramP99(after).p99Ms, Infinity, 'without the baseline the preload dominates');
});

test('RSS slope: least squares', () => {
  assert.equal(slope([[0, 10], [1, 12], [2, 14]]), 2);
  assert.ok(Number.isNaN(slope([[0, 1]])));
});

test('rows from build/soak-rows/ join the table; the expected ones that are missing say "not run"', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-soak-rows-'));
  try {
    fs.writeFileSync(path.join(dir, 'fuzz.json'), JSON.stringify({ figure: 'bad inputs tried', value: '12000 cases', required: '0 crashes', ok: true }));
    fs.writeFileSync(path.join(dir, 'broken.json'), '{');
    const rows = extraRows(dir);
    assert.equal(rows.find((r) => r.figure === 'bad inputs tried')?.value, '12000 cases (build/soak-rows/fuzz.json)');
    assert.equal(rows.find((r) => /migration/.test(r.figure))?.value, 'not run');
    assert.equal(rows.find((r) => r.figure === 'build/soak-rows/broken.json')?.ok, false);
    assert.match(renderTable(rows), /\| bad inputs tried \| 12000 cases \(build\/soak-rows\/fuzz.json\) \| 0 crashes \| yes \|/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
