// `sluice trace` decides like the BPF programs: one table of map contents,
// one row per (path, packet) with the verdict the program would reach.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber } from '../../src/datapath/addr';
import { trace, type TraceInput, type TraceMaps } from '../../src/cli/trace';
import { parseClient, renderTrace } from '../../src/cli/traceCommand';

const ip = ip4ToNumber;
const NOW = 1_000_000n * 1_000_000_000n;
const S = 1_000_000_000n;
const F = abi;

interface Frontend { address: string; port: number; proto?: number; scope?: number; flags: number; backends: number[]; revNat: number; affinity?: number }
const frontends: Frontend[] = [
  { address: '198.18.96.1', port: 80, flags: F.LB_SVC_FLAG_CLUSTER_IP, backends: [1, 2], revNat: 1 },
  { address: '198.18.96.2', port: 80, flags: F.LB_SVC_FLAG_CLUSTER_IP, backends: [], revNat: 2 },
  // LoadBalancer with source ranges, externalTrafficPolicy Local: external scope has only the local backend.
  { address: '198.18.50.1', port: 443, flags: F.LB_SVC_FLAG_LOADBALANCER | F.LB_SVC_FLAG_SOURCE_RANGE | F.LB_SVC_FLAG_EXT_LOCAL | F.LB_SVC_FLAG_TWO_SCOPES, backends: [1], revNat: 3 },
  { address: '198.18.50.1', port: 443, scope: F.LB_SCOPE_INTERNAL, flags: F.LB_SVC_FLAG_LOADBALANCER | F.LB_SVC_FLAG_SOURCE_RANGE | F.LB_SVC_FLAG_EXT_LOCAL | F.LB_SVC_FLAG_TWO_SCOPES, backends: [1, 2], revNat: 3 },
  // NodePort, externalTrafficPolicy Local, no local backend.
  { address: '198.18.0.1', port: 30081, flags: F.LB_SVC_FLAG_NODEPORT | F.LB_SVC_FLAG_EXT_LOCAL | F.LB_SVC_FLAG_DROP_NO_BACKEND, backends: [], revNat: 4 },
  // NodePort without any endpoint.
  { address: '198.18.0.1', port: 30082, flags: F.LB_SVC_FLAG_NODEPORT, backends: [], revNat: 7 },
  // NodePort, Cluster policy, with ClientIP affinity.
  { address: '198.18.0.1', port: 30080, flags: F.LB_SVC_FLAG_NODEPORT | F.LB_SVC_FLAG_AFFINITY, backends: [1, 2], revNat: 5, affinity: 60 },
  // A frontend whose second slot is missing (agent mid-update).
  { address: '198.18.96.3', port: 80, flags: F.LB_SVC_FLAG_CLUSTER_IP, backends: [1, 99], revNat: 6 },
];
const backends: Record<number, { address: string; port: number; local: boolean }> = {
  1: { address: '198.18.1.1', port: 8080, local: true },
  2: { address: '198.18.2.1', port: 8080, local: false },
};

function ctEntry(over: Partial<abi.Lb4CtEntry>): abi.Lb4CtEntry {
  return {
    expires_ns: NOW + 100n * S, packets: 3n, bytes: 180n, client_address: ip('198.18.9.9'), frontend_address: ip('198.18.0.1'),
    backend_address: ip('198.18.1.1'), nat_address: 0, client_port: 40000, frontend_port: 30080, backend_port: 8080, nat_port: 0,
    backend_id: 1, rev_nat_id: 5, flags: F.LB_CT_FLAG_SEEN_REPLY | F.LB_CT_FLAG_ESTABLISHED, proto: F.LB_PROTO_TCP, dir: F.LB_CT_DIR_ORIGINAL, ifindex: 2, ...over,
  };
}

