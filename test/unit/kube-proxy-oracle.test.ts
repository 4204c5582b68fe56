// The kube-proxy oracle's parser, on rules real kube-proxy v1.34 wrote in the
// cluster tier (test/cluster/fixtures, refreshed with
// SLUICE_CAPTURE_ORACLE_FIXTURES=<dir> on the cluster test) and on hand-written
// excerpts for the chain shapes that fixture does not have.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import {
  parseIptablesSave, parseNftJson, parseSourceRanges, splitIptablesWords, toBackendSets, type ParseOptions,
} from '../cluster/kubeProxyOracle';
import { compareBackendSets, formatConformanceTable, missingOnBothSides, withSourceRanges } from '../cluster/conformance';
import { IP6TABLES_SEPARATOR } from '../cluster/kubeProxy';
import { sluiceSourceRanges } from '../cluster/sluiceSets';

const fixtures = resolve(__dirname, '..', '..', '..', 'test', 'cluster', 'fixtures');

function sorted<T extends Record<string, Record<string, string[]>>>(s: T): T {
  return Object.fromEntries(Object.entries(s).map(([k, v]) => [k,
    Object.fromEntries(Object.entries(v).sort(([a], [b]) => a.localeCompare(b)))])) as T;
}

for (const [file, parse] of [
  ['iptables-save.txt', parseIptablesSave],
  ['nft-ruleset.json', parseNftJson],
] as const) {
  test(`${file} from real kube-proxy parses into the expected backend sets`, () => {
    const text = readFileSync(join(fixtures, file), 'utf8');
    const { expected, ...opts } = JSON.parse(readFileSync(join(fixtures, `${file}.expected.json`), 'utf8')) as
      ParseOptions & { expected: ReturnType<typeof toBackendSets> };
    assert.deepEqual(sorted(toBackendSets(parse(text, opts))), sorted(expected));
  });
}

test('iptables words: quoted comments with spaces and escaped quotes', () => {
  assert.deepEqual(splitIptablesWords('-A X -m comment --comment "ns/a:p cluster IP" -j Y'),
    ['-A', 'X', '-m', 'comment', '--comment', 'ns/a:p cluster IP', '-j', 'Y']);
  assert.deepEqual(splitIptablesWords('--comment "say \\"hi\\"" -j Z'), ['--comment', 'say "hi"', '-j', 'Z']);
});

const handWritten = `*nat
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment "ns/aff:p cluster IP" -m tcp --dport 80 -j KUBE-SVC-AFF
-A KUBE-SERVICES -d 198.18.50.1/32 -p tcp -m comment --comment "ns/fw:p loadbalancer IP" -m tcp --dport 443 -j KUBE-FW-FW
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-NODEPORTS -p tcp -m comment --comment "ns/fw:p" -m tcp --dport 30443 -j KUBE-EXT-FW
-A KUBE-NODEPORTS -d 127.0.0.0/8 -p tcp -m comment --comment "ns/fw:p" -m tcp --dport 30443 -j KUBE-EXT-FW
-A KUBE-SVC-AFF -m comment --comment "ns/aff:p -> 198.19.1.5:80" -m recent --name KUBE-SEP-A1 --mask 255.255.255.255 --rsource --rcheck --seconds 10800 --reap -j KUBE-SEP-A1
-A KUBE-SVC-AFF -m comment --comment "ns/aff:p -> 198.19.1.5:80" -m statistic --mode random --probability 0.5 -j KUBE-SEP-A1
-A KUBE-SVC-AFF -m comment --comment "ns/aff:p -> 198.19.2.5:80" -j KUBE-SEP-A2
-A KUBE-SEP-A1 -p tcp -m comment --comment ns/aff:p -m recent --set --name KUBE-SEP-A1 --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 198.19.1.5:80
-A KUBE-SEP-A2 -p tcp -m comment --comment ns/aff:p -m recent --set --name KUBE-SEP-A2 --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 198.19.2.5:80
-A KUBE-FW-FW -s 203.0.113.0/24 -j KUBE-EXT-FW
-A KUBE-FW-FW -j KUBE-MARK-DROP
-A KUBE-EXT-FW -s 198.19.0.0/16 -m comment --comment "pod traffic for ns/fw:p external destinations" -j KUBE-SVC-FW
-A KUBE-EXT-FW -m addrtype --src-type LOCAL -j KUBE-SVC-FW
-A KUBE-EXT-FW -j KUBE-SVL-FW
-A KUBE-SVC-FW -m statistic --mode random --probability 0.5 -j KUBE-SEP-F1
-A KUBE-SVC-FW -j KUBE-SEP-F2
-A KUBE-SVL-FW -j KUBE-SEP-F1
-A KUBE-SEP-F1 -p tcp -m tcp -j DNAT --to-destination 198.19.1.6:8443
-A KUBE-SEP-F2 -p tcp -m tcp -j DNAT --to-destination 198.19.2.6:8443
COMMIT
*filter
-A KUBE-EXTERNAL-SERVICES -d 198.18.60.1/32 -p udp -m comment --comment "ns/gone:dns has no endpoints" -m udp --dport 53 -j REJECT --reject-with icmp-port-unreachable
-A KUBE-EXTERNAL-SERVICES -p udp -m comment --comment "ns/gone:dns has no endpoints" -m addrtype --dst-type LOCAL -m udp --dport 30053 -j REJECT --reject-with icmp-port-unreachable
COMMIT
`;

