// Cluster "nodes": one network namespace each, joined by a private fabric (a
// bridge inside its own namespace) on 198.18.0.0/24, each with a pod CIDR
// 198.19.<i>.0/24 routed to it by the other nodes, and a Node object whose
// InternalIP is its fabric address. There is no link to the machine and no
// default route anywhere. Dual-stack (issue 14): every node also has an IPv6
// fabric address fd00:18::<10+i>/64 and pod CIDR fd00:19:<i>::/64, both in
// its Node object, so pods get both families and the EndpointSlice
// controller writes IPv4 and IPv6 slices.
import type { CoreV1Api, V1Node } from '@kubernetes/client-node';
import { join } from 'node:path';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createCgroup } from './cgroup';
import { createNetns, createVethPair, ip, sysctl } from './netns';
import { writeKubeconfig, type Pki } from './pki';
import { run, startProcess, waitFor, type ManagedProcess } from './proc';

export const FABRIC_CIDR_PREFIX = '198.18.0';
export const CLUSTER_POD_CIDR = '198.19.0.0/16';
export const NODE_CIDR = `${FABRIC_CIDR_PREFIX}.0/24`;
export const CLUSTER_POD_CIDR6 = 'fd00:19::/48';
export const NODE_CIDR6 = 'fd00:18::/64';
/** The API server's address as seen from inside a node namespace (see forwarder.ts). */
export const API_IN_NODE = '127.0.0.1:6443';

export interface ClusterNode {
  /** Node object name (also the kube-proxy / Sluice --hostname-override). */
  name: string;
  index: number;
  /** The node's network namespace: where kube-proxy or the Sluice agent of this node runs. */
  netns: string;
  /** InternalIP, on the fabric device `eth0` inside netns. */
  ip: string;
  /** The IPv6 InternalIP, on `eth0` too. */
  ip6: string;
  zone: string;
  podCidr: string;
  podCidr6: string;
  /** The pod bridge the CNI bridge plugin creates inside netns. */
  bridge: string;
  /** Admin kubeconfig whose server is https://127.0.0.1:6443, valid inside netns. */
  kubeconfigPath: string;
  /** cgroup v2 directory of this node; its pods' processes run in child cgroups (attach socket hooks here). */
  cgroup: string;
  /** A bpffs directory for this node's pinned maps and links (removed with the cluster). */
  bpffsDir: string;
}

export function nodeAddress(index: number): string {
  return `${FABRIC_CIDR_PREFIX}.${10 + index}`;
}

export function nodePodCidr(index: number): string {
  return `198.19.${index}.0/24`;
}

export function nodeAddress6(index: number): string {
  return `fd00:18::${10 + index}`;
}

export function nodePodCidr6(index: number): string {
  return `fd00:19:${index}::/64`;
}

/** The fabric: a namespace holding one bridge that every node's eth0 plugs into. */
export async function createFabric(netns: string): Promise<void> {
  await createNetns(netns);
  await ip('-n', netns, 'link', 'add', 'fabric0', 'type', 'bridge');
  await ip('-n', netns, 'link', 'set', 'fabric0', 'up');
}

/**
 * Create node `index` (1-based): netns, fabric link, routes to the other
 * nodes' pod CIDRs, the API forwarder into the netns, and the Node object.
 * Processes started are pushed into `processes` before anything can fail.
 */
