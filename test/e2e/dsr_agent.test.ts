// DSR driven by the agents (issue 17 item 2, docs/dsr.md): the real `sluice
// agent` in node1's namespace with --nodeport-mode dsr and in node2's with the
// default (snat), each with its own API server fake holding the same Service.
// A NodePort flow entering node1 for the backend on node2 goes by DSR: the
// pod sees the client's address, node2's agent (NodePort wildcard, the pod
// local there) opens the IPIP packet, and `sluice status` names the mode.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { Topology, ADDR, SERVER_SCRIPT, CLIENT_SCRIPT } from './tc_topology';
import { sluiceBin, waitFor } from '../helpers/sandbox';
import { NodeAgent } from '../helpers/nodeAgent';

let topo: Topology;
let n1: NodeAgent;
let n2: NodeAgent;

const request = () => topo.node('cli', CLIENT_SCRIPT, ['tcp', ADDR.node1, '30080']);

function program(agent: NodeAgent): void {
  for (const [name, address] of [['n1', ADDR.node1], ['n2', ADDR.node2]]) {
    agent.api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name }, status: { addresses: [{ type: 'InternalIP', address }] } });
  }
  agent.api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' },
    spec: { type: 'NodePort', ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30080, protocol: 'TCP' }] } });
  agent.api.store.create('endpointslices', {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: 'web-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: [{ addresses: [ADDR.pod2], conditions: { ready: true }, nodeName: 'n2' }],
  });
}

function counter(agent: NodeAgent, name: string): bigint {
  const status = JSON.parse(execFileSync(sluiceBin, ['status', '--bpffs', agent.bpffs, '--output', 'json'], { encoding: 'utf8' })) as { counters: Record<string, string> };
  return BigInt(status.counters[name] ?? '0');
}

before(async () => {
  topo = new Topology('sldag');
  topo.create();
  await topo.start('p2', SERVER_SCRIPT, ['p2', '8080']);
  n1 = await NodeAgent.start(topo.netnsPath('n1'), 'n1', ['--devices', 'eth0', '--nodeport-mode', 'dsr', '--stale-socket-netns=']);
  n2 = await NodeAgent.start(topo.netnsPath('n2'), 'n2', ['--devices', 'eth0', '--stale-socket-netns=']);
  program(n1);
  program(n2);
});

after(async () => {
  await n1?.stop();
  await n2?.stop();
  topo?.destroy();
});

test('agent --nodeport-mode dsr on node1: the pod on node2 sees the client; status shows the mode on each node', async () => {
  assert.match(n1.log, /NodePort mode dsr/);
  await waitFor('the NodePort answers', () => request().startsWith('p2 '), 20000);
  const before = counter(n2, 'north_south/dsr_decapsulated/original');
  for (let i = 0; i < 3; i++) assert.equal(request().split(':')[0], `p2 ${ADDR.client}`);
  assert.ok(counter(n2, 'north_south/dsr_decapsulated/original') - before >= 3n, 'node2 opened the IPIP packets');
  assert.ok(counter(n1, 'north_south/dsr_encapsulated/original') >= 3n, 'node1 encapsulated');
  assert.match(execFileSync(sluiceBin, ['status', '--bpffs', n1.bpffs], { encoding: 'utf8' }), /^nodeport mode: dsr \(Direct Server Return \(IPIP, ip6ip6 for IPv6\) for TCP and UDP\)$/m);
  assert.match(execFileSync(sluiceBin, ['status', '--bpffs', n2.bpffs], { encoding: 'utf8' }), /^nodeport mode: snat /m);
});
