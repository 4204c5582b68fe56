// The real-cluster harness: upstream control plane + node namespaces + pods
// wired by the real CNI plugins + (optionally) upstream kube-proxy per node.
//
// From a test:   const c = await startCluster({ nodes: 2 }); try { … } finally { await c.close(); }
// From a shell:  node dist/test/cluster/harness.js up [--nodes N] [--kube-proxy iptables|nftables] [--demo]
//                node dist/test/cluster/harness.js status | down
//                (directory: $SLUICE_CLUSTER_DIR, default /tmp/sluice-cluster)
import { CoreV1Api, DiscoveryV1Api, KubeConfig, type V1EndpointSlice } from '@kubernetes/client-node';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { ensureBinaries, type Binaries } from './binaries';
import { podNetworkConfList, type PluginConf } from './cni';
import { SERVICE_CIDR, SERVICE_CIDR6, startControlPlane, type ControlPlane, type ControlPlaneOptions } from './controlPlane';
import { cleanupKubeProxyRules, startKubeProxy, type KubeProxy, type KubeProxyMode } from './kubeProxy';
import { CLUSTER_POD_CIDR, CLUSTER_POD_CIDR6, NODE_CIDR, NODE_CIDR6, createFabric, createFabricClient, createNode, waitForApiInNode, type ClusterNode } from './nodes';
import { createPod, serveHttp, type ClusterPod, type Place, type PodSpec } from './pods';
import { cgroup2Mount, createCgroup, inCgroupAndNetns } from './cgroup';
import { run, startProcess, stopPid, waitFor, type ManagedProcess } from './proc';
import { cleanupStale, loadState, saveState, teardown, type ClusterState } from './state';

export interface ClusterOptions {
  /** Number of node namespaces (default 2). */
  nodes?: number;
  /** Working directory (certs, etcd data, logs, state.json); default a fresh /tmp/slk8s-XXXX. */
  dir?: string;
  /** Plugins appended to every node's CNI chain after bridge + loopback (Sluice's chained plugin). */
  extraCniPlugins?: PluginConf[];
  /** Extra directories searched for CNI plugin binaries, before /usr/lib/cni. */
  cniPath?: string;
  /** Started by `harness up`: the processes outlive this one and `down` removes them. */
  detached?: boolean;
  binaries?: Binaries;
  /** The control plane's options (Service CIDR, an etcd data directory to start from, apiserver flags): controlPlane.ts. */
  controlPlane?: ControlPlaneOptions;
}

export interface Cluster {
  dir: string;
  /** Prefix of every namespace this cluster owns. */
  prefix: string;
  binaries: Binaries;
  /** Admin kubeconfig for clients in the root network namespace (the test process). */
  kubeconfigPath: string;
  server: string;
  serviceCidr: string;
  /** The IPv6 Service CIDR (the API server is dual-stack, IPv4 primary). */
  serviceCidr6: string;
  clusterPodCidr: string;
  kc: KubeConfig;
  core: CoreV1Api;
  discovery: DiscoveryV1Api;
  nodes: ClusterNode[];
  pods: ClusterPod[];
  kubeProxies: KubeProxy[];
  addPod(spec: Omit<PodSpec, 'node'> & { node?: ClusterNode }): Promise<ClusterPod>;
  /** Start upstream kube-proxy in `node`'s namespace; resolves after its first sync. */
  startKubeProxy(node: ClusterNode, mode: KubeProxyMode): Promise<KubeProxy>;
  stopKubeProxy(kp: KubeProxy): Promise<void>;
  /** The cluster's cgroup v2 directory; node cgroups are `<cgroupRoot>/node-<i>`. */
  cgroupRoot: string;
  /** A namespace outside the cluster on the node fabric (reaches node addresses only), with its own cgroup. */
  addFabricClient(name: string): Promise<Place>;
  /**
   * Start a long-running process for `node` (e.g. the Sluice agent): inside the
   * node's netns, in `cgroup` if given (joined first), log in <dir>/logs/<name>.log,
   * stopped and removed with the cluster.
   */
  startInNode(node: ClusterNode, name: string, argv: string[], opts?: { cgroup?: string; env?: NodeJS.ProcessEnv }): ManagedProcess;
  /** Run a command to completion inside `node`'s netns (bounded); resolves with stdout. */
  execInNode(node: ClusterNode, argv: string[], timeoutMs?: number): Promise<string>;
  /** An HTTP server in the pod answering with the pod's name. */
  serveHttp(pod: ClusterPod, port: number): ManagedProcess;
  /** Wait until the EndpointSlices of a Service list exactly `count` ready endpoints. */
  waitForReadyEndpoints(namespace: string, service: string, count: number, timeoutMs?: number): Promise<V1EndpointSlice[]>;
  close(): Promise<void>;
}

