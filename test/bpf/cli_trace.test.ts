// `sluice trace` against real pinned maps agrees with the TC program run on
// the same packet (BPF_PROG_TEST_RUN): for each packet the trace is taken
// first (nothing sent), then the program decides, and the two must match;
// a flow the program created is then shown by the trace with its backend.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber, numberToIp4 } from '../../src/datapath/addr';
import { BpfMap } from '../../src/bpf';
import { nodeIpMap, syncNodeAddresses } from '../../src/datapath/sockConfig';
import { TcHarness } from './tc_harness';
import { frame, TCP_SYN, TC_ACT_REDIRECT, TC_ACT_SHOT } from './tc_packet';
import type { TraceResult } from '../../src/cli/trace';
import { COUNTERS, counterName } from '../../src/datapath/counters';
import { MaglevTables } from '../../src/datapath/maglev';

const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'sluice');
let h: TcHarness;

before(() => {
  h = TcHarness.create('sluice-clitrace');
  h.reset();
  h.tc.config.set(0, { snat_address: ip4ToNumber('198.18.0.1'), snat_port_min: 0, snat_port_max: 0, tcp_established_timeout: 0, tcp_closing_timeout: 0, udp_timeout: 0, tcp_syn_timeout: 0 });
  const backends = [{ id: 1, address: '198.18.1.1', port: 8080, local: true }, { id: 2, address: '198.18.2.1', port: 8080, local: false }];
  h.upsertFrontend({ address: '198.18.0.1', port: 30080, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, backends });
  // Local policy, endpoints only elsewhere: the agent flags DROP_NO_BACKEND.
  h.upsertFrontend({ address: '198.18.0.1', port: 30081, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_DROP_NO_BACKEND, revNatId: 2, backends: [] });
  // No endpoint at all: rejected with ICMP port unreachable.
  h.upsertFrontend({ address: '198.18.0.1', port: 30082, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 5, backends: [] });
  h.upsertFrontend({ address: '198.18.50.1', port: 443, proto: 'tcp', flags: abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE, revNatId: 3, backends });
  h.upsertFrontend({ address: '198.18.96.1', port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 4, backends });
  h.tc.sourceRanges.set({ prefixlen: 32 + 24, rev_nat_id: 3, address: ip4ToNumber('198.18.200.0') }, 1);
  // A NodePort wildcard (bpf/lib/nodeport.h), served on the node address 198.18.0.1.
  h.upsertFrontend({ address: '0.0.0.0', port: 30083, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 6, backends });
  const nodeIps = BpfMap.fromPinned(path.join(h.pinDir, abi.SLUICE_MAP_NODEIP4));
  syncNodeAddresses(nodeIpMap(nodeIps), ['198.18.0.1']);
  nodeIps.close();
});

after(() => h?.close());

