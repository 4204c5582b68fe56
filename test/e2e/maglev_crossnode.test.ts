// Maglev cross-node consistency (issue 15): two node namespaces, each with
// its own Sluice TC data path programmed by its own `sluice agent` process
// from the same API objects (one built-in API server, reached from each node
// through a unix-socket forwarder). A client sends the same 5-tuples (fixed
// source ports) to a LoadBalancer IP first through node 1, then, after its
// route moves, through node 2, as ECMP or a failover would: every flow
// reaches the same backend on both nodes. Both agents' tables, read from
// their pinned maps and compared by backend address, are identical, and each
// observed backend is the one table[hash(5-tuple) % M] predicts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { openSockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer } from '../../src/datapath/programmer';
import { maglevEntry, maglevFlowHash, readMaglevTable } from '../../src/datapath/maglev';
import { numberToIp4 } from '../../src/datapath/addr';
import { Topology, ADDR, SERVER_SCRIPT } from './tc_topology';
import { cgroup2Root, bpffsRoot, sluiceBin, waitFor } from '../helpers/sandbox';
import { AGENT_CAPS, withCaps } from '../helpers/agentProcess';

const FORWARDER = path.join(__dirname, '..', 'cluster', 'forwarder.js');
const VIP = '198.18.100.7';
const FLOWS = 24;
const POD_NAMES: Record<string, string> = { [ADDR.pod1]: 'p1', [ADDR.pod1b]: 'p1b', [ADDR.pod2]: 'p2' };

let topo: Topology;
let api: ApiServerHandle;
let tmp: string;
const children: ChildProcess[] = [];
const agents: Array<{ node: 'n1' | 'n2'; bpffs: string; cgroup: string; log: string; proc?: ChildProcess }> = [];

/** Connections from fixed source ports, one after another: "<pod name>" per flow (or an error). */
const FLOWS_SCRIPT = `
const net = require('net');
const [host, port, first, count] = process.argv.slice(1).map((v, i) => (i ? Number(v) : v));
const out = [];
const one = (i) => new Promise((done) => {
  const s = net.connect({ host, port, localPort: first + i });
  let data = '';
  const t = setTimeout(() => { s.destroy(); done('timeout'); }, 2000);
  s.on('data', (d) => (data += d));
  s.on('end', () => { clearTimeout(t); done(data.split(' ')[0]); });
  s.on('error', (e) => { clearTimeout(t); done('error ' + e.code); });
});
(async () => { for (let i = 0; i < count; i++) out.push(await one(i)); process.stdout.write(JSON.stringify(out)); })();
`;

const flows = (first: number, count = FLOWS): string[] => JSON.parse(topo.node('cli', FLOWS_SCRIPT, [VIP, '80', String(first), String(count)], 60000) || '[]') as string[];

before(async () => {
  topo = new Topology('slmg');
  topo.create();
  await topo.start('p1', SERVER_SCRIPT, ['p1', '8080']);
  await topo.start('p1b', SERVER_SCRIPT, ['p1b', '8080']);
  await topo.start('p2', SERVER_SCRIPT, ['p2', '8080']);
  api = await startApiServer({ port: 0 });
  for (const [name, address] of [['n1', ADDR.node1], ['n2', ADDR.node2]]) {
    api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name }, status: { addresses: [{ type: 'InternalIP', address }] } });
  }
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-maglev-'));
  const kubeconfig = path.join(tmp, 'kubeconfig');
  await api.writeKubeconfig(kubeconfig);
  const sock = path.join(tmp, 'api.sock');
  children.push(spawn(process.execPath, [FORWARDER, 'unix-to-tcp', sock, `127.0.0.1:${api.port}`], { stdio: 'ignore' }));
  await waitFor('forwarder socket', () => fs.existsSync(sock));
  for (const node of ['n1', 'n2'] as const) {
    children.push(spawn('nsenter', [`--net=${topo.netnsPath(node)}`, process.execPath, FORWARDER, 'tcp-to-unix', '127.0.0.1:6443', sock], { stdio: 'ignore' }));
    const suffix = `${path.basename(tmp)}-${node}`;
    const a = { node, bpffs: path.join(bpffsRoot(), suffix), cgroup: path.join(cgroup2Root(), suffix), log: '' } as (typeof agents)[number];
    fs.mkdirSync(a.cgroup);
    agents.push(a);
    // nsenter first (it needs CAP_SYS_ADMIN), then the agent with exactly the
    // documented capabilities (the tables and their BTF need nothing more).
    const proc = spawn('nsenter', [`--net=${topo.netnsPath(node)}`, ...withCaps(AGENT_CAPS, [sluiceBin, 'agent',
      '--kubeconfig', kubeconfig, '--k8s-api-server', '127.0.0.1:6443', '--node-name', node,
      '--cgroup-path', a.cgroup, '--bpffs', a.bpffs, '--devices', 'eth0',
      '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', '--stale-socket-netns='])], { stdio: ['ignore', 'pipe', 'pipe'] });
    a.proc = proc;
    children.push(proc);
    proc.stdout!.on('data', (d) => (a.log += d));
    proc.stderr!.on('data', (d) => (a.log += d));
  }
  for (const a of agents) {
    await waitFor(`agent ${a.node} synced`, () => a.log.includes('informers synced') || a.proc!.exitCode !== null, 20000);
    assert.ok(a.log.includes('TC attached to the external devices'), a.log);
  }
});