export type StartResult = { ok: true; cluster: Cluster } | { ok: false; skip: string };

const forwarderScript = join(__dirname, 'forwarder.js');

/**
 * Start the cluster: binaries (built on first use), control plane, fabric,
 * nodes. If Go or the module proxy is missing, resolves { ok: false, skip }.
 * On any failure after the first resource exists, everything is removed
 * before the error is rethrown.
 */
export async function startCluster(opts: ClusterOptions = {}): Promise<StartResult> {
  let binaries = opts.binaries;
  if (!binaries) {
    const b = await ensureBinaries();
    if (!b.ok) return { ok: false, skip: b.skip };
    binaries = b.binaries;
  }
  const bins: Binaries = binaries;
  await cleanupStale().catch(() => undefined);

  const dir = opts.dir ?? mkdtempSync('/tmp/slk8s-');
  mkdirSync(join(dir, 'logs'), { recursive: true });
  const prefix = `slk8s-${randomBytes(3).toString('hex')}`;
  const cniPath = opts.cniPath ? `${opts.cniPath}:/usr/lib/cni` : '/usr/lib/cni';
  const processes: ManagedProcess[] = [];
  const cgroupRoot = join(cgroup2Mount(), prefix);
  const bpffsRoot = join('/sys/fs/bpf', prefix);
  const state: ClusterState = {
    dir, prefix, ownerPid: process.pid, detached: opts.detached ?? false, processes: [], pods: [], netns: [], cniPath, cgroupRoot, bpffsRoot,
  };
  const track = (): void => {
    state.processes = processes.map((p) => ({ name: p.name, pid: p.pid }));
    saveState(state);
  };
  saveState(state);

  try {
    createCgroup(cgroupRoot);
    const cp: ControlPlane = await startControlPlane(binaries, dir, processes, opts.controlPlane);
    track();
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfigPath);
    const core = kc.makeApiClient(CoreV1Api);
    const discovery = kc.makeApiClient(DiscoveryV1Api);

    // One unix socket in the root namespace leads to the API server; each node's forwarder ends there.
    const apiSocket = join(dir, 'apiserver.sock');
    processes.push(startProcess('api-forwarder root', [process.execPath, forwarderScript, 'unix-to-tcp', apiSocket, `127.0.0.1:${cp.apiserverPort}`],
      join(dir, 'logs', 'forwarder-root.log')));
    track();

    const fabric = `${prefix}-fabric`;
    state.netns.push(fabric);
    saveState(state);
    await createFabric(fabric);

    const nodes: ClusterNode[] = [];
    const count = opts.nodes ?? 2;
    for (let i = 1; i <= count; i++) {
      state.netns.push(`${prefix}-node-${i}`);
      saveState(state);
      nodes.push(await createNode({
        index: i, count, prefix, fabricNetns: fabric, dir, apiSocket, pki: cp.pki, forwarderScript, core, processes, cgroupRoot, bpffsRoot,
      }));
      track();
    }
    for (const n of nodes) await waitForApiInNode(n, cp.pki.caCert);

    const pods: ClusterPod[] = [];
    const kubeProxies: KubeProxy[] = [];
    const conflistFor = (node: ClusterNode) => podNetworkConfList({
      name: `sluice-test-${node.name}`, bridge: node.bridge, podCidr: node.podCidr,
      ipamDataDir: join(dir, 'ipam', node.name), serviceCidr: opts.controlPlane?.serviceCidr ?? SERVICE_CIDR, clusterCidr: CLUSTER_POD_CIDR, nodeCidr: NODE_CIDR,
      podCidr6: node.podCidr6, serviceCidr6: SERVICE_CIDR6, clusterCidr6: CLUSTER_POD_CIDR6, nodeCidr6: NODE_CIDR6,
      extraPlugins: opts.extraCniPlugins,
    });
    let closed = false;

    const cluster: Cluster = {
      dir, prefix, cgroupRoot, binaries, kubeconfigPath: cp.kubeconfigPath, server: cp.server,
      serviceCidr: opts.controlPlane?.serviceCidr ?? SERVICE_CIDR, serviceCidr6: SERVICE_CIDR6, clusterPodCidr: CLUSTER_POD_CIDR,
      kc, core, discovery, nodes, pods, kubeProxies,

      async addPod(spec) {
        const node = spec.node ?? nodes[pods.length % nodes.length]!;
        const record = { netns: '' } as ClusterState['pods'][number];
        const pod = await createPod({
          spec: { ...spec, node }, prefix, core, conflist: conflistFor(node), cniPath,
          track: (p) => {
            if (!state.pods.includes(record)) state.pods.push(record);
            Object.assign(record, {
              netns: p.netns, containerId: p.containerId, nodeNetns: node.netns, conflist: p.conflist, cniResult: p.cniResult,
            });
            saveState(state);
          },
        });
        pods.push(pod);
        return pod;
      },

      async addFabricClient(name) {
        const netns = `${prefix}-client-${name}`;
        state.netns.push(netns);
        saveState(state);
        await createFabricClient(netns, fabric, state.netns.filter((n) => n.includes('-client-')).length);
        return { netns, cgroup: createCgroup(join(cgroupRoot, `client-${name}`)) };
      },

      async startKubeProxy(node, mode) {
        try {
          const kp = await startKubeProxy(bins, node, mode, dir, processes);
          kubeProxies.push(kp);
          return kp;
        } finally {
          track();
        }
      },

      async stopKubeProxy(kp) {
        await stopPid(kp.process.pid);
        await cleanupKubeProxyRules(bins, kp.node);
        const i = kubeProxies.indexOf(kp);
        if (i >= 0) kubeProxies.splice(i, 1);
      },

      startInNode(node, name, argv, o) {
        const p = startProcess(name, inCgroupAndNetns(o?.cgroup, node.netns, argv), join(dir, 'logs', `${name.replace(/[^\w.-]+/g, '_')}.log`), o?.env);
        processes.push(p);
        track();
        return p;
      },

      execInNode(node, argv, timeoutMs = 30_000) {
        return run(['nsenter', `--net=/run/netns/${node.netns}`, ...argv], { timeoutMs });
      },

      serveHttp(pod, port) {
        const p = serveHttp(pod, port, join(dir, 'logs'));
        processes.push(p);
        track();
        return p;
      },

      async waitForReadyEndpoints(namespace, service, want, timeoutMs = 30_000) {
        return waitFor(`${want} ready endpoints for ${namespace}/${service}`, timeoutMs, async () => {
          const list = await discovery.listNamespacedEndpointSlice({ namespace, labelSelector: `kubernetes.io/service-name=${service}` });
          const ready = list.items.flatMap((s) => s.endpoints ?? []).filter((e) => e.conditions?.ready === true);
          return ready.length === want ? list.items : undefined;
        }, 250);
      },

      async close() {
        if (closed) return;
        closed = true;
        const errors = await teardown(state, { keepDir: process.env.SLUICE_KEEP_CLUSTER_DIR === '1' });
        if (errors.length > 0) throw new Error(`cluster ${prefix} teardown: ${errors.join('; ')}`);
      },
    };
    return { ok: true, cluster };
  } catch (err) {
    track();
    const errors = await teardown(state, { keepDir: true });
    const logs = join(dir, 'logs');
    throw new Error(`start cluster in ${dir}: ${(err as Error).message}${errors.length ? ` (teardown: ${errors.join('; ')})` : ''} — logs kept in ${logs}`);
  }
}

