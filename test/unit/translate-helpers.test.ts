// Translate helpers: node context, skip rules, health checks, translateAll,
// determinism, IP parsing.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { V1Node } from '@kubernetes/client-node';
import type { TranslateOptions } from '../../src/model/frontend';
import {
  groupSlicesByService,
  nodeContextFromNode,
  parseCIDR,
  parseIP,
  serviceKey,
  shouldSkipService,
  translateAll,
  translateService,
} from '../../src/translate';
import { HTTP, NODE, ep, slice, summarize, svc } from './translate-fixtures';

const OPTS: TranslateOptions = { maxEndpointsPerService: 10000 };

function k8sNode(addresses: [string, string][], zone?: string): V1Node {
  return {
    metadata: { name: 'node-a', ...(zone ? { labels: { 'topology.kubernetes.io/zone': zone } } : {}) },
    status: { addresses: addresses.map(([type, address]) => ({ type, address })) },
  };
}

// ---- nodeContextFromNode ---------------------------------------------------------

const nodeRows: {
  name: string; node: V1Node | undefined; npa?: string[]; want: string[]; zone?: string;
  /** Addresses of the agent's own interfaces. */
  local?: string[]; localhost?: boolean; nodeIP?: string;
}[] = [
  {
    name: 'InternalIP and ExternalIP, not Hostname; sorted, v4 first',
    node: k8sNode([['Hostname', 'node-a'], ['ExternalIP', '203.0.113.9'], ['InternalIP', '192.0.2.10'], ['InternalIP', 'fd00:2::10']], 'zone-a'),
    want: ['192.0.2.10', '203.0.113.9', 'fd00:2::10'],
    zone: 'zone-a',
  },
  {
    name: 'nodePortAddresses filters its own family only',
    node: k8sNode([['InternalIP', '192.0.2.10'], ['ExternalIP', '203.0.113.9'], ['InternalIP', 'fd00:2::10']]),
    npa: ['192.0.2.0/24'],
    want: ['192.0.2.10', 'fd00:2::10'],
  },
  {
    name: 'nodePortAddresses of both families',
    node: k8sNode([['InternalIP', '192.0.2.10'], ['ExternalIP', '203.0.113.9'], ['InternalIP', 'fd00:2::10']]),
    npa: ['203.0.113.0/24', 'fd00:3::/64'],
    want: ['203.0.113.9'],
  },
  {
    name: "'primary': first InternalIP of each family",
    node: k8sNode([['ExternalIP', '203.0.113.9'], ['InternalIP', '192.0.2.10'], ['InternalIP', '192.0.2.11'], ['InternalIP', 'fd00:2::10']]),
    npa: ['primary'],
    want: ['192.0.2.10', 'fd00:2::10'],
  },
  { name: 'no Node object: no addresses, no zone', node: undefined, want: [] },
  {
    name: "the node's interfaces serve NodePorts too (kube-proxy reads them), with the Node's addresses",
    node: k8sNode([['InternalIP', '192.0.2.10']]),
    local: ['198.18.5.1', '10.0.0.4'],
    want: ['10.0.0.4', '192.0.2.10', '198.18.5.1'],
  },
  { name: 'no Node object yet (re-registering): the interfaces still serve', node: undefined, local: ['198.18.5.1'], want: ['198.18.5.1'] },
  {
    name: 'localhost NodePorts: 127.0.0.1 when nodePortAddresses is unset (iptables mode)',
    node: undefined, local: ['127.0.0.1', '198.18.5.1'], localhost: true, want: ['127.0.0.1', '198.18.5.1'],
  },
  { name: 'localhost NodePorts off (nftables mode): no 127.0.0.1', node: undefined, local: ['127.0.0.1', '198.18.5.1'], localhost: false, want: ['198.18.5.1'] },
  {
    name: 'localhost NodePorts need nodePortAddresses to cover 127.0.0.0/8',
    node: undefined, local: ['127.0.0.1', '198.18.5.1'], localhost: true, npa: ['198.18.0.0/15'], want: ['198.18.5.1'],
  },
  { name: 'nodePortAddresses 127.0.0.0/8: localhost only', node: undefined, local: ['127.0.0.1', '198.18.5.1'], localhost: true, npa: ['127.0.0.0/8'], want: ['127.0.0.1'] },
  { name: '::1 never serves NodePorts (kube-proxy: not on IPv6)', node: undefined, local: ['::1', 'fe80::1'], localhost: true, want: [] },
  {
    name: "'primary' from bindAddress when the Node has no addresses",
    node: undefined, local: ['198.18.5.1', '198.18.6.1'], nodeIP: '198.18.5.1', npa: ['primary'], want: ['198.18.5.1'],
  },
  { name: "'primary' with no primary IP known: every local address (kube-proxy falls back)", node: undefined, local: ['198.18.5.1'], npa: ['primary'], want: ['198.18.5.1'] },
  {
    name: 'invalid and duplicate addresses dropped',
    node: k8sNode([['InternalIP', 'bogus'], ['InternalIP', '192.0.2.10'], ['ExternalIP', '192.0.2.10']]),
    want: ['192.0.2.10'],
  },
];

