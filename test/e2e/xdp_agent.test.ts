// XDP driven by the agent (issue 17): the real `sluice agent --devices eth0
// --xdp-mode auto` inside a node namespace (set-up as northsouth_agent.test.ts):
// auto takes generic XDP on the veth, the agent keeps the frontend-address set
// in step with the Services, `sluice status` shows the device, its mode and
// its counters, and a NodePort flow to a backend on node2 leaves by XDP_TX.
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


before(async () => {
  topo = new Topology('slxag');
  topo.create();
  await topo.start('p1', SERVER_SCRIPT, ['p1', '8080']);
  await topo.start('p2', SERVER_SCRIPT, ['p2', '8080']);
  api = await startApiServer({ port: 0 });
  api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: ADDR.node1 }] } });
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-xdpag-'));
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
    '--healthcheck-addresses', ADDR.node1, '--stale-socket-netns=', '--xdp-mode', 'auto'])], { stdio: ['ignore', 'pipe', 'pipe'] }));
  agent.stdout!.on('data', (d) => (agentLog += d));
  agent.stderr!.on('data', (d) => (agentLog += d));
  await waitFor('agent synced', () => agentLog.includes('informers synced') || agent.exitCode !== null, 20000);
  assert.ok(agentLog.includes('TC attached to the external devices'), agentLog);
  assert.ok(agentLog.includes('XDP attached in front of TC'), agentLog);
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

interface StatusXdp { device: string; mode: string; tx: string; packets: string; programId?: number }

function xdpStatus(): StatusXdp[] {
  return (JSON.parse(execFileSync(sluiceBin, ['status', '--bpffs', bpffs, '--output', 'json'], { encoding: 'utf8' })) as { xdp: StatusXdp[] }).xdp;
}

test('NodePort to a backend on node2: served through XDP (generic on the veth), status shows device, mode and counters', async () => {
  api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' },
    spec: { type: 'NodePort', ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30080, protocol: 'TCP' }] } });
  api.store.create('endpointslices', slice('web', [[ADDR.pod2, 'n2']]));
  await waitFor('the NodePort answers', () => request(ADDR.node1, 30080).startsWith('p2 '), 20000);
  const before = xdpStatus().find((x) => x.device === 'eth0');
  assert.equal(before?.mode, 'generic', JSON.stringify(xdpStatus()));
  for (let i = 0; i < 3; i++) assert.equal(request(ADDR.node1, 30080).split(':')[0], `p2 ${ADDR.node1}`);
  const after = xdpStatus().find((x) => x.device === 'eth0')!;
  assert.ok(BigInt(after.tx) - BigInt(before!.tx) >= 3n, `XDP_TX ${before!.tx} -> ${after.tx}`);
  const text = execFileSync(sluiceBin, ['status', '--bpffs', bpffs], { encoding: 'utf8' });
  assert.match(text, /XDP DEVICE\s+MODE\s+IFINDEX\s+LINK\s+PROGRAM\s+PACKETS\s+PASSED\s+TX/);
  assert.match(text, /\neth0\s+generic\s+\d+\s+\d+\s+\d+\s+\d+/);
});