// ---------------------------------------------------------------- CLI

function arg(args: string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

async function cli(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  const dir = process.env.SLUICE_CLUSTER_DIR ?? '/tmp/sluice-cluster';
  if (cmd === 'up') {
    const existing = loadState(dir);
    if (existing) {
      process.stderr.write(`harness: a cluster is already recorded in ${dir}; run 'down' first\n`);
      return 1;
    }
    mkdirSync(dir, { recursive: true });
    const started = await startCluster({ dir, nodes: Number(arg(rest, '--nodes') ?? '2'), detached: true });
    if (!started.ok) {
      process.stdout.write(`skipped: ${started.skip}\n`);
      return 0;
    }
    const c = started.cluster;
    try {
      const mode = arg(rest, '--kube-proxy') as KubeProxyMode | undefined;
      if (mode) for (const n of c.nodes) await c.startKubeProxy(n, mode);
      if (rest.includes('--demo')) await demo(c);
    } catch (err) {
      await c.close().catch(() => undefined);
      throw err;
    }
    process.stdout.write(`${JSON.stringify(clusterSummary(c), null, 2)}\n`);
    return 0;
  }
  if (cmd === 'down') {
    const state = loadState(dir);
    if (!state) { process.stdout.write(`harness: no cluster recorded in ${dir}\n`); return 0; }
    const errors = await teardown(state);
    for (const e of errors) process.stderr.write(`harness: ${e}\n`);
    process.stdout.write(`harness: removed cluster ${state.prefix} (${dir})\n`);
    return errors.length ? 1 : 0;
  }
  if (cmd === 'status') {
    const state = loadState(dir);
    process.stdout.write(state ? `${JSON.stringify(state, (k, v: unknown) => (k === 'conflist' || k === 'cniResult' ? undefined : v), 2)}\n` : `no cluster in ${dir}\n`);
    return 0;
  }
  process.stderr.write('usage: harness up [--nodes N] [--kube-proxy iptables|nftables] [--demo] | status | down   (dir: $SLUICE_CLUSTER_DIR)\n');
  return 2;
}

/** What an agent under test needs to join the cluster, per node. */
export function clusterSummary(c: Cluster): object {
  return {
    dir: c.dir,
    kubeconfig: c.kubeconfigPath,
    server: c.server,
    serviceCidr: c.serviceCidr,
    clusterPodCidr: c.clusterPodCidr,
    nodes: c.nodes.map((n) => ({
      name: n.name, netns: n.netns, ip: n.ip, podCidr: n.podCidr, zone: n.zone, cgroup: n.cgroup, bpffsDir: n.bpffsDir,
      kubeconfigInNetns: n.kubeconfigPath, bridge: n.bridge,
    })),
    pods: c.pods.map((p) => ({ name: `${p.namespace}/${p.name}`, node: p.node.name, netns: p.netns, ip: p.ip, cgroup: p.cgroup })),
    kubeProxies: c.kubeProxies.map((k) => ({ node: k.node.name, mode: k.mode, pid: k.process.pid })),
  };
}

/** A Service `demo/web` (ClusterIP + NodePort) with two HTTP pods on different nodes. */
export async function demo(c: Cluster): Promise<void> {
  await c.core.createNamespace({ body: { metadata: { name: 'demo' } } });
  await c.core.createNamespacedService({
    namespace: 'demo',
    body: {
      metadata: { name: 'web' },
      spec: { type: 'NodePort', selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] },
    },
  });
  for (let i = 0; i < 2; i++) {
    const pod = await c.addPod({ name: `web-${i}`, namespace: 'demo', labels: { app: 'web' }, ports: [{ containerPort: 8080, name: 'http' }] });
    c.serveHttp(pod, 8080);
  }
  await c.waitForReadyEndpoints('demo', 'web', 2);
}

if (require.main === module) {
  cli(process.argv.slice(2)).then((code) => process.exit(code), (err: Error) => {
    process.stderr.write(`harness: ${err.message}\n`);
    process.exit(1);
  });
}
