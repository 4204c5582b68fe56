// Backend selection algorithms on the TC north-south path (BPF_PROG_TEST_RUN):
// round-robin over new flows, source-hash by client address, affinity first.
// Each new flow is a SYN with a fresh source port; the backend is read from
// the DNATed packet's destination and the full packet is checked byte by byte.
import { after, before, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TcHarness, type TcBackend } from './tc_harness';
import { TC_ACT_OK, TCP_SYN, diffHex, frame, type L4Spec } from './tc_packet';

const NODE = '198.18.0.1';
const NODE_PORT = 30080;
const BACKENDS: TcBackend[] = [1, 2, 3, 4].map((i) => ({ id: i, address: `198.18.1.${10 + i}`, port: 8080, local: true }));
/** externalTrafficPolicy Local, local backends: DNAT only, so the output is the input with a new destination. */
const FLAGS = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;

let h: TcHarness;
let sport = 40000;

before(() => {
  h = TcHarness.create('sluice-tcalg');
});
after(() => h?.close());
beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: NODE });
});

function program(algorithm: number, affinityTimeout = 0): void {
  const flags = FLAGS | (affinityTimeout ? abi.LB_SVC_FLAG_AFFINITY : 0);
  h.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags, revNatId: 9, backends: BACKENDS, algorithm, affinityTimeout });
}

/** One new flow from `client`: the backend address it was DNATed to. */
function newFlow(client: string): string {
  const syn: L4Spec = { proto: 'tcp', src: client, dst: NODE, sport: sport++, dport: NODE_PORT, tcpFlags: TCP_SYN };
  const { verdict, out } = h.run('ingress', frame(syn));
  assert.equal(verdict, TC_ACT_OK);
  const backend = BACKENDS.find((b) => frame({ ...syn, dst: b.address, dport: b.port }).equals(out));
  assert.ok(backend, `output is no backend's DNAT of the SYN:\n${diffHex(out, frame({ ...syn, dst: BACKENDS[0]!.address, dport: 8080 }))}`);
  return backend.address;
}

function histogram(addresses: string[]): Map<string, number> {
  const h = new Map<string, number>();
  for (const a of addresses) h.set(a, (h.get(a) ?? 0) + 1);
  return h;
}

test('round-robin: N new flows give each of k backends N/k within ±1', () => {
  program(abi.LB_ALG_ROUND_ROBIN);
  const N = 42;
  const picks = Array.from({ length: N }, () => newFlow('198.18.0.10'));
  const counts = histogram(picks);
  for (const b of BACKENDS) {
    const n = counts.get(b.address) ?? 0;
    assert.ok(Math.abs(n - N / BACKENDS.length) <= 1, `${b.address}: ${n} of ${N}: ${JSON.stringify([...counts])}`);
  }
  // In turn: consecutive flows never repeat a backend (k > 1).
  for (let i = 1; i < picks.length; i++) assert.notEqual(picks[i], picks[i - 1], `flows ${i - 1} and ${i}`);
});

test('source-hash: a client always gets the same backend; different clients spread', () => {
  program(abi.LB_ALG_SOURCE_HASH);
  const first = newFlow('198.18.0.10');
  for (let i = 0; i < 20; i++) assert.equal(newFlow('198.18.0.10'), first, `flow ${i} of the same client`);
  const perClient = Array.from({ length: 32 }, (_, i) => `198.18.0.${20 + i}`).map((c) => {
    const b = newFlow(c);
    assert.equal(newFlow(c), b, `client ${c} again`);
    return b;
  });
  const counts = histogram(perClient);
  // The hash is deterministic (client address, rev-NAT id): 32 clients use every backend.
  assert.equal(counts.size, BACKENDS.length, `32 clients over 4 backends: ${JSON.stringify([...counts])}`);
});

test('random (the default) still spreads new flows of one client', () => {
  program(abi.LB_ALG_RANDOM);
  const counts = histogram(Array.from({ length: 80 }, () => newFlow('198.18.0.10')));
  // 80 draws over 4 backends: P(some backend gets none) < 4 * 0.75^80 ~ 4e-10.
  assert.equal(counts.size, BACKENDS.length, JSON.stringify([...counts]));
});

test('sessionAffinity ClientIP wins over round-robin', () => {
  program(abi.LB_ALG_ROUND_ROBIN, 60);
  const first = newFlow('198.18.0.10');
  for (let i = 0; i < 10; i++) assert.equal(newFlow('198.18.0.10'), first, `flow ${i}`);
});
