// One measured round: build/connbench in a mode's client namespace (and
// cgroup), p.perRound connections to the targets in targetFile, with the
// client's and the server's CPU. Shared by bench/main.ts and bench parts.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { run } from './exec';
import { cpuPinning } from './harness';
import type { Mode } from './modes';
import type { Proto } from './services';
import { processCpuMs, type RoundResult } from './stats';

const ROOT = path.resolve(__dirname, '..', '..');

/** What a round takes from the run's plan. */
export interface RoundPlan {
  perRound: number;
  warmup: number;
  roundMaxMs: number;
}

export async function runRound(mode: Mode, proto: Proto, targetFile: string, p: RoundPlan, seed: number, serverPid: number): Promise<RoundResult> {
  const bench = [
    ...cpuPinning().client, 'nsenter', `--net=/run/netns/${mode.client.netns}`, path.join(ROOT, 'build', 'connbench'),
    '--proto', proto, '--targets', targetFile, '--count', String(p.perRound), '--max-ms', String(p.roundMaxMs),
    '--warmup', String(p.warmup), '--timeout-ms', '1000', '--seed', String(seed), '--check-peer',
  ];
  // Join the cgroup first, then enter the netns: `ip netns exec` remounts
  // /sys and could not write cgroup.procs (TESTING.md).
  const argv = mode.cgroup ? ['sh', '-c', 'echo $$ > "$0/cgroup.procs" && exec "$@"', mode.cgroup, ...bench] : bench;
  const serverStat = `/proc/${serverPid}/stat`;
  const before = processCpuMs(fs.readFileSync(serverStat, 'utf8'));
  const r = await run(argv, { timeoutMs: p.roundMaxMs + p.warmup * 1000 + 10_000 });
  const after = processCpuMs(fs.readFileSync(serverStat, 'utf8'));
  const res = JSON.parse(r.stdout) as RoundResult;
  const cpuMs = res.client_cpu_total_s * 1000 + (after - before);
  res.host_cpu_ms_per_1000 = res.ops_total > 0 ? (cpuMs * 1000) / res.ops_total : NaN;
  return res;
}