for (const row of nodeRows) {
  test(`nodeContextFromNode: ${row.name}`, () => {
    const opts = { nodePortAddresses: row.npa, localhostNodePorts: row.localhost ?? false, ...(row.nodeIP ? { nodeIP: row.nodeIP } : {}) };
    const ctx = nodeContextFromNode(row.node, 'node-a', opts, row.local ?? []);
    assert.equal(ctx.name, 'node-a');
    assert.deepEqual(ctx.addresses, row.want);
    assert.equal(ctx.zone, row.zone);
  });
}

// ---- shouldSkipService ---------------------------------------------------------------

const skipRows: { name: string; svc: ReturnType<typeof svc>; want: string | undefined }[] = [
  { name: 'normal ClusterIP', svc: svc(), want: undefined },
  { name: 'headless (clusterIP None)', svc: svc({ clusterIP: 'None', clusterIPs: ['None'] }), want: 'headless' },
  { name: 'no ClusterIP', svc: svc({ clusterIP: '', clusterIPs: [] }), want: 'no_cluster_ip' },
  { name: 'ExternalName', svc: svc({ type: 'ExternalName', clusterIP: '', clusterIPs: [], externalName: 'x.example.com' }), want: 'external_name' },
  { name: 'service-proxy-name label', svc: svc({ labels: { 'service.kubernetes.io/service-proxy-name': 'other' } }), want: 'service_proxy_name' },
  { name: 'headless label', svc: svc({ labels: { 'service.kubernetes.io/headless': '' } }), want: 'headless' },
];
for (const row of skipRows) {
  test(`shouldSkipService: ${row.name}`, () => {
    assert.equal(shouldSkipService(row.svc), row.want);
    const t = translateService(row.svc, [slice('s1', [ep('198.18.1.2')])], NODE, OPTS);
    assert.equal(t.skipped, row.want);
    if (row.want) assert.deepEqual(t.frontends, []);
  });
}

test('serviceKey: Service and EndpointSlice', () => {
  assert.equal(serviceKey(svc({ name: 'api', namespace: 'prod' })), 'prod/api');
  assert.equal(serviceKey(slice('api-x1', [], { service: 'api', namespace: 'prod' })), 'prod/api');
  const unlabelled = slice('x', []);
  delete unlabelled.metadata?.labels?.['kubernetes.io/service-name'];
  assert.equal(serviceKey(unlabelled), undefined);
});

// ---- health check (kube-proxy LocalReadyEndpoints) --------------------------------------

const LB_LOCAL = {
  type: 'LoadBalancer',
  externalTrafficPolicy: 'Local',
  healthCheckNodePort: 31999,
  ports: [
    { ...HTTP, nodePort: 30080 },
    { name: 'https', port: 443, protocol: 'TCP', nodePort: 30443 },
  ],
  status: { loadBalancer: { ingress: [{ ip: '203.0.113.7' }] } },
};

test('healthCheck: local ready endpoints counted once per IP across ports; terminating and remote not counted', () => {
  const t = translateService(
    svc(LB_LOCAL),
    [
      slice('s1', [ep('198.18.1.1', { node: 'node-a' }), ep('198.18.1.4', { node: 'node-a', ready: false, serving: true, terminating: true }), ep('198.18.1.2', { node: 'node-b' })], {
        ports: [
          { name: 'http', port: 8080 },
          { name: 'https', port: 8443 },
        ],
      }),
      slice('s2', [ep('198.18.1.5', { node: 'node-a' })], { ports: [{ name: 'http', port: 8080 }] }),
    ],
    NODE,
    OPTS,
  );
  assert.deepEqual(t.healthCheck, { service: 'default/web', nodePort: 31999, localEndpoints: 2 });
});

test('healthCheck: zero local endpoints still reported (the server must answer 503)', () => {
  const t = translateService(svc(LB_LOCAL), [slice('s1', [ep('198.18.1.2', { node: 'node-b' })])], NODE, OPTS);
  assert.deepEqual(t.healthCheck, { service: 'default/web', nodePort: 31999, localEndpoints: 0 });
});

