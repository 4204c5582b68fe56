// Upstream kube-proxy as the oracle: it runs inside one node's network
// namespace (so it programs only that namespace's iptables/nftables), against
// the same API server, with its health and metrics servers bound inside the
// namespace and every host-wide knob (conntrack sysctls) left alone.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Binaries } from './binaries';
import { inNetns } from './netns';
import { CLUSTER_POD_CIDR, CLUSTER_POD_CIDR6, type ClusterNode } from './nodes';
import { FatalWaitError, isAlive, sleep, startProcess, stopPid, tailLog, waitFor, type ManagedProcess } from './proc';

export type KubeProxyMode = 'iptables' | 'nftables';

/** KubeProxyConfiguration lines: zero = do not touch; nf_conntrack_max and the timeouts are host-wide. */
export const CONNTRACK_UNTOUCHED = [
  'conntrack:',
  '  maxPerCore: 0',
  '  min: 0',
  '  tcpEstablishedTimeout: 0s',
  '  tcpCloseWaitTimeout: 0s',
  '  udpTimeout: 0s',
  '  udpStreamTimeout: 0s',
];

export interface KubeProxy {
  node: ClusterNode;
  mode: KubeProxyMode;
  process: ManagedProcess;
  configPath: string;
}

/** KubeProxyConfiguration for one node namespace. */
export function kubeProxyConfig(node: ClusterNode, mode: KubeProxyMode): string {
  return [
    'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
    'kind: KubeProxyConfiguration',
    `mode: ${mode}`,
    `hostnameOverride: ${node.name}`,
    'clientConnection:',
    `  kubeconfig: ${node.kubeconfigPath}`,
    // Dual-stack: kube-proxy runs an IPv4 and an IPv6 proxier (ip6tables / table ip6 kube-proxy).
    `clusterCIDR: ${CLUSTER_POD_CIDR},${CLUSTER_POD_CIDR6}`,
    'detectLocalMode: ClusterCIDR',
    // NodePorts on the node's own (Node object) addresses, so the rules name them.
    'nodePortAddresses: ["primary"]',
    'healthzBindAddress: 127.0.0.1:10256',
    'metricsBindAddress: 127.0.0.1:10249',
    'bindAddress: 0.0.0.0',
    ...CONNTRACK_UNTOUCHED,
    'iptables:',
    '  minSyncPeriod: 0s',
    '  syncPeriod: 30s',
    'nftables:',
    '  minSyncPeriod: 0s',
    '  syncPeriod: 30s',
    '',
  ].join('\n');
}

/**
 * What kube-proxy logs (at -v=4) when its proxiers learn the node's zone.
 * Without that call kube-proxy applies no topology hints at all.
 */
const TOPOLOGY_LOGGED = 'Updated proxier node topology labels';
const TOPOLOGY_WAIT_MS = 5_000;
const START_ATTEMPTS = 3;

/**
 * Start kube-proxy in `node.netns` and wait until it has written its first
 * full set of rules and its proxiers know the node's zone.
 *
 * The zone check works around a start-up race in upstream kube-proxy
 * (v1.34 cmd/kube-proxy/app/server.go): NewNodeTopologyConfig adds its
 * handler to the node informer, which is already running, before the proxier
 * is registered with it; when the informer replays the Node before that
 * registration, the config records the zone with no handler to tell, and no
 * later event carries a different zone, so that kube-proxy never uses
 * topology hints. It showed in about one start in four here (both topology
 * Services' frontends on one node with every endpoint, for the whole
 * comparison). An oracle in that state is not kube-proxy's behaviour but a
 * lost event: it is restarted (at most START_ATTEMPTS starts).
 */
