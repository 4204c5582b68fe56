// src/agent/mapSizing.ts: which IPv6 capacities the agent asks for.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { IPV6_SMALL_ENTRIES, mapCapacities, nodeHasIpv6, nodeServesIpv6 } from '../../src/agent/mapSizing';

test('nodeHasIpv6: an IPv6 pod CIDR or address on the Node', () => {
  assert.equal(nodeHasIpv6({ spec: { podCIDRs: ['10.0.0.0/24'] }, status: { addresses: [{ address: '10.1.0.1' }] } }), false);
  assert.equal(nodeHasIpv6({ spec: { podCIDRs: ['10.0.0.0/24', 'fd00::/64'] } }), true);
  assert.equal(nodeHasIpv6({ status: { addresses: [{ address: '10.1.0.1' }, { address: 'fd00::1' }] } }), true);
  assert.equal(nodeHasIpv6({ spec: { podCIDR: 'fd00::/64' } }), true);
  assert.equal(nodeHasIpv6({}), false);
});

test('mapCapacities: small IPv6 tables only when IPv4-only, never over the config or an existing pin', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mapsz-'));
  try {
    assert.deepEqual(mapCapacities({ sluice_svc4: 1000 }, dir, true), { sluice_svc4: 1000, sluice_be6: 262144, sluice_revnat6: 65536 });
    assert.equal(mapCapacities({ sluice_be4: 5000 }, dir, true).sluice_be6, 5000, 'the IPv6 id arrays follow their IPv4 twins (ids from one pool)');
    const small = mapCapacities({ sluice_be6: 77 }, dir, false);
    assert.equal(small.sluice_be6, 77, 'maxEntries wins');
    assert.equal(small.sluice_revnat6, IPV6_SMALL_ENTRIES.sluice_revnat6);
    assert.equal(small.sluice_rng6, IPV6_SMALL_ENTRIES.sluice_rng6);
    assert.equal(small.sluice_svc6, IPV6_SMALL_ENTRIES.sluice_svc6);
    fs.writeFileSync(path.join(dir, 'sluice_affin6'), '');
    assert.equal(mapCapacities({}, dir, false).sluice_affin6, undefined, 'a pinned map keeps its size');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('nodeServesIpv6: the config decides when not auto; unknown counts as IPv6', async () => {
  assert.deepEqual((await nodeServesIpv6('small', undefined, 'n')).ipv6, false);
  assert.deepEqual((await nodeServesIpv6('full', undefined, 'n')).ipv6, true);
  assert.deepEqual((await nodeServesIpv6('auto', undefined, 'n')).ipv6, true);
  const failing = { server: 'x', get: () => Promise.reject(new Error('refused')) };
  const r = await nodeServesIpv6('auto', failing, 'n');
  assert.equal(r.ipv6, true);
  assert.match(r.why, /refused/);
});

test('mapCapacities: the names map (rev-NAT id and protocol) is asked for at twice sluice_revnat4 when that passes its default, unless asked for (at 100 000 Services x 2 ports the default filled)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mapsz-'));
  try {
    assert.equal(mapCapacities({ sluice_revnat4: 200000 }, dir, true).sluice_svcname, 400000);
    assert.equal(mapCapacities({ sluice_revnat4: 200000, sluice_svcname: 1000 }, dir, true).sluice_svcname, 1000, 'maxEntries wins');
    assert.equal(mapCapacities({ sluice_revnat4: 65536 }, dir, true).sluice_svcname, undefined, 'the object\'s default already covers it');
    assert.equal(mapCapacities({ sluice_revnat4: 1024 }, dir, true).sluice_svcname, undefined, 'never below the object\'s default');
    assert.equal(mapCapacities({}, dir, false).sluice_svcname, undefined);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('mapCapacities: the Maglev array of maps (indexed by rev-NAT id and scope) follows sluice_revnat4 at twice its size, unless asked for', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mapsz-'));
  try {
    assert.equal(mapCapacities({ sluice_revnat4: 200000 }, dir, true).sluice_maglev4, 400000);
    assert.equal(mapCapacities({ sluice_revnat4: 200000, sluice_maglev4: 1024 }, dir, true).sluice_maglev4, 1024, 'maxEntries wins');
    assert.equal(mapCapacities({}, dir, true).sluice_maglev4, undefined, 'the object\'s default (twice SLUICE_MAX_REVNAT)');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
