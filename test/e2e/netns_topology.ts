// The common part of the e2e topologies: one network namespace per role,
// named <prefix>-<random>-<role>, commands inside them, node scripts run
// there, and cleanup of both.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';

export class NetnsTopology<R extends string> {
  readonly ns: Record<R, string>;
  private readonly children: ChildProcess[] = [];

  constructor(prefix: string, private readonly roles: readonly R[]) {
    const suffix = randomBytes(3).toString('hex');
    this.ns = Object.fromEntries(roles.map((r) => [r, `${prefix}-${suffix}-${r}`])) as Record<R, string>;
  }

  netnsPath(role: R): string {
    return `/run/netns/${this.ns[role]}`;
  }

  in(role: R, ...args: string[]): void {
    execFileSync('ip', ['-n', this.ns[role], ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  }

  sysctl(role: R, key: string, value: string): void {
    execFileSync('ip', ['netns', 'exec', this.ns[role], 'sysctl', '-qw', `${key}=${value}`]);
  }

  /** Every role's namespace, with its loopback up. */
  protected addNamespaces(): void {
    for (const r of this.roles) {
      execFileSync('ip', ['netns', 'add', this.ns[r]]);
      this.in(r, 'link', 'set', 'lo', 'up');
    }
  }

  /**
   * A pod namespace `role` on `node` by a veth (`hostDev` on the node, eth0 in
   * the pod) with a /32 address; the node's `gateway` address (one it owns on
   * another device, as many CNIs do) answers ARP there (proxy_arp). The pod
   * routes only the test range, not a default route.
   */
  protected addPod(node: R, role: R, address: string, gateway: string, hostDev: string): void {
    this.in(node, 'link', 'add', hostDev, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', this.ns[role]);
    this.in(node, 'link', 'set', hostDev, 'up');
    this.in(node, 'route', 'add', `${address}/32`, 'dev', hostDev, 'src', gateway);
    this.in(role, 'addr', 'add', `${address}/32`, 'dev', 'eth0');
    this.in(role, 'link', 'set', 'eth0', 'up');
    this.in(role, 'route', 'add', `${gateway}/32`, 'dev', 'eth0');
    this.in(role, 'route', 'add', '198.18.0.0/15', 'via', gateway, 'dev', 'eth0');
    this.sysctl(node, `net.ipv4.conf.${hostDev}.proxy_arp`, '1');
  }

  /** Nodes forward, without reverse-path filtering or redirects. */
  protected makeRouters(nodes: R[]): void {
    for (const n of nodes) {
      this.sysctl(n, 'net.ipv4.ip_forward', '1');
      this.sysctl(n, 'net.ipv4.conf.all.rp_filter', '0');
      this.sysctl(n, 'net.ipv4.conf.default.rp_filter', '0');
      this.sysctl(n, 'net.ipv4.conf.all.send_redirects', '0');
    }
  }

  /** Run a node script in a namespace (ip netns exec), collect stdout. Bounded by timeoutMs. */
  node(role: R, script: string, args: string[], timeoutMs = 5000): string {
    const r = spawnSync('ip', ['netns', 'exec', this.ns[role], process.execPath, '-e', script, '--', ...args], { encoding: 'utf8', timeout: timeoutMs });
    if (r.error) throw new Error(`node in ${this.ns[role]}: ${r.error.message}`);
    return (r.stdout ?? '').trim();
  }

  /** Start a long-running node script; waits for its first stdout line. Killed in destroy(). */
  async start(role: R, script: string, args: string[], via: 'ip' | 'nsenter' = 'ip'): Promise<ChildProcess> {
    const cmd = via === 'ip'
      ? ['ip', ['netns', 'exec', this.ns[role], process.execPath, '-e', script, '--', ...args]] as const
      : ['nsenter', [`--net=${this.netnsPath(role)}`, process.execPath, '-e', script, '--', ...args]] as const;
    const child = spawn(cmd[0], [...cmd[1]], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.children.push(child);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`process in ${this.ns[role]} did not start within 5s`)), 5000);
      let err = '';
      child.stderr!.on('data', (d) => (err += d));
      child.stdout!.once('data', () => { clearTimeout(timer); resolve(); });
      child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`process in ${this.ns[role]} exited ${code}: ${err}`)); });
    });
    return child;
  }

  destroy(): void {
    for (const c of this.children) if (c.exitCode === null && c.pid) c.kill('SIGKILL');
    for (const r of this.roles) spawnSync('ip', ['netns', 'del', this.ns[r]]);
  }
}
