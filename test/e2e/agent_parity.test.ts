// kube-proxy parity of the agent, end to end (issue 11): the real `sluice
// agent`, the built-in API server, backends in a network namespace, clients
// in a child cgroup. One Service with 10 000 endpoints on 3 ports; two
// Services claiming one address; REJECT vs DROP; NodePorts that survive the
// Node object and serve 127.0.0.1; /healthz following nodeEligible; the live
// /metrics page through promtool.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { Sandbox, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { startBackends } from '../helpers/backends';
import { AgentProcess } from '../helpers/agentProcess';
import * as abi from '../../src/abi/generated';
import { BpfMap } from '../../src/bpf';
import { nodeIpMap } from '../../src/datapath/sockConfig';
import { numberToIp4 } from '../../src/datapath/addr';

const NODE = 'node-p';
const NODE_IP = '198.18.0.1';
const BACKENDS = ['198.18.20.2', '198.18.20.3', '198.18.20.4'];

let sb: Sandbox;
let api: ApiServerHandle;
let agent: AgentProcess;
let tmp: string;

function nodeObject(extra: Record<string, unknown> = {}) {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name: NODE }, status: { addresses: [{ type: 'InternalIP', address: NODE_IP }] }, ...extra };
}

function createService(name: string, spec: Record<string, unknown>) {
  return api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' }, spec }) as {
    metadata: Record<string, unknown>; spec: { clusterIP: string; ports: Array<{ nodePort?: number }> } & Record<string, unknown>;
  };
}

interface SliceOpts { ports?: Array<{ name: string; port: number; protocol?: string }>; node?: string }

function slice(service: string, name: string, ips: string[], o: SliceOpts = {}) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name, namespace: 'default',
      labels: { 'kubernetes.io/service-name': service },
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': new Date().toISOString() },
    },
    addressType: 'IPv4',
    ports: (o.ports ?? [{ name: 'http', port: 8080 }]).map((p) => ({ protocol: 'TCP', ...p })),
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true }, nodeName: o.node ?? NODE })),
  };
}

type Programmed = Array<{ frontend: string; flags: string[]; backends: Array<{ address: string; port: number }> }>;

function programmed(): Programmed {
  // 30 000 backends do not fit execFileSync's default 1 MiB of output.
  return JSON.parse(execFileSync(sluiceBin, ['services', '-o', 'json', '--bpffs', sb.bpffs], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 })) as Programmed;
}

async function waitFrontend(what: string, check: (f: Programmed[number] | undefined) => boolean, frontend: string, timeoutMs = 15000): Promise<void> {
  await waitFor(what, () => check(programmed().find((s) => s.frontend === frontend)), timeoutMs).catch((err: Error) => {
    const complaints = agent.lines.filter((l) => l.level >= 40).slice(-5).map((l) => JSON.stringify(l));
    throw new Error(`${err.message}; agent warnings/errors: ${complaints.join(' | ')}`);
  });
}

/** The addresses NodePorts listen on: sluice_nodeip4 as the agent wrote it. */
function nodePortAddresses(): string[] {
  const m = BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_NODEIP4));
  try {
    return [...nodeIpMap(m).entries()].map(([a]) => numberToIp4(a));
  } finally {
    m.close();
  }
}

const backendsOf = (f: Programmed[number] | undefined) => (f?.backends ?? []).map((b) => `${b.address}:${b.port}`).sort().join(',');

async function connect(vip: string, port: number, count: number) {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', vip, String(port), String(count)]);
  return (JSON.parse(out) as { results: Array<{ backend?: string; error?: string; ms: number }> }).results;
}

function endpoints(): { healthz: string; metrics: string } {
  const line = agent.find(/serving \/healthz/)!;
  return { healthz: String(line.healthz), metrics: String(line.metrics) };
}

before(async () => {
  sb = Sandbox.create();
  await startBackends(sb, BACKENDS);
  api = await startApiServer({ port: 0 });
  api.store.create('nodes', nodeObject());
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-e2e-parity-'));
  const kubeconfig = path.join(tmp, 'kubeconfig');
  await api.writeKubeconfig(kubeconfig);
  agent = new AgentProcess([
    '--kubeconfig', kubeconfig, '--hostname-override', NODE, '--cgroup-path', sb.cgroup, '--bpffs', sb.bpffs,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', '--sync-period', '8s', '--drift-repair-period', '8', '--log-level', 'debug',
  ]);
  await agent.waitForLog(/informers synced/);
});

