// A multi-homed node through the real agent: clients arrive on node1's public
// device (eth0, the only one named in --devices); node1 reaches node2's pods
// over a private device (eth1), and node2 routes node1's public subnet over
// that private link too. externalTrafficPolicy Cluster traffic to a backend
// on node2 must be SNATed to node1's private address (what MASQUERADE picks
// for the egress device) and its reply, which enters node1 on eth1, restored
// there: the agent attaches the TC programs to the node-to-node device.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { MultiHomeTopology, MH, ECHO_SERVER, BULK_TCP_CLIENT, BIG_UDP_CLIENT } from './multihome_topology';
import { NodeAgent } from '../helpers/nodeAgent';
import { sluiceBin, waitFor } from '../helpers/sandbox';

let topo: MultiHomeTopology;
let agent: NodeAgent;

before(async () => {
  topo = new MultiHomeTopology('slmh');
  topo.create();
  await topo.start('p1', ECHO_SERVER, ['p1', '8080']);
  await topo.start('p2', ECHO_SERVER, ['p2', '8080']);
  agent = await NodeAgent.start(topo.netnsPath('n1'), 'n1', ['--devices', 'eth0']);
  agent.api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: MH.node1Public }] } });
});

after(async () => {
  await agent?.stop();
  topo?.destroy();
});

function slice(service: string, protocol: 'TCP' | 'UDP', endpoints: Array<[string, string]>) {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: `${service}-1`, namespace: 'default', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: [{ name: 'p', port: 8080, protocol }],
    endpoints: endpoints.map(([ip, node]) => ({ addresses: [ip], conditions: { ready: true }, nodeName: node })),
  };
}

function diagnostics(): string {
  const run = (args: string[]) => { try { return execFileSync(sluiceBin, args, { encoding: 'utf8' }); } catch (e) { return String(e); } };
  return `ct: ${run(['ct', 'list', '--bpffs', agent.bpffs])}; agent: ${agent.log.split('\n').filter((l) => /device|error|warn|"level":[45]0/.test(l)).join(' | ').slice(0, 3000)}`;
}

test('NodePort (eTP Cluster) to a backend behind the private device: SNAT to the private address, reply restored on eth1', async () => {
  agent.api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' },
    spec: { type: 'NodePort', ports: [{ name: 'p', port: 80, targetPort: 8080, nodePort: 30080, protocol: 'TCP' }] } });
  agent.api.store.create('endpointslices', slice('web', 'TCP', [[MH.pod2, 'n2']]));
  let last = '';
  await waitFor('the remote backend answers through the NodePort', () => {
    last = topo.node('cli', BULK_TCP_CLIENT, [MH.node1Public, '30080', '2000', '2000']);
    return last.startsWith('ok');
  }, 20000).catch((err: Error) => { throw new Error(`${err.message}: last answer ${last}; ${diagnostics()}`); });
  assert.equal(last, `ok p2 ${MH.node1Private} 2000`, 'the backend sees the address of the device the flow left by');
  await waitFor('the agent reports the node-to-node device', () => /TC attached to a node-to-node device/.test(agent.log), 5000)
    .catch((err: Error) => { throw new Error(`${err.message}: ${agent.log.slice(-3000)}`); });
});

test('UDP and an ExternalIP work the same way; a local backend keeps the public address', async () => {
  agent.api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'dns', namespace: 'default' },
    spec: { type: 'ClusterIP', externalIPs: ['198.18.100.7'], ports: [{ name: 'p', port: 53, targetPort: 8080, protocol: 'UDP' }] } });
  agent.api.store.create('endpointslices', slice('dns', 'UDP', [[MH.pod2, 'n2']]));
  await waitFor('UDP through the ExternalIP', () => topo.node('cli', BIG_UDP_CLIENT, ['198.18.100.7', '53', '200']) === 'ok 200', 20000)
    .catch((err: Error) => { throw new Error(`${err.message}; ${diagnostics()}`); });

  agent.api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'local', namespace: 'default' },
    spec: { type: 'NodePort', ports: [{ name: 'p', port: 80, targetPort: 8080, nodePort: 30081, protocol: 'TCP' }] } });
  agent.api.store.create('endpointslices', slice('local', 'TCP', [[MH.pod1, 'n1']]));
  let last = '';
  await waitFor('the local backend answers', () => (last = topo.node('cli', BULK_TCP_CLIENT, [MH.node1Public, '30081', '100', '2000'])).startsWith('ok'), 20000);
  assert.equal(last, `ok p1 ${MH.node1Public} 100`);
});
