// Upstream kube-proxy itself against the Sluice agent, on one real control
// plane (the cluster tier's etcd + kube-apiserver v1.34.4): both watch the
// same Services and EndpointSlices, each on its own "node". Measured the same
// way for both: cold start to every Service programmed, and one endpoint
// change from the API write to the rules/maps showing it.
//   kube-proxy (iptables mode): polled with iptables-save in its node.
//   Sluice: the master entry's backend count in the pinned map.
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import * as path from 'node:path';
import { startCluster, type Cluster } from '../test/cluster/harness';
import { dumpRules } from '../test/cluster/kubeProxy';
import { openSockLbMaps, type SockLbMaps } from '../src/datapath/maps';
import { ip4ToNumber } from '../src/datapath/addr';
import { LB_PROTO_TCP } from '../src/abi/generated';
import { portProtoHash } from './kube-iptables';

export interface UpstreamSide {
  coldStartMs?: number;
  changeMs: number[];
  timeouts: number;
}

export interface UpstreamResult {
  skipped?: string;
  services: number;
  endpointsPerService: number;
  createMs?: number;
  kubeProxy?: UpstreamSide;
  sluice?: UpstreamSide;
  notes: string[];
}

const ENDPOINTS = 10;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function endpoints(i: number, count: number): V1EndpointSlice['endpoints'] {
  return Array.from({ length: count }, (_, j) => ({ addresses: [`198.19.${(i >> 4) & 255}.${((i & 15) << 4) + j}`], conditions: { ready: true } }));
}

async function createServices(c: Cluster, n: number): Promise<string[]> {
  const vips: string[] = [];
  const one = async (i: number) => {
    const svc = (await c.core.createNamespacedService({ namespace: 'default', body: {
      metadata: { name: `up-${i}` }, spec: { ports: [{ name: 'http', port: 80, protocol: 'TCP' }] },
    } as V1Service })) as V1Service;
    vips[i] = svc.spec!.clusterIP!;
    await c.discovery.createNamespacedEndpointSlice({ namespace: 'default', body: {
      metadata: { name: `up-${i}`, labels: { 'kubernetes.io/service-name': `up-${i}` } },
      addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: endpoints(i, ENDPOINTS),
    } as V1EndpointSlice });
  };
  for (let i = 0; i < n; i += 16) await Promise.all(Array.from({ length: Math.min(16, n - i) }, (_, k) => one(i + k)));
  return vips;
}

/**
 * Endpoint jumps kube-proxy programmed per Service, from iptables-save. Above
 * 1 000 endpoints kube-proxy drops its rule comments, so Services are found by
 * their chain name (the same hash kube-proxy uses, bench/kube-iptables.ts).
 */
function kubeProxySeps(rules: string, chains: Map<string, string>): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of rules.matchAll(/^-A (KUBE-SVC-\S+) .*-j KUBE-SEP-/gm)) {
    const name = chains.get(m[1]!);
    if (name) out.set(name, (out.get(name) ?? 0) + 1);
  }
  return out;
}

function sluiceCount(maps: SockLbMaps, vip: string): number | undefined {
  return maps.services.get({ address: ip4ToNumber(vip), port: 80, proto: LB_PROTO_TCP, scope: 0 })?.count;
}

async function poll(what: () => Promise<boolean> | boolean, timeoutMs: number, intervalMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await what()) return true;
    await sleep(intervalMs);
  }
  return false;
}

