// The agent's settings: kube-proxy's KubeProxyConfiguration file is read and
// mapped (ignored fields named with a reason), durations take Go's syntax,
// --hostname-override exists, and an invalid setting is a startup error
// from the real entry point (exit code and message), never a hot loop.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { readConfigFile, resolveConfig } from '../../src/agent/config';
import { parseDurationMs } from '../../src/agent/duration';

const repo = path.resolve(__dirname, '..', '..', '..');
const sluice = path.join(repo, 'bin', 'sluice');

function withFile(text: string, fn: (file: string) => void): void {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-config-'));
  try {
    const file = path.join(dir, 'config.yaml');
    fs.writeFileSync(file, text);
    fn(file);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** What kubeadm v1.34 writes into the kube-proxy ConfigMap (config.conf), with a few values changed. */
const KUBEADM = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: 2h
  udpStreamTimeout: 0s
  udpTimeout: 45s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: "0.0.0.0:10256"
hostnameOverride: "Node-7"
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 500ms
  syncPeriod: 1m
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: "127.0.0.1:10249"
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
`;

test('Go durations', () => {
  assert.equal(parseDurationMs('30s', 'x'), 30_000);
  assert.equal(parseDurationMs('1m', 'x'), 60_000);
  assert.equal(parseDurationMs('500ms', 'x'), 500);
  assert.equal(parseDurationMs('1h30m', 'x'), 5_400_000);
  assert.equal(parseDurationMs('1.5s', 'x'), 1500);
  assert.equal(parseDurationMs('0', 'x'), 0);
  assert.throws(() => parseDurationMs('30', 'syncPeriod'), /syncPeriod: "30" is not a duration/);
  assert.throws(() => parseDurationMs('1 m', 'x'), /not a duration/);
});

test("kubeadm's KubeProxyConfiguration maps onto the agent's settings", () => {
  withFile(KUBEADM, (file) => {
    const { config, ignored } = readConfigFile(file);
    assert.equal(config.nodeName, 'node-7');
    assert.equal(config.kubeconfig, '/var/lib/kube-proxy/kubeconfig.conf');
    assert.equal(config.healthzBindAddress, '0.0.0.0:10256');
    assert.equal(config.metricsBindAddress, '127.0.0.1:10249');
    assert.equal(config.syncPeriodSeconds, 60, 'iptables.syncPeriod: the default mode is iptables');
    assert.equal(config.minSyncPeriodMs, 500);
    assert.equal(config.conntrackTcpEstablishedSeconds, 7200);
    assert.equal(config.conntrackUdpSeconds, 45);
    assert.equal(config.localhostNodePorts, true, 'iptables mode allows localhost NodePorts unless told not to');
    assert.equal(config.nodeIP, undefined, 'bindAddress 0.0.0.0 names no node IP');
    assert.equal(config.nodePortAddresses, undefined, 'null: every local address, as kube-proxy');
    const names = ignored.map((f) => f.field);
    assert.ok(names.includes('clusterCIDR'), names.join(','));
    for (const f of ignored) assert.ok(f.why.length > 10, `${f.field} has a reason`);
    assert.ok(!names.includes('iptables.masqueradeAll'), 'fields left at their zero value are not reported');
  });
});

test('nftables mode: nodePortAddresses defaults to primary, no localhost NodePorts, nftables sync periods', () => {
  withFile(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
bindAddress: 198.18.0.5
nftables:
  syncPeriod: 45s
  minSyncPeriod: 1s
`, (file) => {
    const { config } = readConfigFile(file);
    assert.deepEqual(config.nodePortAddresses, ['primary']);
    assert.equal(config.localhostNodePorts, false);
    assert.equal(config.syncPeriodSeconds, 45);
    assert.equal(config.minSyncPeriodMs, 1000);
    assert.equal(config.nodeIP, '198.18.0.5');
  });
});

