// One part of `make bench` on its own, for working on it without the whole
// run (the full bench calls the same functions from main.ts):
//
//   node dist/bench/part.js controlplane [--services N] [--changes N] [--bench-shaped]
//   node dist/bench/part.js nodeport [--services N] [--rounds N]
//   node dist/bench/part.js ruleupdates [--services N] [--changes N]
//   node dist/bench/part.js upstream [--services N] [--changes N] [--cold-budget-s N] [--create-budget-s N] [--only id,id] [--write-results]   (make bench-kubeproxy)
//   node dist/bench/part.js statememory [--services N]   (no root needed)
//   node dist/bench/part.js lc [--services N] [--rounds N] [--per-round N]   (least-connection connect ratio)
//   node dist/bench/part.js maglev [--services N]        (Maglev table build time and memory)
//   node dist/bench/part.js algorithms [--services N] [--rounds N] [--per-round N]   (connect ratio per algorithm, as main.ts's rows)
//   node dist/bench/part.js clusterip [--services N] [--family 4|6] [--per-round N]   (one ClusterIP round per mode and protocol)
//   node dist/bench/part.js pod [--services N] [--rounds N] [--per-round N] [--proto tcp|udp]   (per-packet pod-veth rows: Service and non-Service p50 ratios, program ns per run)
//
// Prints the part's result as JSON. Needs root; cleans up like main.ts.
import * as path from 'node:path';
import { killRunning } from './exec';
import { Harness } from './harness';
import { measureControlPlane } from './controlplane';
import { measureNodePort } from './nodeport';
import { measureUpstream } from './upstream';
import { describeMachine, measuredCommit } from './machine';
import { loadavg, runMarkdown, writeUpstreamResults, type UpstreamRun } from './upstreamResults';
import { measureRuleUpdates } from './ruleupdates';
import { backendTargets, DirectMode, makeBaselineModes, serviceTargets } from './modes';
import { Family, makeServicePorts, targetLines } from './services';
import { SluiceSockMode, SluiceTcMode } from './sluice';
import { measurePodPath } from './podpath';
import { runRound } from './rounds';
import * as fs from 'node:fs';
import * as os from 'node:os';
import { measureStateMemory } from './statememory';
import { measureLcConnect } from './lcconnect';
import { measureAlgorithmConnect, measureMaglevBuild } from './algorithms';
import { ProgStats } from './progstats';

const ROOT = path.resolve(__dirname, '..', '..');

