// Churn soak, short form (issue 13 item 2): the real agent under endpoint
// churn with clients connecting through the socket LB the whole time
// (bench/soak.ts; `make soak` is the long form with the full table). Asserts
// the zero figures: no connection reached a backend later than the agent's
// p99 programming latency after its removal was in the map, no failed
// connection to the sampled Services (they always have 10 live backends),
// and after every Service is deleted no map entry or allocator id is left
// beyond the baseline. SOAK_E2E_S / SOAK_E2E_SERVICES / SOAK_E2E_RATE scale it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SOAK_DEFAULTS, runSoak } from '../../bench/soak';
import { renderTable, soakRows } from '../../bench/soakReport';

const env = (name: string, fallback: number) => (process.env[name] ? Number(process.env[name]) : fallback);

test('churn soak (short): no stale backend after N = p99 programming latency, no failed connection, no leak after deleting everything', async () => {
  const r = await runSoak({
    ...SOAK_DEFAULTS,
    seconds: env('SOAK_E2E_S', 20),
    services: env('SOAK_E2E_SERVICES', 1000),
    rate: env('SOAK_E2E_RATE', 500),
    prefix: 'sluice-soak-e2e',
    log: (l) => process.stdout.write(`# ${l}\n`),
  });
  process.stdout.write(`${renderTable(soakRows(r)).split('\n').map((l) => `# ${l}`).join('\n')}\n`);
  assert.ok(r.updatesApplied > 0 && r.connections > 0, `no load: ${r.updatesApplied} updates, ${r.connections} connections`);
  assert.ok(r.removalsSeen > 0, 'no removal of a sampled Service\'s backend was seen in the map: the stale check would be empty');
  assert.equal(r.staleAfterN, 0, `connections reached a backend more than ${r.programmingP99Ms} ms after its removal was in the map: ${r.staleExamples.join('; ')}`);
  assert.equal(r.failedConnections, 0, `failed connections: ${JSON.stringify(r.failedReasons)}`);
  assert.equal(r.leaked, 0, `left after every Service was deleted: ${r.leakDetail.join('; ')}`);
});
