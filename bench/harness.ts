// The bench's network: one "backend host" namespace holding the ten backend
// addresses (198.18.1.1-10 on its loopback) and the servers, and one client
// namespace per mode, each joined to the backend namespace by its own veth
// pair. Every mode thus keeps its rules loaded in its own namespace, and the
// rounds can alternate between modes (A B A B ...) without reloading.
//
// Safety: nothing here touches the machine's own namespace, devices or root
// cgroup. Veths are created inside the backend namespace with their peer moved
// straight into the client namespace; no namespace has a default route, only
// routes to 198.18.1.0/24 (backends) and 198.19.0.0/16 (VIPs) over its veth,
// and their IPv6 twins (fd00:18:1::/64, fd00:19::/112; services.ts CIDRS).
// Names carry a random suffix; destroy() removes everything, and is safe to
// call twice or after a partial setup.
import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import { run } from './exec';
import { BACKEND_COUNT, BACKEND_PORT, backendAddress, CIDRS, FAMILIES } from './services';

export interface ClientNs {
  netns: string;
  /** The client's own link address (198.18.0.4k+1). */
  address: string;
  /** The backend side's address on this link (the client's gateway). */
  gateway: string;
  /** The same two on the link's IPv6 subnet (fd00:18::4k+1, +2 /126). */
  address6: string;
  gateway6: string;
  /** The backend-side veth (a "pod veth" seen from the host). */
  hostVeth: string;
  clientVeth: string;
}

const T = { timeoutMs: 15000 };

export function cgroup2Mount(): string {
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep < 0) continue;
    const fstype = line.slice(sep + 3).split(' ')[0];
    if (fstype === 'cgroup2') {
      const mountPoint = line.split(' ')[4];
      if (mountPoint) return mountPoint;
    }
  }
  throw new Error('bench harness: no cgroup2 mount in /proc/self/mountinfo');
}

/**
 * Fixed CPUs for the load generator and the server (docs/bench.md, "CPU
 * placement"). On veth a connect's whole handshake runs in the client's
 * softirq; the server only accepts. Left to the scheduler, the server lands
 * on the client's CPU in some rounds (its accept wakeup then preempts the
 * client inside the timed connect) and on the other CPU in others, and a
 * round's p50 jumps between the two (8 and 12-14 µs direct, the same
 * binary). Every mode's rounds get the same placement: client on the first
 * CPU, server on the last. One CPU: no pinning.
 */
export function cpuPinning(): { client: string[]; server: string[] } {
  const n = os.cpus().length;
  if (n < 2) return { client: [], server: [] };
  return { client: ['taskset', '-c', '0'], server: ['taskset', '-c', String(n - 1)] };
}

export class Harness {
  readonly suffix = randomBytes(3).toString('hex');
  readonly backendNs = `sbench-be-${this.suffix}`;
  private readonly clients: ClientNs[] = [];
  private readonly namespaces: string[] = [];
  private readonly cgroups: string[] = [];
  private readonly bpffsDirs: string[] = [];
  private server?: ChildProcess;
  private destroyed = false;

  constructor(private readonly root: string) {}

  get serverPid(): number {
    const pid = this.server?.pid;
    if (pid === undefined) throw new Error('bench harness: the backend server is not running');
    return pid;
  }

  get serverBinary(): string {
    return path.join(this.root, 'build', 'benchserver');
  }

  async setup(): Promise<void> {
    await this.addNetns(this.backendNs);
    const ns = this.backendNs;
    for (let i = 0; i < BACKEND_COUNT; i++) {
      await run(['ip', '-n', ns, 'addr', 'add', `${backendAddress(i)}/32`, 'dev', 'lo'], T);
      await run(['ip', '-n', ns, 'addr', 'add', `${backendAddress(i, 6)}/128`, 'dev', 'lo'], T);
    }
    // Deep accept and SYN queues: the server must never be what we measure.
    await this.sysctl(ns, { 'net.core.somaxconn': '8192', 'net.ipv4.tcp_max_syn_backlog': '16384', 'net.ipv4.tcp_tw_reuse': '1' });
    await this.startServer();
  }

