// least-connection through the real agent (issue 15): an IPVS-style agent
// default (`--lb-algorithm lc`), the annotation switching a Service to it
// live with a client connecting in a loop (0 failures), active counts shown
// by `sluice backends`, kept across an agent restart, and all back to 0
// once the connections end, the count of a backend removed meanwhile too.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { startBackends } from '../helpers/backends';
import { AgentProcess } from '../helpers/agentProcess';
import { Holder } from '../helpers/holdClient';
import { readLcCounts } from '../../src/datapath/lcCounts';

const NODE = 'node-a';
const BACKENDS = ['198.18.40.2', '198.18.40.3', '198.18.40.4', '198.18.40.5'];

let sb: Sandbox;
let api: ApiServerHandle;
let agent: AgentProcess;
let tmp: string;
let kubeconfig: string;

async function startAgent(): Promise<AgentProcess> {
  const a = new AgentProcess([
    '--kubeconfig', kubeconfig, '--node-name', NODE, '--cgroup-path', sb.cgroup, '--bpffs', sb.bpffs,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0',
    '--sync-period', '5', '--log-level', 'debug', '--lb-algorithm', 'lc',
  ]);
  await a.waitForLog(/informers synced/);
  return a;
}

function createService(name: string, annotations?: Record<string, string>): string {
  const svc = api.store.create('services', {
    apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default', annotations },
    spec: { ports: [{ name: 'http', port: 80, protocol: 'TCP' }] },
  }) as { spec: { clusterIP: string } };
  return svc.spec.clusterIP;
}

function slice(service: string, ips: string[]) {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: `${service}-1`, namespace: 'default', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true }, nodeName: NODE })),
  };
}

function algorithmOf(frontend: string): string | undefined {
  const list = JSON.parse(sh(sluiceBin, ['services', '-o', 'json', '--bpffs', sb.bpffs])) as Array<{ frontend: string; algorithm: string; backends: unknown[] }>;
  return list.find((s) => s.frontend === frontend && s.backends.length > 0)?.algorithm;
}

/** `sluice backends -o json`: address:port -> {id, active}. */
function backends(): Map<string, { id: number; active?: number }> {
  const rows = JSON.parse(sh(sluiceBin, ['backends', '-o', 'json', '--bpffs', sb.bpffs])) as Array<{ id: number; address: string; port: number; active?: number }>;
  return new Map(rows.map((r) => [`${r.address}:${r.port}`, { id: r.id, active: r.active }]));
}

function actives(): number[] {
  const b = backends();
  return BACKENDS.map((a) => b.get(`${a}:8080`)?.active ?? -1);
}

before(async () => {
  sb = Sandbox.create('sluice-lc-e2e');
  await startBackends(sb, BACKENDS);
  api = await startApiServer({ port: 0 });
  api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: NODE }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } });
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-lc-e2e-'));
  kubeconfig = path.join(tmp, 'kubeconfig');
  await api.writeKubeconfig(kubeconfig);
  agent = await startAgent();
});

after(async () => {
  await agent?.stop();
  await api?.close();
  sb?.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('IPVS-style default lc; the annotation switches to least-connection live; counts survive a restart and return to 0', async () => {
  const plain = createService('plain');
  api.store.create('endpointslices', slice('plain', BACKENDS));
  await waitFor('plain programmed', () => algorithmOf(`${plain}:80/tcp`) !== undefined);
  assert.equal(algorithmOf(`${plain}:80/tcp`), 'least-connection', '--lb-algorithm lc is the default');
  // Gone again: below, a backend removed from `web` must leave the maps.
  api.store.delete('services', 'plain', 'default');
  api.store.delete('endpointslices', 'plain-1', 'default');
  await waitFor('plain deleted', () => algorithmOf(`${plain}:80/tcp`) === undefined);

  const vip = createService('web', { 'sluice.io/lb-algorithm': 'random' });
  const frontend = `${vip}:80/tcp`;
  api.store.create('endpointslices', slice('web', BACKENDS));
  await waitFor('web programmed', () => algorithmOf(frontend) === 'random');

  // A client connects in a loop while the annotation changes to lc.
  const loop = sb.runInCgroup(['node', labScript('lbClient'), 'loop', vip, '80', '4000']);
  await new Promise((r) => setTimeout(r, 500));
  const s = api.store.get('services', 'web', 'default') as { metadata: { annotations?: Record<string, string> } };
  s.metadata.annotations = { 'sluice.io/lb-algorithm': 'least-connection' };
  api.store.update('services', s);
  await waitFor('least-connection programmed', () => algorithmOf(frontend) === 'least-connection');
  const { ok, errors } = JSON.parse(await loop) as { ok: number; errors: Record<string, number> };
  assert.deepEqual(errors, {}, `connections failed while the algorithm changed: ${JSON.stringify(errors)}`);
  assert.ok(ok > 20, `only ${ok} connections in 4 s`);
  // The loop's connections are closed: nothing is held.
  await waitFor('loop sockets released', () => actives().every((n) => n === 0));

  const holder = new Holder(sb, vip, BACKENDS);
  try {
    await holder.open(80, 8);
    assert.deepEqual(actives(), [2, 2, 2, 2], 'eight held connections, two per backend');
    assert.match(sh(sluiceBin, ['backends', '--bpffs', sb.bpffs]), /ID\s+BACKEND\s+FLAGS\s+ACTIVE/);

    assert.equal(await agent.stop(), 0);
    agent = await startAgent();
    assert.deepEqual(actives(), [2, 2, 2, 2], 'the restarted agent adopted the counts');
    await holder.open(80, 4);
    assert.deepEqual(actives(), [3, 3, 3, 3], 'and least-connection goes on from them');

    // A backend leaves while it holds three connections: its count stays
    // with its id until they end (zeroing it would go negative later).
    const removedId = backends().get(`${BACKENDS[3]}:8080`)!.id;
    api.store.update('endpointslices', slice('web', BACKENDS.slice(0, 3)));
    await waitFor('backend removed', () => !backends().has(`${BACKENDS[3]}:8080`));
    await holder.closeAll();
    const ids = [...backends().values()].map((b) => b.id).concat(removedId);
    await waitFor('every count 0', () => [...readLcCounts(sb.bpffs, ids)!.values()].every((n) => n === 0));
  } finally {
    holder.kill();
  }
});
