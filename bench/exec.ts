// Child processes for the bench: every one bounded in time, every failure
// named (what ran, why it failed, the tail of its stderr).
import { spawn } from 'node:child_process';

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
  timedOut: boolean;
}

export interface RunOptions {
  timeoutMs: number;
  input?: string;
  /** Resolve instead of throwing on a non-zero exit or a timeout. */
  allowFailure?: boolean;
}

export class RunError extends Error {
  constructor(readonly what: string, readonly result: RunResult) {
    super(
      `${what}: ${result.timedOut ? `timed out after ${result.ms} ms` : `exit code ${result.code}`}` +
        (result.stderr ? `: ${result.stderr.trim().split('\n').slice(-3).join(' | ')}` : ''),
    );
  }
}

/** Process groups of the children still running, for killRunning(). */
const running = new Set<number>();

/** Kills every child process group still running (on Ctrl-C). */
export function killRunning(): void {
  for (const pid of running) {
    try { process.kill(-pid, 'SIGKILL'); } catch { /* already gone */ }
  }
  running.clear();
}

/** Runs argv[0] with argv[1..], kills its whole process group at timeoutMs. */
export function run(argv: string[], opts: RunOptions): Promise<RunResult> {
  const [cmd, ...args] = argv;
  if (cmd === undefined) throw new Error('run: empty argv');
  const what = argv.slice(0, 4).join(' ');
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    const pid = child.pid;
    if (pid !== undefined) running.add(pid);
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.setEncoding('utf8').on('data', (d: string) => { stdout += d; });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      if (stderr.length < 65536) stderr += d;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      if (child.pid !== undefined) {
        try { process.kill(-child.pid, 'SIGKILL'); } catch { /* already gone */ }
      }
    }, opts.timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`${what}: cannot start: ${err.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      if (pid !== undefined) running.delete(pid);
      const result = { code, stdout, stderr, ms: Date.now() - started, timedOut };
      if ((code !== 0 || timedOut) && !opts.allowFailure) reject(new RunError(what, result));
      else resolve(result);
    });
    child.stdin.on('error', () => { /* the child may exit before reading all input */ });
    child.stdin.end(opts.input ?? '');
  });
}

/** Runs a command inside a named network namespace (ip netns exec). */
export function inNetns(netns: string, argv: string[], opts: RunOptions): Promise<RunResult> {
  return run(['ip', 'netns', 'exec', netns, ...argv], opts);
}