  /** A new client namespace joined to the backend namespace by a veth. */
  async addClient(tag: string): Promise<ClientNs> {
    const k = this.clients.length;
    if (k >= 60) throw new Error(`bench harness: client ${tag}: too many client namespaces`);
    const netns = `sbench-${tag}-${this.suffix}`.slice(0, 40);
    await this.addNetns(netns);
    const hostVeth = `sbh${k}${this.suffix}`.slice(0, 15);
    const clientVeth = `sbc${k}${this.suffix}`.slice(0, 15);
    const address = `198.18.0.${4 * k + 1}`;
    const gateway = `198.18.0.${4 * k + 2}`;
    const address6 = `fd00:18::${(4 * k + 1).toString(16)}`;
    const gateway6 = `fd00:18::${(4 * k + 2).toString(16)}`;
    await run(['ip', '-n', this.backendNs, 'link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', clientVeth, 'netns', netns], T);
    await run(['ip', '-n', this.backendNs, 'addr', 'add', `${gateway}/30`, 'dev', hostVeth], T);
    await run(['ip', '-n', netns, 'addr', 'add', `${address}/30`, 'dev', clientVeth], T);
    // nodad: the addresses are usable at once (no DAD wait, no tentative state).
    await run(['ip', '-n', this.backendNs, 'addr', 'add', `${gateway6}/126`, 'dev', hostVeth, 'nodad'], T);
    await run(['ip', '-n', netns, 'addr', 'add', `${address6}/126`, 'dev', clientVeth, 'nodad'], T);
    await run(['ip', '-n', this.backendNs, 'link', 'set', hostVeth, 'up'], T);
    await run(['ip', '-n', netns, 'link', 'set', clientVeth, 'up'], T);
    for (const f of FAMILIES) {
      const via = f === 6 ? gateway6 : gateway;
      await run(['ip', '-n', netns, 'route', 'add', CIDRS[f].backends, 'via', via], T);
      await run(['ip', '-n', netns, 'route', 'add', CIDRS[f].vips, 'via', via], T);
    }
    // TIME_WAIT: the load generator closes with SO_LINGER 0 (RST), so no
    // TIME_WAIT socket is left on either side; tw_reuse covers the rest.
    await this.sysctl(netns, { 'net.ipv4.tcp_tw_reuse': '1', 'net.ipv4.ip_local_port_range': '10000 65000' });
    const c = { netns, address, gateway, address6, gateway6, hostVeth, clientVeth };
    this.clients.push(c);
    return c;
  }

  /** A child cgroup of the cgroup2 mount, never the root itself. */
  makeCgroup(tag: string): string {
    const dir = path.join(cgroup2Mount(), `sluice-bench-${tag}-${this.suffix}`);
    fs.mkdirSync(dir);
    this.cgroups.push(dir);
    return dir;
  }

  makeBpffsDir(tag: string): string {
    const dir = path.join('/sys/fs/bpf', `sluice-bench-${tag}-${this.suffix}`);
    fs.mkdirSync(dir);
    this.bpffsDirs.push(dir);
    return dir;
  }

  private async addNetns(name: string): Promise<void> {
    await run(['ip', 'netns', 'add', name], T);
    this.namespaces.push(name);
    await run(['ip', '-n', name, 'link', 'set', 'lo', 'up'], T);
  }

  private async sysctl(netns: string, values: Record<string, string>): Promise<void> {
    for (const [k, v] of Object.entries(values)) {
      await run(['ip', 'netns', 'exec', netns, 'sysctl', '-q', '-w', `${k}=${v}`], T);
    }
  }

  private startServer(): Promise<void> {
    return new Promise((resolve, reject) => {
      const child = spawn('ip', ['netns', 'exec', this.backendNs, ...cpuPinning().server, this.serverBinary, '--port', String(BACKEND_PORT), '--max-s', '1500'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      this.server = child;
      let err = '';
      const timer = setTimeout(() => reject(new Error(`benchserver in ${this.backendNs}: not ready after 5 s: ${err}`)), 5000);
      child.stderr.setEncoding('utf8').on('data', (d: string) => { err += d; });
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        if (d.includes('ready')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.on('exit', (code) => {
        clearTimeout(timer);
        if (!this.destroyed) reject(new Error(`benchserver in ${this.backendNs}: exited with ${code}: ${err}`));
      });
    });
  }

  private destroying?: Promise<string[]>;

  /** Remove everything this harness made, in reverse order; never throws.
   *  A second call (Ctrl-C during cleanup) waits for the first. */
  destroy(): Promise<string[]> {
    this.destroying ??= this.doDestroy();
    return this.destroying;
  }

  private async doDestroy(): Promise<string[]> {
    this.destroyed = true;
    const problems: string[] = [];
    if (this.server && this.server.exitCode === null) {
      this.server.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 200));
      if (this.server.exitCode === null) this.server.kill('SIGKILL');
    }
    for (const dir of this.bpffsDirs.reverse()) {
      try { fs.rmSync(dir, { recursive: true, force: true }); } catch (e) { problems.push(`rm ${dir}: ${(e as Error).message}`); }
    }
    for (const ns of this.namespaces.reverse()) {
      const r = await run(['ip', 'netns', 'del', ns], { timeoutMs: 60000, allowFailure: true });
      if (r.code !== 0) problems.push(`ip netns del ${ns}: ${r.stderr.trim()}`);
    }
    for (const dir of this.cgroups.reverse()) {
      for (let i = 0; i < 20; i++) {
        try { fs.rmdirSync(dir); break; } catch (e) {
          if ((e as NodeJS.ErrnoException).code === 'ENOENT') break;
          if (i === 19) problems.push(`rmdir ${dir}: ${(e as Error).message}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    }
    return problems;
  }
}
