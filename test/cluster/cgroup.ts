// cgroup v2 directories for the cluster: one per node, one per pod beneath its
// node, so a socket-LB agent for a node attaches to the node's cgroup (never
// the machine's root cgroup) and reaches exactly that node's pods. Processes
// join their cgroup before entering their netns (`ip netns exec` would remount
// /sys and make cgroup.procs unwritable).
import { existsSync, mkdirSync, readFileSync, readdirSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import { sleep } from './proc';

/** Where cgroup v2 is mounted (e.g. /sys/fs/cgroup/unified in the hybrid layout). */
export function cgroup2Mount(): string {
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [pre, post] = line.split(' - ');
    if (post?.startsWith('cgroup2 ')) {
      const mountPoint = pre?.split(' ')[4];
      if (mountPoint) return mountPoint;
    }
  }
  throw new Error('cgroup v2 is not mounted (no cgroup2 entry in /proc/self/mountinfo)');
}

export function createCgroup(path: string): string {
  if (path === cgroup2Mount()) throw new Error(`refusing to use the root cgroup ${path} for the test cluster`);
  mkdirSync(path, { recursive: true });
  return path;
}

/** Remove a cgroup tree, deepest first; a cgroup still holding processes is retried briefly, then reported. */
export async function removeCgroupTree(path: string): Promise<void> {
  if (!existsSync(path)) return;
  const children = readdirDirs(path);
  for (const c of children) await removeCgroupTree(join(path, c));
  for (let i = 0; ; i++) {
    try { rmdirSync(path); return; } catch (err) {
      if (i >= 20) throw new Error(`remove cgroup ${path}: ${(err as Error).message} (procs: ${readFileSync(join(path, 'cgroup.procs'), 'utf8').trim() || 'none'})`);
      await sleep(100);
    }
  }
}

function readdirDirs(path: string): string[] {
  return readdirSync(path, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name);
}

/**
 * argv that runs `argv` inside cgroup `cgroup` (joined first) and network
 * namespace `netns` (entered second, with nsenter: /sys stays as it is).
 */
export function inCgroupAndNetns(cgroup: string | undefined, netns: string, argv: string[]): string[] {
  const enter = ['nsenter', `--net=/run/netns/${netns}`, ...argv];
  if (!cgroup) return enter;
  return ['sh', '-c', 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', 'sh', cgroup, ...enter];
}