function flag(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

const log = (msg: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

async function main(): Promise<void> {
  const part = process.argv[2];
  const h = new Harness(ROOT);
  const onSignal = () => {
    killRunning();
    void h.destroy().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    let result: unknown;
    if (part === 'maglev') {
      result = measureMaglevBuild(flag('services', 10000), log);
    } else if (part === 'statememory') {
      result = measureStateMemory(flag('services', 10000));
    } else if (part === 'controlplane') {
      result = await measureControlPlane({
        root: ROOT, services: flag('services', 1000), changes: flag('changes', 100), settleMs: flag('settle-ms', 2000), budgetMs: flag('budget-s', 120) * 1000,
        makeCgroup: (t) => h.makeCgroup(t), makeBpffs: (t) => h.makeBpffsDir(t), log, realistic: !process.argv.includes('--bench-shaped'),
      });
    } else if (part === 'upstream') {
      const only = process.argv.indexOf('--only');
      const startedAt = new Date();
      const load0 = loadavg();
      result = await measureUpstream({
        root: ROOT, services: flag('services', 10000), changes: flag('changes', 20), coldBudgetS: flag('cold-budget-s', 300), createBudgetS: flag('create-budget-s', 900), log,
        ...(only > 0 ? { only: process.argv[only + 1]!.split(',') } : {}),
      });
      const up = result as Awaited<ReturnType<typeof measureUpstream>>;
      const run: UpstreamRun = { commit: measuredCommit(ROOT), machine: describeMachine(), startedAt: startedAt.toISOString(), durationS: (Date.now() - startedAt.getTime()) / 1000, loadavg: { start: load0, end: loadavg() }, result: up };
      process.stderr.write(runMarkdown(run).join('\n') + '\n');
      // `make bench-kubeproxy`: the run goes into the committed results file (not a QUICK one, not a skipped one).
      if (process.argv.includes('--write-results') && !up.skipped) log(`upstream: wrote ${writeUpstreamResults(path.join(ROOT, 'docs'), run).join(', ')}`);
    } else if (part === 'nodeport') {
      result = await measureNodePort({
        root: ROOT, services: flag('services', 1000), rounds: flag('rounds', 3), roundMs: flag('round-ms', 2000), budgetMs: flag('budget-s', 120) * 1000,
        suffix: h.suffix, makeCgroup: (t) => h.makeCgroup(t), makeBpffs: (t) => h.makeBpffsDir(t), log,
      });
    } else if (part === 'ruleupdates') {
      await h.setup();
      const modes = makeBaselineModes({ legacy: await h.addClient('ipt-legacy'), nft: await h.addClient('ipt-nft'), nftables: await h.addClient('nft') });
      const ports = makeServicePorts(flag('services', 1000), ['tcp', 'udp']);
      for (const m of modes) {
        const out = await m.load(ports, 300_000);
        log(`${m.label}: loaded in ${out.ms} ms`);
      }
      result = await measureRuleUpdates({
        ports, netns: { legacy: modes[0]!.client.netns, nft: modes[1]!.client.netns, nftables: modes[2]!.client.netns },
        changes: flag('changes', 20), fullChanges: flag('full-changes', 2), writeTimeoutMs: 30_000, budgetMs: flag('budget-s', 120) * 1000, log,
      });
    } else if (part === 'clusterip') {
      // The data-path half of main.ts at one scale, one family, one round each (a smoke of the rows).
      await h.setup();
      const family = flag('family', 4) as Family;
      const modes = [new DirectMode(await h.addClient('direct')), ...makeBaselineModes({ legacy: await h.addClient('ipt-legacy'), nft: await h.addClient('ipt-nft'), nftables: await h.addClient('nft') }),
        new SluiceSockMode(await h.addClient('sl-sock'), (t) => h.makeCgroup(t), (t) => h.makeBpffsDir(t), ROOT)];
      const ports = makeServicePorts(flag('services', 100), ['tcp', 'udp'], family);
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-part-'));
      const rows: unknown[] = [];
      try {
        for (const m of modes) {
          const out = await m.load(ports, 120_000);
          for (const proto of ['tcp', 'udp'] as const) {
            const file = path.join(dir, `${m.id}-${proto}.txt`);
            fs.writeFileSync(file, targetLines(m.usesVips ? serviceTargets(ports, proto) : backendTargets(family)));
            const r = await runRound(m, proto, file, { perRound: flag('per-round', 500), warmup: 20, roundMaxMs: 4000 }, 1, h.serverPid);
            rows.push({ mode: m.id, family, proto, loadMs: out.ms, ok: r.ok, attempted: r.attempted, wrong_peer: r.wrong_peer, last_errno: r.last_errno, p50_us: r.p50_us });
          }
        }
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
      result = rows;
    } else if (part === 'pod') {
      result = await measurePodPath({
        h, root: ROOT, services: flag('services', 1000), rounds: flag('rounds', 3), perRound: flag('per-round', 2000),
        protos: process.argv.includes('--proto') ? [process.argv[process.argv.indexOf('--proto') + 1] as 'tcp' | 'udp'] : ['tcp', 'udp'],
        makeTc: async () => new SluiceTcMode(await h.addClient('sl-tc'), h.backendNs, (t) => h.makeCgroup(t), (t) => h.makeBpffsDir(t), ROOT), log,
      });
    } else if (part === 'lc') {
      result = await measureLcConnect({ h, root: ROOT, services: flag('services', 10000), rounds: flag('rounds', 7), perRound: flag('per-round', 3000), log });
    } else if (part === 'algorithms') {
      // The per-algorithm connect rows of main.ts at one scale, on their own.
      await h.setup();
      const direct = new DirectMode(await h.addClient('alg-direct'));
      const sock = new SluiceSockMode(await h.addClient('alg-sock'), (t) => h.makeCgroup(t), (t) => h.makeBpffsDir(t), ROOT);
      const services = flag('services', 10000);
      const ports = makeServicePorts(services, ['tcp']);
      const out = await sock.load(ports, 120_000);
      if (!out.loaded || !sock.bpffs || !sock.cgroup) throw new Error(`${sock.label}: ${out.reason ?? 'not loaded'}`);
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-part-'));
      const progStats = new ProgStats();
      progStats.enable();
      try {
        const vips = path.join(dir, 'vips.txt');
        const backendsFile = path.join(dir, 'direct.txt');
        fs.writeFileSync(vips, targetLines(serviceTargets(ports, 'tcp')));
        fs.writeFileSync(backendsFile, targetLines(backendTargets()));
        const plan = { perRound: flag('per-round', 3000), warmup: 100, roundMaxMs: 6000 };
        result = await measureAlgorithmConnect({
          bpffs: sock.bpffs, services, rounds: flag('rounds', 3), progStats, progs: await ProgStats.cgroupPrograms(sock.cgroup), log,
          round: (via, r) => runRound(via === 'direct' ? direct : sock, 'tcp', via === 'direct' ? backendsFile : vips, plan, 7000 + r, h.serverPid),
        });
      } finally {
        progStats.restore();
        fs.rmSync(dir, { recursive: true, force: true });
      }
    } else {
      throw new Error('usage: part.js controlplane|nodeport [--services N] ...');
    }
    process.stdout.write(JSON.stringify(result, null, 1) + '\n');
  } finally {
    const problems = await h.destroy();
    if (problems.length) log(`cleanup problems: ${problems.join('; ')}`);
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`bench part: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