test('iptables: affinity, firewall → external → local chains, addrtype LOCAL NodePorts, no-endpoint REJECTs', () => {
  const sets = toBackendSets(parseIptablesSave(handWritten, { nodeAddresses: ['198.18.0.11', '198.18.0.21'], loadBalancerIPs: ['198.18.50.1'] }));
  assert.deepEqual(sets.clusterIP, { '10.96.0.20:80/tcp': ['198.19.1.5:80', '198.19.2.5:80'] });
  // The LB IP goes through the source-range firewall to the external path: Local endpoints only.
  assert.deepEqual(sets.loadBalancerIP, { '198.18.50.1:443/tcp': ['198.19.1.6:8443'] });
  // The REJECT/DROP column: "has no endpoints" REJECTs.
  assert.deepEqual(sets.externalIP, { '198.18.60.1:53/udp': ['<reject>'] });
  assert.deepEqual(sets.nodePort, {
    '198.18.0.11:30443/tcp': ['198.19.1.6:8443'],
    '198.18.0.21:30443/tcp': ['198.19.1.6:8443'],
    '198.18.0.11:30053/udp': ['<reject>'],
    '198.18.0.21:30053/udp': ['<reject>'],
  });
});

test('nft: a minimal kube-proxy table, IPv6 keys in brackets', () => {
  const doc = {
    nftables: [
      { map: { family: 'ip6', table: 'kube-proxy', name: 'service-ips', elem: [
        [{ concat: ['fd00:96::10', 'tcp', 80] }, { goto: { target: 'service-ABC-ns/v6/tcp/http' } }],
      ] } },
      { rule: { family: 'ip6', table: 'kube-proxy', chain: 'service-ABC-ns/v6/tcp/http', expr: [
        { vmap: { key: { numgen: { mode: 'random', mod: 2, offset: 0 } }, data: { set: [
          [0, { goto: { target: 'endpoint-1-ns/v6/tcp/http__fd00:1::5/8080' } }],
          [1, { goto: { target: 'endpoint-2-ns/v6/tcp/http__fd00:2::5/8080' } }],
        ] } } },
      ] } },
      { rule: { family: 'ip6', table: 'kube-proxy', chain: 'endpoint-1-ns/v6/tcp/http__fd00:1::5/8080', expr: [{ dnat: { addr: 'fd00:1::5', port: 8080, family: 'ip6' } }] } },
      { rule: { family: 'ip6', table: 'kube-proxy', chain: 'endpoint-2-ns/v6/tcp/http__fd00:2::5/8080', expr: [{ dnat: { addr: 'fd00:2::5', port: 8080, family: 'ip6' } }] } },
      // Not kube-proxy's table: ignored.
      { map: { family: 'ip', table: 'other', name: 'service-ips', elem: [[{ concat: ['10.96.0.9', 'tcp', 1] }, { goto: { target: 'x' } }]] } },
    ],
  };
  const [f, ...rest] = parseNftJson(JSON.stringify(doc));
  assert.equal(rest.length, 0);
  assert.deepEqual(f, {
    kind: 'clusterIP', address: 'fd00:96::10', port: 80, protocol: 'tcp', service: 'ns/v6:http',
    backends: ['[fd00:1::5]:8080', '[fd00:2::5]:8080'],
  });
  assert.deepEqual(Object.keys(toBackendSets([f!]).clusterIP), ['[fd00:96::10]:80/tcp']);
});