function fakeMaps(opts: { snat?: string; ct?: Array<[abi.Lb4CtKey, abi.Lb4CtEntry]>; affinity?: Array<[abi.Lb4AffinityKey, abi.LbAffinity]> } = {}): TraceMaps {
  const svc = new Map<string, abi.Lb4Service>();
  const ranges: number[] = [];
  const k = (key: abi.Lb4FrontendKey) => `${key.address}/${key.port}/${key.proto}/${key.scope}`;
  for (const f of frontends) {
    const base = { address: ip(f.address), port: f.port, proto: f.proto ?? F.LB_PROTO_TCP, scope: f.scope ?? F.LB_SCOPE_EXTERNAL };
    svc.set(k(base), { backend_id: ranges.length, count: f.backends.length, flags: f.flags, rev_nat_id: f.revNat, affinity_timeout: f.affinity ?? 0, algorithm: F.LB_ALG_RANDOM });
    ranges.push(...f.backends);
  }
  const ctKey = (c: abi.Lb4CtKey) => JSON.stringify(c);
  const ct = new Map((opts.ct ?? []).map(([key, e]) => [ctKey(key), e]));
  const aff = new Map((opts.affinity ?? []).map(([key, v]) => [JSON.stringify({ ...key, client_id: String(key.client_id) }), v]));
  return {
    service: (key) => svc.get(k(key)),
    rangeEntry: (i) => ranges[i],
    backend: (id) => {
      const b = backends[id];
      return b && { address: ip(b.address), port: b.port, proto: F.LB_PROTO_TCP, flags: b.local ? F.LB_BACKEND_FLAG_LOCAL : 0, zone: 0 };
    },
    // revNat 3 allows 198.18.200.0/24 only.
    sourceAllowed: (revNat, client) => revNat === 3 && (client >>> 8) === (ip('198.18.200.0') >>> 8),
    affinity: (key) => aff.get(JSON.stringify({ ...key, client_id: String(key.client_id) })),
    conntrack: {
      get: (key) => ct.get(ctKey(key)),
      flowsOf: (client, frontend, port, proto) => [...ct].map(([key, e]) => [JSON.parse(key), e] as [abi.Lb4CtKey, abi.Lb4CtEntry])
        .filter(([key, e]) => key.dir === 0 && e.client_address === client && e.frontend_address === frontend && e.frontend_port === port && e.proto === proto),
    },
    tcConfig: () => ({ snat_address: opts.snat ? ip(opts.snat) : 0, snat_port_min: 0, snat_port_max: 0, tcp_established_timeout: 0, tcp_closing_timeout: 0, udp_timeout: 0, tcp_syn_timeout: 0 }),
    serviceName: (revNat) => (revNat === 1 ? { namespace: 'shop', name: 'web', portName: 'http' } : undefined),
    nowNs: () => NOW,
  };
}

const inp = (p: TraceInput['path'], client: string, dst: string, over: Partial<TraceInput> = {}): TraceInput => {
  const [address, port] = dst.split(':') as [string, string];
  const [host, clientPort] = client.split(':');
  return { path: p, client: host!, clientPort: clientPort === undefined ? undefined : Number(clientPort), address, port: Number(port), proto: 'tcp', ...over };
};

