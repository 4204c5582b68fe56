// Traffic through real objects: the Sluice agent is the only service proxy of
// a real cluster (no kube-proxy anywhere). Client pods — processes in their
// node's cgroup, where the socket LB is attached — reach a Service by its
// ClusterIP and by its NodePort; a client outside the cluster (on the node
// fabric) reaches the NodePort through the TC path on the node's eth0.
// Backends come and go as real Pod objects: the real EndpointSlice
// controller writes the slices, the agent follows, and so does the traffic.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { V1Service } from '@kubernetes/client-node';
import { startCluster, type Cluster } from './harness';
import { httpGetFrom, setPodStatus, waitForHttp, type ClusterPod, type Place } from './pods';
import type { ClusterNode } from './nodes';
import { sluiceBuildMissing, sluiceServices, startSluiceAgent } from './sluiceAgent';
import { waitFor } from './proc';

const NS = 'traffic';
/** Requests per check: enough to see every backend of 3 with random choice (miss chance 3·(2/3)^40 < 1e-6). */
const TRIES = 40;

let cluster: Cluster | undefined;
let skipReason: string | undefined;
let client: ClusterPod | undefined;
let outside: Place | undefined;
let service: V1Service | undefined;
const backends = new Map<string, ClusterPod>();

function need(t: { skip: (msg: string) => void }): Cluster | undefined {
  if (!cluster) t.skip(skipReason ?? 'cluster did not start');
  return cluster;
}

const vip = (): string => service?.spec?.clusterIP ?? '';
const nodePort = (): number => service?.spec?.ports?.[0]?.nodePort ?? 0;

/** Names of the backends that answered `url` from `from`, over `tries` requests (stops early once `want` are all seen). */
async function answered(from: Place, url: string, want: string[] = [], tries = TRIES): Promise<string[]> {
  const seen = new Set<string>();
  for (let i = 0; i < tries; i++) {
    seen.add(await httpGetFrom(from, url));
    if (want.length > 0 && want.every((w) => seen.has(w)) && i >= 2 * want.length) break;
  }
  return [...seen].sort();
}

async function addBackend(c: Cluster, name: string, node: ClusterNode): Promise<ClusterPod> {
  const pod = await c.addPod({ name, namespace: NS, node, labels: { app: 'web' }, ports: [{ name: 'http', containerPort: 8080 }] });
  c.serveHttp(pod, 8080);
  await waitForHttp(pod, `http://${pod.ip}:8080/`);
  backends.set(name, pod);
  return pod;
}

/** Wait until node's Sluice maps list exactly these backends for the Service's ClusterIP. */
async function sluiceHas(node: ClusterNode, pods: ClusterPod[]): Promise<void> {
  const want = pods.map((p) => `${p.ip}:8080`).sort();
  let got: string[] = [];
  await waitFor(`Sluice on ${node.name} to program ${vip()}:80 -> ${want.join(' ')}`, 20_000, async () => {
    const fe = (await sluiceServices(node)).find((v) => v.frontend === `${vip()}:80/tcp`);
    got = (fe?.backends ?? []).map((b) => `${b.address}:${b.port}`).sort();
    return JSON.stringify(got) === JSON.stringify(want) ? true : undefined;
  }, 200).catch((err: Error) => assert.fail(`${err.message} (has: ${got.join(' ') || 'none'})`));
}

