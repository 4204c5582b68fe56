// SNAT source-port allocation of the north-south path under load (issue 13
// item 5), on crafted SYNs through BPF_PROG_TEST_RUN: 100 000 concurrent
// flows to one Service port get a port each, every port of the range can be
// handed out to flows toward one backend:port, and when the range truly runs
// out the flow is dropped whole (no conntrack entry left) and counted.
//
// A flow's reply key is backend:port -> SNAT address:port, so one backend
// address:port and one SNAT address hold at most (range size) concurrent
// flows: 4536 with the default 61000-65535. 100 000 flows to one port number
// therefore go to 25 backends listening on that port.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber, numberToIp4 } from '../../src/datapath/addr';
import { writeTcConfig, type TcConfig } from '../../src/datapath/tc/config';
import { counterIndex } from '../../src/datapath/counters';
import { TcHarness, type TcBackend } from './tc_harness';
import { TC_ACT_OK, TC_ACT_SHOT, TCP_SYN, frame, type L4Spec } from './tc_packet';

const NODE = '198.18.0.1';
const NODEPORT = 30080;
const BACKEND_PORT = 8080;
const DEFAULT_RANGE = abi.LB_TC_DEFAULT_SNAT_PORT_MAX - abi.LB_TC_DEFAULT_SNAT_PORT_MIN + 1;

let h: TcHarness;

before(() => {
  h = TcHarness.create('sluice-soak-snat');
});
after(() => h?.close());

function setup(cfg: TcConfig, backends: number): void {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: NODE, ...cfg });
  const list: TcBackend[] = Array.from({ length: backends }, (_, i) => ({ id: i + 1, address: `198.18.2.${i + 1}`, port: BACKEND_PORT, local: false }));
  h.upsertFrontend({ address: NODE, port: NODEPORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 40, backends: list });
}

/** Client n: distinct (address, port) pairs in 198.19.0.0/16, ports outside the SNAT range. */
function client(n: number): L4Spec {
  return { proto: 'tcp', src: numberToIp4(ip4ToNumber('198.19.0.1') + (n % 4000)), sport: 40000 + Math.floor(n / 4000), dst: NODE, dport: NODEPORT, tcpFlags: TCP_SYN };
}

interface Outcome {
  failed: number;
  /** backend:SNAT-port of every translated flow (the reply key; must be distinct). */
  replyKeys: Set<string>;
  snatFailed: bigint;
  exhausted: bigint;
}

function drive(from: number, count: number): Outcome {
  const failedBefore = h.counter(counterIndex('north_south', 'snat_failed'));
  const exhaustedBefore = exhaustedCounter();
  const replyKeys = new Set<string>();
  let failed = 0;
  for (let n = from; n < from + count; n++) {
    const { verdict, out } = h.run('ingress', frame(client(n)));
    if (verdict !== TC_ACT_OK) {
      failed++;
      continue;
    }
    assert.equal(out.readUInt32BE(14 + 12), ip4ToNumber(NODE), `flow ${n}: source not SNATed to the node`);
    replyKeys.add(`${numberToIp4(out.readUInt32BE(14 + 16))}:${out.readUInt16BE(14 + 2)}>${out.readUInt16BE(14 + 20)}`);
  }
  return { failed, replyKeys, snatFailed: h.counter(counterIndex('north_south', 'snat_failed')) - failedBefore, exhausted: exhaustedCounter() - exhaustedBefore };
}

function exhaustedCounter(): bigint {
  return h.counter(counterIndex('north_south', 'snat_ports_exhausted'));
}

describe('SNAT ports: probing, not random tries', () => {
  test('100 000 concurrent flows to one Service port (25 backends on :8080), default range: no SNAT failure', () => {
    setup({}, 25);
    const r = drive(0, 100_000);
    console.log(`# 100000 flows, 25 backends, range ${DEFAULT_RANGE}: failed ${r.failed}, snat_failed ${r.snatFailed}`);
    assert.equal(r.snatFailed, 0n, `SNAT failures among 100 000 flows (range ${DEFAULT_RANGE} per backend)`);
    assert.equal(r.failed, 0, 'flows not translated');
    assert.equal(r.replyKeys.size, 100_000, 'two flows share a reply tuple backend:port <- node:port');
  });

  test(`one backend:port takes every port of the default range (${DEFAULT_RANGE} flows); the next flow is dropped whole and counted`, () => {
    setup({}, 1);
    const r = drive(0, DEFAULT_RANGE);
    console.log(`# ${DEFAULT_RANGE} flows to one backend:port: failed ${r.failed}, snat_failed ${r.snatFailed}`);
    assert.equal(r.snatFailed, 0n, `SNAT failures before the range of ${DEFAULT_RANGE} ports was full`);
    assert.equal(r.replyKeys.size, DEFAULT_RANGE, 'every port of the range handed out once');
    assertDroppedWhole(DEFAULT_RANGE);
  });

  test('a 10-port range: 10 flows fit, the 11th is dropped and counted; a port whose flow expired is reused', async () => {
    setup({ snatPortMin: 62000, snatPortMax: 62009, tcpSynTimeout: 1 }, 1);
    const r = drive(0, 10);
    assert.equal(r.failed, 0);
    assert.deepEqual([...r.replyKeys].map((k) => Number(k.split('>')[1])).sort(), Array.from({ length: 10 }, (_, i) => 62000 + i));
    assertDroppedWhole(10);
    await new Promise((resolve) => setTimeout(resolve, 1300));
    const again = drive(20, 1);
    assert.equal(again.failed, 0, 'a new flow after the others expired');
    assert.equal(again.exhausted, 0n);
  });
});

/** Flow n (the range is full): TC_ACT_SHOT, snat_failed and snat_ports_exhausted +1, no conntrack entry of it. */
function assertDroppedWhole(n: number): void {
  const r = drive(n, 1);
  assert.equal(r.failed, 1, 'the flow past the end of the range was translated');
  assert.equal(r.snatFailed, 1n, 'snat_failed counts the dropped flow');
  assert.equal(r.exhausted, 1n, 'snat_ports_exhausted counts the dropped flow');
  assert.equal(h.run('ingress', frame(client(n))).verdict, TC_ACT_SHOT, 'a flow past the end of the range is dropped');
  const c = client(n);
  const left = [...h.tc.conntrack.entries()].filter(([, v]) => v.client_address === ip4ToNumber(c.src) && v.client_port === c.sport);
  assert.deepEqual(left, [], 'the dropped flow left a conntrack entry');
}
