// bench/upstream.ts and bench/progstats.ts pieces that need no cluster: the
// metrics parser both kube-proxy's and the agent's /metrics go through, the
// kube-proxy config of the default and tuned rows, and the program-time
// targets' verdicts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { benchKubeProxyConfig, metricValue } from '../../bench/upstream';
import { programTargets, type BenchReport } from '../../bench/report';
import type { ClusterNode } from '../../test/cluster/nodes';

const METRICS = [
  '# HELP kubeproxy_sync_proxy_rules_duration_seconds SyncProxyRules latency in seconds',
  'kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.001"} 0',
  'kubeproxy_sync_proxy_rules_duration_seconds_sum 1.25',
  'kubeproxy_sync_proxy_rules_duration_seconds_count 3',
  'kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.7646e+09',
  'kubeproxy_sync_proxy_rules_endpoint_changes_total 7',
  'rest_client_requests_total{code="200",method="GET"} 4',
  'rest_client_requests_total{code="201",method="POST"} 2',
].join('\n');

test('metricValue: the exact name (not a longer one), summed over label sets', () => {
  assert.equal(metricValue(METRICS, 'kubeproxy_sync_proxy_rules_duration_seconds_count'), 3);
  assert.equal(metricValue(METRICS, 'kubeproxy_sync_proxy_rules_duration_seconds_sum'), 1.25);
  assert.equal(metricValue(METRICS, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds'), 1.7646e9);
  assert.equal(metricValue(METRICS, 'kubeproxy_sync_proxy_rules_duration_seconds'), undefined, 'a histogram has no bare sample');
  assert.equal(metricValue(METRICS, 'rest_client_requests_total'), 6);
});

test('kube-proxy config: the default row sets no minSyncPeriod (1 s), the tuned row its value in both modes', () => {
  const node = { name: 'n1', kubeconfigPath: '/k' } as ClusterNode;
  const def = benchKubeProxyConfig(node, 'iptables', undefined);
  assert.doesNotMatch(def, /minSyncPeriod/);
  assert.match(def, /^mode: iptables$/m);
  const tuned = benchKubeProxyConfig(node, 'nftables', '5ms');
  assert.equal([...tuned.matchAll(/^ {2}minSyncPeriod: 5ms$/gm)].length, 2);
});

test('program-time targets: PASS only when every series a target covers is within it; n/a when not measured', () => {
  const rep = { programs: { notes: [], rows: [
    { series: 'socket LB, 1 Services, TCP', program: 'sluice_connect4', runs: 10, ns: 1000, nsPerRun: 100 },
    { series: 'socket LB, 1000 Services, TCP', program: 'sluice_connect4', runs: 10, ns: 2000, nsPerRun: 200 },
    { series: 'non-Service traffic, socket LB, 1000 Services, TCP', program: 'sluice_getpeer4', runs: 10, ns: 5000, nsPerRun: 500 },
    { series: 'socket LB, 1 Services, TCP', program: 'sluice_getpeer4', runs: 10, ns: 500, nsPerRun: 50 },
  ] } } as unknown as BenchReport;
  const t = programTargets(rep);
  assert.equal(t.find((x) => x.target.startsWith('connect4'))!.verdict, 'FAIL');
  assert.equal(t.find((x) => x.target.startsWith('getpeername4'))!.verdict, 'PASS', 'non-Service rows are not judged');
  assert.equal(t.find((x) => x.target.startsWith('sendmsg4'))!.verdict, 'n/a');
});

test('metricValue: kube-proxy v1.34 labels its sync metrics by ip_family; the IPv6 proxier\'s lines can be left out, a timestamp taken as the max', () => {
  const text = [
    'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.7e+09',
    'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 1.8e+09',
    'kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 2',
    'kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv6"} 5',
  ].join('\n');
  const v6 = /ip_family="IPv6"/;
  assert.equal(metricValue(text, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', 'max', v6), 1.7e9);
  assert.equal(metricValue(text, 'kubeproxy_sync_proxy_rules_duration_seconds_count', 'sum', v6), 2);
  assert.equal(metricValue(text, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', 'max'), 1.8e9);
});
