// XDP driven by the agent (issue 17): the real `sluice agent --devices eth0
// --xdp-mode auto` inside node1's namespace (test/helpers/nodeAgent.ts): auto
// takes generic XDP on the veth, the agent keeps the frontend-address set in
// step with the Services, `sluice status` shows the device, its mode and its
// counters, and a NodePort flow to a backend on node2 leaves by XDP_TX.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { Topology, ADDR, SERVER_SCRIPT, CLIENT_SCRIPT } from './tc_topology';
import { sluiceBin, waitFor } from '../helpers/sandbox';
import { NodeAgent } from '../helpers/nodeAgent';

let topo: Topology;
let agent: NodeAgent;

const request = (host: string, port: number) => topo.node('cli', CLIENT_SCRIPT, ['tcp', host, String(port)]);

interface StatusXdp { device: string; mode: string; tx: string; packets: string; programId?: number }

function xdpStatus(): StatusXdp[] {
  return (JSON.parse(execFileSync(sluiceBin, ['status', '--bpffs', agent.bpffs, '--output', 'json'], { encoding: 'utf8' })) as { xdp: StatusXdp[] }).xdp;
}

before(async () => {
  topo = new Topology('slxag');
  topo.create();
  await topo.start('p2', SERVER_SCRIPT, ['p2', '8080']);
  agent = await NodeAgent.start(topo.netnsPath('n1'), 'n1', ['--devices', 'eth0', '--xdp-mode', 'auto', '--stale-socket-netns=']);
  agent.api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: ADDR.node1 }] } });
  assert.ok(agent.log.includes('XDP attached in front of TC'), agent.log);
});

after(async () => {
  await agent?.stop();
  topo?.destroy();
});

test('NodePort to a backend on node2: served through XDP (generic on the veth), status shows device, mode and counters', async () => {
  agent.api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' },
    spec: { type: 'NodePort', ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30080, protocol: 'TCP' }] } });
  agent.api.store.create('endpointslices', {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: 'web-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: [{ addresses: [ADDR.pod2], conditions: { ready: true }, nodeName: 'n2' }],
  });
  await waitFor('the NodePort answers', () => request(ADDR.node1, 30080).startsWith('p2 '), 20000);
  const before = xdpStatus().find((x) => x.device === 'eth0');
  assert.equal(before?.mode, 'generic', JSON.stringify(xdpStatus()));
  for (let i = 0; i < 3; i++) assert.equal(request(ADDR.node1, 30080).split(':')[0], `p2 ${ADDR.node1}`);
  const after = xdpStatus().find((x) => x.device === 'eth0')!;
  assert.ok(BigInt(after.tx) - BigInt(before!.tx) >= 3n, `XDP_TX ${before!.tx} -> ${after.tx}`);
  const text = execFileSync(sluiceBin, ['status', '--bpffs', agent.bpffs], { encoding: 'utf8' });
  assert.match(text, /XDP DEVICE\s+MODE\s+IFINDEX\s+LINK\s+PROGRAM\s+PACKETS\s+PASSED\s+TX/);
  assert.match(text, /\neth0\s+generic\s+\d+\s+\d+\s+\d+\s+\d+/);
});
