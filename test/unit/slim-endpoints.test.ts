// The translation reads a packed slim slice (src/agent/slim.ts) from its
// integers, not from endpoint objects and address text
// (forEachPackedIPv4 in src/translate/endpoints.ts). It must collect exactly
// what the API object's text gives: random slices, conditions, nodes, zones,
// local endpoints, duplicates, and addresses that cannot pack.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { V1Endpoint, V1EndpointSlice } from '@kubernetes/client-node';
import { collectEndpoints } from '../../src/translate/endpoints';
import type { IPFamily, TranslateProblem } from '../../src/model/frontend';
import { ip4Exact, slimSlice, StringPool } from '../../src/agent/slim';

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

const TRI = [undefined, true, false];

function randomSlice(r: () => number, i: number, addressType = 'IPv4'): V1EndpointSlice {
  const endpoints: V1Endpoint[] = [];
  const n = Math.floor(r() * 12);
  for (let e = 0; e < n; e++) {
    // A small address space so two endpoints of one slice sometimes collide.
    const address = r() < 0.03 ? '0.0.0.0' : r() < 0.03 ? '255.255.255.255' : `198.18.${Math.floor(r() * 3)}.${Math.floor(r() * 256)}`;
    const ep: V1Endpoint = { addresses: [address] };
    if (r() < 0.8) {
      const c: NonNullable<V1Endpoint['conditions']> = {};
      const ready = TRI[Math.floor(r() * 3)];
      const serving = TRI[Math.floor(r() * 3)];
      const terminating = TRI[Math.floor(r() * 3)];
      if (ready !== undefined) c.ready = ready;
      if (serving !== undefined) c.serving = serving;
      if (terminating !== undefined) c.terminating = terminating;
      ep.conditions = c;
    }
    if (r() < 0.9) ep.nodeName = `node-${Math.floor(r() * 4)}`;
    if (r() < 0.7) ep.zone = `zone-${Math.floor(r() * 3)}`;
    endpoints.push(ep);
  }
  return {
    addressType,
    metadata: { name: `s-${i}`, namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } },
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }, { name: 'dns', port: 53, protocol: 'UDP' }],
    endpoints,
  };
}

function collect(slices: V1EndpointSlice[], node: string, families: IPFamily[]) {
  const problems: TranslateProblem[] = [];
  const out = collectEndpoints(slices, node, new Set(families), problems);
  // Maps in their insertion order: the packed path must also keep the order.
  return { endpoints: [...out].map(([k, v]) => [k, [...v]]), problems };
}

test('slim: a packed slice collects the same endpoints as its API object (500 random Services)', () => {
  const r = rng(12);
  let packedSeen = 0;
  for (let i = 0; i < 500; i++) {
    const pool = new StringPool();
    const slices = Array.from({ length: 1 + Math.floor(r() * 3) }, (_, j) => randomSlice(r, j));
    const slim = slices.map((s) => slimSlice(s, pool));
    packedSeen += slim.filter((s) => 'forEachPackedIPv4' in s).length;
    for (const node of ['', 'node-1']) {
      assert.deepEqual(collect(slim, node, ['IPv4', 'IPv6']), collect(slices, node, ['IPv4', 'IPv6']), `case ${i} node "${node}"`);
    }
  }
  assert.ok(packedSeen > 1000, `the packed path was exercised (${packedSeen} packed slices)`);
});

test('slim: a packed slice whose addressType is IPv6 still reports its IPv4 addresses as invalid', () => {
  const slice = randomSlice(rng(3), 0, 'IPv6');
  slice.endpoints = [{ addresses: ['198.18.0.1'] }, { addresses: ['198.18.0.2'] }];
  const slim = slimSlice(slice, new StringPool());
  assert.ok('forEachPackedIPv4' in slim, 'the fixture packs');
  const got = collect([slim], '', ['IPv4', 'IPv6']);
  assert.deepEqual(got, collect([slice], '', ['IPv4', 'IPv6']));
  assert.equal(got.problems.length, 1);
  assert.match(got.problems[0]!.message, /2 endpoint address\(es\) are not valid IPv6 addresses/);
});

test('slim: ip4Exact takes canonical dotted quads only', () => {
  assert.equal(ip4Exact('198.18.0.1'), 0xc6120001);
  assert.equal(ip4Exact('0.0.0.0'), 0);
  assert.equal(ip4Exact('255.255.255.255'), 0xffffffff);
  for (const bad of ['', '1.2.3', '1.2.3.4.5', '01.2.3.4', '1.2.3.00', '256.1.1.1', '1.2.3.4 ', '1..3.4', '.1.2.3', '1.2.3.', '1.2.3.1000', 'a.b.c.d', '::1', '1.2.3.-4', '١.2.3.4']) {
    assert.equal(ip4Exact(bad), undefined, JSON.stringify(bad));
  }
});
