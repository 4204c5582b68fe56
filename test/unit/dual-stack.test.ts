// Dual-stack in the translate and apply-spec steps (issue 14): which frontends
// each family gets from ipFamilies / clusterIPs / EndpointSlice addressType,
// that slim records translate the same, and that IPv6 frontends reach the
// data-path spec with IPv6 backends only.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { TranslateOptions } from '../../src/model/frontend';
import { translateService } from '../../src/translate';
import { ep, slice, summarize, svc, HTTP } from './translate-fixtures';
import { slimService, slimSlice, StringPool } from '../../src/agent/slim';
import { toFrontendSpec, ZoneIds } from '../../src/agent/toSpecs';
import { canonicalIp6, formatEndpoint, ip6ToBytes, parseEndpoint } from '../../src/datapath/addr';
import { frontendId } from '../../src/datapath/programmer';
import { COUNTERS } from '../../src/datapath/counters';
import * as abi from '../../src/abi/generated';

const BOTH: TranslateOptions = { maxEndpointsPerService: 100, ipFamilies: ['IPv4', 'IPv6'] };
const NODE = { name: 'node-a', zone: 'zone-a', addresses: ['192.0.2.10', 'fd00:2::10'] };
const V4 = slice('web-v4', [ep('198.18.1.1', { node: 'node-a' }), ep('198.18.1.2', { node: 'node-b' })]);
const V6 = slice('web-v6', [ep('fd00:1::1', { node: 'node-a' }), ep('fd00:1::2', { node: 'node-b' })], { addressType: 'IPv6' });

function translate(s: ReturnType<typeof svc>, slices = [V4, V6], opts = BOTH) {
  const t = translateService(s, slices, NODE, opts);
  const pool = new StringPool();
  assert.deepEqual(translateService(slimService(s, pool), slices.map((x) => slimSlice(x, pool)), NODE, opts), t, 'slim records translate the same');
  return t;
}

test('PreferDualStack NodePort Service: each family gets its ClusterIP and NodePort frontends with its own slice\'s backends', () => {
  const t = translate(svc({
    type: 'NodePort', ipFamilyPolicy: 'PreferDualStack', ipFamilies: ['IPv4', 'IPv6'],
    clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10', 'fd00:10:96::a'], ports: [{ ...HTTP, nodePort: 30080 }],
  }));
  assert.deepEqual(summarize(t), {
    'ClusterIP 10.96.0.10:80/TCP': ['198.18.1.1:8080', '198.18.1.2:8080'],
    'ClusterIP [fd00:10:96::a]:80/TCP': ['[fd00:1::1]:8080', '[fd00:1::2]:8080'],
    'NodePort 192.0.2.10:30080/TCP': ['198.18.1.1:8080', '198.18.1.2:8080'],
    'NodePort [fd00:2::10]:30080/TCP': ['[fd00:1::1]:8080', '[fd00:1::2]:8080'],
  });
  assert.deepEqual(t.problems, []);
  assert.deepEqual(new Set(t.frontends.map((f) => `${f.kind}/${f.family}`)).size, 4);
});

test('IPv6 first (ipFamilies [IPv6, IPv4]): clusterIPs are matched by index to the families', () => {
  const t = translate(svc({ ipFamilies: ['IPv6', 'IPv4'], clusterIP: 'fd00:10:96::a', clusterIPs: ['fd00:10:96::a', '10.96.0.10'] }));
  assert.deepEqual(Object.keys(summarize(t)).sort(), ['ClusterIP 10.96.0.10:80/TCP', 'ClusterIP [fd00:10:96::a]:80/TCP']);
});

test('SingleStack IPv6: only IPv6 frontends, the IPv4 slice is not read', () => {
  const t = translate(svc({ ipFamilyPolicy: 'SingleStack', ipFamilies: ['IPv6'], clusterIP: 'fd00:10:96::b', clusterIPs: ['fd00:10:96::b'] }));
  assert.deepEqual(summarize(t), { 'ClusterIP [fd00:10:96::b]:80/TCP': ['[fd00:1::1]:8080', '[fd00:1::2]:8080'] });
});

test('an object without ipFamilies (older API) takes its family from spec.clusterIP', () => {
  const s = svc({ clusterIP: 'fd00:10:96::c', clusterIPs: ['fd00:10:96::c'] });
  delete s.spec!.ipFamilies;
  assert.deepEqual(Object.keys(summarize(translate(s))), ['ClusterIP [fd00:10:96::c]:80/TCP']);
});