test('healthCheck: none for eTP Cluster, NodePort type, or missing healthCheckNodePort', () => {
  assert.equal(translateService(svc({ ...LB_LOCAL, externalTrafficPolicy: 'Cluster' }), [], NODE, OPTS).healthCheck, undefined);
  assert.equal(translateService(svc({ ...LB_LOCAL, type: 'NodePort' }), [], NODE, OPTS).healthCheck, undefined);
  const missing = translateService(svc({ ...LB_LOCAL, healthCheckNodePort: undefined }), [], NODE, OPTS);
  assert.equal(missing.healthCheck, undefined);
  assert.deepEqual(missing.problems.map((p) => p.reason), ['invalid_port']);
});

// ---- determinism -------------------------------------------------------------------------

test('output does not depend on slice or endpoint order', () => {
  const s = svc({ type: 'NodePort', externalTrafficPolicy: 'Local', ports: [{ ...HTTP, nodePort: 30080 }], externalIPs: ['203.0.113.51', '203.0.113.50'] });
  const eps = ['198.18.1.9', '198.18.1.10', '198.18.1.2', '198.18.1.100'].map((ip, i) => ep(ip, { node: i % 2 ? 'node-a' : 'node-b' }));
  const slices = [slice('s1', eps.slice(0, 2)), slice('s2', eps.slice(2)), slice('s3', [eps[0]!, eps[3]!])];
  const first = translateService(s, slices, NODE, OPTS);
  const second = translateService(s, [...slices].reverse().map((x) => ({ ...x, endpoints: [...x.endpoints].reverse() })), NODE, OPTS);
  assert.deepEqual(second, first);
  // Backends sorted numerically, not as strings.
  assert.deepEqual(
    first.frontends[0]?.backends.map((b) => b.address),
    ['198.18.1.2', '198.18.1.9', '198.18.1.10', '198.18.1.100'],
  );
  assert.deepEqual(
    first.frontends.map((f) => `${f.kind} ${f.address} ${f.scope}`),
    [
      'ClusterIP 10.96.0.10 external',
      'NodePort 192.0.2.10 external',
      'NodePort 192.0.2.10 internal',
      'ExternalIP 203.0.113.50 external',
      'ExternalIP 203.0.113.50 internal',
      'ExternalIP 203.0.113.51 external',
      'ExternalIP 203.0.113.51 internal',
    ],
  );
});

test('backend fields: local, nodeName, zone, proto', () => {
  const t = translateService(svc(), [slice('s1', [ep('198.18.1.1', { node: 'node-a', zone: 'zone-a' }), ep('198.18.1.2')])], NODE, OPTS);
  assert.deepEqual(t.frontends[0]?.backends, [
    { address: '198.18.1.1', port: 8080, proto: 'TCP', local: true, terminating: false, zone: 'zone-a', nodeName: 'node-a' },
    { address: '198.18.1.2', port: 8080, proto: 'TCP', local: false, terminating: false },
  ]);
});

// ---- translateAll ---------------------------------------------------------------------------

test('translateAll: sorted, grouped slices, problems collected, conflicts resolved by age', () => {
  const older = svc({ name: 'b-old', created: '2024-01-01T00:00:00Z', externalIPs: ['203.0.113.50'], clusterIP: '10.96.0.20', clusterIPs: ['10.96.0.20'] });
  const newer = svc({ name: 'a-new', created: '2024-06-01T00:00:00Z', externalIPs: ['203.0.113.50'], clusterIP: '10.96.0.21', clusterIPs: ['10.96.0.21'] });
  const bad = svc({ name: 'c-bad', clusterIP: '10.96.0.22', clusterIPs: ['10.96.0.22'], ports: [HTTP, { name: 'sctp', port: 9, protocol: 'SCTP' }] });
  const headless = svc({ name: 'd-headless', clusterIP: 'None', clusterIPs: ['None'] });
  const slices = groupSlicesByService([
    slice('b-1', [ep('198.18.1.1')], { service: 'b-old' }),
    slice('a-1', [ep('198.18.1.2')], { service: 'a-new' }),
    slice('c-1', [ep('198.18.1.3')], { service: 'c-bad' }),
  ]);
  const all = translateAll([bad, headless, newer, older], slices, NODE, OPTS);
  assert.deepEqual(all.services.map((s) => s.service), ['default/a-new', 'default/b-old', 'default/c-bad', 'default/d-headless']);
  assert.deepEqual(
    all.frontends.map((f) => `${f.service} ${f.kind} ${f.address} -> ${f.backends.map((b) => b.address).join(',')}`),
    [
      'default/a-new ClusterIP 10.96.0.21 -> 198.18.1.2',
      'default/b-old ClusterIP 10.96.0.20 -> 198.18.1.1',
      'default/b-old ExternalIP 203.0.113.50 -> 198.18.1.1',
      'default/c-bad ClusterIP 10.96.0.22 -> 198.18.1.3',
    ],
  );
  assert.deepEqual(all.problems.map((p) => `${p.object} ${p.reason}`), ['Service default/a-new frontend_conflict', 'Service default/c-bad unsupported_protocol']);
  assert.equal(all.services[3]?.skipped, 'headless');
});

