// Cluster "pods": a network namespace wired by the real CNI plugins (run by
// cni.ts inside the node's namespace) and a Pod object whose status is set
// Running/Ready with the pod's IP through the status subresource — what a
// kubelet would do — so the real EndpointSlice controller writes the slices.
import type { CoreV1Api, V1ContainerPort, V1Pod } from '@kubernetes/client-node';
import { join } from 'node:path';
import { cniAdd, cniDel, podIPv4, podIPv6, type CniResult, type NetConfList } from './cni';
import { createCgroup, inCgroupAndNetns } from './cgroup';
import { createNetns, deleteNetns, netnsPath } from './netns';
import type { ClusterNode } from './nodes';
import { run, startProcess, waitFor, type ManagedProcess } from './proc';

export interface PodSpec {
  name: string;
  namespace?: string;
  node: ClusterNode;
  labels?: Record<string, string>;
  ports?: V1ContainerPort[];
  /** Report Ready (default true). A not-ready pod still gets an IP and a (not ready) endpoint. */
  ready?: boolean;
}

export interface ClusterPod {
  name: string;
  namespace: string;
  node: ClusterNode;
  netns: string;
  ip: string;
  /** The IPv6 address (dual-stack network), else undefined. */
  ip6?: string;
  containerId: string;
  cniResult: CniResult;
  conflist: NetConfList;
  /** cgroup v2 directory the pod's processes run in (a child of its node's cgroup). */
  cgroup: string;
}

/** Where a command runs: a network namespace, and optionally a cgroup joined first. */
export interface Place { netns: string; cgroup?: string }

/** Wire the pod's netns with the node's CNI chain and publish the Pod (Running, Ready, podIP). */
export async function createPod(opts: {
  spec: PodSpec; prefix: string; core: CoreV1Api; conflist: NetConfList; cniPath?: string;
  /** Called as soon as the netns exists, so a failure later still gets it cleaned up. */
  track: (pod: Partial<ClusterPod> & { netns: string }) => void;
}): Promise<ClusterPod> {
  const { spec } = opts;
  const namespace = spec.namespace ?? 'default';
  const netns = `${opts.prefix}-pod-${namespace}-${spec.name}`;
  const containerId = `${opts.prefix}-${namespace}-${spec.name}`;
  const cgroup = createCgroup(join(spec.node.cgroup, `pod-${namespace}-${spec.name}`));
  await createNetns(netns);
  opts.track({ netns });
  const inv = {
    containerId, netnsPath: netnsPath(netns), ifName: 'eth0', hostNetns: spec.node.netns, cniPath: opts.cniPath,
    // IgnoreUnknown: plugins that do not know the K8S_* keys must not fail on them (as kubelet's runtimes pass it).
    args: { IgnoreUnknown: '1', K8S_POD_NAMESPACE: namespace, K8S_POD_NAME: spec.name, K8S_POD_INFRA_CONTAINER_ID: containerId },
  };
  const cniResult = await cniAdd(opts.conflist, inv);
  const pod: ClusterPod = {
    name: spec.name, namespace, node: spec.node, netns, ip: podIPv4(cniResult), ip6: podIPv6(cniResult), containerId, cniResult, conflist: opts.conflist, cgroup,
  };
  opts.track(pod);

  await opts.core.createNamespacedPod({
    namespace,
    body: {
      metadata: { name: spec.name, namespace, labels: spec.labels ?? {} },
      spec: {
        nodeName: spec.node.name,
        containers: [{ name: 'app', image: 'sluice.invalid/netns-pod:none', ports: spec.ports ?? [] }],
        terminationGracePeriodSeconds: 0,
      },
    },
  });
  await setPodStatus(opts.core, pod, spec.ready ?? true);
  return pod;
}

/** Set phase Running, podIP(s), hostIP and the Ready condition, as a kubelet would after the sandbox is up. */
export async function setPodStatus(core: CoreV1Api, pod: ClusterPod, ready: boolean): Promise<V1Pod> {
  const current = await core.readNamespacedPod({ name: pod.name, namespace: pod.namespace });
  const now = new Date();
  const cond = (type: string, status: boolean): { type: string; status: string; lastTransitionTime: Date } =>
    ({ type, status: status ? 'True' : 'False', lastTransitionTime: now });
  current.status = {
    phase: 'Running',
    hostIP: pod.node.ip,
    hostIPs: [{ ip: pod.node.ip }, { ip: pod.node.ip6 }],
    podIP: pod.ip,
    podIPs: [{ ip: pod.ip }, ...(pod.ip6 ? [{ ip: pod.ip6 }] : [])],
    startTime: now,
    conditions: [
      cond('PodScheduled', true), cond('Initialized', true),
      cond('ContainersReady', ready), cond('Ready', ready),
    ],
  };
  return core.replaceNamespacedPodStatus({ name: pod.name, namespace: pod.namespace, body: current });
}

/** CNI DEL (reverse chain, cached result), then remove the netns. */
export async function destroyPodNetwork(pod: Partial<ClusterPod> & { netns: string }, cniPath?: string): Promise<string[]> {
  const errors: string[] = [];
  if (pod.conflist && pod.containerId && pod.node) {
    await cniDel(pod.conflist, {
      containerId: pod.containerId, netnsPath: netnsPath(pod.netns), ifName: 'eth0', hostNetns: pod.node.netns, cniPath,
    }, pod.cniResult).catch((err: Error) => errors.push(err.message));
  }
  await deleteNetns(pod.netns).catch((err: Error) => errors.push(err.message));
  return errors;
}

/**
 * Serve HTTP inside the pod on `port`: every answer is the pod's name, so a
 * client can tell which backend it reached. Returns the process (stop it by pid).
 */
export function serveHttp(pod: ClusterPod, port: number, logDir: string): ManagedProcess {
  const code = `require('http').createServer((q, s) => s.end(${JSON.stringify(pod.name)})).listen(${port}, '0.0.0.0')`;
  return startProcess(`http ${pod.namespace}/${pod.name}:${port}`,
    inCgroupAndNetns(pod.cgroup, pod.netns, [process.execPath, '-e', code]),
    join(logDir, `http-${pod.namespace}-${pod.name}-${port}.log`));
}

/**
 * HTTP GET `url` from `from` (a pod, a fabric client, or a bare netns name),
 * inside its cgroup and netns, bounded; resolves with the body, rejects on any failure.
 */
export async function httpGetFrom(from: Place | string, url: string, timeoutMs = 3000): Promise<string> {
  const place: Place = typeof from === 'string' ? { netns: from } : from;
  const code = [
    `const r = require('http').get(${JSON.stringify(url)}, { timeout: ${timeoutMs} }, (res) => {`,
    "  let b = ''; res.on('data', (d) => b += d); res.on('end', () => { process.stdout.write(b); process.exit(0); }); });",
    "r.on('timeout', () => { console.error('timeout'); process.exit(1); });",
    "r.on('error', (e) => { console.error(e.message); process.exit(1); });",
  ].join('\n');
  return run(inCgroupAndNetns(place.cgroup, place.netns, [process.execPath, '-e', code]), { timeoutMs: timeoutMs + 5000 });
}

/** Wait until GET url from netns answers (a server just started). */
export async function waitForHttp(from: Place | string, url: string, timeoutMs = 10_000): Promise<string> {
  const where = typeof from === 'string' ? from : from.netns;
  return waitFor(`GET ${url} from ${where}`, timeoutMs, () => httpGetFrom(from, url, 1000), 200);
}