test('verdicts: every path and branch of the programs', () => {
  const origKey = { saddr: ip('198.18.9.9'), daddr: ip('198.18.0.1'), sport: 40000, dport: 30080, proto: F.LB_PROTO_TCP, dir: F.LB_CT_DIR_ORIGINAL };
  const snatted = ctEntry({ flags: F.LB_CT_FLAG_SNAT | F.LB_CT_FLAG_SEEN_REPLY, nat_address: ip('198.18.0.1'), nat_port: 61001, backend_address: ip('198.18.2.1'), backend_id: 2 });
  const replyKey = { saddr: ip('198.18.2.1'), daddr: ip('198.18.0.1'), sport: 8080, dport: 61001, proto: F.LB_PROTO_TCP, dir: F.LB_CT_DIR_REPLY };
  const cases: Array<[string, TraceInput, Parameters<typeof fakeMaps>[0], RegExp, string?]> = [
    ['socket: not a frontend', inp('socket', '198.18.9.9', '198.18.97.1:80'), {}, /^PASS: not a frontend: the call proceeds untouched$/],
    ['socket: ClusterIP', inp('socket', '198.18.9.9', '198.18.96.1:80'), {}, /^TRANSLATE: to one of 2 backends \(random\)$/, 'socket/translated/original'],
    ['socket: no backends', inp('socket', '198.18.9.9', '198.18.96.2:80'), {}, /^REFUSE: no backends: connect\(\)\/sendmsg\(\) fail with ECONNREFUSED$/, 'socket/no_backend/original'],
    ['socket: a LB IP from a source outside its ranges is refused (issue 11 item 1)', inp('socket', '198.18.9.9', '198.18.50.1:443'), {}, /^REFUSE: source outside loadBalancerSourceRanges: connect\(\)\/sendmsg\(\) fail with EHOSTUNREACH$/, 'socket/source_range_drop/original'],
    ['socket: ext-Local LB from inside the ranges uses the internal scope (both backends)', inp('socket', '198.18.200.9', '198.18.50.1:443'), {}, /^TRANSLATE: to one of 2 backends/],
    ['socket: missing slot', inp('socket', '198.18.9.9', '198.18.96.3:80'), {}, /1 slot\(s\) missing, a pick of one fails/],
    ['tc: ClusterIP is not served on external devices', inp('north_south', '198.18.9.9', '198.18.96.1:80'), {}, /^PASS: a ClusterIP frontend/],
    ['tc: outside source ranges', inp('north_south', '198.18.9.9', '198.18.50.1:443'), {}, /^DROP: source outside loadBalancerSourceRanges$/, 'north_south/source_range_drop/original'],
    ['tc: inside source ranges, local backend, Local policy: no SNAT', inp('north_south', '198.18.200.7', '198.18.50.1:443'), {}, /^TRANSLATE: to one of 1 backends \(random\)$/, 'north_south/new_flow/original'],
    ['tc: Local policy without local backends', inp('north_south', '198.18.9.9', '198.18.0.1:30081'), {}, /^DROP: no local backends: dropped$/, 'north_south/no_backend/original'],
    ['tc: no endpoint at all is rejected', inp('north_south', '198.18.9.9', '198.18.0.1:30082'), {}, /^REJECT: no backends: ICMP port unreachable sent back to the client$/, 'north_south/no_backend/original'],
    ['tc: Cluster policy needs SNAT, none configured', inp('north_south', '198.18.9.9', '198.18.0.1:30080'), {}, /every backend\(s\) need SNAT and no SNAT address is configured: dropped/],
    ['tc: Cluster policy SNATs', inp('north_south', '198.18.9.9', '198.18.0.1:30080'), { snat: '198.18.0.1' }, /source SNATed to 198\.18\.0\.1$/],
    ['tc: known flow', inp('north_south', '198.18.9.9:40000', '198.18.0.1:30080'), { ct: [[origKey, ctEntry({})]] }, /^TRANSLATE: known flow \(established\) to backend 198\.18\.1\.1:8080$/],
    ['tc: known flow whose backend is gone', inp('north_south', '198.18.9.9:40000', '198.18.0.1:30080'), { snat: '198.18.0.1', ct: [[origKey, ctEntry({ backend_id: 7 })]] }, /^TRANSLATE: the known flow's backend 198\.18\.1\.1:8080 is gone: the flow is deleted \(north_south\/backend_gone\/original\) and the packet balanced as new; to one of 2/],
    ['tc: expired flow is a new flow', inp('north_south', '198.18.9.9:40000', '198.18.0.1:30080'), { snat: '198.18.0.1', ct: [[origKey, ctEntry({ expires_ns: NOW - 1n })]] }, /^TRANSLATE: to one of 2 backends/],
    ['tc: reply of a SNATed flow', inp('north_south', '198.18.2.1:8080', '198.18.0.1:61001'), { ct: [[replyKey, snatted]] }, /^REPLY: reply of a known flow: restored to 198\.18\.0\.1:30080 -> 198\.18\.9\.9:40000$/, 'north_south/reverse_translated/reply'],
    ['pod: no backends are rejected', inp('pod', '198.18.9.9', '198.18.96.2:80'), {}, /^REJECT: no backends: ICMP port unreachable/, 'pod/no_backend/original'],
    ['pod: a north-south flow is not the pod path\'s', inp('pod', '198.18.9.9:40000', '198.18.0.1:30080'), { ct: [[origKey, ctEntry({})]] }, /^TRANSLATE: to one of 2 backends/, 'pod/new_flow/original'],
    ['tc: affinity entry in time picks its backend', inp('north_south', '198.18.9.9', '198.18.0.1:30080'), { snat: '198.18.0.1', affinity: [[{ client_id: BigInt(ip('198.18.9.9')), rev_nat_id: 5, netns_cookie: 0 }, { last_used_ns: NOW - 10n * S, backend_id: 2 }]] }, /^TRANSLATE: affinity: to backend #2 198\.18\.2\.1:8080; source SNATed/],
    ['tc: expired affinity entry', inp('north_south', '198.18.9.9', '198.18.0.1:30080'), { snat: '198.18.0.1', affinity: [[{ client_id: BigInt(ip('198.18.9.9')), rev_nat_id: 5, netns_cookie: 0 }, { last_used_ns: NOW - 61n * S, backend_id: 2 }]] }, /^TRANSLATE: to one of 2 backends/],
  ];
  for (const [name, input, opts, reason, ctr] of cases) {
    const r = trace(input, fakeMaps(opts));
    const text = `${r.verdict.action.toUpperCase()}: ${r.verdict.reason}`;
    assert.match(text, reason, `${name}: ${text}`);
    if (ctr) assert.equal(r.verdict.counter, ctr, name);
  }
});

test('details: scope, Service name, backends with SNAT, conntrack state, affinity', () => {
  const ext = trace(inp('north_south', '198.18.200.7', '198.18.50.1:443'), fakeMaps());
  assert.equal(ext.frontend?.scope, 'external');
  assert.deepEqual(ext.frontend?.backends.map((b) => [b.id, b.snat]), [[1, false]]);
  assert.deepEqual(ext.sourceRange, { applies: true, allowed: true, enforced: true });
  const int = trace(inp('socket', '198.18.9.9', '198.18.50.1:443'), fakeMaps());
  assert.equal(int.frontend?.scope, 'internal');
  assert.equal(int.frontend?.backends.length, 2);
  assert.equal(trace(inp('socket', '198.18.9.9', '198.18.96.1:80'), fakeMaps()).frontend?.service, 'shop/web:http');
  const withFlows = trace(inp('north_south', '198.18.9.9', '198.18.0.1:30080'), fakeMaps({ snat: '198.18.0.1', ct: [
    [{ saddr: ip('198.18.9.9'), daddr: ip('198.18.0.1'), sport: 40000, dport: 30080, proto: 6, dir: 0 }, ctEntry({})],
    [{ saddr: ip('198.18.9.9'), daddr: ip('198.18.0.1'), sport: 40001, dport: 30080, proto: 6, dir: 0 }, ctEntry({ client_port: 40001, flags: F.LB_CT_FLAG_CLOSING | F.LB_CT_FLAG_SNAT, nat_address: ip('198.18.0.1'), nat_port: 61002 })],
  ] }));
  assert.deepEqual(withFlows.conntrack?.map((c) => [c.client, c.state, c.nat ?? null, c.expiresInSeconds]), [
    ['198.18.9.9:40000', 'established', null, 100], ['198.18.9.9:40001', 'closing', '198.18.0.1:61002', 100],
  ]);
  const sock = trace(inp('socket', '198.18.9.9', '198.18.0.1:30080'), fakeMaps());
  assert.match(sock.affinity?.note ?? '', /--netns-cookie/);
  const cookie = trace(inp('socket', '198.18.9.9', '198.18.0.1:30080', { netnsCookie: 4097n }), fakeMaps({ affinity: [[{ client_id: 4097n, rev_nat_id: 5, netns_cookie: 1 }, { last_used_ns: NOW - 5n * S, backend_id: 1 }]] }));
  assert.deepEqual([cookie.affinity?.valid, cookie.affinity?.backend, cookie.affinity?.lastUsedSecondsAgo], [true, '198.18.1.1:8080', 5]);
  const text = renderTrace(withFlows);
  assert.match(text, /^packet: +198\.18\.9\.9 -> 198\.18\.0\.1:30080\/tcp \(path north_south\)$/m);
  assert.match(text, /^conntrack: original 198\.18\.9\.9:40001 -> 198\.18\.0\.1:30080 => 198\.18\.1\.1:8080 \(#1\) via 198\.18\.0\.1:61002; closing;/m);
  assert.match(text, /^verdict: +TRANSLATE: /m);
});

test('bad arguments are one-line usage errors through the entry point', () => {
  const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'sluice');
  const cases: Array<[string[], RegExp]> = [
    [['trace', '198.18.9.9'], /^sluice trace: usage: sluice trace SRC/],
    [['trace', 'nohost', '198.18.0.1:80'], /^sluice trace: source "nohost": expected an IPv4 ADDRESS/],
    [['trace', '198.18.9.9', '198.18.0.1'], /^sluice trace: destination: cannot parse "198\.18\.0\.1"/],
    [['trace', '198.18.9.9', '198.18.0.1:80', '--path', 'xdp'], /^sluice trace: --path xdp: use socket, north-south or pod/],
    [['trace', '198.18.9.9', '198.18.0.1:80', '--netns-cookie', 'abc'], /^sluice trace: --netns-cookie "abc"/],
  ];
  for (const [args, pattern] of cases) {
    const r = spawnSync(bin, [...args, '--bpffs', '/nonexistent/sluice'], { encoding: 'utf8' });
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, pattern);
    assert.equal(r.stderr.trim().split('\n').length, 1);
  }
  assert.deepEqual(parseClient('198.18.9.9:40000'), { address: '198.18.9.9', port: 40000 });
});
