// Network namespaces and links for the cluster's "nodes" and "pods". Nothing
// here touches the machine's own interfaces: every link is a veth or bridge
// created inside namespaces this harness made, with no default route.
import { existsSync } from 'node:fs';
import { run } from './proc';

export async function ip(...args: string[]): Promise<string> {
  return run(['ip', ...args], { timeoutMs: 15_000 });
}

/** Run a command inside netns `name` (`ip netns exec`: also remounts /sys for it). */
export async function inNetns(name: string, argv: string[], timeoutMs = 30_000): Promise<string> {
  return run(['ip', 'netns', 'exec', name, ...argv], { timeoutMs });
}

export async function createNetns(name: string): Promise<void> {
  await ip('netns', 'add', name);
  // IPv6 on whatever the host's defaults: the cluster is dual-stack (fd00::/8 only).
  await inNetns(name, ['sysctl', '-q', '-w', 'net.ipv6.conf.all.disable_ipv6=0', 'net.ipv6.conf.default.disable_ipv6=0']);
  await ip('-n', name, 'link', 'set', 'lo', 'up');
}

/** Delete a netns if it exists; processes still inside keep it alive, so stop them first. */
export async function deleteNetns(name: string): Promise<void> {
  if (!existsSync(`/run/netns/${name}`)) return;
  await ip('netns', 'del', name);
}

export function netnsPath(name: string): string {
  return `/run/netns/${name}`;
}

export async function listNetns(): Promise<string[]> {
  const out = await ip('netns', 'list');
  return out.split('\n').map((l) => l.split(' ')[0] ?? '').filter((n) => n.length > 0);
}

/**
 * A veth pair with one end in `nsA` (named ifA) and the other in `nsB` (named
 * ifB). Created inside nsA so the pair never exists in the root namespace.
 */
export async function createVethPair(nsA: string, ifA: string, nsB: string, ifB: string): Promise<void> {
  await ip('-n', nsA, 'link', 'add', ifA, 'type', 'veth', 'peer', 'name', ifB, 'netns', nsB);
  await ip('-n', nsA, 'link', 'set', ifA, 'up');
  await ip('-n', nsB, 'link', 'set', ifB, 'up');
}

export async function sysctl(ns: string, key: string, value: string): Promise<void> {
  await inNetns(ns, ['sysctl', '-q', '-w', `${key}=${value}`]);
}
