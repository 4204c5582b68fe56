// North-south driven by the agent: the real `sluice agent` runs inside a
// "node" namespace with --devices, watches the built-in API (reached through
// a unix-socket forwarder, so the node namespace has no route anywhere), and
// programs NodePort, LoadBalancer (externalTrafficPolicy Local with its
// healthCheckNodePort) and loadBalancerSourceRanges for a client outside.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { Topology, ADDR, SERVER_SCRIPT, CLIENT_SCRIPT } from './tc_topology';
import { cgroup2Root, bpffsRoot, sluiceBin, waitFor } from '../helpers/sandbox';
import { AGENT_CAPS, withCaps } from '../helpers/agentProcess';

const FORWARDER = path.join(__dirname, '..', 'cluster', 'forwarder.js');

let topo: Topology;
let api: ApiServerHandle;
let tmp: string;
let cgroup: string;
let bpffs: string;
const children: ChildProcess[] = [];
let agentLog = '';
const RESERVED = '/proc/sys/net/ipv4/ip_local_reserved_ports';
let hostReservedBefore = '';

function track(child: ChildProcess): ChildProcess {
  children.push(child);
  return child;
}

function slice(service: string, endpoints: Array<[string, string]>) {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: `${service}-1`, namespace: 'default', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: endpoints.map(([ip, node]) => ({ addresses: [ip], conditions: { ready: true }, nodeName: node })),
  };
}

const request = (host: string, port: number) => topo.node('cli', CLIENT_SCRIPT, ['tcp', host, String(port)]);

const HTTP_GET = `
const http = require('http');
const [host, port] = process.argv.slice(1);
setTimeout(() => { process.stdout.write('timeout'); process.exit(0); }, 2000);
http.get({ host, port: Number(port), path: '/' }, (res) => { let b = ''; res.on('data', (d) => (b += d));
  res.on('end', () => { process.stdout.write(res.statusCode + ' ' + b); process.exit(0); }); })
  .on('error', (e) => { process.stdout.write('error ' + e.code); process.exit(0); });
`;

before(async () => {
  hostReservedBefore = fs.readFileSync(RESERVED, 'utf8');
  topo = new Topology('slag');
  topo.create();
  await topo.start('p1', SERVER_SCRIPT, ['p1', '8080']);
  await topo.start('p2', SERVER_SCRIPT, ['p2', '8080']);
  api = await startApiServer({ port: 0 });
  api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: ADDR.node1 }] } });
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-ns-'));
  const kubeconfig = path.join(tmp, 'kubeconfig');
  await api.writeKubeconfig(kubeconfig);
  // API server -> unix socket -> 127.0.0.1:6443 inside the node namespace.
  const sock = path.join(tmp, 'api.sock');
  track(spawn(process.execPath, [FORWARDER, 'unix-to-tcp', sock, `127.0.0.1:${api.port}`], { stdio: 'ignore' }));
  await waitFor('forwarder socket', () => fs.existsSync(sock));
  track(spawn('nsenter', [`--net=${topo.netnsPath('n1')}`, process.execPath, FORWARDER, 'tcp-to-unix', '127.0.0.1:6443', sock], { stdio: 'ignore' }));
  const suffix = path.basename(tmp);
  cgroup = path.join(cgroup2Root(), suffix);
  fs.mkdirSync(cgroup);
  bpffs = path.join(bpffsRoot(), suffix);
  // nsenter first (it needs CAP_SYS_ADMIN), then the agent with exactly the documented capabilities.
  const agent = track(spawn('nsenter', [`--net=${topo.netnsPath('n1')}`, ...withCaps(AGENT_CAPS, [sluiceBin, 'agent',
    '--kubeconfig', kubeconfig, '--k8s-api-server', '127.0.0.1:6443', '--node-name', 'n1',
    '--cgroup-path', cgroup, '--bpffs', bpffs, '--devices', 'eth0',
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0',
    '--healthcheck-addresses', ADDR.node1, '--stale-socket-netns='])], { stdio: ['ignore', 'pipe', 'pipe'] }));
  agent.stdout!.on('data', (d) => (agentLog += d));
  agent.stderr!.on('data', (d) => (agentLog += d));
  await waitFor('agent synced', () => agentLog.includes('informers synced') || agent.exitCode !== null, 20000);
  assert.ok(agentLog.includes('TC attached to the external devices'), agentLog);
});