export async function measureUpstream(opts: { root: string; services: number; changes: number; log: (m: string) => void }): Promise<UpstreamResult> {
  const result: UpstreamResult = { services: opts.services, endpointsPerService: ENDPOINTS, notes: [] };
  const started = await startCluster({ nodes: 2 });
  if (!started.ok) return { ...result, skipped: started.skip };
  const c = started.cluster;
  let maps: SockLbMaps | undefined;
  try {
    const [kpNode, slNode] = c.nodes as [Cluster['nodes'][number], Cluster['nodes'][number]];
    let t = Date.now();
    const vips = await createServices(c, opts.services);
    result.createMs = Date.now() - t;
    opts.log(`upstream: ${opts.services} Services x ${ENDPOINTS} endpoints created in the real API server in ${result.createMs} ms`);

    // Cold start, one after the other so neither slows the other.
    t = Date.now();
    await c.startKubeProxy(kpNode, 'iptables');
    const chains = new Map(Array.from({ length: opts.services }, (_, i) => [`KUBE-SVC-${portProtoHash(`default/up-${i}:http`, 'tcp')}`, `up-${i}`] as const));
    const kpReady = await poll(async () => kubeProxySeps(await dumpRules(kpNode, 'iptables'), chains).size >= opts.services, opts.services > 500 ? 120_000 : 30_000, 50);
    result.kubeProxy = { coldStartMs: kpReady ? Date.now() - t : undefined, changeMs: [], timeouts: 0 };
    if (!kpReady) {
      const rules = await dumpRules(kpNode, 'iptables');
      result.notes.push(`kube-proxy did not program all Services in 120 s; ${kubeProxySeps(rules, chains).size} seen; sample: ${rules.split('\n').filter((l) => l.includes('KUBE-SVC')).slice(0, 3).join(' / ')}`);
    }
    t = Date.now();
    c.startInNode(slNode, 'sluice-agent', [path.join(opts.root, 'bin', 'sluice'), 'agent', '--kubeconfig', slNode.kubeconfigPath,
      '--node-name', slNode.name, '--cgroup-path', slNode.cgroup, '--bpffs', slNode.bpffsDir,
      '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0'], { cgroup: slNode.cgroup });
    const slReady = await poll(() => {
      try {
        maps ??= openSockLbMaps(slNode.bpffsDir);
      } catch {
        return false; // not pinned yet
      }
      return vips.every((v) => sluiceCount(maps!, v) === ENDPOINTS);
    }, 120_000, 5);
    result.sluice = { coldStartMs: slReady ? Date.now() - t : undefined, changeMs: [], timeouts: 0 };
    opts.log(`upstream: cold start kube-proxy ${result.kubeProxy.coldStartMs} ms, Sluice ${result.sluice.coldStartMs} ms`);
    if (!maps) throw new Error('Sluice never pinned its maps');

    // One endpoint change at a time: both proxies watch it; each is timed to its own visibility.
    for (let k = 0; k < opts.changes; k++) {
      const i = k % opts.services;
      const want = k < opts.services ? ENDPOINTS - 1 : ENDPOINTS;
      const name = `up-${i}`;
      const writeAt = Date.now();
      await c.discovery.replaceNamespacedEndpointSlice({ name, namespace: 'default', body: {
        metadata: { name, labels: { 'kubernetes.io/service-name': name } },
        addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: endpoints(i, want),
      } as V1EndpointSlice });
      const sl = poll(() => sluiceCount(maps!, vips[i]!) === want, 10_000, 0.5).then((ok) => (ok ? Date.now() - writeAt : undefined));
      const kp = poll(async () => kubeProxySeps(await dumpRules(kpNode, 'iptables'), chains).get(name) === want, 10_000, 20).then((ok) => (ok ? Date.now() - writeAt : undefined));
      const [slMs, kpMs] = await Promise.all([sl, kp]);
      if (slMs === undefined) result.sluice.timeouts++;
      else result.sluice.changeMs.push(slMs);
      if (kpMs === undefined) result.kubeProxy.timeouts++;
      else result.kubeProxy.changeMs.push(kpMs);
    }
    result.notes.push('kube-proxy is polled with iptables-save every 20 ms (its own resolution adds up to that); its default minSyncPeriod (1 s) is part of what it takes.');
    return result;
  } catch (err) {
    result.notes.push(`stopped: ${(err as Error).message}`);
    return result;
  } finally {
    maps?.close();
    await c.close();
  }
}
