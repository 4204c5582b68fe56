// Processes the cluster harness starts: each in its own process group (so a
// stop reaches its children), output to a log file, and stopped by pid only.
import { spawn, execFile } from 'node:child_process';
import { openSync, closeSync, readFileSync, existsSync } from 'node:fs';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

export interface ManagedProcess {
  name: string;
  pid: number;
  logPath: string;
  /** Resolves with the exit code (or signal name) once the process has ended. */
  exited: Promise<string>;
}

/**
 * Start `argv` detached in a new process group with stdout+stderr appended to
 * logPath. Detached so `harness up` can exit and leave the cluster running;
 * `stopProcess` (or `harness down`) ends it by its recorded pid.
 */
export function startProcess(name: string, argv: string[], logPath: string, env?: NodeJS.ProcessEnv): ManagedProcess {
  const [cmd, ...args] = argv;
  if (!cmd) throw new Error(`start ${name}: empty command line`);
  const fd = openSync(logPath, 'a');
  const child = spawn(cmd, args, { detached: true, stdio: ['ignore', fd, fd], env: env ?? process.env });
  closeSync(fd);
  if (child.pid === undefined) throw new Error(`start ${name}: spawn ${cmd} failed (see ${logPath})`);
  const exited = new Promise<string>((resolve) => {
    child.on('exit', (code, signal) => resolve(signal ?? String(code)));
    child.on('error', (err) => resolve(`spawn error: ${err.message}`));
  });
  child.unref();
  return { name, pid: child.pid, logPath, exited };
}

export function isAlive(pid: number): boolean {
  try { process.kill(pid, 0); return true; } catch { return false; }
}

/** SIGTERM the process group, then SIGKILL after graceMs. Never fails on an already-gone process. */
export async function stopPid(pid: number, graceMs = 5000): Promise<void> {
  const signalGroup = (sig: NodeJS.Signals): void => {
    try { process.kill(-pid, sig); } catch { try { process.kill(pid, sig); } catch { /* gone */ } }
  };
  if (!isAlive(pid)) return;
  signalGroup('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    if (!isAlive(pid) || isZombie(pid)) return;
    await sleep(100);
  }
  signalGroup('SIGKILL');
  const killDeadline = Date.now() + 3000;
  while (Date.now() < killDeadline && isAlive(pid) && !isZombie(pid)) await sleep(50);
}

function isZombie(pid: number): boolean {
  try { return /^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8')); } catch { return false; }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** The last `lines` lines of a log file, for error messages. */
export function tailLog(path: string, lines = 15): string {
  if (!existsSync(path)) return `(no log at ${path})`;
  return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
}

/** Run a command to completion (bounded by timeoutMs); throws an error naming the command and its stderr. */
export async function run(argv: string[], opts: { timeoutMs?: number; input?: string; env?: NodeJS.ProcessEnv } = {}): Promise<string> {
  const [cmd, ...args] = argv;
  if (!cmd) throw new Error('run: empty command line');
  if (opts.input !== undefined) return runWithInput(cmd, args, opts.input, opts.timeoutMs ?? 60_000, opts.env);
  try {
    const { stdout } = await execFileP(cmd, args, {
      timeout: opts.timeoutMs ?? 60_000, maxBuffer: 64 << 20, env: opts.env ?? process.env,
    });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`${argv.join(' ')}: ${(e.stderr || e.message).trim()}`);
  }
}

function runWithInput(cmd: string, args: string[], input: string, timeoutMs: number, env?: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], env: env ?? process.env });
    let out = '';
    let err = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    child.on('error', (e) => { clearTimeout(timer); reject(new Error(`${cmd}: ${e.message}`)); });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(Object.assign(new Error(`${cmd} ${args.join(' ')} exited ${signal ?? code}: ${(err || out).trim()}`), { stdout: out }));
    });
    child.stdin.end(input);
  });
}

/** Thrown from a waitFor check to stop waiting at once (e.g. the process being waited on has died). */
export class FatalWaitError extends Error {}

/**
 * Poll `check` until it returns a value (not undefined) or timeoutMs passes; the error names `what`.
 * Errors from `check` count as "not yet", except FatalWaitError, which ends the wait.
 */
export async function waitFor<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>, intervalMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError = '';
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (err) {
      if (err instanceof FatalWaitError) throw err;
      lastError = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${lastError}` : ''}`);
    await sleep(intervalMs);
  }
}