test('an IPv4-only node (ipFamilies [IPv4]) programs only the IPv4 half of a dual-stack Service', () => {
  const t = translate(svc({ ipFamilies: ['IPv4', 'IPv6'], clusterIPs: ['10.96.0.10', 'fd00:10:96::a'] }), [V4, V6], { maxEndpointsPerService: 100, ipFamilies: ['IPv4'] });
  assert.deepEqual(Object.keys(summarize(t)), ['ClusterIP 10.96.0.10:80/TCP']);
});

test('externalIPs, LoadBalancer ingress and source ranges are split by family', () => {
  const t = translate(svc({
    type: 'LoadBalancer', ipFamilies: ['IPv4', 'IPv6'], clusterIPs: ['10.96.0.10', 'fd00:10:96::a'],
    ports: [{ ...HTTP, nodePort: 30080 }], externalIPs: ['203.0.113.50', 'fd00:50::1'],
    loadBalancerSourceRanges: ['198.51.100.0/24', 'fd00:77::/48'],
    status: { loadBalancer: { ingress: [{ ip: '203.0.113.7' }, { ip: 'fd00:7::7' }] } },
  }));
  const lb = (address: string) => t.frontends.find((f) => f.kind === 'LoadBalancer' && f.address === address);
  assert.deepEqual(lb('203.0.113.7')?.sourceRanges, ['198.51.100.0/24']);
  assert.deepEqual(lb('fd00:7::7')?.sourceRanges, ['fd00:77::/48']);
  const eip = t.frontends.find((f) => f.kind === 'ExternalIP' && f.family === 'IPv6');
  assert.equal(eip?.address, 'fd00:50::1');
  assert.ok(eip?.backends.every((b) => b.address.includes(':')), 'IPv6 ExternalIP gets IPv6 backends');
});

test('toFrontendSpec passes IPv6 frontends through (the programmer writes them to the lb6_* maps)', () => {
  const t = translate(svc({ ipFamilies: ['IPv6'], clusterIP: 'fd00:10:96::b', clusterIPs: ['fd00:10:96::b'] }));
  const spec = toFrontendSpec(t.frontends[0]!, new ZoneIds());
  assert.equal(spec?.address, 'fd00:10:96::b');
  assert.deepEqual(spec?.backends.map((b) => b.address), ['fd00:1::1', 'fd00:1::2']);
  assert.equal(spec!.flags & abi.LB_SVC_FLAG_CLUSTER_IP, abi.LB_SVC_FLAG_CLUSTER_IP);
  assert.equal(frontendId(spec!), '[fd00:10:96::b]:80/tcp');
});

test('CLI endpoints: [IPv6]:port/proto parses to the canonical address; bad ones are refused with the expected form', () => {
  assert.deepEqual(parseEndpoint('[FD00:0::10]:80/udp'), { address: 'fd00::10', port: 80, proto: 'udp' });
  assert.equal(formatEndpoint({ address: 'fd00::10', port: 80, proto: 'tcp' }), '[fd00::10]:80/tcp');
  assert.deepEqual(parseEndpoint('10.96.0.10:53'), { address: '10.96.0.10', port: 53, proto: 'tcp' });
  assert.throws(() => parseEndpoint('fd00::10:80/tcp'), /\[IPV6\]:PORT/);
  assert.throws(() => parseEndpoint('[fd00::zz]:80'), /cannot parse/);
  assert.throws(() => parseEndpoint('[fd00::1::2]:80'), /not an IPv6 address/);
  assert.throws(() => parseEndpoint('[::ffff:10.0.0.1]:80'), /not an IPv6 address/, 'IPv4-mapped belongs to the IPv4 table');
  assert.equal(canonicalIp6('2001:DB8:0:0:0:0:0:1'), '2001:db8::1');
  assert.equal(ip6ToBytes('fd00::1').toString('hex'), 'fd000000000000000000000000000001');
});

test('counters: IPv6 reuses the IPv4 reason rows; the one IPv6-only row is in 124..127', () => {
  const row = COUNTERS.get(abi.LB_CNT_SOCK6_V4MAPPED);
  assert.deepEqual(row, { reason: 'ipv4_mapped', direction: 'none', path: 'socket' });
  assert.ok(abi.LB_CNT_SOCK6_V4MAPPED >= 124 && abi.LB_CNT_SOCK6_V4MAPPED <= 127);
});
