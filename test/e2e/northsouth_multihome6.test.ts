// The IPv6 twin of northsouth_multihome.test.ts (issue 14 item 3 with issue
// 10 item 9): a multi-homed node through the real agent, clients on node1's
// public device (eth0, the only one named in --devices), node2's pods behind
// the private device (eth1), node2 routing node1's public prefix over the
// private link. externalTrafficPolicy Cluster IPv6 traffic to a backend on
// node2 must be SNATed to node1's private IPv6 address (what MASQUERADE picks
// for the egress device), and its reply, which enters node1 on eth1, restored
// there: the agent resolves the remote IPv6 backend's device through the
// IPv6 routes and attaches the TC programs to it. Only IPv6 Services here,
// so no IPv4 backend attaches eth1 first.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { MultiHomeTopology, MH, MH6, ECHO_SERVER, BULK_TCP_CLIENT, BIG_UDP_CLIENT } from './multihome_topology';
import { NodeAgent } from '../helpers/nodeAgent';
import { sluiceBin, waitFor } from '../helpers/sandbox';

let topo: MultiHomeTopology;
let agent: NodeAgent;

before(async () => {
  topo = new MultiHomeTopology('slmh6');
  topo.create();
  await topo.start('p1', ECHO_SERVER, ['p1', '8080']);
  await topo.start('p2', ECHO_SERVER, ['p2', '8080']);
  agent = await NodeAgent.start(topo.netnsPath('n1'), 'n1', ['--devices', 'eth0'], { serviceCIDR: '10.96.0.0/16,fd00:10:96::/112' });
  agent.api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' },
    status: { addresses: [{ type: 'InternalIP', address: MH.node1Public }, { type: 'InternalIP', address: MH6.node1Public }] } });
});

after(async () => {
  await agent?.stop();
  topo?.destroy();
});

function service(name: string, spec: Record<string, unknown>) {
  return { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' },
    spec: { ipFamilies: ['IPv6'], ipFamilyPolicy: 'SingleStack', ...spec } };
}

function slice(service: string, protocol: 'TCP' | 'UDP', endpoints: Array<[string, string]>) {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: `${service}-1`, namespace: 'default', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv6',
    ports: [{ name: 'p', port: 8080, protocol }],
    endpoints: endpoints.map(([ip, node]) => ({ addresses: [ip], conditions: { ready: true }, nodeName: node })),
  };
}

function diagnostics(): string {
  const run = (args: string[]) => { try { return execFileSync(sluiceBin, args, { encoding: 'utf8' }); } catch (e) { return String(e); } };
  return `ct: ${run(['ct', 'list', '--bpffs', agent.bpffs])}; agent: ${agent.log.split('\n').filter((l) => /device|error|warn|"level":[45]0/.test(l)).join(' | ').slice(0, 3000)}`;
}

test('IPv6 NodePort (eTP Cluster) to a backend behind the private device: SNAT to the private IPv6 address, reply restored on eth1', async () => {
  agent.api.store.create('services', service('web', { type: 'NodePort', ports: [{ name: 'p', port: 80, targetPort: 8080, nodePort: 30080, protocol: 'TCP' }] }));
  agent.api.store.create('endpointslices', slice('web', 'TCP', [[MH6.pod2, 'n2']]));
  let last = '';
  await waitFor('the remote backend answers through the IPv6 NodePort', () => {
    last = topo.node('cli', BULK_TCP_CLIENT, [MH6.node1Public, '30080', '2000', '2000']);
    return last.startsWith('ok');
  }, 20000).catch((err: Error) => { throw new Error(`${err.message}: last answer ${last}; ${diagnostics()}`); });
  assert.equal(last, `ok p2 ${MH6.node1Private} 2000`, 'the backend sees the IPv6 address of the device the flow left by');
  await waitFor('the agent reports the node-to-node device with its IPv6 SNAT address',
    () => agent.log.split('\n').some((l) => l.includes('TC attached to a node-to-node device') && l.includes(MH6.node1Private)), 5000)
    .catch((err: Error) => { throw new Error(`${err.message}: ${agent.log.slice(-3000)}`); });
});

test('IPv6 UDP through an ExternalIP works the same way; a local IPv6 backend keeps the public address', async () => {
  agent.api.store.create('services', service('dns', { type: 'ClusterIP', externalIPs: ['fd00:100::7'], ports: [{ name: 'p', port: 53, targetPort: 8080, protocol: 'UDP' }] }));
  agent.api.store.create('endpointslices', slice('dns', 'UDP', [[MH6.pod2, 'n2']]));
  let last = '';
  await waitFor('UDP through the IPv6 ExternalIP', () => (last = topo.node('cli', BIG_UDP_CLIENT, ['fd00:100::7', '53', '200'])) === 'ok 200', 20000)
    .catch((err: Error) => { throw new Error(`${err.message}: last answer ${last}; ${diagnostics()}`); });
  // The echo does not name its peer: the UDP flow's SNAT source comes from sluice_ct6.
  const flows = JSON.parse(execFileSync(sluiceBin, ['ct', 'list', '-o', 'json', '--bpffs', agent.bpffs], { encoding: 'utf8' })) as
    Array<{ family: number; proto: string; frontend: string; snat?: string }>;
  const udp = flows.filter((f) => f.family === 6 && f.proto === 'udp' && f.frontend === '[fd00:100::7]:53');
  assert.ok(udp.length > 0 && udp.every((f) => f.snat?.startsWith(`[${MH6.node1Private}]:`)), `UDP flows SNATed to the private IPv6 address: ${JSON.stringify(udp)}`);

  agent.api.store.create('services', service('local', { type: 'NodePort', ports: [{ name: 'p', port: 80, targetPort: 8080, nodePort: 30081, protocol: 'TCP' }] }));
  agent.api.store.create('endpointslices', slice('local', 'TCP', [[MH6.pod1, 'n1']]));
  await waitFor('the local backend answers', () => (last = topo.node('cli', BULK_TCP_CLIENT, [MH6.node1Public, '30081', '100', '2000'])).startsWith('ok'), 20000)
    .catch((err: Error) => { throw new Error(`${err.message}: last answer ${last}; ${diagnostics()}`); });
  assert.equal(last, `ok p1 ${MH6.node1Public} 100`);
});
