// Run time per call of the socket-LB programs, measured by the kernel
// (kernel.bpf_stats_enabled: run_time_ns / run_cnt per program), while a
// bounded TCP and UDP client loop runs in a throwaway netns + cgroup.
// Root only; switches kernel.bpf_stats_enabled off again if it switched it on.
//   node dist/src/lab/hookCost.js [CONNECTIONS] [DATAGRAMS] [ALGORITHM] [BACKENDS]
// BACKENDS: how many (default 3), for algorithms whose cost grows with it (least-connection).
import * as fs from 'node:fs';
import { Sandbox, sh, sluiceBin, labScript } from './sandbox';

const STATS = '/proc/sys/kernel/bpf_stats_enabled';
const VIP = '10.96.0.40';

interface ProgStats { name: string; run_time_ns?: number; run_cnt?: number }

async function main(): Promise<void> {
  const connections = Number(process.argv[2] ?? 3000);
  const datagrams = Number(process.argv[3] ?? 3000);
  const algorithm = process.argv[4] ? ['--algorithm', process.argv[4]] : []; // sluice.io/lb-algorithm names
  const BACKENDS = Array.from({ length: Number(process.argv[5] ?? 3) }, (_, i) => `198.18.15.${2 + i}`);
  const sb = Sandbox.create('sluice-cost');
  const previous = fs.readFileSync(STATS, 'utf8').trim();
  try {
    await sb.startBackends(BACKENDS, [8080, 5353]);
    const sluice = (args: string[]) => sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
    sluice(['attach', '--cgroup', sb.cgroup]);
    sluice(['service', 'upsert', '--frontend', `${VIP}:80/tcp`, '--backends', BACKENDS.map((b) => `${b}:8080`).join(','), ...algorithm]);
    sluice(['service', 'upsert', '--frontend', `${VIP}:53/udp`, '--backends', BACKENDS.map((b) => `${b}:5353`).join(','), ...algorithm]);
    const status = JSON.parse(sluice(['status', '-o', 'json'])) as { attachments: Array<{ hook: string; programId: number }> };
    // Only the run that switched it on switches it off (other measurements
    // on the machine follow the same rule), so it never stays on.
    if (previous === '0') fs.writeFileSync(STATS, '1');
    await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', VIP, '80', String(connections)], 120000);
    await sb.runInCgroup(['node', labScript('lbClient'), 'udp', VIP, '53', String(datagrams)], 120000);
    const rows = status.attachments.map(({ hook, programId }) => {
      const p = JSON.parse(sh('bpftool', ['prog', 'show', 'id', String(programId), '-j'])) as ProgStats;
      const cnt = p.run_cnt ?? 0;
      return { hook, calls: cnt, nsPerCall: cnt ? Math.round((p.run_time_ns ?? 0) / cnt) : undefined };
    });
    process.stdout.write(JSON.stringify(rows) + '\n');
  } finally {
    if (previous === '0') fs.writeFileSync(STATS, '0');
    sb.close();
  }
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(1);
});
