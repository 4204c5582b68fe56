// The conformance check's two mappings, without a cluster: Sluice's
// `services -o json` scopes to the oracle's external/internal paths, and the
// oracle's `path` option on kube-proxy's real rules (test/cluster/fixtures)
// and on the externalTrafficPolicy Local chain with no local endpoint.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseIptablesSave, parseNftJson, toBackendSets, type ParseOptions } from '../cluster/kubeProxyOracle';
import { kindOfFlags, sluiceBackendSets, type SluiceServiceView } from '../cluster/sluiceSets';

const fixtures = resolve(__dirname, '..', '..', '..', 'test', 'cluster', 'fixtures');
const be = (address: string, port = 8080) => ({ address, port, flags: [] });

const view: SluiceServiceView[] = [
  { frontend: '10.96.0.10:80/tcp', address: '10.96.0.10', port: 80, protocol: 'tcp', scope: 'external', flags: ['ClusterIP'], backends: [be('198.19.2.2'), be('198.19.1.2')] },
  { frontend: '198.18.0.11:30080/tcp', address: '198.18.0.11', port: 30080, protocol: 'tcp', scope: 'external',
    flags: ['NodePort', 'externalTrafficPolicy=Local', 'two-scopes'], backends: [be('198.19.1.2')] },
  { frontend: '198.18.0.11:30080/tcp', address: '198.18.0.11', port: 30080, protocol: 'tcp', scope: 'internal',
    flags: ['NodePort', 'two-scopes'], backends: [be('198.19.1.2'), be('198.19.2.2')] },
  { frontend: '198.18.200.1:53/udp', address: '198.18.200.1', port: 53, protocol: 'udp', scope: 'external', flags: ['LoadBalancer', 'sourceRanges'], backends: [] },
];

test('sluice sets: the external path takes external scopes, the internal path the twin where there is one', () => {
  assert.deepEqual(sluiceBackendSets(view, 'external'), {
    clusterIP: { '10.96.0.10:80/tcp': ['198.19.1.2:8080', '198.19.2.2:8080'] },
    externalIP: {},
    loadBalancerIP: { '198.18.200.1:53/udp': ['<reject>'] },
    nodePort: { '198.18.0.11:30080/tcp': ['198.19.1.2:8080'] },
  });
  assert.deepEqual(sluiceBackendSets(view, 'internal').nodePort, { '198.18.0.11:30080/tcp': ['198.19.1.2:8080', '198.19.2.2:8080'] });
  assert.deepEqual(sluiceBackendSets(view, 'internal').clusterIP, sluiceBackendSets(view, 'external').clusterIP);
});

test('sluice sets: the REJECT/DROP column follows the drop-no-backend flag', () => {
  const dropping: SluiceServiceView[] = [
    { frontend: '10.96.0.11:80/tcp', address: '10.96.0.11', port: 80, protocol: 'tcp', scope: 'external', flags: ['ClusterIP', 'internalTrafficPolicy=Local', 'drop-no-backend'], backends: [] },
    { frontend: '10.96.0.12:80/tcp', address: '10.96.0.12', port: 80, protocol: 'tcp', scope: 'external', flags: ['ClusterIP'], backends: [] },
  ];
  assert.deepEqual(sluiceBackendSets(dropping).clusterIP, { '10.96.0.11:80/tcp': ['<drop>'], '10.96.0.12:80/tcp': ['<reject>'] });
});

test('sluice sets: the IPv4 NodePort wildcard (0.0.0.0) stands for each of the node\'s NodePort addresses', () => {
  const wild: SluiceServiceView[] = [
    { frontend: '0.0.0.0:30080/tcp', address: '0.0.0.0', port: 30080, protocol: 'tcp', scope: 'external', flags: ['NodePort'], backends: [be('198.19.1.2')] },
  ];
  assert.deepEqual(sluiceBackendSets(wild, 'external', ['198.18.0.11', '198.18.5.1', 'fd00::11']).nodePort, {
    '198.18.0.11:30080/tcp': ['198.19.1.2:8080'], '198.18.5.1:30080/tcp': ['198.19.1.2:8080'],
  });
  assert.deepEqual(Object.keys(sluiceBackendSets(wild).nodePort), ['0.0.0.0:30080/tcp'], 'no addresses given: the wildcard as is');
});