test('conformance table: matches, mismatches and frontends only one side has', () => {
  const kp = { clusterIP: { '10.96.0.5:80/tcp': ['198.19.1.2:8080', '198.19.2.2:8080'], '10.96.0.6:53/udp': [] },
    externalIP: {}, loadBalancerIP: {}, nodePort: { '198.18.0.11:30080/tcp': ['198.19.1.2:8080'] } };
  const sl = { clusterIP: { '10.96.0.5:80/tcp': ['198.19.2.2:8080', '198.19.1.2:8080'], '10.96.0.6:53/udp': [] },
    externalIP: {}, loadBalancerIP: {}, nodePort: { '198.18.0.11:30080/tcp': ['198.19.2.2:8080'] } };
  const rows = compareBackendSets('etp-local', 'node-1', kp, sl);
  assert.deepEqual(rows.map((r) => [r.frontend, r.match]), [
    ['10.96.0.5:80/tcp', true], ['10.96.0.6:53/udp', true], ['198.18.0.11:30080/tcp', false],
  ]);
  const table = formatConformanceTable(rows);
  assert.match(table, /198\.18\.0\.11:30080\/tcp\s+198\.19\.1\.2:8080\s+198\.19\.2\.2:8080\s+MISMATCH/);
  assert.match(table, /\n2 match, 1 mismatch$/);
  const onlyKp = compareBackendSets('s', 'n', kp, { ...sl, clusterIP: {} });
  assert.equal(onlyKp.filter((r) => !r.match).length, 3, 'a frontend Sluice lacks is a mismatch');
});

// ---- the source-ranges column and frontends both sides miss (issue 16, item 6) ----

const firewalledIpt = `*nat
:KUBE-SERVICES - [0:0]
:KUBE-FW-AAA - [0:0]
:KUBE-EXT-AAA - [0:0]
-A KUBE-SERVICES -d 198.18.200.24/32 -p tcp -m comment --comment "conf/lb-source-ranges:http loadbalancer IP" -m tcp --dport 80 -j KUBE-FW-AAA
-A KUBE-FW-AAA -s 198.18.0.0/24 -m comment --comment "conf/lb-source-ranges:http loadbalancer IP" -j KUBE-EXT-AAA
-A KUBE-FW-AAA -s 198.18.200.24/32 -m comment --comment "conf/lb-source-ranges:http loadbalancer IP" -j KUBE-EXT-AAA
-A KUBE-FW-AAA -m comment --comment "conf/lb-source-ranges:http loadbalancer IP" -j KUBE-MARK-DROP
COMMIT
`;

test('source ranges: iptables KUBE-FW-* chains, the LoadBalancer IP\'s own node-hairpin allowance left out', () => {
  assert.deepEqual(parseSourceRanges(firewalledIpt, 'iptables', { loadBalancerIPs: ['198.18.200.24'] }),
    { '198.18.200.24:80/tcp': ['198.18.0.0/24'] });
  // Without knowing the LB IP, the allowance is reported (it is a rule kube-proxy wrote).
  assert.deepEqual(parseSourceRanges(firewalledIpt, 'iptables'), { '198.18.200.24:80/tcp': ['198.18.0.0/24', '198.18.200.24/32'] });
});

test('source ranges: nftables firewall-ips map and the "ip saddr != { ... } drop" chain', () => {
  const fw = 'firewall-AAA-conf/lb-source-ranges/tcp/http';
  const doc = { nftables: [
    { map: { family: 'ip', table: 'kube-proxy', name: 'firewall-ips', elem: [[{ concat: ['198.18.200.24', 'tcp', 80] }, { goto: { target: fw } }]] } },
    { rule: { family: 'ip', table: 'kube-proxy', chain: fw, expr: [
      { match: { op: '!=', left: { payload: { protocol: 'ip', field: 'saddr' } },
        right: { set: [{ prefix: { addr: '198.18.0.0', len: 24 } }, '198.18.200.24', '10.1.2.3'] } } },
      { drop: null },
    ] } },
  ] };
  assert.deepEqual(parseSourceRanges(JSON.stringify(doc), 'nftables', { loadBalancerIPs: ['198.18.200.24'] }),
    { '198.18.200.24:80/tcp': ['10.1.2.3/32', '198.18.0.0/24'] });
});