after(async () => {
  await agent?.stop();
  await api?.close();
  sb?.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('one Service with 10 000 endpoints on 3 ports: every frontend gets every backend (no Service-wide cap)', async () => {
  const ports = [{ name: 'http', port: 8080 }, { name: 'alt', port: 8081 }, { name: 'dns', port: 5353, protocol: 'UDP' }];
  const svc = createService('big', {
    ports: [{ name: 'http', port: 80, protocol: 'TCP' }, { name: 'alt', port: 81, protocol: 'TCP' }, { name: 'dns', port: 53, protocol: 'UDP' }],
  });
  const ips = Array.from({ length: 10_000 }, (_, i) => `198.19.${(i + 1) >> 8}.${(i + 1) & 255}`);
  for (let s = 0; s < 10; s++) api.store.create('endpointslices', slice('big', `big-${s}`, ips.slice(s * 1000, (s + 1) * 1000), { ports }));
  for (const fe of [`${svc.spec.clusterIP}:80/tcp`, `${svc.spec.clusterIP}:81/tcp`, `${svc.spec.clusterIP}:53/udp`]) {
    await waitFrontend(`${fe} with 10 000 backends`, (f) => f?.backends.length === 10_000, fe, 60_000);
  }
  assert.equal(agent.find(/too_many_endpoints|maxEndpointsPerService/), undefined, 'no endpoint-limit problem reported');
  // Gone again, so the other tests read small maps.
  api.store.delete('services', 'big', 'default');
  for (let s = 0; s < 10; s++) api.store.delete('endpointslices', `big-${s}`, 'default');
  await waitFrontend('the big Service removed', (f) => f === undefined, `${svc.spec.clusterIP}:80/tcp`, 60_000);
});

test('frontend conflicts: the older Service keeps the address whichever claims it first, in partial and full syncs', async () => {
  const port = [{ name: 'http', port: 80, protocol: 'TCP' }];
  // "older" is created first (same second: its name sorts first, the documented tie-break).
  createService('conflict-first', { ports: port, externalIPs: ['198.18.30.1'] });
  api.store.create('endpointslices', slice('conflict-first', 'conflict-first-1', [BACKENDS[0]!]));
  createService('conflict-second', { ports: port, externalIPs: ['198.18.30.2'] });
  api.store.create('endpointslices', slice('conflict-second', 'conflict-second-1', [BACKENDS[1]!]));
  const older = `${BACKENDS[0]}:8080`;
  await waitFrontend('older on .1', (f) => backendsOf(f) === older, '198.18.30.1:80/tcp');
  await waitFrontend('newer on .2', (f) => backendsOf(f) === `${BACKENDS[1]}:8080`, '198.18.30.2:80/tcp');

  // Order 1: the address is the older Service's; the newer one claims it too.
  patchExternalIPs('conflict-second', ['198.18.30.1', '198.18.30.2']);
  await agent.waitForLog(/Service default\/conflict-second: frontend 198\.18\.30\.1:80\/tcp.*belongs to Service default\/conflict-first/);
  await waitFrontend('still the older one', (f) => backendsOf(f) === older, '198.18.30.1:80/tcp');

  // Order 2: the newer Service holds an address first; the older one claims it afterwards and takes it over.
  patchExternalIPs('conflict-second', ['198.18.30.2', '198.18.30.3']);
  await waitFrontend('newer on .3', (f) => backendsOf(f) === `${BACKENDS[1]}:8080`, '198.18.30.3:80/tcp');
  patchExternalIPs('conflict-first', ['198.18.30.1', '198.18.30.3']);
  await waitFrontend('the older one takes .3 over (partial sync)', (f) => backendsOf(f) === older, '198.18.30.3:80/tcp');
  await agent.waitForLog(/Service default\/conflict-second: frontend 198\.18\.30\.3:80\/tcp.*belongs to Service default\/conflict-first/);

  // Full syncs (every 8 s) keep the same winners.
  const fullSyncs = agent.lines.filter((l) => l.kind === 'full').length;
  await waitFor('two more full syncs', () => agent.lines.filter((l) => l.kind === 'full').length >= fullSyncs + 2, 30_000);
  for (const fe of ['198.18.30.1:80/tcp', '198.18.30.3:80/tcp']) {
    assert.equal(backendsOf(programmed().find((s) => s.frontend === fe)), older, `${fe} after full syncs`);
  }
  assert.equal(backendsOf(programmed().find((s) => s.frontend === '198.18.30.2:80/tcp')), `${BACKENDS[1]}:8080`);

  // The winner lets go: the loser gets the address at once, not at the next full sync (--drift-repair-period 8).
  patchExternalIPs('conflict-first', ['198.18.30.1']);
  const letGo = agent.lines.filter((l) => l.kind === 'full').length;
  await waitFrontend('the newer one gets .3 back', (f) => backendsOf(f) === `${BACKENDS[1]}:8080`, '198.18.30.3:80/tcp', 6000);
  assert.ok(agent.lines.filter((l) => l.kind === 'full').length <= letGo + 1, 'it came with partial syncs, not by waiting for full ones');
  const text = await (await fetch(`http://${endpoints().metrics}/metrics`)).text();
  assert.match(text, /sluice_errors_total\{reason="frontend_conflict"\} [1-9]/);
});

function patchExternalIPs(name: string, externalIPs: string[]): void {
  const current = structuredClone(api.store.get('services', name, 'default')) as { spec: Record<string, unknown> };
  api.store.update('services', { ...current, spec: { ...current.spec, externalIPs } } as never);
}

test('REJECT vs DROP: no endpoints anywhere refuses; internalTrafficPolicy Local with endpoints only elsewhere is unreachable', async () => {
  const none = createService('rej-none', { ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  const local = createService('drop-local', { internalTrafficPolicy: 'Local', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  api.store.create('endpointslices', slice('drop-local', 'drop-local-1', [BACKENDS[2]!], { node: 'another-node' }));
  await waitFrontend('drop-local flagged', (f) => f?.flags.includes('drop-no-backend') === true, `${local.spec.clusterIP}:80/tcp`);
  await waitFrontend('rej-none programmed, not flagged', (f) => f !== undefined && !f.flags.includes('drop-no-backend'), `${none.spec.clusterIP}:80/tcp`);
  const refused = await connect(none.spec.clusterIP, 80, 3);
  assert.ok(refused.every((r) => r.error === 'ECONNREFUSED'), JSON.stringify(refused));
  const dropped = await connect(local.spec.clusterIP, 80, 3);
  assert.ok(dropped.every((r) => r.error === 'EHOSTUNREACH'), JSON.stringify(dropped));
  const text = await (await fetch(`http://${endpoints().metrics}/metrics`)).text();
  assert.match(text, /kubeproxy_sync_proxy_rules_no_local_endpoints_total\{traffic_policy="internal",ip_family="IPv4"\} [1-9]/);
});

test('NodePorts: on 127.0.0.1 from the node (iptables mode default), and they survive the Node object going away', async () => {
  const svc = createService('np-parity', { type: 'NodePort', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  api.store.create('endpointslices', slice('np-parity', 'np-parity-1', [BACKENDS[0]!]));
  const nodePort = svc.spec.ports[0]!.nodePort!;
  const want = `${BACKENDS[0]}:8080`;
  // One IPv4 entry at the wildcard address (bpf/lib/nodeport.h); the addresses it listens on are sluice_nodeip4's.
  await waitFrontend('NodePort wildcard', (f) => backendsOf(f) === want, `0.0.0.0:${nodePort}/tcp`);
  await waitFor('NodePort addresses: the Node IP and 127.0.0.1', () => nodePortAddresses().includes(NODE_IP) && nodePortAddresses().includes('127.0.0.1'), 15000);
  const results = await connect('127.0.0.1', nodePort, 5);
  assert.ok(results.every((r) => r.backend === want), JSON.stringify(results));

  api.store.delete('nodes', NODE);
  await agent.waitForLog(/sync done/); // the Node's deletion is synced
  const fullSyncs = agent.lines.filter((l) => l.kind === 'full').length;
  await waitFor('a full sync without the Node', () => agent.lines.filter((l) => l.kind === 'full').length > fullSyncs, 20_000);
  assert.equal(backendsOf(programmed().find((s) => s.frontend === `0.0.0.0:${nodePort}/tcp`)), want, 'kept while the Node is away');
  assert.ok(nodePortAddresses().includes(NODE_IP), 'kept while the Node is away');
  api.store.create('nodes', { ...nodeObject(), status: {} });
  const afterReregister = agent.lines.filter((l) => l.kind === 'full').length;
  await waitFor('a full sync with an address-less Node', () => agent.lines.filter((l) => l.kind === 'full').length > afterReregister, 20_000);
  assert.equal(backendsOf(programmed().find((s) => s.frontend === `0.0.0.0:${nodePort}/tcp`)), want, 'kept while it re-registers without addresses');
  assert.ok(nodePortAddresses().includes(NODE_IP), 'kept while it re-registers without addresses');
  api.store.update('nodes', { ...(structuredClone(api.store.get('nodes', NODE)) as object), status: nodeObject().status } as never);
});

test('/healthz is 503 while the Node is tainted ToBeDeletedByClusterAutoscaler, /livez stays 200; both counted', async () => {
  const { healthz, metrics } = endpoints();
  api.store.update('nodes', { ...(structuredClone(api.store.get('nodes', NODE)) as object), spec: { taints: [{ key: 'ToBeDeletedByClusterAutoscaler', value: '1700000000', effect: 'NoSchedule' }] } } as never);
  await waitFor('healthz 503', async () => (await fetch(`http://${healthz}/healthz`)).status === 503, 10_000);
  const res = await fetch(`http://${healthz}/healthz`);
  assert.equal(((await res.json()) as { nodeEligible: boolean }).nodeEligible, false);
  assert.equal((await fetch(`http://${healthz}/livez`)).status, 200);
  api.store.update('nodes', { ...(structuredClone(api.store.get('nodes', NODE)) as object), spec: {} } as never);
  await waitFor('healthz 200 again', async () => (await fetch(`http://${healthz}/healthz`)).status === 200, 10_000);
  const text = await (await fetch(`http://${metrics}/metrics`)).text();
  assert.match(text, /kubeproxy_proxy_healthz_total\{code="503"\} [1-9]/);
  assert.match(text, /kubeproxy_proxy_livez_total\{code="200"\} [1-9]/);
});

/** Debian's promtool, unpacked by scripts/deps.sh. */
const PROMTOOL = [process.env.PROMTOOL, '/var/cache/sluice/promtool/promtool', '/usr/bin/promtool'].find((p) => p && fs.existsSync(p));

test('the live /metrics: kube-proxy\'s change counters move, and promtool accepts the page', { skip: PROMTOOL ? false : 'promtool not available (scripts/deps.sh unpacks it from Debian\'s prometheus package)' }, async () => {
  const text = await (await fetch(`http://${endpoints().metrics}/metrics`)).text();
  assert.match(text, /kubeproxy_sync_proxy_rules_service_changes_total [1-9]/);
  assert.match(text, /kubeproxy_sync_proxy_rules_endpoint_changes_total [1-9]/);
  assert.match(text, /kubeproxy_sync_full_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} [1-9]/);
  assert.match(text, /kubeproxy_sync_partial_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} [1-9]/);
  const r = spawnSync(PROMTOOL!, ['check', 'metrics'], { input: text, encoding: 'utf8' });
  const complaints = `${r.stdout}${r.stderr}`.split('\n').filter((l) => l.trim() !== '');
  // kube-proxy's own gauge carries a counter's suffix; promtool rejects kube-proxy's page for it too.
  assert.deepEqual(complaints.filter((l) => !l.startsWith('kubeproxy_sync_proxy_rules_no_local_endpoints_total non-counter')), []);
});

test('loadBalancerSourceRanges on the socket path: a client outside the ranges cannot reach the LB IP through the socket LB; inside can; the ClusterIP is not filtered', async () => {
  const LB_IP = '198.18.28.10';
  const INSIDE = '198.18.26.5';
  const OUTSIDE = '198.18.27.5';
  for (const a of [INSIDE, OUTSIDE]) sb.ip(['addr', 'add', `${a}/32`, 'dev', 'lo']);
  const svc = api.store.create('services', {
    apiVersion: 'v1', kind: 'Service', metadata: { name: 'lb-ranges', namespace: 'default' },
    spec: { type: 'LoadBalancer', loadBalancerSourceRanges: ['198.18.26.0/24'], ports: [{ name: 'dns', port: 53, targetPort: 8080, protocol: 'UDP' }] },
  }) as { spec: { clusterIP: string } };
  api.store.updateStatus('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'lb-ranges', namespace: 'default' },
    status: { loadBalancer: { ingress: [{ ip: LB_IP }] } } });
  api.store.create('endpointslices', slice('lb-ranges', 'lb-ranges-1', BACKENDS, { ports: [{ name: 'dns', port: 8080, protocol: 'UDP' }] }));
  await waitFrontend('LB IP programmed with its ranges', (f) => f?.flags.includes('sourceRanges') === true && f.backends.length === 3, `${LB_IP}:53/udp`);
  const from = async (source: string, address: string) =>
    (JSON.parse(await sb.runInCgroup(['node', labScript('rawSock'), 'from', source, address, '53'])) as { result: string }).result;
  assert.deepEqual({
    inside: await from(INSIDE, LB_IP),
    outside: await from(OUTSIDE, LB_IP),
    // The test netns is not the agent's (host) netns: an unbound socket there is a pod's, whose address the hook cannot know.
    unboundPod: await from('-', LB_IP),
    clusterIpOutside: await from(OUTSIDE, svc.spec.clusterIP),
  }, {
    inside: `${LB_IP}:53`,
    outside: 'EHOSTUNREACH',
    unboundPod: 'EHOSTUNREACH',
    clusterIpOutside: `${svc.spec.clusterIP}:53`,
  });
  const counted = /sluice_datapath_events_total\{[^}]*reason="source_range_drop"[^}]*path="socket"[^}]*\} [1-9]/;
  let text = '';
  await waitFor('source_range_drop counted on the socket path', async () => {
    text = await (await fetch(`http://${endpoints().metrics}/metrics`)).text();
    return counted.test(text);
  }, 15000).catch(() => assert.fail(`no socket source_range_drop in /metrics: ${text.split('\n').filter((l) => l.includes('source_range')).join(' | ')}`));
});
