// The real agent entry point (`bin/sluice agent`) as a child process, with its
// JSON log lines collected so tests can wait for what it says.
import { spawn, type ChildProcess } from 'node:child_process';
import { sluiceBin, waitFor } from './sandbox';

export interface AgentLogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

/**
 * The capabilities docs/deploy.md gives the agent container. The e2e tier runs
 * every agent with exactly these (and uid 0, as the DaemonSet does), so a
 * feature that quietly needs more fails here, not on a customer's node.
 */
export const AGENT_CAPS = ['bpf', 'net_admin', 'perfmon'] as const;

/** `cmd` under setpriv with exactly `caps` (inheritable, ambient and bounding), as a container runtime would. */
export function withCaps(caps: readonly string[], cmd: string[]): string[] {
  const set = ['-all', ...caps.map((c) => `+${c}`)].join(',');
  return ['setpriv', `--inh-caps=${set}`, `--ambient-caps=${set}`, `--bounding-set=${set}`, '--', ...cmd];
}

export interface AgentProcessOptions {
  /** Capabilities instead of AGENT_CAPS (a test that needs more says so, and why). */
  caps?: readonly string[];
}

export class AgentProcess {
  readonly lines: AgentLogLine[] = [];
  private child: ChildProcess;
  private exited: Promise<number | null>;
  stderr = '';

  constructor(args: string[], opts: AgentProcessOptions = {}) {
    // The machine's /run/netns holds other tests' namespaces: an agent under
    // test walks only the ones its test names (stale-socket termination).
    const netns = args.some((a) => a.startsWith('--stale-socket-netns')) ? [] : ['--stale-socket-netns='];
    const [cmd, ...rest] = withCaps(opts.caps ?? AGENT_CAPS, [sluiceBin, 'agent', ...args, ...netns]);
    this.child = spawn(cmd!, rest, { stdio: ['ignore', 'pipe', 'pipe'] });
    let buf = '';
    this.child.stdout!.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        try {
          this.lines.push(JSON.parse(line) as AgentLogLine);
        } catch {
          this.lines.push({ level: 30, msg: line });
        }
      }
    });
    this.child.stderr!.on('data', (d) => (this.stderr += d));
    this.exited = new Promise((resolve) => this.child.on('exit', (code) => resolve(code)));
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Resolves with the exit code once the process has ended. */
  exit(): Promise<number | null> {
    return this.exited;
  }

  find(pattern: RegExp): AgentLogLine | undefined {
    return this.lines.find((l) => pattern.test(l.msg));
  }

  async waitForLog(pattern: RegExp, timeoutMs = 15000): Promise<AgentLogLine> {
    await waitFor(`agent log ${pattern}`, () => this.find(pattern) !== undefined || this.child.exitCode !== null, timeoutMs);
    const line = this.find(pattern);
    if (!line) throw new Error(`agent exited (${this.child.exitCode}) before logging ${pattern}; stderr: ${this.stderr}; log: ${this.lines.map((l) => l.msg).join(' | ')}`);
    return line;
  }

  /** SIGTERM and wait: the agent leaves maps and programs in place. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    if (this.child.exitCode === null) this.child.kill(signal);
    const timeout = new Promise<null>((r) => setTimeout(() => r(null), 10000));
    const code = await Promise.race([this.exited, timeout]);
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
    return code;
  }
}
