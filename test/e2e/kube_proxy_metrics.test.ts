// Sluice's /metrics against the real kube-proxy's: upstream kube-proxy
// v1.34 (the binary the cluster tier builds) runs in a throwaway network
// namespace against the built-in API server started in that namespace, and
// every kubeproxy_* family it exports must either exist on Sluice's page with
// the same type and label names, or be one of the iptables/nftables-only
// families named below. Nothing leaves the namespace: no link but loopback.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Sandbox, sluiceBin, waitFor } from '../helpers/sandbox';
import { AgentMetrics } from '../../src/agent/metrics';
import { CONNTRACK_UNTOUCHED } from '../cluster/kubeProxy';

const versions = fs.readFileSync(path.resolve(__dirname, '..', '..', '..', 'test', 'cluster', 'versions.env'), 'utf8');
const K8S_VERSION = /^KUBERNETES_VERSION=(\S+)/m.exec(versions)?.[1] ?? '';
const KUBE_PROXY = path.join(process.env.SLUICE_CACHE ?? '/var/cache/sluice', `k8s-${K8S_VERSION}`, 'bin', 'kube-proxy');
const skip = fs.existsSync(KUBE_PROXY) ? false : `no kube-proxy binary at ${KUBE_PROXY} (scripts/k8s-binaries.sh builds it)`;

/** kube-proxy families that describe its iptables/nftables/conntrack machinery: nothing in Sluice means the same. */
const NO_COUNTERPART = new Set([
  'kubeproxy_sync_proxy_rules_nftables_sync_failures_total',
  'kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total',
  'kubeproxy_conntrack_reconciler_sync_duration_seconds',
  'kubeproxy_conntrack_reconciler_deleted_entries_total',
]);

let sb: Sandbox;
let tmp: string;

interface Family { type: string; labels: Set<string> }

function families(text: string): Map<string, Family> {
  const out = new Map<string, Family>();
  for (const line of text.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)/.exec(line);
    if (t) out.set(t[1]!, { type: t[2]!, labels: new Set() });
  }
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)\{([^}]*)\}/.exec(line);
    if (!m) continue;
    const name = m[1]!;
    const fam = out.get(name) ?? out.get(name.replace(/_(bucket|sum|count)$/, ''));
    for (const pair of m[2]!.match(/[a-zA-Z_]\w*="/g) ?? []) {
      const label = pair.slice(0, -2);
      if (label !== 'le') fam?.labels.add(label);
    }
  }
  return out;
}

/** GET inside the namespace (the servers listen on its loopback). */
function fetchInNetns(url: string): string {
  return sb.execInNetns([process.execPath, '-e', `fetch(${JSON.stringify(url)}).then(r => r.text()).then(t => process.stdout.write(t), e => { console.error(e.message); process.exit(1); })`]);
}

before(async () => {
  if (skip) return;
  sb = Sandbox.create('sluice-kpm');
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-kpm-'));
  const kubeconfig = path.join(tmp, 'kubeconfig');
  sb.spawnInNetns([sluiceBin, 'apiserver', '--listen', '127.0.0.1:6443', '--kubeconfig-out', kubeconfig]);
  await waitFor('built-in API server in the namespace', () => fs.existsSync(kubeconfig), 15_000);
  const node = { apiVersion: 'v1', kind: 'Node', metadata: { name: 'kpm-node' }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } };
  sb.execInNetns([process.execPath, '-e', `fetch('http://127.0.0.1:6443/api/v1/nodes', { method: 'POST', headers: { 'content-type': 'application/json' }, body: ${JSON.stringify(JSON.stringify(node))} }).then(r => { if (r.status >= 300) process.exit(1); })`]);
  const config = path.join(tmp, 'kube-proxy.yaml');
  fs.writeFileSync(config, [
    'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
    'kind: KubeProxyConfiguration',
    'mode: nftables',
    'hostnameOverride: kpm-node',
    'clientConnection:',
    `  kubeconfig: ${kubeconfig}`,
    'clusterCIDR: 198.19.0.0/16',
    'healthzBindAddress: 127.0.0.1:10256',
    'metricsBindAddress: 127.0.0.1:10249',
    ...CONNTRACK_UNTOUCHED,
    '',
  ].join('\n'));
  const proxy = sb.spawnInNetns([KUBE_PROXY, `--config=${config}`, '--v=1']);
  let log = '';
  proxy.stderr!.on('data', (d) => { log = (log + String(d)).slice(-4000); });
  await waitFor('kube-proxy synced once', () => {
    try {
      return /kubeproxy_sync_proxy_rules_last_timestamp_seconds\{[^}]*\} [1-9]/.test(fetchInNetns('http://127.0.0.1:10249/metrics'));
    } catch {
      return false;
    }
  }, 60_000).catch((err: Error) => { throw new Error(`${err.message}; kube-proxy said: ${log}`); });
  fetchInNetns('http://127.0.0.1:10256/healthz');
  fetchInNetns('http://127.0.0.1:10256/livez');
});

after(() => {
  sb?.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('every kubeproxy_* family the real kube-proxy exports has the same name, type and labels on Sluice\'s page', { skip }, async (t) => {
  const upstream = families(fetchInNetns('http://127.0.0.1:10249/metrics'));
  const m = new AgentMetrics();
  const fam = { ip_family: 'IPv4' };
  // Touch every labelled family once so its label names show.
  for (const h of [m.syncDuration, m.syncFullDuration, m.syncPartialDuration, m.networkProgrammingDuration]) h.observe(fam, 0.01);
  m.syncLastTimestamp.set(fam, 1);
  m.syncLastQueuedTimestamp.set(fam, 1);
  m.healthzTotal.inc({ code: '200' });
  m.livezTotal.inc({ code: '200' });
  m.noLocalEndpoints.set({ traffic_policy: 'internal', ...fam }, 0);
  const ours = families(await m.registry.metrics());

  const compared: string[] = [];
  for (const [name, theirs] of upstream) {
    if (!name.startsWith('kubeproxy_') || NO_COUNTERPART.has(name)) continue;
    const mine = ours.get(name);
    assert.ok(mine, `kube-proxy exports ${name} (${theirs.type}); Sluice does not`);
    assert.equal(mine.type, theirs.type, `${name}: type`);
    if (theirs.labels.size > 0) assert.deepEqual([...mine.labels].sort(), [...theirs.labels].sort(), `${name}: labels`);
    compared.push(name);
  }
  t.diagnostic(`compared with kube-proxy ${K8S_VERSION}: ${compared.sort().join(', ')}`);
  // The families kube-proxy shows after one sync and one probe of each endpoint.
  for (const name of ['kubeproxy_sync_proxy_rules_duration_seconds', 'kubeproxy_sync_full_proxy_rules_duration_seconds',
    'kubeproxy_sync_proxy_rules_last_timestamp_seconds', 'kubeproxy_proxy_healthz_total', 'kubeproxy_proxy_livez_total',
    'kubeproxy_sync_proxy_rules_no_local_endpoints_total', 'kubeproxy_sync_proxy_rules_service_changes_total']) {
    assert.ok(compared.includes(name), `${name} was compared (kube-proxy exported: ${[...upstream.keys()].filter((n) => n.startsWith('kubeproxy_')).join(', ')})`);
  }
});
