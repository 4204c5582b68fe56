// The Sluice agent as a cluster node's service proxy: started inside the
// node's network namespace (API through the node's forwarder), socket hooks
// on the node's cgroup (every pod process of that node runs beneath it),
// maps pinned in the node's bpffs dir. Stopped and cleaned with the cluster.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Cluster } from './harness';
import type { ClusterNode } from './nodes';
import { FatalWaitError, isAlive, run, stopPid, tailLog, waitFor, type ManagedProcess } from './proc';
import { parseSluiceServices, type SluiceServiceView } from './sluiceSets';

/** Repository root (this file runs from dist/test/cluster/). */
export const REPO_ROOT = join(__dirname, '..', '..', '..');
export const SLUICE_BIN = join(REPO_ROOT, 'bin', 'sluice');

export interface SluiceAgent {
  node: ClusterNode;
  process: ManagedProcess;
}

/** Is the Sluice build (compiled CLI and BPF objects) there? Undefined when yes, else the reason. */
export function sluiceBuildMissing(): string | undefined {
  for (const f of ['dist/src/cli/main.js', 'build/sock_lb.bpf.o']) {
    if (!existsSync(join(REPO_ROOT, f))) return `Sluice is not built (${f} missing): run make build`;
  }
  return undefined;
}

/**
 * Start `sluice agent` for `node` and wait until its maps hold the cluster's
 * `kubernetes` Service (informers synced, first sync applied).
 * `devices`: external devices for the TC path (e.g. ['eth0'] — the node's veth on the fabric).
 */
export async function startSluiceAgent(c: Cluster, node: ClusterNode, opts: { devices?: string[]; extraArgs?: string[] } = {}): Promise<SluiceAgent> {
  const argv = [
    process.execPath, SLUICE_BIN, 'agent',
    '--kubeconfig', node.kubeconfigPath,
    '--node-name', node.name,
    '--cgroup-path', node.cgroup,
    '--bpffs', node.bpffsDir,
    '--healthz-bind-address', '127.0.0.1:0',
    '--metrics-bind-address', '127.0.0.1:0',
    // The same NodePort addresses as the oracle's kube-proxy (nodePortAddresses: ["primary"]).
    '--nodeport-addresses', 'primary',
    ...(opts.devices?.length ? ['--devices', opts.devices.join(',')] : []),
    ...(opts.extraArgs ?? []),
  ];
  const proc = c.startInNode(node, `sluice-agent ${node.name}`, argv);
  await waitFor(`the Sluice agent on ${node.name} to program the kubernetes Service`, 60_000, async () => {
    if (!isAlive(proc.pid)) throw new FatalWaitError(`sluice agent on ${node.name} exited:\n${tailLog(proc.logPath)}`);
    const view = await sluiceServices(node).catch(() => []);
    return view.some((v) => v.frontend === '10.96.0.1:443/tcp') ? true : undefined;
  }, 250);
  return { node, process: proc };
}

export async function stopSluiceAgent(agent: SluiceAgent): Promise<void> {
  await stopPid(agent.process.pid);
}

/** `sluice services -o json` for the node's pinned maps (read from the root netns: it only reads bpffs). */
export async function sluiceServices(node: ClusterNode): Promise<SluiceServiceView[]> {
  const out = await run([process.execPath, SLUICE_BIN, 'services', '-o', 'json', '--bpffs', node.bpffsDir], { timeoutMs: 30_000 });
  return parseSluiceServices(out, node.name);
}
