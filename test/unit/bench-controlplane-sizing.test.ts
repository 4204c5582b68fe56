// The control-plane bench's map capacities must hold what its objects ask
// for at every scale it runs (bench/controlplane.ts): at 100 000 Services x
// TCP and UDP the Service-name map (one entry per frontend) was left at its
// default 131 072, every first sync threw when it filled, and the part never
// reached its one-change samples.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { controlPlaneMaxEntries } from '../../bench/controlplane';
import { MAP_SPECS, SLUICE_MAP_REVNAT4, SLUICE_MAP_SERVICES4, SLUICE_MAP_SVC_NAMES } from '../../src/abi/generated';

for (const services of [1000, 10_000, 100_000]) {
  test(`maps sized per frontend hold every frontend at ${services} Services x 2 ports`, () => {
    const sizes = controlPlaneMaxEntries(services, 2);
    const frontends = services * 2;
    for (const map of [SLUICE_MAP_SERVICES4, SLUICE_MAP_REVNAT4, SLUICE_MAP_SVC_NAMES]) {
      const capacity = sizes[map] ?? MAP_SPECS[map]!.maxEntries;
      assert.ok(capacity >= frontends, `${map}: ${capacity} entries for ${frontends} frontends`);
    }
  });
}