after(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 300));
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  topo?.destroy();
  await api?.close();
  if (bpffs) fs.rmSync(bpffs, { recursive: true, force: true });
  if (cgroup && fs.existsSync(cgroup)) fs.rmdirSync(cgroup);
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('NodePort from outside (externalTrafficPolicy Cluster): both backends see the node, as kube-proxy masquerades', async () => {
  api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' },
    spec: { type: 'NodePort', ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30080, protocol: 'TCP' }] } });
  api.store.create('endpointslices', slice('web', [[ADDR.pod1, 'n1'], [ADDR.pod2, 'n2']]));
  const seen = new Map<string, string>();
  let last = '';
  await waitFor('both backends answer on the NodePort', () => {
    const [name, peer] = request(ADDR.node1, 30080).split(' ');
    if (name === 'p1' || name === 'p2') seen.set(name, peer!.split(':')[0]!);
    else last = name ?? '';
    return seen.size === 2;
  }, 20000).catch((err: Error) => { throw new Error(`${err.message}: saw ${JSON.stringify([...seen])}, last answer ${last}; ct: ${execFileSync(sluiceBin, ['ct', 'list', '--bpffs', bpffs], { encoding: 'utf8' })}; links: ${execFileSync('ls', [path.join(bpffs, 'links')], { encoding: 'utf8' })}; maps: ${execFileSync(sluiceBin, ['services', '--bpffs', bpffs], { encoding: 'utf8' })}; agent: ${agentLog.split('\n').filter((l) => /device|error|warn|"level":[45]0/.test(l)).join(' | ').slice(0, 3000)}`); });
  assert.equal(seen.get('p1'), ADDR.node1, 'a local backend sees the node address (SNAT; the agent attached TC to its device for the reply)');
  assert.equal(seen.get('p2'), ADDR.node1, 'a remote backend sees the node address (SNAT)');
  assert.match(agentLog, /TC attached to a local backend device/);
});

test('externalTrafficPolicy Local: only the local backend, the client address kept, and the healthCheckNodePort follows', async () => {
  api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'lb', namespace: 'default' },
    spec: { type: 'LoadBalancer', externalTrafficPolicy: 'Local', healthCheckNodePort: 32100,
      ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30081, protocol: 'TCP' }] } });
  api.store.updateStatus('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'lb', namespace: 'default' },
    status: { loadBalancer: { ingress: [{ ip: '198.18.100.5' }] } } });
  api.store.create('endpointslices', slice('lb', [[ADDR.pod1, 'n1'], [ADDR.pod2, 'n2']]));
  await waitFor('health check 200', () => topo.node('cli', HTTP_GET, [ADDR.node1, '32100']).startsWith('200'), 20000);
  const body = JSON.parse(topo.node('cli', HTTP_GET, [ADDR.node1, '32100']).slice(4)) as Record<string, unknown>;
  assert.deepEqual(body, { service: { namespace: 'default', name: 'lb' }, localEndpoints: 1, serviceProxyHealthy: true });
  for (let i = 0; i < 8; i++) {
    const answer = request('198.18.100.5', 80);
    assert.ok(answer.startsWith(`p1 ${ADDR.client}:`), `only the local backend, seeing the client: ${answer}`);
  }
  // The local endpoint goes away: the node says 503 and drops the traffic.
  api.store.update('endpointslices', slice('lb', [[ADDR.pod2, 'n2']]));
  await waitFor('health check 503', () => topo.node('cli', HTTP_GET, [ADDR.node1, '32100']).startsWith('503'), 20000);
  assert.equal(request('198.18.100.5', 80), 'timeout');
});

test('loadBalancerSourceRanges: other sources are dropped', async () => {
  api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'ranged', namespace: 'default' },
    spec: { type: 'LoadBalancer', loadBalancerSourceRanges: ['198.18.0.99/32'],
      ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30082, protocol: 'TCP' }] } });
  api.store.updateStatus('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'ranged', namespace: 'default' },
    status: { loadBalancer: { ingress: [{ ip: '198.18.100.6' }] } } });
  api.store.create('endpointslices', slice('ranged', [[ADDR.pod1, 'n1']]));
  // The NodePort of the same Service has no source ranges (kube-proxy applies them to the LB IP).
  await waitFor('NodePort programmed', () => request(ADDR.node1, 30082).startsWith('p1'), 20000);
  assert.equal(request('198.18.100.6', 80), 'timeout', 'a client outside the ranges is dropped');
  api.store.patch('services', 'ranged', { spec: { loadBalancerSourceRanges: ['198.18.0.0/24'] } }, { namespace: 'default', contentType: 'application/merge-patch+json' });
  await waitFor('allowed after the range widens', () => request('198.18.100.6', 80).startsWith('p1'), 20000);
});

test('the SNAT port range is reserved from the node\'s own connections, in the node\'s network namespace only', () => {
  const inNode = execFileSync('nsenter', [`--net=${topo.netnsPath('n1')}`, 'cat', RESERVED], { encoding: 'utf8' }).trim();
  assert.equal(inNode, '61000-65535', 'net.ipv4.ip_local_reserved_ports in the node namespace');
  assert.equal(fs.readFileSync(RESERVED, 'utf8'), hostReservedBefore, 'the machine\'s own namespace is untouched');
  assert.match(agentLog, /SNAT ports 61000-65535 reserved/);
});