export async function createNode(opts: {
  index: number; count: number; prefix: string; fabricNetns: string; dir: string;
  apiSocket: string; pki: Pki; forwarderScript: string; core: CoreV1Api; processes: ManagedProcess[];
  cgroupRoot: string; bpffsRoot: string;
}): Promise<ClusterNode> {
  const { index } = opts;
  const node: ClusterNode = {
    name: `node-${index}`,
    index,
    netns: `${opts.prefix}-node-${index}`,
    ip: nodeAddress(index),
    ip6: nodeAddress6(index),
    zone: index % 2 === 1 ? 'zone-a' : 'zone-b',
    podCidr: nodePodCidr(index),
    podCidr6: nodePodCidr6(index),
    bridge: 'cni0',
    kubeconfigPath: join(opts.dir, `node-${index}.kubeconfig`),
    cgroup: createCgroup(join(opts.cgroupRoot, `node-${index}`)),
    bpffsDir: join(opts.bpffsRoot, `node-${index}`),
  };
  mkdirSync(node.bpffsDir, { recursive: true });
  await createNetns(node.netns);
  await createVethPair(node.netns, 'eth0', opts.fabricNetns, `n${index}`);
  await ip('-n', opts.fabricNetns, 'link', 'set', `n${index}`, 'master', 'fabric0');
  await ip('-n', node.netns, 'addr', 'add', `${node.ip}/24`, 'dev', 'eth0');
  await ip('-n', node.netns, 'addr', 'add', `${node.ip6}/64`, 'dev', 'eth0', 'nodad');
  await sysctl(node.netns, 'net.ipv4.ip_forward', '1');
  await sysctl(node.netns, 'net.ipv6.conf.all.forwarding', '1');
  for (let j = 1; j <= opts.count; j++) {
    if (j !== index) await ip('-n', node.netns, 'route', 'add', nodePodCidr(j), 'via', nodeAddress(j));
    if (j !== index) await ip('-n', node.netns, '-6', 'route', 'add', nodePodCidr6(j), 'via', nodeAddress6(j));
  }

  writeKubeconfig(node.kubeconfigPath, `https://${API_IN_NODE}`, opts.pki);
  const fwd = startProcess(`api-forwarder ${node.name}`, [
    'nsenter', `--net=/run/netns/${node.netns}`, process.execPath, opts.forwarderScript, 'tcp-to-unix', API_IN_NODE, opts.apiSocket,
  ], join(opts.dir, 'logs', `forwarder-${node.name}.log`));
  opts.processes.push(fwd);

  await registerNode(opts.core, node);
  return node;
}

/** Create the Node object, then set its status (addresses, Ready) through the status subresource, as a kubelet would. */
export async function registerNode(core: CoreV1Api, node: ClusterNode): Promise<V1Node> {
  await core.createNode({
    body: {
      metadata: {
        name: node.name,
        labels: {
          'kubernetes.io/hostname': node.name,
          'kubernetes.io/os': 'linux',
          'topology.kubernetes.io/zone': node.zone,
          'sluice.test/netns': node.netns,
        },
      },
      spec: { podCIDR: node.podCidr, podCIDRs: [node.podCidr, node.podCidr6] },
    },
  });
  const now = new Date();
  const current = await core.readNode({ name: node.name });
  current.status = {
    addresses: [{ type: 'InternalIP', address: node.ip }, { type: 'InternalIP', address: node.ip6 }, { type: 'Hostname', address: node.name }],
    conditions: [{
      type: 'Ready', status: 'True', reason: 'SluiceTestHarness', message: 'node namespace is up',
      lastHeartbeatTime: now, lastTransitionTime: now,
    }],
  };
  return core.replaceNodeStatus({ name: node.name, body: current });
}

/** Wait until the API server answers through the node's forwarder (proves the node can reach it). */
export async function waitForApiInNode(node: ClusterNode, caCert: string): Promise<void> {
  const script = `${node.kubeconfigPath}.probe.js`;
  writeFileSync(script, [
    "const https = require('https'); const fs = require('fs');",
    `const req = https.get({ host: '127.0.0.1', port: 6443, path: '/livez', ca: fs.readFileSync(${JSON.stringify(caCert)}), timeout: 3000 },`,
    '  (res) => { process.exit(res.statusCode === 401 || res.statusCode === 200 || res.statusCode === 403 ? 0 : 1); });',
    "req.on('error', () => process.exit(1)); req.on('timeout', () => process.exit(1));",
  ].join('\n'));
  await waitFor(`the API server from inside ${node.netns}`, 20_000, async () => {
    await run(['nsenter', `--net=/run/netns/${node.netns}`, process.execPath, script], { timeoutMs: 5000 });
    return true;
  }, 200);
}

/**
 * A client outside the cluster: a namespace on the fabric (198.18.0.200+k)
 * that reaches the node addresses only — the place external NodePort
 * traffic comes from.
 */
export async function createFabricClient(netns: string, fabricNetns: string, index: number): Promise<string> {
  const address = `${FABRIC_CIDR_PREFIX}.${200 + index}`;
  await createNetns(netns);
  await createVethPair(netns, 'eth0', fabricNetns, `c${index}`);
  await ip('-n', fabricNetns, 'link', 'set', `c${index}`, 'master', 'fabric0');
  await ip('-n', netns, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
  return address;
}
