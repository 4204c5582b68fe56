// What a running test cluster owns, written to <dir>/state.json after every
// change, so `harness down` (or a later run, for a crashed one) can remove
// exactly that — by recorded pid and name, never by pattern.
import { existsSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CniResult, NetConfList } from './cni';
import { cniDel } from './cni';
import { removeCgroupTree } from './cgroup';
import { deleteNetns, netnsPath } from './netns';
import { isAlive, stopPid } from './proc';

export interface PodRecord {
  netns: string;
  containerId?: string;
  nodeNetns?: string;
  conflist?: NetConfList;
  cniResult?: CniResult;
}

export interface ClusterState {
  dir: string;
  prefix: string;
  /** The process that started the cluster; a state whose owner is gone (and was not `up`) is stale. */
  ownerPid: number;
  detached: boolean;
  /** In start order; stopped in reverse. */
  processes: Array<{ name: string; pid: number }>;
  pods: PodRecord[];
  /** Node and fabric namespaces, in creation order. */
  netns: string[];
  cniPath?: string;
  /** The cluster's cgroup v2 directory (node and pod cgroups live beneath it). */
  cgroupRoot?: string;
  /** The cluster's bpffs directory (per-node directories beneath it). */
  bpffsRoot?: string;
}

export function statePath(dir: string): string {
  return join(dir, 'state.json');
}

export function saveState(state: ClusterState): void {
  const tmp = `${statePath(state.dir)}.tmp`;
  writeFileSync(tmp, JSON.stringify(state, null, 2));
  renameSync(tmp, statePath(state.dir));
}

export function loadState(dir: string): ClusterState | undefined {
  const p = statePath(dir);
  if (!existsSync(p)) return undefined;
  return JSON.parse(readFileSync(p, 'utf8')) as ClusterState;
}

/**
 * Remove everything the state names: processes (reverse start order, by pid),
 * CNI DEL for each pod (while its node namespace still exists), the pod, node
 * and fabric namespaces, then the directory. Collects errors instead of
 * stopping at the first, so one failure does not leave the rest behind.
 */
export async function teardown(state: ClusterState, opts: { keepDir?: boolean } = {}): Promise<string[]> {
  const errors: string[] = [];
  // Processes inside namespaces first (servers, kube-proxy, forwarders), then the control plane.
  for (const p of [...state.processes].reverse()) {
    await stopPid(p.pid).catch((err: Error) => errors.push(`stop ${p.name} (pid ${p.pid}): ${err.message}`));
  }
  for (const pod of [...state.pods].reverse()) {
    if (pod.conflist && pod.containerId && pod.nodeNetns && existsSync(netnsPath(pod.nodeNetns))) {
      await cniDel(pod.conflist, {
        containerId: pod.containerId, netnsPath: netnsPath(pod.netns), ifName: 'eth0', hostNetns: pod.nodeNetns, cniPath: state.cniPath,
      }, pod.cniResult).catch((err: Error) => errors.push(err.message));
    }
    await deleteNetns(pod.netns).catch((err: Error) => errors.push(`delete netns ${pod.netns}: ${err.message}`));
  }
  for (const ns of [...state.netns].reverse()) {
    await deleteNetns(ns).catch((err: Error) => errors.push(`delete netns ${ns}: ${err.message}`));
  }
  if (state.cgroupRoot) {
    await removeCgroupTree(state.cgroupRoot).catch((err: Error) => errors.push(err.message));
  }
  if (state.bpffsRoot?.startsWith('/sys/fs/bpf/')) {
    // Unlinking the pins drops the maps and links once no process holds them.
    try { rmSync(state.bpffsRoot, { recursive: true, force: true }); } catch (err) { errors.push(`remove ${state.bpffsRoot}: ${(err as Error).message}`); }
  }
  if (!opts.keepDir) rmSync(state.dir, { recursive: true, force: true });
  return errors;
}

/**
 * Tear down clusters left by test runs that died (state under `root` whose
 * owner process is gone and which was not started detached by `harness up`).
 */
export async function cleanupStale(root = '/tmp', namePrefix = 'slk8s-'): Promise<string[]> {
  const cleaned: string[] = [];
  for (const name of readdirSync(root)) {
    if (!name.startsWith(namePrefix)) continue;
    const state = (() => { try { return loadState(join(root, name)); } catch { return undefined; } })();
    if (!state || state.detached || isAlive(state.ownerPid)) continue;
    await teardown(state);
    cleaned.push(state.dir);
  }
  return cleaned;
}
