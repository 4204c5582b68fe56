// The agent keeps the pod path's frontend-address bitmap (sluice_podpf4,
// src/datapath/pod/frontendSet.ts; docs/pod-veth.md) with the Services of a
// real list/watch: the marker after the first full sync, a new Service's
// ClusterIP's bit set once it is programmed, a deleted one's cleared after.
// The packets themselves are judged against this bitmap in test/bpf/pod_lb.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { BpfMap } from '../../src/bpf';
import { ip4ToNumber } from '../../src/datapath/addr';
import { readWords } from '../../src/datapath/bitmap';
import { podSlot } from '../../src/datapath/pod/frontendSet';
import type { ApiServerHandle } from '../../src/k8s/apiserver';
import { type Sandbox, sh, sluiceBin, waitFor } from '../helpers/sandbox';
import { startAgentLab, type AgentLab } from '../helpers/agentLab';
import { AgentProcess } from '../helpers/agentProcess';

const NODE = 'node-a';
const BACKEND = '198.18.16.2';

let lab: AgentLab;
let sb: Sandbox;
let api: ApiServerHandle;

function service(name: string, clusterIP: string): void {
  api.store.create('services', {
    apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' },
    spec: { clusterIP, ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] },
  });
  api.store.create('endpointslices', {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: `${name}-1`, namespace: 'default', labels: { 'kubernetes.io/service-name': name } },
    addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: [{ addresses: [BACKEND], conditions: { ready: true }, nodeName: NODE }],
  });
}

before(async () => {
  lab = await startAgentLab('sluice-podfe', [BACKEND], NODE);
  ({ sb, api } = lab);
  service('web', '10.96.16.1');
});

after(async () => {
  await lab?.close();
});

test('the agent maintains sluice_podpf4: marker after the first full sync, address bits follow the Services', async () => {
  const bpffs = `${sb.bpffs}-podfe`;
  const agent = new AgentProcess([
    '--kubeconfig', lab.kubeconfig, '--node-name', NODE, '--cgroup-path', sb.cgroup, '--bpffs', bpffs,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', '--pod-veth-programs', 'true',
  ]);
  let set: BpfMap | undefined;
  try {
    await agent.waitForLog(/informers synced/);
    set = BpfMap.fromPinned(path.join(bpffs, abi.SLUICE_MAP_POD_PF4));
    const word = (w: number) => readWords(set!, abi.SLUICE_POD_PF_ELEMS)[w]!;
    const has = (a: string) => {
      const slot = podSlot(ip4ToNumber(a));
      return ((word(slot >>> 6) >> BigInt(slot & 63)) & 1n) === 1n;
    };
    const marked = () => word(abi.SLUICE_POD_PF_MARKER) !== 0n;
    assert.notEqual(podSlot(ip4ToNumber('10.96.16.1')), podSlot(ip4ToNumber('10.96.16.2')), 'the two ClusterIPs have bits of their own');
    await waitFor('marker', marked, 10000);
    assert.ok(has('10.96.16.1'), 'the ClusterIP programmed before the marker is in the set');

    service('api', '10.96.16.2');
    await waitFor('second Service programmed', () => sh(sluiceBin, ['services', '--bpffs', bpffs]).includes('10.96.16.2'), 10000);
    assert.ok(has('10.96.16.2'), 'in the set once its frontend is programmed');

    api.store.delete('services', 'api', 'default');
    await waitFor('second Service removed', () => !sh(sluiceBin, ['services', '--bpffs', bpffs]).includes('10.96.16.2'), 10000);
    await waitFor('its address out of the set', () => !has('10.96.16.2'), 5000);
    assert.ok(has('10.96.16.1') && marked());
    assert.deepEqual(agent.lines.filter((l) => l.level >= 50).map((l) => l.msg), [], 'no error');
  } finally {
    set?.close();
    await agent.stop();
    fs.rmSync(bpffs, { recursive: true, force: true });
  }
});