test('translateAll: 2000 Services x 10 endpoints translate quickly', () => {
  const services = [];
  const sl = [];
  for (let i = 0; i < 2000; i++) {
    const ip = `10.96.${i >> 8}.${i & 255}`;
    services.push(svc({ name: `s${i}`, clusterIP: ip, clusterIPs: [ip], type: 'NodePort', ports: [{ ...HTTP, nodePort: 30000 + (i % 2000) }] }));
    const eps = [];
    for (let j = 0; j < 10; j++) eps.push(ep(`198.18.${i >> 8}.${(i & 255)}`.replace(/\.(\d+)$/, `.${(i * 10 + j) & 255}`), { node: j === 0 ? 'node-a' : 'node-b' }));
    sl.push(slice(`s${i}-x`, eps, { service: `s${i}` }));
  }
  const start = process.hrtime.bigint();
  const all = translateAll(services, groupSlicesByService(sl), NODE, OPTS);
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  assert.equal(all.services.length, 2000);
  assert.ok(all.frontends.length >= 4000);
  // Not a benchmark assertion, a sanity bound: a quadratic slip would take minutes.
  assert.ok(ms < 20000, `${ms} ms`);
  console.log(`# translateAll 2000 services x 10 endpoints: ${ms.toFixed(0)} ms`);
});

// ---- IP parsing ------------------------------------------------------------------------------

const ipRows: [string, string | undefined, string?][] = [
  ['10.0.0.1', '10.0.0.1', 'IPv4'],
  ['010.000.000.001', '10.0.0.1', 'IPv4'],
  ['256.0.0.1', undefined],
  ['1.2.3', undefined],
  ['1.2.3.4.', undefined],
  ['.1.2.3', undefined],
  ['1..2.3', undefined],
  ['1.2.3.4.5', undefined],
  ['1.2.3.0004', undefined],
  ['1.2.3.+4', undefined],
  ['1.2.3. 4', undefined],
  ['1.2.3.4\n', undefined],
  ['１.2.3.4', undefined],
  ['255.255.255.255', '255.255.255.255', 'IPv4'],
  ['0.0.0.0', '0.0.0.0', 'IPv4'],
  ['fd00::1', 'fd00::1', 'IPv6'],
  ['FD00:0000:0000:0000:0000:0000:0000:0001', 'fd00::1', 'IPv6'],
  ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1', 'IPv6'],
  ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1', 'IPv6'],
  ['::', '::', 'IPv6'],
  ['::1', '::1', 'IPv6'],
  ['::ffff:192.0.2.1', '192.0.2.1', 'IPv4'],
  ['64:ff9b::192.0.2.1', '64:ff9b::c000:201', 'IPv6'],
  ['1::2::3', undefined],
  ['fe80::1%eth0', undefined],
  ['', undefined],
  ['1:2:3:4:5:6:7:8:9', undefined],
];
for (const [input, want, family] of ipRows) {
  test(`parseIP ${JSON.stringify(input)}`, () => {
    const ip = parseIP(input);
    assert.equal(ip?.text, want);
    assert.equal(ip?.family, family);
  });
}

test('parseIP: IPv4 parsed as one pass of digits and dots, leading zeros only when sloppy', () => {
  assert.equal(parseIP('10.0.0.01', false), undefined);
  assert.equal(parseIP('10.0.0.0', false)?.text, '10.0.0.0');
  assert.equal(parseIP('10.0.0.01', true)?.text, '10.0.0.1');
  assert.equal(parseIP('10.0.0.256', true), undefined);
});

test('parseCIDR: network masked, invalid rejected', () => {
  assert.equal(parseCIDR('198.51.100.77/24')?.text, '198.51.100.0/24');
  assert.equal(parseCIDR('fd00::1/8')?.text, 'fd00::/8');
  assert.equal(parseCIDR('0.0.0.0/0')?.text, '0.0.0.0/0');
  assert.equal(parseCIDR('198.51.100.0/33'), undefined);
  assert.equal(parseCIDR('198.51.100.0'), undefined);
  assert.equal(parseCIDR('010.0.0.0/8'), undefined, 'strict: leading zeros rejected like net.ParseCIDR');
});

test('summarize helper round-trip sanity', () => {
  assert.deepEqual(summarize(translateService(svc(), [], NODE, OPTS)), { 'ClusterIP 10.96.0.10:80/TCP': [] });
});
