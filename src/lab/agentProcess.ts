// The real agent (`bin/sluice agent`) as a child process, for the e2e tests
// and the bench alike: its own process (so its RSS and CPU time are its own),
// its pino JSON lines collected with their timestamps so callers can wait for
// what it says and time its phases (listed, synced, first sync).
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import { sluiceBin } from './sandbox';
import { AGENT_ENV, AGENT_NODE_FLAGS } from '../agent/nodeFlags';

export interface AgentLine {
  level: number;
  /** pino's epoch milliseconds (the reader's clock for lines that are not JSON). */
  time: number;
  msg: string;
  [key: string]: unknown;
}

/**
 * The capabilities docs/deploy.md gives the agent container. The e2e tier runs
 * every agent with exactly these (and uid 0, as the DaemonSet does), so a
 * feature that quietly needs more fails there, not on a customer's node.
 */
export const AGENT_CAPS = ['bpf', 'net_admin', 'perfmon'] as const;

/** `cmd` under setpriv with exactly `caps` (inheritable, ambient and bounding), as a container runtime would. */
export function withCaps(caps: readonly string[], cmd: string[]): string[] {
  const set = ['-all', ...caps.map((c) => `+${c}`)].join(',');
  return ['setpriv', `--inh-caps=${set}`, `--ambient-caps=${set}`, `--bounding-set=${set}`, '--', ...cmd];
}

export interface AgentProcessOptions {
  /** Runs before node (e.g. ['nsenter', '--net=/run/netns/X']); it must exec, so the pid stays the agent's own. */
  prefix?: string[];
  /** Run the agent with exactly these capabilities (setpriv, after the prefix); default: the caller's own. */
  caps?: readonly string[];
  /** node's own flags before the script (default: AGENT_NODE_FLAGS, or $SLUICE_AGENT_NODE_FLAGS split on spaces, to measure others). */
  nodeFlags?: readonly string[];
}

/** The node flags of the agent, from $SLUICE_AGENT_NODE_FLAGS when it is set ("" = none). */
export function agentNodeFlags(): readonly string[] {
  const env = process.env['SLUICE_AGENT_NODE_FLAGS'];
  return env === undefined ? AGENT_NODE_FLAGS : env.split(' ').filter(Boolean);
}

/** clock ticks per second of /proc/PID/stat (USER_HZ: 100 on Linux). */
const USER_HZ = 100;

export class AgentProcess {
  readonly lines: AgentLine[] = [];
  readonly startedAt: number;
  /** Its stderr (the first 64 KiB). */
  stderr = '';
  private readonly child: ChildProcess;
  private readonly exitPromise: Promise<number | null>;
  private exitCode: number | null | undefined;
  /** Told after new lines arrived (waitForLine). */
  private readonly lineWaiters = new Set<() => void>();

  constructor(args: string[], opts: AgentProcessOptions = {}) {
    const agent = [process.execPath, ...(opts.nodeFlags ?? agentNodeFlags()), sluiceBin, 'agent', ...args];
    const argv = [...(opts.prefix ?? []), ...(opts.caps ? withCaps(opts.caps, agent) : agent)];
    this.startedAt = Date.now();
    // The caller's environment wins, so a bench can measure another MALLOC_ARENA_MAX.
    this.child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...AGENT_ENV, ...process.env } });
    let buf = '';
    this.child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        try {
          this.lines.push(JSON.parse(line) as AgentLine);
        } catch {
          this.lines.push({ level: 30, time: Date.now(), msg: line });
        }
      }
      for (const wake of [...this.lineWaiters]) wake();
    });
    this.child.stderr!.setEncoding('utf8').on('data', (d: string) => {
      if (this.stderr.length < 65536) this.stderr += d;
    });
    this.exitPromise = new Promise((resolve) => this.child.on('exit', (code) => {
      this.exitCode = code;
      resolve(code);
    }));
  }

  get pid(): number {
    if (this.child.pid === undefined) throw new Error('agent: not started');
    return this.child.pid;
  }

  get exited(): boolean {
    return this.exitCode !== undefined;
  }

  /** Resolves with the exit code once the process has ended. */
  exit(): Promise<number | null> {
    return this.exitPromise;
  }

  /** The last lines of its output, for error messages. */
  tail(): string {
    return [...this.lines.slice(-5).map((l) => l.msg), this.stderr.trim().split('\n').slice(-5).join(' | ')].join(' | ');
  }

  find(pattern: RegExp): AgentLine | undefined {
    return this.lines.find((l) => pattern.test(l.msg));
  }

  /** Resolves with the first line matching; rejects when the agent exits first or after timeoutMs. */
  async waitForLog(pattern: RegExp, timeoutMs = 15000): Promise<AgentLine> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const line = this.find(pattern);
      if (line) return line;
      if (this.exited) throw new Error(`agent exited (${this.exitCode}) before logging ${pattern}: ${this.tail()}`);
      if (Date.now() > end) throw new Error(`agent: no ${pattern} within ${timeoutMs} ms: ${this.tail()}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /**
   * The first line from index `from` on that matches, as soon as its output
   * arrives (no timer polls meanwhile: a bench timing the agent leaves the
   * CPU to it); undefined after timeoutMs or once the agent exited.
   */
  waitForLine(match: (line: AgentLine) => boolean, from: number, timeoutMs: number): Promise<{ line: AgentLine; index: number } | undefined> {
    return new Promise((resolve) => {
      let next = from;
      const finish = (found: { line: AgentLine; index: number } | undefined) => {
        this.lineWaiters.delete(check);
        clearTimeout(timer);
        resolve(found);
      };
      const check = () => {
        for (; next < this.lines.length; next++) {
          const line = this.lines[next]!;
          if (match(line)) return finish({ line, index: next });
        }
        if (this.exited) finish(undefined);
      };
      const timer = setTimeout(() => finish(undefined), timeoutMs);
      this.lineWaiters.add(check);
      void this.exitPromise.then(check);
      check();
    });
  }

  /** /proc/PID/status memory fields, bytes. */
  memory(): { vmRss: number; vmHwm: number; rssAnon: number; rssFile: number } {
    const status = fs.readFileSync(`/proc/${this.pid}/status`, 'utf8');
    const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
    return { vmRss: kib('VmRSS'), vmHwm: kib('VmHWM'), rssAnon: kib('RssAnon'), rssFile: kib('RssFile') };
  }

  /** CPU time it has used so far (user + system), ms: steadier than wall time on a busy machine. */
  cpuMs(): number {
    const stat = fs.readFileSync(`/proc/${this.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / USER_HZ;
  }

  /** `signal` (SIGTERM), then SIGKILL after graceMs; resolves with its exit code. */
  async stop(signal: NodeJS.Signals = 'SIGTERM', graceMs = 10000): Promise<number | null> {
    if (this.exited) return this.exitCode ?? null;
    this.child.kill(signal);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    const code = await this.exitPromise;
    clearTimeout(timer);
    return code;
  }
}
