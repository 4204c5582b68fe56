// least-connection's connect cost at scale (issue 15): new TCP connections
// to a random one of N Services (10 backends each, the same ten for every
// Service, so every connect compares ten shared counts) through the socket
// LB with random and with least-connection, each against direct connections
// to the backends, in interleaved rounds on one harness. Ratios are paired
// by round like the main table's (median of per-round ratios).
//   node dist/bench/part.js lc [--services N] [--rounds N] [--per-round N]
// Run under flock /tmp/sluice-bench.lock (the machine is shared).
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as abi from '../src/abi/generated';
import type { Harness } from './harness';
import { backendTargets, DirectMode, serviceTargets, type Mode } from './modes';
import { runRound } from './rounds';
import { makeServicePorts, targetLines } from './services';
import { SluiceSockMode } from './sluice';
import { median, summarize, type RoundResult, type Summary } from './stats';

export interface LcConnectResult {
  services: number;
  rounds: number;
  perRound: number;
  /** Per mode: the summary and the paired p50/p99 ratios to direct. */
  modes: Array<{ mode: string; summary: Summary; p50Ratio: number; p99Ratio: number; loadMs: number }>;
  notes: string[];
}

export async function measureLcConnect(opts: {
  h: Harness; root: string; services: number; rounds: number; perRound: number; log: (m: string) => void;
}): Promise<LcConnectResult> {
  const { h, root, log } = opts;
  await h.setup();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bench-lc-'));
  const notes: string[] = [];
  try {
    const ports = makeServicePorts(opts.services, ['tcp']);
    const vips = path.join(tmp, 'vips.txt');
    const direct = path.join(tmp, 'direct.txt');
    fs.writeFileSync(vips, targetLines(serviceTargets(ports, 'tcp')));
    fs.writeFileSync(direct, targetLines(backendTargets()));
    const modes: Mode[] = [
      new DirectMode(await h.addClient('lc-direct')),
      new SluiceSockMode(await h.addClient('lc-rnd'), (t) => h.makeCgroup(t), (t) => h.makeBpffsDir(t), root),
      new SluiceSockMode(await h.addClient('lc-lc'), (t) => h.makeCgroup(t), (t) => h.makeBpffsDir(t), root, { name: 'lc', code: abi.LB_ALG_LEAST_CONN }),
    ];
    const loadMs = new Map<string, number>();
    for (const m of modes.slice(1)) {
      if (m.unavailable) throw new Error(`${m.label}: ${m.unavailable}`);
      const out = await m.load(ports, 120_000);
      if (!out.loaded) throw new Error(`${m.label}: ${out.reason}`);
      loadMs.set(m.id, out.ms);
      log(`${m.label}: ${ports.length} service ports loaded in ${(out.ms / 1000).toFixed(1)} s`);
    }
    const rounds = new Map<string, RoundResult[]>(modes.map((m) => [m.id, []]));
    const plan = { perRound: opts.perRound, warmup: 100, roundMaxMs: 6000 };
    for (let r = 0; r < opts.rounds; r++) {
      const order = r % 2 === 0 ? modes : [...modes].reverse();
      for (const m of order) {
        rounds.get(m.id)!.push(await runRound(m, 'tcp', m.usesVips ? vips : direct, plan, 31 * r + 7, h.serverPid));
      }
      log(`round ${r + 1}/${opts.rounds} done`);
    }
    const d = rounds.get('direct')!;
    const ratio = (rs: RoundResult[], key: 'p50_us' | 'p99_us') => median(rs.map((x, i) => x[key] / d[i]![key]));
    return {
      services: opts.services, rounds: opts.rounds, perRound: opts.perRound, notes,
      modes: modes.map((m) => {
        const rs = rounds.get(m.id)!;
        return { mode: m.id, summary: summarize(rs), p50Ratio: ratio(rs, 'p50_us'), p99Ratio: ratio(rs, 'p99_us'), loadMs: loadMs.get(m.id) ?? 0 };
      }),
    };
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}