test('source ranges column: LoadBalancer rows match only when the ranges match; other kinds untouched', () => {
  const kp = { clusterIP: { '10.96.0.5:80/tcp': ['198.19.1.2:8080'] }, externalIP: {}, nodePort: {},
    loadBalancerIP: { '198.18.200.24:80/tcp': ['198.19.1.2:8080'] } };
  const rows = compareBackendSets('lb-source-ranges', 'node-1', kp, kp);
  const view = [{ frontend: '198.18.200.24:80/tcp', address: '198.18.200.24', port: 80, protocol: 'tcp', scope: 'external',
    flags: ['LoadBalancer', 'sourceRanges'], backends: [], sourceRanges: ['198.18.0.0/25'] }];
  const got = withSourceRanges(rows, { '198.18.200.24:80/tcp': ['198.18.0.0/24'] }, sluiceSourceRanges(view));
  const lb = got.find((r) => r.kind === 'loadBalancerIP')!;
  assert.equal(lb.match, false, 'different ranges are a mismatch even with equal backends');
  assert.deepEqual([lb.kubeProxyRanges, lb.sluiceRanges], [['198.18.0.0/24'], ['198.18.0.0/25']]);
  assert.equal(got.find((r) => r.kind === 'clusterIP')!.match, true);
  const table = formatConformanceTable(got);
  assert.match(table, /kube-proxy ranges +sluice ranges/);
  assert.match(table, /198\.18\.0\.0\/24 +198\.18\.0\.0\/25 +MISMATCH/);
  const same = withSourceRanges(rows, { '198.18.200.24:80/tcp': ['198.18.0.0/25'] }, sluiceSourceRanges(view));
  assert.equal(same.every((r) => r.match), true);
  // The flag without any CIDR denies every source: not the same as kube-proxy's "no ranges" (all).
  const denyAll = sluiceSourceRanges([{ ...view[0]!, frontend: '[fd00:200::22]:80/tcp', address: 'fd00:200::22', sourceRanges: undefined }]);
  const v6rows = compareBackendSets('v6', 'node-1', { ...kp, loadBalancerIP: { '[fd00:200::22]:80/tcp': ['[fd00:19:1::2]:8080'] } }, { ...kp, loadBalancerIP: { '[fd00:200::22]:80/tcp': ['[fd00:19:1::2]:8080'] } });
  const open = withSourceRanges(v6rows, {}, denyAll).find((r) => r.kind === 'loadBalancerIP')!;
  assert.equal(open.match, false, JSON.stringify(open));
  assert.deepEqual(open.sluiceRanges, ['(flag set, no CIDR: deny all)']);
});

test('a frontend the Service should have that both sides lack is a mismatch row', () => {
  const empty = { clusterIP: {}, externalIP: {}, loadBalancerIP: {}, nodePort: {} };
  const rows = compareBackendSets('s', 'node-1', { ...empty, clusterIP: { '10.96.0.5:80/tcp': ['198.19.1.2:8080'] } },
    { ...empty, clusterIP: { '10.96.0.5:80/tcp': ['198.19.1.2:8080'] } });
  assert.equal(rows.length, 1, 'compareBackendSets alone does not see the NodePort neither side has');
  const missing = missingOnBothSides(() => 'scenario', 'node-1', [
    { kind: 'clusterIP', frontend: '10.96.0.5:80/tcp' }, { kind: 'nodePort', frontend: '198.18.0.11:30080/tcp' },
  ], rows);
  assert.deepEqual(missing.map((r) => [r.kind, r.frontend, r.kubeProxy, r.sluice, r.match]),
    [['nodePort', '198.18.0.11:30080/tcp', undefined, undefined, false]]);
  assert.match(formatConformanceTable([...rows, ...missing]), /\(absent\) +\(absent\) +MISMATCH/);
});