function sluiceTrace(...args: string[]): TraceResult {
  const r = spawnSync(bin, ['trace', ...args, '--path', 'north-south', '-o', 'json', '--bpffs', h.pinDir], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as TraceResult;
}

test('for each packet the trace predicts what the TC program then does', () => {
  const packets: Array<[string, number, string, number, TraceResult['verdict']['action']]> = [
    ['198.18.9.9', 40000, '198.18.0.1', 30080, 'translate'],
    ['198.18.9.9', 40001, '198.18.0.1', 30081, 'drop'], // externalTrafficPolicy Local, no local backend
    ['198.18.9.9', 40006, '198.18.0.1', 30082, 'reject'], // no endpoint at all
    ['198.18.9.9', 40007, '198.18.0.1', 30083, 'translate'], // the NodePort wildcard on a node address
    ['198.18.9.9', 40008, '198.18.0.2', 30083, 'pass'], // not a node address
    ['198.18.9.9', 40002, '198.18.50.1', 443, 'drop'], // outside loadBalancerSourceRanges
    ['198.18.200.7', 40003, '198.18.50.1', 443, 'translate'],
    ['198.18.9.9', 40004, '198.18.96.1', 80, 'pass'], // a ClusterIP is not served here
    ['198.18.9.9', 40005, '198.18.97.1', 80, 'pass'], // not a frontend
  ];
  for (const [src, sport, dst, dport, expected] of packets) {
    const predicted = sluiceTrace(`${src}:${sport}`, `${dst}:${dport}/tcp`);
    assert.equal(predicted.verdict.action, expected, `${src}:${sport} -> ${dst}:${dport}: ${predicted.verdict.reason}`);
    const counterIndex = [...COUNTERS].find(([, l]) => counterName(l) === predicted.verdict.counter)?.[0];
    const before = counterIndex === undefined ? 0n : h.counter(counterIndex);
    const pkt = frame({ proto: 'tcp', src, dst, sport, dport, tcpFlags: TCP_SYN });
    const { verdict, out } = h.run('ingress', pkt);
    const rewritten = !out.equals(pkt);
    const actual = verdict === TC_ACT_SHOT ? 'drop' : verdict === TC_ACT_REDIRECT && out[23] === 1 ? 'reject' : rewritten ? 'translate' : 'pass';
    assert.equal(actual, expected, `program on ${src}:${sport} -> ${dst}:${dport}: verdict ${verdict}`);
    // The counter the trace names is the one the program counted.
    if (expected !== 'pass') assert.equal(h.counter(counterIndex!) - before, 1n, `${predicted.verdict.counter} after ${src}:${sport} -> ${dst}:${dport}`);
  }
});

test('a flow the program created: the trace shows its backend, state and SNAT port, and it wins over a new pick', () => {
  const pkt = frame({ proto: 'tcp', src: '198.18.9.9', dst: '198.18.0.1', sport: 41000, dport: 30080, tcpFlags: TCP_SYN });
  const { out } = h.run('ingress', pkt);
  const chosen = numberToIp4(out.readUInt32BE(14 + 16));
  const r = sluiceTrace('198.18.9.9:41000', '198.18.0.1:30080/tcp');
  assert.equal(r.verdict.action, 'translate');
  assert.match(r.verdict.reason, new RegExp(`^known flow \\(syn-sent\\) to backend ${chosen.replace(/\./g, '\\.')}:8080, source 198\\.18\\.0\\.1:\\d+$`));
  assert.equal(r.conntrack?.length, 1);
  assert.equal(r.conntrack![0]!.backend, `${chosen}:8080`);
  assert.ok(r.conntrack![0]!.expiresInSeconds > 50 && r.conntrack![0]!.expiresInSeconds <= 60, `SYN timeout: ${r.conntrack![0]!.expiresInSeconds}`);
  // Without the client port: every live flow of this client to the frontend.
  const all = sluiceTrace('198.18.9.9', '198.18.0.1:30080/tcp');
  assert.deepEqual(all.conntrack?.map((c) => c.client).sort(), ['198.18.9.9:40000', '198.18.9.9:41000']);
  // The reply from the backend to the SNAT address is recognised as the flow's reply.
  const nat = r.conntrack![0]!.nat!;
  const reply = sluiceTrace(`${chosen}:8080`, `${nat}/tcp`);
  assert.equal(reply.verdict.action, 'reply');
  assert.match(reply.verdict.reason, /restored to 198\.18\.0\.1:30080 -> 198\.18\.9\.9:41000/);
});

test('source-hash and maglev: the trace names the backend the program then picks, flow by flow', () => {
  const tables = new MaglevTables(h.obj.map(abi.SLUICE_MAP_MAGLEV4), 251);
  try {
    const backends = [1, 2, 3, 4, 5].map((i) => ({ id: 10 + i, address: `198.18.3.${i}`, port: 8080, local: false }));
    tables.sync({ revNatId: 5, proto: 'tcp', scope: 'external' }, backends);
    h.upsertFrontend({ address: '198.18.0.1', port: 30090, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 5, backends, algorithm: abi.LB_ALG_MAGLEV });
    h.upsertFrontend({ address: '198.18.0.1', port: 30091, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 6, backends, algorithm: abi.LB_ALG_SOURCE_HASH });
    const seen = { maglev: new Set<string>(), sh: new Set<string>() };
    for (let i = 0; i < 12; i++) {
      for (const [dport, kind] of [[30090, 'maglev'], [30091, 'sh']] as const) {
        const src = `198.18.7.${i * 7}`;
        const sport = 42000 + i;
        const r = sluiceTrace(`${src}:${sport}`, `198.18.0.1:${dport}/tcp`);
        assert.ok(r.pick?.backend, `${kind}: a prediction for ${src}:${sport} (${JSON.stringify(r.pick)})`);
        assert.equal(r.pick.hashedBy, kind === 'maglev' ? '5-tuple' : 'client address');
        const { out } = h.run('ingress', frame({ proto: 'tcp', src, dst: '198.18.0.1', sport, dport, tcpFlags: TCP_SYN }));
        const actual = `${numberToIp4(out.readUInt32BE(14 + 16))}:${out.readUInt16BE(14 + 20 + 2)}`;
        assert.equal(actual, r.pick.backend, `${kind} ${src}:${sport}: trace said ${r.pick.backend}, the program picked ${actual}`);
        seen[kind].add(actual);
      }
    }
    assert.ok(seen.maglev.size >= 3 && seen.sh.size >= 3, `flows spread: ${[...seen.maglev]} / ${[...seen.sh]}`);
    // The text form names the pick and, for maglev, each backend's table share.
    const text = spawnSync(bin, ['trace', '198.18.7.200:43000', '198.18.0.1:30090/tcp', '--path', 'north-south', '--bpffs', h.pinDir], { encoding: 'utf8' });
    assert.match(text.stdout, /^pick: +maglev by 5-tuple: backend #1\d 198\.18\.3\.\d:8080 \(entry \d+\); table shares #1\d \d+\.\d%/m, text.stdout + text.stderr);
    // Without the client port the 5-tuple is unknown: no backend named, the reason says why.
    const noPort = sluiceTrace('198.18.7.200', '198.18.0.1:30090/tcp');
    assert.equal(noPort.pick?.backend, undefined);
    assert.match(noPort.pick?.note ?? '', /client port/);
  } finally {
    tables.close();
  }
});

test('round-robin and least-connection: the trace shows the live cursor and active counts, and names the backend the program then picks', () => {
  const backendsOf = (base: number) => [1, 2, 3, 4].map((i) => ({ id: base + i, address: `198.18.4.${base + i}`, port: 8080, local: false }));
  const rr = backendsOf(20);
  const lc = backendsOf(30);
  h.upsertFrontend({ address: '198.18.0.1', port: 30092, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 7, backends: rr, algorithm: abi.LB_ALG_ROUND_ROBIN });
  h.upsertFrontend({ address: '198.18.0.1', port: 30093, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 8, backends: lc, algorithm: abi.LB_ALG_LEAST_CONN });
  const picked = (src: string, sport: number, dport: number): string => {
    const { out } = h.run('ingress', frame({ proto: 'tcp', src, dst: '198.18.0.1', sport, dport, tcpFlags: TCP_SYN }));
    return `${numberToIp4(out.readUInt32BE(14 + 16))}:${out.readUInt16BE(14 + 20 + 2)}`;
  };
  // Round-robin: the cursor names the next slot, whoever the client is.
  const rrSeen = new Set<string>();
  for (let i = 0; i < 8; i++) {
    const r = sluiceTrace(`198.18.8.${i}:${41000 + i}`, '198.18.0.1:30092/tcp');
    assert.equal(r.pick?.hashedBy, 'the frontend\'s cursor');
    assert.ok(r.pick?.backend, JSON.stringify(r.pick));
    assert.equal(r.pick.slot, (r.pick.cursor! % 4) + 1);
    assert.equal(picked(`198.18.8.${i}`, 41000 + i, 30092), r.pick.backend, `round-robin flow ${i}`);
    rrSeen.add(r.pick.backend);
  }
  assert.equal(rrSeen.size, 4, 'eight flows went round all four');
  // least-connection: skewed counts; the least loaded is named, then taken.
  const counts = h.obj.map(abi.SLUICE_MAP_LC_COUNT4);
  const setCount = (id: number, n: number) => { const k = Buffer.alloc(4); k.writeUInt32LE(id); const v = Buffer.alloc(4); v.writeUInt32LE(n); counts.update(k, v); };
  [3, 1, 2, 5].forEach((n, i) => setCount(lc[i]!.id, n));
  const first = sluiceTrace('198.18.8.100:42100', '198.18.0.1:30093/tcp');
  assert.deepEqual(first.pick?.active, { '#31': 3, '#32': 1, '#33': 2, '#34': 5 });
  assert.deepEqual(first.pick?.least, [32]);
  assert.equal(first.pick?.backend, '198.18.4.32:8080');
  assert.equal(picked('198.18.8.100', 42100, 30093), first.pick.backend);
  // #32 now holds 2, as #33: a tie, both named, and the program takes one of them.
  const tie = sluiceTrace('198.18.8.101:42101', '198.18.0.1:30093/tcp');
  assert.deepEqual(tie.pick?.least, [32, 33]);
  assert.equal(tie.pick?.backend, undefined);
  assert.match(tie.pick?.note ?? '', /tied at 2 active: one of #32, #33/);
  assert.ok(['198.18.4.32:8080', '198.18.4.33:8080'].includes(picked('198.18.8.101', 42101, 30093)));
  const text = spawnSync(bin, ['trace', '198.18.8.102:42102', '198.18.0.1:30093/tcp', '--path', 'north-south', '--bpffs', h.pinDir], { encoding: 'utf8' });
  assert.match(text.stdout, /^pick: +least-connection by active connections: .*; active #31 3, #32 \d, #33 \d, #34 5/m, text.stdout + text.stderr);
  for (const b of lc) setCount(b.id, 0);
});
