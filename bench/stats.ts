// Small statistics helpers and the per-round record of build/connbench.

/** One connbench run (its JSON line) plus the host CPU it cost. */
export interface RoundResult {
  proto: 'tcp' | 'udp';
  attempted: number;
  ok: number;
  timeouts: number;
  refused: number;
  other_errors: number;
  last_errno: number;
  wrong_peer: number;
  warmup_failed: number;
  elapsed_s: number;
  per_s: number;
  p50_us: number;
  p90_us: number;
  p99_us: number;
  max_us: number;
  mean_us: number;
  client_cpu_s: number;
  /** Connections/exchanges including the warm-up, and the client's CPU for all of them. */
  ops_total: number;
  client_cpu_total_s: number;
  /** CPU (user + system, softirq work included where it ran in their
   *  context) of the client and the server processes, ms per 1000. */
  host_cpu_ms_per_1000: number;
}

export function median(values: number[]): number {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid]! : (v[mid - 1]! + v[mid]!) / 2;
}

export interface Summary {
  rounds: number;
  p50_us: number;
  p99_us: number;
  per_s: number;
  host_cpu_ms_per_1000: number;
  ok: number;
  failed: number;
  wrong_peer: number;
}

export function summarize(rounds: RoundResult[]): Summary {
  return {
    rounds: rounds.length,
    p50_us: median(rounds.map((r) => r.p50_us)),
    p99_us: median(rounds.map((r) => r.p99_us)),
    per_s: median(rounds.map((r) => r.per_s)),
    host_cpu_ms_per_1000: median(rounds.map((r) => r.host_cpu_ms_per_1000)),
    ok: rounds.reduce((s, r) => s + r.ok, 0),
    failed: rounds.reduce((s, r) => s + r.timeouts + r.refused + r.other_errors, 0),
    wrong_peer: rounds.reduce((s, r) => s + r.wrong_peer, 0),
  };
}

/** utime + stime of a process, in ms (from /proc/PID/stat; USER_HZ = 100). */
export function processCpuMs(stat: string): number {
  // Fields after the ")" of the command name: state is field 3, utime 14, stime 15.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) * 10;
}