test('IPVS mode: ipvs.scheduler becomes the default algorithm (empty is rr, as IPVS); unsupported schedulers are refused by name', () => {
  const ipvs = (scheduler: string) => `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
ipvs:
  scheduler: "${scheduler}"
`;
  withFile(ipvs(''), (file) => assert.equal(readConfigFile(file).config.lbAlgorithm, 'round-robin'));
  withFile(ipvs('sh'), (file) => assert.equal(readConfigFile(file).config.lbAlgorithm, 'source-hash'));
  withFile(ipvs('wlc'), (file) => assert.throws(() => readConfigFile(file), /ipvs\.scheduler.*wlc/));
  withFile(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
`, (file) => assert.equal(readConfigFile(file).config.lbAlgorithm, undefined));
});

test('unknown fields and bad values are errors naming the field', () => {
  withFile(`apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nfrobnicate: true\n`, (file) => {
    assert.throws(() => readConfigFile(file), /unknown KubeProxyConfiguration field "frobnicate"/);
  });
  withFile(`apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\niptables:\n  syncPeriod: 30\n`, (file) => {
    assert.throws(() => readConfigFile(file), /iptables\.syncPeriod: 30 is not a duration string/);
  });
  withFile(`apiVersion: kubeproxy.config.k8s.io/v1beta9\nkind: KubeProxyConfiguration\n`, (file) => {
    assert.throws(() => readConfigFile(file), /apiVersion "kubeproxy.config.k8s.io\/v1beta9" is not supported/);
  });
});

test('flags: kube-proxy duration syntax, --hostname-override, bare numbers still seconds', () => {
  const c = resolveConfig(new Map([['sync-period', '1m'], ['min-sync-period', '250ms'], ['hostname-override', 'worker-1'],
    ['conntrack-tcp-timeout-established', '24h'], ['conntrack-udp', '30']]));
  assert.equal(c.syncPeriodSeconds, 60);
  assert.equal(c.minSyncPeriodMs, 250);
  assert.equal(c.nodeName, 'worker-1');
  assert.equal(c.conntrackTcpEstablishedSeconds, 86400);
  assert.equal(c.conntrackUdpSeconds, 30);
  assert.equal(resolveConfig(new Map([['sync-period', '5']])).syncPeriodSeconds, 5);
  assert.throws(() => resolveConfig(new Map([['sync-period', '0s']])), /invalid config: syncPeriod \(--sync-period\) 0: must be greater than 0/);
  assert.throws(() => resolveConfig(new Map([['sync-period', 'soon']])), /--sync-period: "soon" is not a duration/);
});

test('a zero duration in the file is "unset" (kube-proxy defaults it), a negative one an error', () => {
  withFile(`apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\niptables:\n  syncPeriod: 0s\n`, (file) => {
    assert.equal(resolveConfig(new Map([['config', file]])).syncPeriodSeconds, 30);
  });
});

test('the real entry point refuses a bad sync period at once, with the reason and exit code 1', () => {
  const run = (args: string[]) => spawnSync(sluice, ['agent', '--node-name', 'n1', ...args], { encoding: 'utf8', timeout: 20_000 });
  withFile(`apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\niptables:\n  syncPeriod: -5s\n`, (file) => {
    const r = run(['--config', file]);
    assert.equal(r.status, 1, `exit code; stderr: ${r.stderr}`);
    assert.match(r.stderr, /invalid config: syncPeriod \(--sync-period\) -5: must be greater than 0/);
  });
  // Sluice's own file format: a 0 here made setInterval(full sync, 0), a loop that never rests.
  withFile('syncPeriodSeconds: 0\n', (file) => {
    const r = run(['--config', file]);
    assert.equal(r.status, 1, `exit code; stderr: ${r.stderr}`);
    assert.match(r.stderr, /invalid config: syncPeriod \(--sync-period\) 0: must be greater than 0/);
  });
  const r = run(['--sync-period=0s']);
  assert.equal(r.status, 1, `exit code; stderr: ${r.stderr}`);
  assert.match(r.stderr, /invalid config: syncPeriod \(--sync-period\) 0: must be greater than 0/);
  assert.equal(r.signal, null, 'exited by itself, not by the timeout');
});

// Live map migration (issue 13.4): maxEntries names maps of any object
// (conntrack belongs to the TC object), and a bad one is a startup error.
test('maxEntries: any Sluice map by name, a positive whole number; an unknown map or a bad size is refused naming it', () => {
  withFile('maxEntries:\n  sluice_ct4: 327680\n  sluice_svc4: 1048576\n', (file) => {
    assert.deepEqual(resolveConfig(new Map([['config', file]])).maxEntries, { sluice_ct4: 327680, sluice_svc4: 1048576 });
  });
  withFile('maxEntries:\n  sluice_conntrack: 1000\n', (file) => {
    assert.throws(() => resolveConfig(new Map([['config', file]])), /invalid config: maxEntries\.sluice_conntrack 1000: not a Sluice map \(known: .*sluice_ct4/);
  });
  withFile('maxEntries:\n  sluice_ct4: -1\n', (file) => {
    assert.throws(() => resolveConfig(new Map([['config', file]])), /invalid config: maxEntries\.sluice_ct4 -1: must be a whole number/);
  });
});
