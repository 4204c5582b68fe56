// A small routed "cluster" in network namespaces for the north-south tests.
// Nothing here touches the machine's own namespace or devices: every veth is
// created directly between two test namespaces, there is no default route,
// and every name carries a random suffix.
//
//   cli (198.18.0.10) ─┐
//   n1  (198.18.0.1)  ─┼─ br0 in lan            n1: TC on eth0; pods p1 (198.18.1.10), p1b (198.18.1.11)
//   n2  (198.18.0.2)  ─┘                        n2: pod p2 (198.18.2.20)
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';

export const ADDR = {
  client: '198.18.0.10',
  node1: '198.18.0.1',
  node2: '198.18.0.2',
  pod1: '198.18.1.10',
  pod1b: '198.18.1.11',
  pod2: '198.18.2.20',
  /** ExternalIP / LoadBalancer IPs, routed to node1 by the client. */
  vipNet: '198.18.100.0/24',
} as const;

export type Role = 'lan' | 'cli' | 'n1' | 'n2' | 'p1' | 'p1b' | 'p2';
const ROLES: Role[] = ['lan', 'cli', 'n1', 'n2', 'p1', 'p1b', 'p2'];

function ip(args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

export class Topology {
  readonly ns: Record<Role, string>;
  private readonly children: ChildProcess[] = [];

  constructor(prefix = 'sltc') {
    const suffix = randomBytes(3).toString('hex');
    this.ns = Object.fromEntries(ROLES.map((r) => [r, `${prefix}-${suffix}-${r}`])) as Record<Role, string>;
  }

  netnsPath(role: Role): string {
    return `/run/netns/${this.ns[role]}`;
  }

  in(role: Role, ...args: string[]): void {
    ip(['-n', this.ns[role], ...args]);
  }

  sysctl(role: Role, key: string, value: string): void {
    execFileSync('ip', ['netns', 'exec', this.ns[role], 'sysctl', '-qw', `${key}=${value}`]);
  }

  create(): void {
    for (const r of ROLES) {
      ip(['netns', 'add', this.ns[r]]);
      this.in(r, 'link', 'set', 'lo', 'up');
    }
    this.in('lan', 'link', 'add', 'br0', 'type', 'bridge');
    this.in('lan', 'link', 'set', 'br0', 'up');
    const lanPort = (role: Role, address: string) => {
      this.in('lan', 'link', 'add', `${role}-l`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', this.ns[role]);
      this.in('lan', 'link', 'set', `${role}-l`, 'master', 'br0', 'up');
      this.in(role, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
      this.in(role, 'link', 'set', 'eth0', 'up');
    };
    lanPort('cli', ADDR.client);
    lanPort('n1', ADDR.node1);
    lanPort('n2', ADDR.node2);
    const pod = (node: Role, role: Role, address: string, gateway: string, hostDev: string) => {
      this.in(node, 'link', 'add', hostDev, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', this.ns[role]);
      this.in(node, 'link', 'set', hostDev, 'up');
      this.in(node, 'route', 'add', `${address}/32`, 'dev', hostDev, 'src', gateway);
      this.in(role, 'addr', 'add', `${address}/32`, 'dev', 'eth0');
      this.in(role, 'link', 'set', 'eth0', 'up');
      this.in(role, 'route', 'add', `${gateway}/32`, 'dev', 'eth0');
      // Not a default route: only the test's own ranges are reachable.
      this.in(role, 'route', 'add', '198.18.0.0/15', 'via', gateway, 'dev', 'eth0');
      // The node answers ARP for its gateway address on every pod veth.
      this.sysctl(node, `net.ipv4.conf.${hostDev}.proxy_arp`, '1');
    };
    // Pods reach their node through a link-local-free /32 scheme: the node's
    // pod-facing address is its LAN address (as many CNIs do).
    pod('n1', 'p1', ADDR.pod1, ADDR.node1, 'vp1');
    pod('n1', 'p1b', ADDR.pod1b, ADDR.node1, 'vp1b');
    pod('n2', 'p2', ADDR.pod2, ADDR.node2, 'vp2');
    this.in('n1', 'route', 'add', '198.18.2.0/24', 'via', ADDR.node2);
    this.in('n2', 'route', 'add', '198.18.1.0/24', 'via', ADDR.node1);
    this.in('cli', 'route', 'add', ADDR.vipNet, 'via', ADDR.node1);
    for (const n of ['n1', 'n2'] as const) {
      this.sysctl(n, 'net.ipv4.ip_forward', '1');
      this.sysctl(n, 'net.ipv4.conf.all.rp_filter', '0');
      this.sysctl(n, 'net.ipv4.conf.default.rp_filter', '0');
      this.sysctl(n, 'net.ipv4.conf.all.send_redirects', '0');
    }
  }

  /** Run a node script in a namespace (ip netns exec), collect stdout. Bounded by timeoutMs. */
  node(role: Role, script: string, args: string[], timeoutMs = 5000): string {
    const r = spawnSync('ip', ['netns', 'exec', this.ns[role], process.execPath, '-e', script, '--', ...args], { encoding: 'utf8', timeout: timeoutMs });
    if (r.error) throw new Error(`node in ${this.ns[role]}: ${r.error.message}`);
    return (r.stdout ?? '').trim();
  }

  /** Start a long-running node script; waits for its first stdout line. Killed in destroy(). */
  async start(role: Role, script: string, args: string[], via: 'ip' | 'nsenter' = 'ip'): Promise<ChildProcess> {
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
    for (const r of ROLES) spawnSync('ip', ['netns', 'del', this.ns[r]]);
  }
}

/** TCP and UDP server answering "<name> <peer address>:<peer port>". */
export const SERVER_SCRIPT = `
const net = require('net'), dgram = require('dgram');
const [name, port] = process.argv.slice(1);
let ready = 0; const up = () => { if (++ready === 2) process.stdout.write('ready\\n'); };
net.createServer((s) => s.end(name + ' ' + s.remoteAddress + ':' + s.remotePort)).listen(Number(port), '0.0.0.0', up);
const u = dgram.createSocket('udp4');
u.on('message', (m, r) => u.send(name + ' ' + r.address + ':' + r.port, r.port, r.address));
u.bind(Number(port), '0.0.0.0', up);
`;

/** One TCP request or UDP datagram; prints the answer or "timeout"/"error <code>". */
export const CLIENT_SCRIPT = `
const net = require('net'), dgram = require('dgram');
const [proto, host, port] = process.argv.slice(1);
const done = (s) => { process.stdout.write(s); process.exit(0); };
setTimeout(() => done('timeout'), 2000);
if (proto === 'tcp') {
  const s = net.connect(Number(port), host); let data = '';
  s.on('data', (d) => (data += d)); s.on('end', () => done(data)); s.on('error', (e) => done('error ' + e.code));
} else {
  const u = dgram.createSocket('udp4');
  u.on('message', (m) => done(String(m)));
  u.send('hi', Number(port), host);
}
`;
