// A throwaway lab for tests and the demo: a network namespace with no route
// out, a child cgroup (never the root one) and a bpffs directory, all with
// unique names, all removed by close() even when something failed.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import { cgroup2Mount } from '../datapath/sockLb';

export function sh(cmd: string, args: string[], opts: { input?: string } = {}): string {
  return execFileSync(cmd, args, { encoding: 'utf8', input: opts.input, stdio: ['pipe', 'pipe', 'pipe'] });
}

export function cgroup2Root(): string {
  return cgroup2Mount();
}

export function bpffsRoot(): string {
  for (const line of fs.readFileSync('/proc/mounts', 'utf8').split('\n')) {
    const [, mnt, type] = line.split(' ');
    if (type === 'bpf') return mnt!;
  }
  throw new Error('bpffs is not mounted (make deps mounts it)');
}

export class Sandbox {
  readonly netns: string;
  readonly cgroup: string;
  readonly bpffs: string;
  private readonly children = new Set<ChildProcess>();
  private extraNetns: string[] = [];

  private constructor(readonly id: string, prefix: string) {
    this.netns = `${prefix}-${id}`;
    this.cgroup = path.join(cgroup2Root(), `${prefix}-${id}`);
    this.bpffs = path.join(bpffsRoot(), `${prefix}-${id}`);
  }

  /** Create the netns (loopback up, no other link), the child cgroup and the bpffs dir. */
  static create(prefix = 'sluice-test'): Sandbox {
    const sb = new Sandbox(randomBytes(4).toString('hex'), prefix);
    try {
      sh('ip', ['netns', 'add', sb.netns]);
      // IPv6 on inside the namespace whatever the host's defaults (issue 14 tests use fd00::/8).
      sb.execInNetns(['sysctl', '-q', '-w', 'net.ipv6.conf.all.disable_ipv6=0', 'net.ipv6.conf.default.disable_ipv6=0']);
      sb.ip(['link', 'set', 'lo', 'up']);
      fs.mkdirSync(sb.cgroup);
    } catch (err) {
      sb.close();
      throw err;
    }
    return sb;
  }

  /** `ip` inside the namespace. */
  ip(args: string[]): string {
    return sh('ip', ['-n', this.netns, ...args]);
  }

  addNetns(suffix: string): string {
    const name = `${this.netns}-${suffix}`;
    sh('ip', ['netns', 'add', name]);
    this.extraNetns.push(name);
    sh('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
    return name;
  }

  /** Run a command in the namespace (not in the cgroup). */
  execInNetns(cmd: string[], netns = this.netns): string {
    return sh('nsenter', [`--net=/run/netns/${netns}`, '--', ...cmd]);
  }

  /** Start a long-running process in the namespace; killed by close(). */
  spawnInNetns(cmd: string[], netns = this.netns): ChildProcess {
    const child = spawn('nsenter', [`--net=/run/netns/${netns}`, '--', ...cmd], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.track(child);
    return child;
  }

  /**
   * Run a process inside the cgroup *and* the namespace. It joins the cgroup
   * first and then enters the netns: `ip netns exec` would remount /sys and
   * make cgroup.procs unwritable (TESTING.md).
   */
  spawnInCgroup(cmd: string[], netns = this.netns): ChildProcess {
    const script = `echo $$ > ${this.cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${netns} -- "$@"`;
    const child = spawn('sh', ['-c', script, 'sh', ...cmd], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.track(child);
    return child;
  }

  /** Run to completion in cgroup + netns; resolves with stdout, rejects with stderr. */
  runInCgroup(cmd: string[], timeoutMs = 30000, netns = this.netns): Promise<string> {
    return collect(this.spawnInCgroup(cmd, netns), timeoutMs, cmd.join(' '));
  }

  /**
   * Backend "pods" on the namespace's loopback: each address added as a /32
   * on lo, one backendServer serving TCP and UDP on every address:port.
   * Resolves once they all listen.
   */
  async startBackends(addresses: string[], ports: number[]): Promise<ChildProcess> {
    // IPv6 addresses: no duplicate address detection, usable at once.
    for (const a of addresses) this.ip(['addr', 'add', a.includes(':') ? `${a}/128` : `${a}/32`, 'dev', 'lo', ...(a.includes(':') ? ['nodad'] : [])]);
    const server = this.spawnInNetns(['node', labScript('backendServer'), ...addresses.flatMap((a) => ports.map((p) => `${a}:${p}`))]);
    let ready = false;
    server.stdout!.on('data', (d) => { if (String(d).includes('ready')) ready = true; });
    await waitFor('backend servers', () => ready);
    return server;
  }

  private track(child: ChildProcess): void {
    this.children.add(child);
    child.on('exit', () => this.children.delete(child));
  }

  close(): void {
    for (const child of this.children) child.kill('SIGKILL');
    for (const ns of [...this.extraNetns, this.netns]) {
      try { sh('ip', ['netns', 'del', ns]); } catch { /* already gone */ }
    }
    if (fs.existsSync(this.cgroup)) {
      // Processes still in the cgroup were killed above; wait for them to go.
      for (let i = 0; i < 50; i++) {
        try { fs.rmdirSync(this.cgroup); break; } catch { sh('sleep', ['0.1']); }
      }
    }
    fs.rmSync(this.bpffs, { recursive: true, force: true });
  }
}

export function collect(child: ChildProcess, timeoutMs: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stdout?.on('data', (d) => (out += d));
    child.stderr?.on('data', (d) => (err += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${what}: timed out after ${timeoutMs} ms; stderr: ${err}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${what}: exit ${code}; stderr: ${err.trim()}`));
    });
  });
}

/** Wait until `probe` returns true, bounded. */
export async function waitFor(what: string, probe: () => boolean | Promise<boolean>, timeoutMs = 10000, intervalMs = 50): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out waiting for ${what}`);
}

export const repoRoot = path.resolve(__dirname, '..', '..', '..');
export const sluiceBin = path.join(repoRoot, 'bin', 'sluice');
/** The lab's traffic programs, compiled next to this file. */
export const labScript = (name: 'backendServer' | 'lbClient' | 'rawSock' | 'holdClient') => path.join(__dirname, `${name}.js`);
