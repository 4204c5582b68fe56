// `sluice trace` for IPv6 on the TC paths (issue 14 CLI, issue 15
// observability): against real pinned maps, the trace of an IPv6 packet
// agrees with what the TC (and pod-veth) program then does with it through
// BPF_PROG_TEST_RUN: the verdict and its counter, round-robin's cursor and
// least-connection's active counts naming the backend the program picks,
// source-hash and Maglev predictions flow by flow, a created flow and its reply.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { bytesToIp6 } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TcHarness } from './tc_harness';
import { Tc6Maps } from './tc_harness6';
import { PodPrograms } from './pod_harness';
import { TCP_SYN, TC_ACT_SHOT } from './tc_packet';
import { frame6 } from './tc_packet6';
import type { TraceResult } from '../../src/cli/trace';
import { COUNTERS, counterName } from '../../src/datapath/counters';
import { MaglevTables } from '../../src/datapath/maglev';

const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'sluice');
const NODE = 'fd00:18::1';
let h: TcHarness;
let v6: Tc6Maps;

before(() => {
  h = TcHarness.create('sluice-trace6tc');
  v6 = new Tc6Maps(h);
  h.reset();
  v6.reset();
  writeTcConfig(h.tc.config, {});
  v6.setSnat(NODE);
  const backends = [{ id: 51, address: 'fd00:18:1::1', port: 8080, local: true }, { id: 52, address: 'fd00:18:2::1', port: 8080, local: false }];
  v6.upsertFrontend({ address: NODE, port: 30080, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 61, backends });
  v6.upsertFrontend({ address: NODE, port: 30081, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_DROP_NO_BACKEND, revNatId: 62, backends: [] });
  v6.upsertFrontend({ address: NODE, port: 30082, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 65, backends: [] });
  v6.upsertFrontend({ address: 'fd00:50::1', port: 443, proto: 'tcp', flags: abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE, revNatId: 63, backends });
  v6.upsertFrontend({ address: 'fd00:96::1', port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 64, backends });
  v6.addSourceRange(63, '2001:db8:200::/48');
});

after(() => h?.close());

