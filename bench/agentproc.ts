// The real agent (`bin/sluice agent`) as a child process of the bench: its own
// process, so its RSS is its own; its pino JSON lines collected with their
// timestamps, so the bench can time phases (listed, synced, first sync).
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

export interface AgentLine {
  level: number;
  time: number;
  msg: string;
  [key: string]: unknown;
}

export class AgentProcess {
  readonly lines: AgentLine[] = [];
  readonly startedAt: number;
  private readonly child: ChildProcess;
  private stderr = '';
  private exitCode: number | null | undefined;

  /**
   * `prefix` runs before node (e.g. ['nsenter', '--net=/run/netns/X']); it
   * must exec, so the pid stays the agent's own.
   */
  constructor(root: string, args: string[], prefix: string[] = []) {
    const argv = [...prefix, process.execPath, path.join(root, 'bin', 'sluice'), 'agent', ...args];
    this.startedAt = Date.now();
    this.child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
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
    });
    this.child.stderr!.setEncoding('utf8').on('data', (d: string) => {
      if (this.stderr.length < 65536) this.stderr += d;
    });
    this.child.on('exit', (code) => { this.exitCode = code; });
  }

  get pid(): number {
    if (this.child.pid === undefined) throw new Error('agent: not started');
    return this.child.pid;
  }

  get exited(): boolean {
    return this.exitCode !== undefined;
  }

  /** The last lines of its output, for error messages. */
  tail(): string {
    return [...this.lines.slice(-5).map((l) => l.msg), this.stderr.trim().split('\n').slice(-5).join(' | ')].join(' | ');
  }

  find(pattern: RegExp): AgentLine | undefined {
    return this.lines.find((l) => pattern.test(l.msg));
  }

  /** Resolves with the first line matching, rejects when the agent exits or after timeoutMs. */
  async waitFor(pattern: RegExp, timeoutMs: number): Promise<AgentLine> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const line = this.find(pattern);
      if (line) return line;
      if (this.exited) throw new Error(`agent exited (${this.exitCode}) before logging ${pattern}: ${this.tail()}`);
      if (Date.now() > end) throw new Error(`agent: no ${pattern} within ${timeoutMs} ms: ${this.tail()}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /** /proc/PID/status memory fields, bytes. */
  memory(): { vmRss: number; vmHwm: number; rssAnon: number; rssFile: number } {
    const status = fs.readFileSync(`/proc/${this.pid}/status`, 'utf8');
    const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
    return { vmRss: kib('VmRSS'), vmHwm: kib('VmHWM'), rssAnon: kib('RssAnon'), rssFile: kib('RssFile') };
  }

  /** SIGTERM, then SIGKILL after graceMs; resolves once it has exited. */
  async stop(graceMs = 3000): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<void>((r) => this.child.once('exit', () => r()));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    await gone;
    clearTimeout(timer);
  }
}
