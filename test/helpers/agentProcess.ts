// The real agent entry point (`bin/sluice agent`) as a child process, with its
// JSON log lines collected so tests can wait for what it says.
import { spawn, type ChildProcess } from 'node:child_process';
import { sluiceBin, waitFor } from './sandbox';

export interface AgentLogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

export class AgentProcess {
  readonly lines: AgentLogLine[] = [];
  private child: ChildProcess;
  private exited: Promise<number | null>;
  stderr = '';

  constructor(args: string[]) {
    this.child = spawn(sluiceBin, ['agent', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
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