test('sluice sets: a frontend without a kind flag is an error that names its flags', () => {
  assert.equal(kindOfFlags(['ExternalIP', 'externalTrafficPolicy=Local']), 'externalIP');
  assert.throws(() => kindOfFlags(['two-scopes']), /flags \[two-scopes\]/);
});

for (const [file, parse] of [['iptables-save.txt', parseIptablesSave], ['nft-ruleset.json', parseNftJson]] as const) {
  test(`oracle paths on real kube-proxy rules (${file}): eTP Local short-circuit = Cluster set, external = local set`, () => {
    const text = readFileSync(join(fixtures, file), 'utf8');
    const { expected, ...opts } = JSON.parse(readFileSync(join(fixtures, `${file}.expected.json`), 'utf8')) as
      ParseOptions & { expected: ReturnType<typeof toBackendSets> };
    const external = toBackendSets(parse(text, { ...opts, path: 'external' }));
    const internal = toBackendSets(parse(text, { ...opts, path: 'internal' }));
    assert.deepEqual(external, toBackendSets(parse(text, opts)), 'external is the default');
    // The fixture's eTP Local Service: external IP 198.18.100.10:8081 (local: one pod); its ClusterIP has the Cluster set.
    const local = expected.externalIP['198.18.100.10:8081/tcp'];
    const clusterSet = Object.entries(expected.clusterIP).find(([k]) => k.endsWith(':8081/tcp'))?.[1];
    assert.ok(local && clusterSet && clusterSet.length > local.length);
    assert.deepEqual(external.externalIP['198.18.100.10:8081/tcp'], local);
    assert.deepEqual(internal.externalIP['198.18.100.10:8081/tcp'], clusterSet);
    // eTP Cluster frontends have one path for everyone.
    assert.deepEqual(internal.loadBalancerIP, external.loadBalancerIP);
  });
}

test('oracle: eTP Local with no local endpoint — external path empty (not the short-circuit), internal the Cluster set', () => {
  const rules = `*filter
:KUBE-EXTERNAL-SERVICES - [0:0]
-A KUBE-EXTERNAL-SERVICES -d 198.18.100.21/32 -p tcp -m comment --comment "conf/etp-local:http has no local endpoints" -m tcp --dport 8081 -j DROP
COMMIT
*nat
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -d 198.18.100.21/32 -p tcp -m comment --comment "conf/etp-local:http external IP" -m tcp --dport 8081 -j KUBE-EXT-AAA
-A KUBE-EXT-AAA -s 198.19.0.0/16 -m comment --comment "pod traffic for conf/etp-local:http external destinations" -j KUBE-SVC-AAA
-A KUBE-EXT-AAA -m comment --comment "masquerade LOCAL traffic for conf/etp-local:http external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
-A KUBE-EXT-AAA -m comment --comment "route LOCAL traffic for conf/etp-local:http external destinations" -m addrtype --src-type LOCAL -j KUBE-SVC-AAA
-A KUBE-SVC-AAA -m comment --comment "conf/etp-local:http -> 198.19.2.2:8080" -j KUBE-SEP-BBB
-A KUBE-SEP-BBB -p tcp -m comment --comment "conf/etp-local:http" -m tcp -j DNAT --to-destination 198.19.2.2:8080
COMMIT
`;
  const ext = toBackendSets(parseIptablesSave(rules, { path: 'external' }));
  const int = toBackendSets(parseIptablesSave(rules, { path: 'internal' }));
  // "has no local endpoints" DROPs: the REJECT/DROP column says so.
  assert.deepEqual(ext.externalIP, { '198.18.100.21:8081/tcp': ['<drop>'] });
  assert.deepEqual(int.externalIP, { '198.18.100.21:8081/tcp': ['198.19.2.2:8080'] });
});
