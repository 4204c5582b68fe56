// The real-cluster tier: upstream etcd + kube-apiserver + kube-controller-manager,
// node and pod namespaces wired by the real CNI plugins, and upstream kube-proxy
// (iptables, then nftables mode) in a node namespace as the oracle. Skips (with
// the reason) only where Go or the Go module proxy is missing.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cgroup2Mount } from './cgroup';
import { join } from 'node:path';
import type { V1Service } from '@kubernetes/client-node';
import { startCluster, type Cluster } from './harness';
import { kubeProxyBackendSets, type BackendSets } from './kubeProxyOracle';
import { compareBackendSets, formatConformanceTable } from './conformance';
import { httpGetFrom, waitForHttp, type ClusterPod, type Place } from './pods';
import { isAlive, waitFor, type ManagedProcess } from './proc';
import { listNetns } from './netns';
import { dumpRules, type KubeProxyMode } from './kubeProxy';

const NS = 'oracle';
const EXTERNAL_IP = '198.18.100.10';
const LB_IP = '198.18.200.1';

let cluster: Cluster | undefined;
let skipReason: string | undefined;
let web: ClusterPod[] = [];
let client: Place = { netns: '' };
let iptablesSets: BackendSets | undefined;
let drain: ClusterPod | undefined;

function need(t: { skip: (msg: string) => void }): Cluster | undefined {
  if (!cluster) t.skip(skipReason ?? 'cluster did not start');
  return cluster;
}

async function createService(c: Cluster, body: V1Service): Promise<V1Service> {
  return c.core.createNamespacedService({ namespace: NS, body });
}