function sluiceTrace(pathName: string, ...args: string[]): TraceResult {
  const r = spawnSync(bin, ['trace', ...args, '--path', pathName, '-o', 'json', '--bpffs', h.pinDir], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as TraceResult;
}

/** The destination of a translated IPv6 frame: "[address]:port". */
const dstOf = (out: Buffer) => `[${bytesToIp6(out.subarray(14 + 24, 14 + 40))}]:${out.readUInt16BE(14 + 40 + 2)}`;

test('north-south, IPv6: for each packet the trace predicts what the TC program then does, and names the counter it bumps', () => {
  const packets: Array<[string, number, string, number, TraceResult['verdict']['action']]> = [
    ['2001:db8:9::9', 40000, NODE, 30080, 'translate'],
    ['2001:db8:9::9', 40001, NODE, 30081, 'drop'], // externalTrafficPolicy Local, no local backend
    ['2001:db8:9::9', 40006, NODE, 30082, 'drop'], // no endpoint at all: the IPv6 north-south path drops
    ['2001:db8:9::9', 40002, 'fd00:50::1', 443, 'drop'], // outside loadBalancerSourceRanges
    ['2001:db8:200::7', 40003, 'fd00:50::1', 443, 'translate'],
    ['2001:db8:9::9', 40004, 'fd00:96::1', 80, 'pass'], // a ClusterIP is not served here
    ['2001:db8:9::9', 40005, 'fd00:97::1', 80, 'pass'], // not a frontend
  ];
  for (const [src, sport, dst, dport, expected] of packets) {
    const predicted = sluiceTrace('north-south', `[${src}]:${sport}`, `[${dst}]:${dport}/tcp`);
    assert.equal(predicted.verdict.action, expected, `[${src}]:${sport} -> [${dst}]:${dport}: ${predicted.verdict.reason}`);
    const counterIndex = [...COUNTERS].find(([, l]) => counterName(l) === predicted.verdict.counter)?.[0];
    const before = counterIndex === undefined ? 0n : h.counter(counterIndex);
    const pkt = frame6({ proto: 'tcp', src, dst, sport, dport, tcpFlags: TCP_SYN });
    const { verdict, out } = h.run('ingress', pkt);
    const actual = verdict === TC_ACT_SHOT ? 'drop' : !out.equals(pkt) ? 'translate' : 'pass';
    assert.equal(actual, expected, `program on [${src}]:${sport} -> [${dst}]:${dport}: verdict ${verdict}`);
    if (expected !== 'pass') assert.equal(h.counter(counterIndex!) - before, 1n, `${predicted.verdict.counter} after [${src}]:${sport}`);
  }
  const ranged = sluiceTrace('north-south', '[2001:db8:9::9]:40010', '[fd00:50::1]:443/tcp');
  assert.deepEqual(ranged.sourceRange, { applies: true, allowed: false, enforced: true });
});

test('north-south, IPv6: a flow the program created is shown with its backend and SNAT source, and its reply is recognised', () => {
  const { out } = h.run('ingress', frame6({ proto: 'tcp', src: '2001:db8:9::9', dst: NODE, sport: 41000, dport: 30080, tcpFlags: TCP_SYN }));
  const chosen = dstOf(out);
  const r = sluiceTrace('north-south', '[2001:db8:9::9]:41000', `[${NODE}]:30080/tcp`);
  assert.equal(r.verdict.action, 'translate');
  assert.match(r.verdict.reason, /^known flow \(syn-sent\) to backend \[fd00:18:[12]::1\]:8080, source \[fd00:18::1\]:\d+$/);
  assert.equal(r.conntrack?.[0]?.backend, chosen);
  const nat = r.conntrack![0]!.nat!;
  const reply = sluiceTrace('north-south', chosen, `${nat}/tcp`);
  assert.equal(reply.verdict.action, 'reply');
  assert.match(reply.verdict.reason, /restored to \[fd00:18::1\]:30080 -> \[2001:db8:9::9\]:41000/);
});

test('round-robin and least-connection on IPv6 frontends: the trace shows the live cursor and active counts, and names the backend the program then picks', () => {
  const backendsOf = (base: number) => [1, 2, 3, 4].map((i) => ({ id: base + i, address: `fd00:18:4::${base + i}`, port: 8080, local: false }));
  const rr = backendsOf(70);
  const lc = backendsOf(80);
  v6.upsertFrontend({ address: NODE, port: 30092, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 67, backends: rr, algorithm: abi.LB_ALG_ROUND_ROBIN });
  v6.upsertFrontend({ address: NODE, port: 30093, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 68, backends: lc, algorithm: abi.LB_ALG_LEAST_CONN });
  const picked = (src: string, sport: number, dport: number) => dstOf(h.run('ingress', frame6({ proto: 'tcp', src, dst: NODE, sport, dport, tcpFlags: TCP_SYN })).out);
  const rrSeen = new Set<string>();
  for (let i = 0; i < 8; i++) {
    const r = sluiceTrace('north-south', `[2001:db8:8::${i}]:${41000 + i}`, `[${NODE}]:30092/tcp`);
    assert.equal(r.pick?.hashedBy, 'the frontend\'s cursor');
    assert.ok(r.pick?.backend && r.pick.cursor !== undefined, JSON.stringify(r.pick));
    assert.equal(r.pick.slot, (r.pick.cursor % 4) + 1);
    assert.equal(picked(`2001:db8:8::${i}`, 41000 + i, 30092), r.pick.backend, `round-robin flow ${i}`);
    rrSeen.add(r.pick.backend);
  }
  assert.equal(rrSeen.size, 4, 'eight flows went round all four');
  const counts = h.obj.map(abi.SLUICE_MAP_LC_COUNT4);
  const setCount = (id: number, n: number) => { const k = Buffer.alloc(4); k.writeUInt32LE(id); const v = Buffer.alloc(4); v.writeUInt32LE(n); counts.update(k, v); };
  [3, 1, 2, 5].forEach((n, i) => setCount(lc[i]!.id, n));
  const first = sluiceTrace('north-south', '[2001:db8:8::100]:42100', `[${NODE}]:30093/tcp`);
  assert.deepEqual(first.pick?.active, { '#81': 3, '#82': 1, '#83': 2, '#84': 5 });
  assert.deepEqual(first.pick?.least, [82]);
  assert.equal(first.pick?.backend, '[fd00:18:4::82]:8080');
  assert.equal(picked('2001:db8:8::100', 42100, 30093), first.pick.backend);
  const tie = sluiceTrace('north-south', '[2001:db8:8::101]:42101', `[${NODE}]:30093/tcp`);
  assert.deepEqual(tie.pick?.least, [82, 83]);
  assert.match(tie.pick?.note ?? '', /tied at 2 active: one of #82, #83/);
  const text = spawnSync(bin, ['trace', '[2001:db8:8::102]:42102', `[${NODE}]:30092/tcp`, '--path', 'north-south', '--bpffs', h.pinDir], { encoding: 'utf8' });
  assert.match(text.stdout, /^pick: +round-robin by the frontend's cursor: backend #7\d \[fd00:18:4::7\d\]:8080 \(slot \d\); cursor \d+$/m, text.stdout + text.stderr);
  for (const b of lc) setCount(b.id, 0);
});

test('source-hash and maglev on IPv6 frontends: the trace names the backend the program then picks, flow by flow', () => {
  const tables = new MaglevTables(h.obj.map(abi.SLUICE_MAP_MAGLEV4), 251);
  try {
    const backends = [1, 2, 3, 4, 5].map((i) => ({ id: 90 + i, address: `fd00:18:3::${i}`, port: 8080, local: false }));
    tables.sync({ revNatId: 69, proto: 'tcp', scope: 'external' }, backends);
    v6.upsertFrontend({ address: NODE, port: 30090, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 69, backends, algorithm: abi.LB_ALG_MAGLEV });
    v6.upsertFrontend({ address: NODE, port: 30091, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 70, backends, algorithm: abi.LB_ALG_SOURCE_HASH });
    const seen = { maglev: new Set<string>(), sh: new Set<string>() };
    for (let i = 0; i < 12; i++) {
      for (const [dport, kind] of [[30090, 'maglev'], [30091, 'sh']] as const) {
        const src = `2001:db8:7::${(i * 7).toString(16)}`;
        const sport = 42000 + i;
        const r = sluiceTrace('north-south', `[${src}]:${sport}`, `[${NODE}]:${dport}/tcp`);
        assert.ok(r.pick?.backend, `${kind}: a prediction for [${src}]:${sport} (${JSON.stringify(r.pick)})`);
        assert.equal(r.pick.hashedBy, kind === 'maglev' ? '5-tuple' : 'client address');
        const actual = dstOf(h.run('ingress', frame6({ proto: 'tcp', src, dst: NODE, sport, dport, tcpFlags: TCP_SYN })).out);
        assert.equal(actual, r.pick.backend, `${kind} [${src}]:${sport}: trace said ${r.pick.backend}, the program picked ${actual}`);
        seen[kind].add(actual);
      }
    }
    assert.ok(seen.maglev.size >= 3 && seen.sh.size >= 3, `flows spread: ${[...seen.maglev]} / ${[...seen.sh]}`);
    const noPort = sluiceTrace('north-south', '2001:db8:7::1', `[${NODE}]:30090/tcp`);
    assert.equal(noPort.pick?.backend, undefined);
    assert.match(noPort.pick?.note ?? '', /client port/);
  } finally {
    tables.close();
  }
});

test('pod veth, IPv6: a ClusterIP is translated and a frontend without backends rejected, as the pod program does', () => {
  const pod = PodPrograms.load(h);
  try {
    const cases: Array<[number, string, TraceResult['verdict']['action']]> = [[40500, 'fd00:96::1', 'translate'], [40501, 'fd00:96::2', 'reject']];
    v6.upsertFrontend({ address: 'fd00:96::2', port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 71, backends: [] });
    for (const [sport, dst, expected] of cases) {
      const r = sluiceTrace('pod', `[fd00:10:1::5]:${sport}`, `[${dst}]:80/tcp`);
      assert.equal(r.verdict.action, expected, r.verdict.reason);
      assert.equal(r.verdict.counter, expected === 'translate' ? 'pod/new_flow/original' : 'pod/no_backend/original');
      const pkt = frame6({ proto: 'tcp', src: 'fd00:10:1::5', dst, sport, dport: 80, tcpFlags: TCP_SYN });
      const { out } = pod.run('ingress', pkt);
      // A reject is an ICMPv6 (next header 58) sent back into the pod.
      const actual = out[14 + 6] === 58 ? 'reject' : !out.equals(pkt) ? 'translate' : 'pass';
      assert.equal(actual, expected, `pod program on -> [${dst}]:80`);
    }
  } finally {
    pod.close();
  }
});