// Dual-stack (issue 14): kube-proxy runs one proxier per family and names the
// chains of a Service port alike in both (the hash is of the port's name), so
// the families must be parsed apart or an IPv4 frontend gets IPv6 backends.
test('nft dual-stack: table ip and table ip6 with the same chain names keep their own backends', () => {
  const table = (family: 'ip' | 'ip6', vip: string, backend: string, nodeIp: string) => [
    { map: { family, table: 'kube-proxy', name: 'service-ips', elem: [[{ concat: [vip, 'tcp', 80] }, { goto: { target: 'service-DS-conf/ds/tcp/http' } }]] } },
    { map: { family, table: 'kube-proxy', name: 'service-nodeports', elem: [[{ concat: ['tcp', 30080] }, { goto: { target: 'external-DS-conf/ds/tcp/http' } }]] } },
    { set: { family, table: 'kube-proxy', name: 'nodeport-ips', elem: [nodeIp] } },
    { rule: { family, table: 'kube-proxy', chain: 'external-DS-conf/ds/tcp/http', expr: [{ goto: { target: 'service-DS-conf/ds/tcp/http' } }] } },
    { rule: { family, table: 'kube-proxy', chain: 'service-DS-conf/ds/tcp/http', expr: [{ goto: { target: `endpoint-1-conf/ds/tcp/http__${backend}/8080` } }] } },
    { rule: { family, table: 'kube-proxy', chain: `endpoint-1-conf/ds/tcp/http__${backend}/8080`, expr: [{ dnat: { addr: backend, port: 8080, family } }] } },
    { map: { family, table: 'kube-proxy', name: 'no-endpoint-services', elem: [[{ concat: [family === 'ip' ? '10.96.0.99' : 'fd00:10:96::99', 'tcp', 81] }, { goto: { target: 'reject-chain' } }]] } },
  ];
  const doc = { nftables: [...table('ip', '10.96.0.50', '198.19.1.5', '198.18.0.11'), ...table('ip6', 'fd00:10:96::50', 'fd00:19:1::5', 'fd00:18::11')] };
  const sets = toBackendSets(parseNftJson(JSON.stringify(doc), { serviceCidrs: ['10.96.0.0/16', 'fd00:10:96::/112'] }));
  assert.deepEqual(sorted(sets), sorted({
    clusterIP: {
      '10.96.0.50:80/tcp': ['198.19.1.5:8080'], '[fd00:10:96::50]:80/tcp': ['[fd00:19:1::5]:8080'],
      '10.96.0.99:81/tcp': ['<reject>'], '[fd00:10:96::99]:81/tcp': ['<reject>'],
    },
    externalIP: {}, loadBalancerIP: {},
    nodePort: { '198.18.0.11:30080/tcp': ['198.19.1.5:8080'], '[fd00:18::11]:30080/tcp': ['[fd00:19:1::5]:8080'] },
  }));
});

test('iptables dual-stack: iptables-save and ip6tables-save halves with the same chain names keep their own backends', () => {
  const half = (vip: string, len: number, backend: string, nodeIp: string) => `*nat
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -d ${vip}/${len} -p tcp -m comment --comment "conf/ds:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-DS
-A KUBE-SERVICES -d ${nodeIp}/${len} -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -j KUBE-NODEPORTS
-A KUBE-NODEPORTS -p tcp -m comment --comment "conf/ds:http" -m tcp --dport 30080 -j KUBE-EXT-DS
-A KUBE-EXT-DS -j KUBE-SVC-DS
-A KUBE-SVC-DS -j KUBE-SEP-DS1
-A KUBE-SEP-DS1 -p tcp -m tcp -j DNAT --to-destination ${backend}
COMMIT
*filter
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -d ${vip.replace(/50$/, '99')}/${len} -p tcp -m comment --comment "conf/none:http has no endpoints" -m tcp --dport 81 -j REJECT
COMMIT
`;
  const text = `${half('10.96.0.50', 32, '198.19.1.5:8080', '198.18.0.11')}\n${IP6TABLES_SEPARATOR}\n${half('fd00:10:96::50', 128, '[fd00:19:1::5]:8080', 'fd00:18::11')}`;
  const sets = toBackendSets(parseIptablesSave(text, { serviceCidrs: ['10.96.0.0/16', 'fd00:10:96::/112'] }));
  assert.deepEqual(sorted(sets), sorted({
    clusterIP: {
      '10.96.0.50:80/tcp': ['198.19.1.5:8080'], '[fd00:10:96::50]:80/tcp': ['[fd00:19:1::5]:8080'],
      '10.96.0.99:81/tcp': ['<reject>'], '[fd00:10:96::99]:81/tcp': ['<reject>'],
    },
    externalIP: {}, loadBalancerIP: {},
    nodePort: { '198.18.0.11:30080/tcp': ['198.19.1.5:8080'], '[fd00:18::11]:30080/tcp': ['[fd00:19:1::5]:8080'] },
  }));
});

test('an IPv6 address inside the IPv6 Service CIDR is a cluster IP where the rules do not say the kind', () => {
  const doc = { nftables: [{ map: { family: 'ip6', table: 'kube-proxy', name: 'no-endpoint-services', elem: [[{ concat: ['fd00:10:96::7', 'udp', 53] }, { goto: { target: 'reject-chain' } }]] } }] };
  const [f] = parseNftJson(JSON.stringify(doc), { serviceCidrs: ['10.96.0.0/16', 'fd00:10:96::/112'] });
  assert.equal(f?.kind, 'clusterIP');
});