after(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 300));
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  topo?.destroy();
  await api?.close();
  for (const a of agents) {
    fs.rmSync(a.bpffs, { recursive: true, force: true });
    if (fs.existsSync(a.cgroup)) fs.rmdirSync(a.cgroup);
  }
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

/** One agent's table for the VIP, as backend addresses (ids are each node's own). */
function tableOf(bpffs: string): { m: number; addresses: string[] } {
  const maps = openSockLbMaps(bpffs);
  try {
    const f = LbProgrammer.adopt(maps).programmedFrontends().find((x) => x.address === VIP && x.port === 80 && x.scope === 'external');
    assert.ok(f, `${bpffs}: no frontend ${VIP}:80`);
    const t = readMaglevTable(maps.maglev!, { revNatId: f.revNatId, proto: 'tcp', scope: 'external' });
    assert.ok(t, `${bpffs}: no Maglev table for ${VIP}:80`);
    return { m: t.m, addresses: [...t.ids].map((id) => numberToIp4(maps.backends.get(id)!.address)) };
  } finally {
    maps.close();
  }
}

test('the same 5-tuples reach the same backends through either node; both agents built the same table', async () => {
  api.store.create('services', { apiVersion: 'v1', kind: 'Service',
    metadata: { name: 'mg', namespace: 'default', annotations: { 'sluice.io/lb-algorithm': 'maglev' } },
    spec: { type: 'LoadBalancer', ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30090, protocol: 'TCP' }] } });
  api.store.updateStatus('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'mg', namespace: 'default' },
    status: { loadBalancer: { ingress: [{ ip: VIP }] } } });
  api.store.create('endpointslices', {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: 'mg-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 'mg' } },
    addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: [[ADDR.pod1, 'n1'], [ADDR.pod1b, 'n1'], [ADDR.pod2, 'n2']].map(([ip, node]) => ({ addresses: [ip], conditions: { ready: true }, nodeName: node })),
  });
  // Both nodes programmed (tables present) before the flows.
  await waitFor('both tables written', () => agents.every((a) => { try { return tableOf(a.bpffs).addresses.length > 0; } catch { return false; } }), 20000)
    .catch((err: Error) => { throw new Error(`${err.message}; agents: ${agents.map((a) => a.log.split('\n').filter((l) => /"level":[45]0/.test(l)).join(' | ')).join(' || ').slice(0, 3000)}`); });
  await waitFor('the VIP answers through node 1', () => /^p/.test(flows(29000, 1)[0] ?? ''), 20000);

  const t1 = tableOf(agents[0]!.bpffs);
  const t2 = tableOf(agents[1]!.bpffs);
  assert.equal(t1.m, t2.m);
  assert.deepEqual(t1.addresses, t2.addresses, 'the two agents\' tables differ');
  assert.equal(new Set(t1.addresses).size, 3);

  const via1 = flows(21000);
  topo.in('cli', 'route', 'replace', ADDR.vipNet, 'via', ADDR.node2);
  try {
    await waitFor('the VIP answers through node 2', () => /^p/.test(flows(29500, 1)[0] ?? ''), 20000);
    const via2 = flows(21000);
    assert.deepEqual(via2, via1, `per flow: node 1 ${JSON.stringify(via1)}, node 2 ${JSON.stringify(via2)}`);
  } finally {
    topo.in('cli', 'route', 'replace', ADDR.vipNet, 'via', ADDR.node1);
  }
  assert.ok(via1.every((b) => /^p/.test(b)), JSON.stringify(via1));
  assert.ok(new Set(via1).size >= 2, `${FLOWS} flows on one backend only: ${JSON.stringify(via1)}`);
  // Each flow on the backend the table predicts for its 5-tuple.
  via1.forEach((b, i) => {
    const entry = maglevEntry(maglevFlowHash({ saddr: ADDR.client, daddr: VIP, sport: 21000 + i, dport: 80, proto: 'tcp' }), t1.m);
    assert.equal(b, POD_NAMES[t1.addresses[entry]!], `flow from port ${21000 + i}`);
  });
});