describe('traffic through real objects, Sluice as the only service proxy', { timeout: 10 * 60_000 }, () => {
  before(async () => {
    const missing = sluiceBuildMissing();
    if (missing) { skipReason = missing; return; }
    const started = await startCluster({ nodes: 2 });
    if (!started.ok) { skipReason = started.skip; return; }
    const c = cluster = started.cluster;
    try {
      // TC on each node's eth0 (a veth on the test fabric) for traffic from outside the node.
      for (const n of c.nodes) await startSluiceAgent(c, n, { devices: ['eth0'] });
      outside = await c.addFabricClient('outside');
      await c.core.createNamespace({ body: { metadata: { name: NS } } });
      service = await c.core.createNamespacedService({
        namespace: NS,
        body: { metadata: { name: 'web' }, spec: { type: 'NodePort', selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 'http' as never, protocol: 'TCP' }] } },
      });
      await c.core.createNamespacedService({
        namespace: NS, body: { metadata: { name: 'empty' }, spec: { selector: { app: 'nothing' }, ports: [{ port: 80, targetPort: 8080 as never, protocol: 'TCP' }] } },
      });
      const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
      await addBackend(c, 'web-a', n1);
      await addBackend(c, 'web-b', n2);
      client = await c.addPod({ name: 'client', namespace: NS, node: n1, labels: { app: 'client' } });
      await c.waitForReadyEndpoints(NS, 'web', 2);
    } catch (err) {
      await c.close().catch(() => undefined);
      cluster = undefined;
      throw err;
    }
  });

  after(async () => {
    if (cluster) await cluster.close();
  });

  test('a client pod reaches the ClusterIP, and both backends (one per node) answer', async (t) => {
    const c = need(t); if (!c || !client) return;
    await sluiceHas(c.nodes[0]!, [backends.get('web-a')!, backends.get('web-b')!]);
    assert.deepEqual(await answered(client, `http://${vip()}/`, ['web-a', 'web-b']), ['web-a', 'web-b']);
  });

  test('the socket LB does the work: the same pod outside its node cgroup cannot reach the ClusterIP', async (t) => {
    const c = need(t); if (!c || !client) return;
    // Same netns, no cgroup: the hooks do not run, and no node has a route for the service range.
    await assert.rejects(httpGetFrom({ netns: client.netns }, `http://${vip()}/`, 1500));
  });

  test('a client pod reaches the Service by its NodePort on its own node', async (t) => {
    const c = need(t); if (!c || !client) return;
    const n1 = c.nodes[0]!;
    assert.deepEqual(await answered(client, `http://${n1.ip}:${nodePort()}/`, ['web-a', 'web-b']), ['web-a', 'web-b']);
  });

  test('a client outside the cluster reaches the NodePort of each node (TC path), both backends', async (t) => {
    const c = need(t); if (!c || !outside) return;
    for (const n of c.nodes) {
      assert.deepEqual(await answered(outside, `http://${n.ip}:${nodePort()}/`, ['web-a', 'web-b']), ['web-a', 'web-b'], `NodePort on ${n.name}`);
    }
  });

  test('a Service without endpoints refuses at once', async (t) => {
    const c = need(t); if (!c || !client) return;
    const empty = await c.core.readNamespacedService({ name: 'empty', namespace: NS });
    const started = Date.now();
    await assert.rejects(httpGetFrom(client, `http://${empty.spec?.clusterIP}/`, 3000), /ECONNREFUSED/);
    assert.ok(Date.now() - started < 2500, 'refused, not timed out');
  });

  test('a new Pod becomes a backend: the controller writes the slice, Sluice programs it, traffic reaches it', async (t) => {
    const c = need(t); if (!c || !client || !outside) return;
    const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
    await addBackend(c, 'web-c', n2);
    await c.waitForReadyEndpoints(NS, 'web', 3);
    const all = ['web-a', 'web-b', 'web-c'];
    await sluiceHas(n1, all.map((n) => backends.get(n)!));
    assert.deepEqual(await answered(client, `http://${vip()}/`, all), all, 'ClusterIP');
    assert.deepEqual(await answered(client, `http://${n1.ip}:${nodePort()}/`, all), all, 'NodePort from a pod');
    assert.deepEqual(await answered(outside, `http://${n2.ip}:${nodePort()}/`, all), all, 'NodePort from outside');
  });

  test('a Pod that turns not-ready stops getting traffic, and gets it again when ready', async (t) => {
    const c = need(t); if (!c || !client) return;
    const n1 = c.nodes[0]!;
    const b = backends.get('web-b')!;
    await setPodStatus(c.core, b, false);
    await sluiceHas(n1, [backends.get('web-a')!, backends.get('web-c')!]);
    assert.deepEqual(await answered(client, `http://${vip()}/`), ['web-a', 'web-c']);
    await setPodStatus(c.core, b, true);
    await sluiceHas(n1, ['web-a', 'web-b', 'web-c'].map((n) => backends.get(n)!));
    assert.deepEqual(await answered(client, `http://${vip()}/`, ['web-a', 'web-b', 'web-c']), ['web-a', 'web-b', 'web-c']);
  });

  test('a deleted Pod leaves the backend set and gets no more traffic (its server still runs)', async (t) => {
    const c = need(t); if (!c || !client || !outside) return;
    const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
    await c.core.deleteNamespacedPod({ name: 'web-a', namespace: NS, gracePeriodSeconds: 0 });
    await c.waitForReadyEndpoints(NS, 'web', 2);
    await sluiceHas(n1, [backends.get('web-b')!, backends.get('web-c')!]);
    await sluiceHas(n2, [backends.get('web-b')!, backends.get('web-c')!]);
    // web-a's process still answers on its own address: only the proxy decides it is no longer a backend.
    assert.equal(await httpGetFrom(client, `http://${backends.get('web-a')!.ip}:8080/`), 'web-a');
    assert.deepEqual(await answered(client, `http://${vip()}/`), ['web-b', 'web-c'], 'ClusterIP');
    assert.deepEqual(await answered(client, `http://${n1.ip}:${nodePort()}/`), ['web-b', 'web-c'], 'NodePort from a pod');
    assert.deepEqual(await answered(outside, `http://${n1.ip}:${nodePort()}/`, [], 20), ['web-b', 'web-c'], 'NodePort from outside');
  });
});
