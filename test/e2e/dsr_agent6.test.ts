// IPv6 DSR driven by the agents (issue 17 item 2, docs/dsr.md; the IPv6 twin
// of dsr_agent.test.ts): the real `sluice agent` in node1's namespace with
// --nodeport-mode dsr and in node2's with the default (snat), each with its
// own API server fake holding the same IPv6 Service. A NodePort flow entering
// node1 for the backend on node2 goes by ip6ip6: node2's agent has the
// NodePort on its own IPv6 address only (no IPv6 wildcard) and its addresses
// in sluice_nodeip6, which is how node2 finds the frontend of node1's
// NodePort; the pod sees the client's address and the client node1's.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { CLIENT_SCRIPT } from './tc_topology';
import { PEER_SERVER6, Topology6, V6 } from './tc_topology6';
import { sluiceBin, waitFor } from '../helpers/sandbox';
import { NodeAgent } from '../helpers/nodeAgent';

let topo: Topology6;
let n1: NodeAgent;
let n2: NodeAgent;

const request = (proto: 'tcp' | 'udp') => topo.node('cli', CLIENT_SCRIPT, [proto, V6.node1Public, '30080']);
const SERVICE_CIDR = { serviceCIDR: '10.96.0.0/16,fd00:10:96::/112' };

function program(agent: NodeAgent): void {
  for (const [name, address] of [['n1', V6.node1Public], ['n2', V6.node2Private]]) {
    agent.api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name }, status: { addresses: [{ type: 'InternalIP', address }] } });
  }
  agent.api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' },
    spec: { type: 'NodePort', ipFamilies: ['IPv6'], ipFamilyPolicy: 'SingleStack', ports: [
      { name: 'http', port: 80, targetPort: 8080, nodePort: 30080, protocol: 'TCP' },
      { name: 'dns', port: 53, targetPort: 8080, nodePort: 30080, protocol: 'UDP' }] } });
  agent.api.store.create('endpointslices', {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: 'web-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv6', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }, { name: 'dns', port: 8080, protocol: 'UDP' }],
    endpoints: [{ addresses: [V6.pod2], conditions: { ready: true }, nodeName: 'n2' }],
  });
}

function counter(agent: NodeAgent, name: string): bigint {
  const status = JSON.parse(execFileSync(sluiceBin, ['status', '--bpffs', agent.bpffs, '--output', 'json'], { encoding: 'utf8' })) as { counters: Record<string, string> };
  return BigInt(status.counters[name] ?? '0');
}

before(async () => {
  topo = new Topology6('sldag6');
  topo.create();
  topo.addClientLink();
  await topo.start('p2', PEER_SERVER6, ['p2', '8080']);
  n1 = await NodeAgent.start(topo.netnsPath('n1'), 'n1', ['--devices', 'eth0', '--nodeport-mode', 'dsr', '--stale-socket-netns='], SERVICE_CIDR);
  n2 = await NodeAgent.start(topo.netnsPath('n2'), 'n2', ['--devices', 'eth1,eth2', '--stale-socket-netns='], SERVICE_CIDR);
  program(n1);
  program(n2);
});

after(async () => {
  await n1?.stop();
  await n2?.stop();
  topo?.destroy();
});

test('agent --nodeport-mode dsr on node1, IPv6 NodePort: node2 opens the ip6ip6 packets; the pod sees the client', async () => {
  assert.match(n1.log, /NodePort mode dsr/);
  let last = '';
  await waitFor('the IPv6 NodePort answers', () => (last = request('tcp')).startsWith('p2 '), 20000)
    .catch((err: Error) => { throw new Error(`${err.message}: last answer ${last}; n2: ${n2.log.slice(-2000)}`); });
  const before = counter(n2, 'north_south/dsr_decapsulated/original');
  for (let i = 0; i < 3; i++) {
    assert.equal(request('tcp'), `p2 ${V6.client}`);
    assert.equal(request('udp'), `p2 ${V6.client}`);
  }
  assert.ok(counter(n2, 'north_south/dsr_decapsulated/original') - before >= 6n, 'node2 opened the ip6ip6 packets');
  assert.ok(counter(n1, 'north_south/dsr_encapsulated/original') >= 6n, 'node1 encapsulated');
  assert.equal(counter(n1, 'north_south/reverse_translated/reply'), 0n, 'node1 translated no reply');
});