export async function startKubeProxy(bin: Binaries, node: ClusterNode, mode: KubeProxyMode, dir: string,
  processes: ManagedProcess[]): Promise<KubeProxy> {
  const configPath = join(dir, `kube-proxy-${node.name}-${mode}.yaml`);
  writeFileSync(configPath, kubeProxyConfig(node, mode));
  for (let attempt = 1; ; attempt++) {
    const logPath = join(dir, 'logs', `kube-proxy-${node.name}-${mode}-${attempt}.log`);
    // `ip netns exec` (not nsenter): it also remounts /sys for the namespace, which
    // kube-proxy reads for the namespace's interfaces. kube-proxy needs no cgroup.
    // -v=4: the level at which the proxier logs that it has the node's topology labels.
    const proc = startProcess(`kube-proxy ${node.name} (${mode})`, [
      'ip', 'netns', 'exec', node.netns, bin.kubeProxy, `--config=${configPath}`, '--v=4',
    ], logPath);
    processes.push(proc);
    await waitFor(`kube-proxy (${mode}) in ${node.netns} to program its first sync`, 60_000, async () => {
      if (!isAlive(proc.pid)) throw new FatalWaitError(`kube-proxy exited:\n${tailLog(proc.logPath)}`);
      return (await hasSynced(node, mode)) ? true : undefined;
    }, 500);
    if (!node.zone || await logShows(logPath, TOPOLOGY_LOGGED, TOPOLOGY_WAIT_MS)) {
      return { node, mode, process: proc, configPath };
    }
    await stopPid(proc.pid);
    const tracked = processes.indexOf(proc);
    if (tracked >= 0) processes.splice(tracked, 1); // splice(-1) would drop another process's record
    await cleanupKubeProxyRules(bin, node);
    if (attempt >= START_ATTEMPTS) {
      throw new Error(`kube-proxy (${mode}) in ${node.netns} never learned the node's zone ${node.zone} in ${START_ATTEMPTS} starts ` +
        `(no "${TOPOLOGY_LOGGED}" within ${TOPOLOGY_WAIT_MS} ms of its first sync; log ${logPath})`);
    }
    process.stderr.write(`kube-proxy (${mode}) in ${node.netns}: no "${TOPOLOGY_LOGGED}" after its first sync ` +
      `(upstream start-up race, see startKubeProxy); restarting it (start ${attempt + 1} of ${START_ATTEMPTS})\n`);
  }
}

async function logShows(path: string, text: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (existsSync(path) && readFileSync(path, 'utf8').includes(text)) return true;
    if (Date.now() > deadline) return false;
    await sleep(100);
  }
}

/** Both families' proxiers have written a full sync. */
async function hasSynced(node: ClusterNode, mode: KubeProxyMode): Promise<boolean> {
  if (mode === 'iptables') {
    for (const save of ['iptables-save', 'ip6tables-save']) {
      const out = await inNetns(node.netns, [save, '-t', 'nat']);
      // A full sync always ends KUBE-SERVICES with the jump to KUBE-NODEPORTS (for the node's address).
      if (!/^-A KUBE-SERVICES .*-j KUBE-NODEPORTS$/m.test(out)) return false;
    }
    return true;
  }
  for (const family of ['ip', 'ip6']) {
    const out = await inNetns(node.netns, ['nft', 'list', 'table', family, 'kube-proxy']).catch(() => '');
    if (!out.includes('service-ips')) return false;
  }
  return true;
}

/**
 * Between the IPv4 and the IPv6 half of an iptables dump: kube-proxy names
 * its chains alike in both families (the hash is of the Service port), so
 * the oracle parses each half on its own.
 */
export const IP6TABLES_SEPARATOR = '# ---- ip6tables-save ----';

/** The rules kube-proxy wrote in the node's namespace (both families), in the text form the oracle parses. */
export async function dumpRules(node: ClusterNode, mode: KubeProxyMode): Promise<string> {
  if (mode === 'iptables') {
    return `${await inNetns(node.netns, ['iptables-save'])}\n${IP6TABLES_SEPARATOR}\n${await inNetns(node.netns, ['ip6tables-save'])}`;
  }
  // Both tables (ip and ip6 kube-proxy); the parser keeps the families apart.
  return inNetns(node.netns, ['nft', '-j', 'list', 'ruleset']);
}

/**
 * `kube-proxy --cleanup` inside the node namespace: removes every rule any
 * kube-proxy mode left there, so the next mode (or Sluice) starts clean and a
 * stale rule cannot make a check pass.
 */
export async function cleanupKubeProxyRules(bin: Binaries, node: ClusterNode): Promise<void> {
  await inNetns(node.netns, [bin.kubeProxy, '--cleanup', '--v=0'], 60_000);
}