describe('cluster tier', { timeout: 30 * 60_000 }, () => {
  before(async () => {
    const started = await startCluster({ nodes: 2 });
    if (!started.ok) { skipReason = started.skip; return; }
    cluster = started.cluster;
    client = await cluster.addFabricClient('client');
  });

  after(async () => {
    if (cluster) await cluster.close();
  });

  test('the control plane serves the API and every node is registered', async (t) => {
    const c = need(t); if (!c) return;
    const nodes = await c.core.listNode();
    assert.deepEqual(nodes.items.map((n) => n.metadata?.name).sort(), c.nodes.map((n) => n.name).sort());
    for (const n of nodes.items) {
      const internal = n.status?.addresses?.find((a) => a.type === 'InternalIP')?.address;
      assert.equal(internal, c.nodes.find((x) => x.name === n.metadata?.name)?.ip);
    }
    const kubernetes = await c.core.readNamespacedService({ name: 'kubernetes', namespace: 'default' });
    assert.equal(kubernetes.spec?.clusterIP, '10.96.0.1');
  });

  test('a Service with 2 pods gets an EndpointSlice from the real controller', async (t) => {
    const c = need(t); if (!c) return;
    await c.core.createNamespace({ body: { metadata: { name: NS } } });
    await createService(c, {
      metadata: { name: 'web' },
      spec: { type: 'NodePort', selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' }] },
    });
    web = [];
    for (const node of c.nodes) {
      const pod = await c.addPod({ name: `web-${node.index}`, namespace: NS, node, labels: { app: 'web' }, ports: [{ name: 'http', containerPort: 8080 }] });
      const server: ManagedProcess = c.serveHttp(pod, 8080);
      web.push(pod);
      // The pod's process runs in the pod's cgroup, beneath its node's (where a socket LB attaches).
      const procCgroup = (): string => `${cgroup2Mount()}${/^0::(.*)$/m.exec(readFileSync(`/proc/${server.pid}/cgroup`, 'utf8'))?.[1] ?? ''}`;
      await waitFor(`${pod.name}'s server to join its cgroup`, 5000, async () => (procCgroup() === pod.cgroup ? true : undefined), 50)
        .catch(() => assert.equal(procCgroup(), pod.cgroup));
      assert.ok(pod.cgroup.startsWith(`${node.cgroup}/`));
    }
    const slices = await c.waitForReadyEndpoints(NS, 'web', 2);
    const addresses = slices.flatMap((s) => (s.endpoints ?? []).flatMap((e) => e.addresses)).sort();
    assert.deepEqual(addresses, web.map((p) => p.ip).sort());
    const ports = slices.flatMap((s) => (s.ports ?? []).map((p) => p.port));
    assert.deepEqual([...new Set(ports)], [8080], 'the named targetPort resolves to the container port');
    const zones = slices.flatMap((s) => (s.endpoints ?? []).map((e) => e.zone)).sort();
    assert.deepEqual(zones, ['zone-a', 'zone-b'], 'zones come from the Node objects');
  });

  test('pods reach each other over the bridge and across nodes', async (t) => {
    const c = need(t); if (!c) return;
    const [a, b] = web;
    assert.ok(a && b);
    assert.equal(await waitForHttp(a, `http://${a.ip}:8080/`), a.name, 'a pod reaches itself');
    assert.equal(await waitForHttp(a, `http://${b.ip}:8080/`), b.name, 'node-1 pod -> node-2 pod');
    assert.equal(await waitForHttp(b, `http://${a.ip}:8080/`), a.name, 'node-2 pod -> node-1 pod');
    // A second pod on node 1 talks to web-1 through the same bridge.
    const peer = await c.addPod({ name: 'peer', namespace: NS, node: c.nodes[0]!, labels: { app: 'peer' } });
    assert.equal(await httpGetFrom(peer, `http://${a.ip}:8080/`), a.name, 'same-node pods share the bridge');
  });

  for (const mode of ['iptables', 'nftables'] as KubeProxyMode[]) {
    test(`kube-proxy (${mode}) programs what the API says, and the oracle parser reads it back`, async (t) => {
      const c = need(t); if (!c) return;
      const [n1, n2] = c.nodes;
      assert.ok(n1 && n2 && web.length === 2);
      const [w1, w2] = web as [ClusterPod, ClusterPod];

      if (mode === 'iptables') {
        // More frontends for the parser: externalTrafficPolicy Local with an external IP,
        // internalTrafficPolicy Local, a LoadBalancer with an ingress IP, and a Service without endpoints.
        await createService(c, {
          metadata: { name: 'local' },
          spec: {
            type: 'NodePort', selector: { app: 'web' }, externalTrafficPolicy: 'Local', externalIPs: [EXTERNAL_IP],
            ports: [{ name: 'http', port: 8081, targetPort: 8080, protocol: 'TCP' }],
          },
        });
        await createService(c, {
          metadata: { name: 'internal-local' },
          spec: { selector: { app: 'web' }, internalTrafficPolicy: 'Local', ports: [{ port: 8082, targetPort: 8080, protocol: 'TCP' }] },
        });
        const lb = await createService(c, {
          metadata: { name: 'lb' },
          spec: { type: 'LoadBalancer', selector: { app: 'web' }, ports: [{ name: 'dns', port: 53, targetPort: 5353, protocol: 'UDP' }] },
        });
        lb.status = { loadBalancer: { ingress: [{ ip: LB_IP }] } };
        await c.core.replaceNamespacedServiceStatus({ name: 'lb', namespace: NS, body: lb });
        await createService(c, {
          metadata: { name: 'empty' },
          spec: { selector: { app: 'nothing' }, ports: [{ port: 9999, targetPort: 9999, protocol: 'TCP' }] },
        });
        // Session affinity (kube-proxy's "recent" rules / affinity sets).
        await createService(c, {
          metadata: { name: 'sticky' },
          spec: { selector: { app: 'web' }, sessionAffinity: 'ClientIP', ports: [{ port: 8083, targetPort: 8080, protocol: 'TCP' }] },
        });
        // A not-ready pod behind web: its endpoint is published (ready=false) and must not be used.
        await c.addPod({ name: 'web-not-ready', namespace: NS, node: n1, labels: { app: 'web' }, ready: false });
        // Terminating fallback: the only pod of 'drain' is being deleted (no kubelet finishes it),
        // still serving, so kube-proxy falls back to it.
        drain = await c.addPod({ name: 'drain-0', namespace: NS, node: n2, labels: { app: 'drain' } });
        await createService(c, {
          metadata: { name: 'drain' },
          spec: { selector: { app: 'drain' }, ports: [{ port: 8084, targetPort: 8080, protocol: 'TCP' }] },
        });
        await c.waitForReadyEndpoints(NS, 'drain', 1);
        await c.core.deleteNamespacedPod({ name: 'drain-0', namespace: NS, gracePeriodSeconds: 600 });
        await waitFor('the drain endpoint to turn terminating', 15_000, async () => {
          const slices = await c.discovery.listNamespacedEndpointSlice({ namespace: NS, labelSelector: 'kubernetes.io/service-name=drain' });
          const eps = slices.items.flatMap((x) => x.endpoints ?? []);
          return eps.length === 1 && eps[0]?.conditions?.terminating === true && eps[0].conditions.serving === true ? true : undefined;
        });
      }

      const svc = async (name: string): Promise<V1Service> => c.core.readNamespacedService({ name, namespace: NS });
      const [webSvc, local, internal, lb, empty, sticky, drainSvc] = await Promise.all(
        ['web', 'local', 'internal-local', 'lb', 'empty', 'sticky', 'drain'].map(svc)) as V1Service[];
      assert.ok(drain);
      const vip = (s: V1Service | undefined): string => s?.spec?.clusterIP ?? '';
      const nodePort = (s: V1Service | undefined): number => s?.spec?.ports?.[0]?.nodePort ?? 0;
      const both = [`${w1.ip}:8080`, `${w2.ip}:8080`].sort();
      const bothDns = [`${w1.ip}:5353`, `${w2.ip}:5353`].sort();

      // What kube-proxy must program on node 1 (w1 is node 1's pod).
      const expected: BackendSets = {
        clusterIP: {
          '10.96.0.1:443/tcp': ['<reject>'], // the REJECT/DROP column (emptySetMarker)
          [`${vip(webSvc)}:80/tcp`]: both,
          [`${vip(local)}:8081/tcp`]: both,
          [`${vip(internal)}:8082/tcp`]: [`${w1.ip}:8080`],
          [`${vip(lb)}:53/udp`]: bothDns,
          [`${vip(empty)}:9999/tcp`]: ['<reject>'],
          [`${vip(sticky)}:8083/tcp`]: both,
          [`${vip(drainSvc)}:8084/tcp`]: [`${drain.ip}:8080`],
        },
        externalIP: { [`${EXTERNAL_IP}:8081/tcp`]: [`${w1.ip}:8080`] },
        loadBalancerIP: { [`${LB_IP}:53/udp`]: bothDns },
        nodePort: {
          [`${n1.ip}:${nodePort(webSvc)}/tcp`]: both,
          [`${n1.ip}:${nodePort(local)}/tcp`]: [`${w1.ip}:8080`],
          [`${n1.ip}:${nodePort(lb)}/udp`]: bothDns,
        },
      };

      const kp = await c.startKubeProxy(n1, mode);
      try {
        const opts = { serviceCidrs: [c.serviceCidr], loadBalancerIPs: [LB_IP] };
        // kube-proxy syncs as events arrive: wait until its rules settle on the expected sets.
        let got: BackendSets | undefined;
        await waitFor(`kube-proxy (${mode}) rules on ${n1.name} to match the API`, 30_000, async () => {
          got = sortSets(await kubeProxyBackendSets(n1, mode, opts));
          return JSON.stringify(got) === JSON.stringify(sortSets(expected)) ? got : undefined;
        }, 500).catch((err: Error) => {
          assert.deepEqual(got, sortSets(expected), err.message);
        });
        assert.deepEqual(got, sortSets(expected));
        // The two kube-proxy modes must agree with each other too: print them as a conformance table.
        if (mode === 'iptables') iptablesSets = got;
        else if (iptablesSets && got) {
          const rows = compareBackendSets('oracle scenarios', n1.name, iptablesSets, got);
          t.diagnostic(`\n${formatConformanceTable(rows, { kubeProxy: 'kube-proxy iptables', sluice: 'kube-proxy nftables' })}`);
          assert.equal(rows.filter((r) => !r.match).length, 0);
        }
        if (process.env.SLUICE_CAPTURE_ORACLE_FIXTURES) {
          // Refresh the parser's unit-test fixtures from real kube-proxy output.
          const file = join(process.env.SLUICE_CAPTURE_ORACLE_FIXTURES, mode === 'iptables' ? 'iptables-save.txt' : 'nft-ruleset.json');
          writeFileSync(file, await dumpRules(n1, mode));
          writeFileSync(`${file}.expected.json`, `${JSON.stringify({ nodeAddresses: [n1.ip], ...opts, expected: got }, null, 2)}\n`);
        }

        // And the rules carry real traffic: the ClusterIP from a pod on node 1 reaches both backends.
        const seen = new Set<string>();
        for (let i = 0; i < 40 && seen.size < 2; i++) seen.add(await httpGetFrom(w1, `http://${vip(webSvc)}/`));
        assert.deepEqual([...seen].sort(), [w1.name, w2.name].sort(), `ClusterIP ${vip(webSvc)} via kube-proxy (${mode})`);
        // From outside the cluster (a client on the node fabric): externalTrafficPolicy Local on
        // node 1 answers only from node 1's pod, and the cluster-wide NodePort reaches both.
        for (let i = 0; i < 6; i++) {
          assert.equal(await httpGetFrom(client, `http://${n1.ip}:${nodePort(local)}/`), w1.name, 'ETP Local NodePort');
        }
        const viaNodePort = new Set<string>();
        for (let i = 0; i < 40 && viaNodePort.size < 2; i++) viaNodePort.add(await httpGetFrom(client, `http://${n1.ip}:${nodePort(webSvc)}/`));
        assert.deepEqual([...viaNodePort].sort(), [w1.name, w2.name].sort(), 'ETP Cluster NodePort reaches both pods');
      } finally {
        await c.stopKubeProxy(kp);
      }
    });
  }

  test('close() removes processes, namespaces and the directory', async (t) => {
    const c = need(t); if (!c) return;
    const pids = (await import('./state')).loadState(c.dir)?.processes.map((p) => p.pid) ?? [];
    assert.ok(pids.length >= 5);
    assert.ok(existsSync(c.cgroupRoot));
    await c.close();
    cluster = undefined;
    for (const pid of pids) assert.equal(isAlive(pid), false, `pid ${pid} still alive`);
    const left = (await listNetns()).filter((n) => n.startsWith(c.prefix));
    assert.deepEqual(left, []);
    assert.equal(existsSync(c.dir), false);
    assert.equal(existsSync(c.cgroupRoot), false, 'cgroups removed');
  });
});

function sortSets(s: BackendSets): BackendSets {
  const out = {} as BackendSets;
  for (const kind of Object.keys(s) as Array<keyof BackendSets>) {
    out[kind] = Object.fromEntries(Object.entries(s[kind]).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => [k, [...v].sort()]));
  }
  return out;
}
