// The machine description printed with every bench report.
import * as fs from 'node:fs';
import * as os from 'node:os';
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';

export interface MachineInfo {
  hostname: string;
  cpuModel: string;
  nproc: number;
  memoryMiB: number;
  kernel: string;
  tools: Record<string, string>;
  date: string;
}

function version(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'pipe'] }).split('\n')[0]!.trim();
  } catch {
    return 'not found';
  }
}

export function describeMachine(): MachineInfo {
  const cpuinfo = fs.readFileSync('/proc/cpuinfo', 'utf8');
  const model = /model name\s*:\s*(.*)/.exec(cpuinfo)?.[1] ?? os.cpus()[0]?.model ?? 'unknown';
  return {
    hostname: os.hostname(),
    cpuModel: model.trim(),
    nproc: os.cpus().length,
    memoryMiB: Math.round(os.totalmem() / 1048576),
    kernel: `${os.type()} ${os.release()}`,
    tools: {
      iptables: version('iptables', ['--version']),
      nft: version('nft', ['--version']),
      clang: version('clang', ['--version']),
      node: process.version,
    },
    date: new Date().toISOString(),
  };
}

/** HEAD, marked +dirty when the work tree differs from it (the numbers then belong to no commit). */
export function measuredCommit(root = path.resolve(__dirname, '..', '..')): string | undefined {
  const git = (...args: string[]) => execFileSync('git', ['-C', root, ...args], { encoding: 'utf8' }).trim();
  try {
    const head = git('rev-parse', 'HEAD');
    return git('status', '--porcelain', '--untracked-files=no') ? `${head}+dirty` : head;
  } catch {
    return undefined;
  }
}
