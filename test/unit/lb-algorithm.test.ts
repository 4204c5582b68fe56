// Per-Service backend selection algorithm (issue 15): annotation parsing, the
// IPVS scheduler name mapping, the agent default, and what reaches the spec.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { LB_ALGORITHM_ANNOTATION, parseLbAlgorithm, translateService } from '../../src/translate';
import { resolveConfig } from '../../src/agent/config';
import { toFrontendSpec, ZoneIds } from '../../src/agent/toSpecs';
import { NODE, svc, slice, ep } from './translate-fixtures';
import { slimService, StringPool } from '../../src/agent/slim';
import type { V1Service } from '@kubernetes/client-node';

test('algorithm names: ours and the IPVS schedulers we implement', () => {
  const table: Array<[string, string]> = [
    ['random', 'random'],
    ['round-robin', 'round-robin'],
    ['rr', 'round-robin'],
    ['RR', 'round-robin'],
    [' sh ', 'source-hash'],
    ['source-hash', 'source-hash'],
    ['lc', 'least-connection'],
    ['Least-Connection', 'least-connection'],
    ['maglev', 'maglev'],
    ['MH', 'maglev'],
  ];
  for (const [input, want] of table) assert.deepEqual(parseLbAlgorithm(input), { algorithm: want }, input);
});

test('IPVS schedulers not implemented are refused, each with a reason', () => {
  for (const name of ['wrr', 'wlc', 'sed', 'nq', 'dh', 'lblc']) {
    const r = parseLbAlgorithm(name);
    assert.ok('error' in r, `${name} must be refused`);
    assert.match(r.error, new RegExp(`^"${name}" refused: .+; use random, round-robin \\(rr\\), source-hash \\(sh\\), least-connection \\(lc\\), maglev \\(mh\\)$`));
  }
  const unknown = parseLbAlgorithm('fastest');
  assert.ok('error' in unknown);
  assert.match(unknown.error, /"fastest" is not a known algorithm/);
});

function annotated(value: string | undefined): V1Service {
  const s = svc({ type: 'NodePort', ports: [{ name: 'http', port: 80, targetPort: 'http', protocol: 'TCP', nodePort: 30080 }] });
  if (value !== undefined) s.metadata!.annotations = { [LB_ALGORITHM_ANNOTATION]: value };
  return s;
}

const SLICES = [slice('s1', [ep('10.0.1.1')])];

test('translate: the annotation sets the algorithm of every frontend of the Service', () => {
  const t = translateService(annotated('rr'), SLICES, NODE, { maxEndpointsPerService: 0 });
  assert.equal(t.frontends.length, 2, 'ClusterIP and NodePort');
  assert.deepEqual(t.frontends.map((f) => f.algorithm), ['round-robin', 'round-robin']);
  assert.deepEqual(t.problems, []);
});

test('translate: no annotation takes the agent default; random when none is given', () => {
  assert.deepEqual(translateService(annotated(undefined), SLICES, NODE, { maxEndpointsPerService: 0 }).frontends.map((f) => f.algorithm), ['random', 'random']);
  const t = translateService(annotated(undefined), SLICES, NODE, { maxEndpointsPerService: 0, defaultLbAlgorithm: 'source-hash' });
  assert.deepEqual(t.frontends.map((f) => f.algorithm), ['source-hash', 'source-hash']);
});

test('translate: an unknown or refused annotation is a named problem and the Service keeps the default', () => {
  for (const value of ['wlc', 'wrr', 'bogus']) {
    const t = translateService(annotated(value), SLICES, NODE, { maxEndpointsPerService: 0, defaultLbAlgorithm: 'round-robin' });
    assert.deepEqual(t.frontends.map((f) => f.algorithm), ['round-robin', 'round-robin'], value);
    assert.equal(t.problems.length, 1, value);
    assert.equal(t.problems[0]!.reason, 'unknown_lb_algorithm');
    assert.equal(t.problems[0]!.object, 'Service default/web');
    assert.match(t.problems[0]!.message, new RegExp(`^Service default/web: annotation sluice.io/lb-algorithm: "${value}" .*; using round-robin$`));
  }
});

test('the spec carries the LB_ALG_* code; sessionAffinity keeps its flag alongside', () => {
  const s = annotated('sh');
  s.spec!.sessionAffinity = 'ClientIP';
  const t = translateService(s, SLICES, NODE, { maxEndpointsPerService: 0 });
  const spec = toFrontendSpec(t.frontends[0]!, new ZoneIds());
  assert.equal(spec?.algorithm, abi.LB_ALG_SOURCE_HASH);
  assert.ok(spec!.flags & abi.LB_SVC_FLAG_AFFINITY, 'affinity still set: the data path checks it first');
  assert.equal(abi.LB_ALG_RANDOM, 0);
  assert.notEqual(abi.LB_ALG_ROUND_ROBIN, abi.LB_ALG_SOURCE_HASH);
});

test('agent default: --lb-algorithm and config lbAlgorithm accept IPVS names and refuse the rest at start', () => {
  assert.equal(resolveConfig(new Map()).lbAlgorithm, 'random');
  assert.equal(resolveConfig(new Map([['lb-algorithm', 'rr']])).lbAlgorithm, 'round-robin');
  assert.equal(resolveConfig(new Map([['lb-algorithm', 'lc']])).lbAlgorithm, 'least-connection');
  assert.throws(() => resolveConfig(new Map([['lb-algorithm', 'wrr']])), /^Error: --lb-algorithm: "wrr" refused: weighted schedulers need endpoint weights/);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-alg-'));
  try {
    const file = path.join(dir, 'config.yaml');
    fs.writeFileSync(file, 'lbAlgorithm: sh\n');
    assert.equal(resolveConfig(new Map([['config', file]])).lbAlgorithm, 'source-hash');
    fs.writeFileSync(file, 'lbAlgorithm: wlc\n');
    assert.throws(() => resolveConfig(new Map([['config', file]])), /config file .*: lbAlgorithm: "wlc" refused/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('the agent\'s slim Service record keeps the algorithm annotation (and only it)', () => {
  const s = annotated('rr');
  s.metadata!.annotations!['example.com/other'] = 'dropped';
  const slim = slimService(s, new StringPool());
  assert.deepEqual(slim.metadata?.annotations, { [LB_ALGORITHM_ANNOTATION]: 'rr' });
  assert.equal(slimService(annotated(undefined), new StringPool()).metadata?.annotations, undefined);
});
