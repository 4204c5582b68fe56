// The per-packet pod-veth rows of main.ts at one scale, on their own
// (`node dist/bench/part.js pod`): rounds alternate direct, Service and
// non-Service traffic through the pod programs (the order reversed every
// other round), each ratio paired with the direct round next to it, and the
// pod programs' run time (bpf_stats) per series.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Harness } from './harness';
import { DirectMode, backendTargets, serviceTargets, type Mode } from './modes';
import { ProgStats } from './progstats';
import { runRound } from './rounds';
import { makeServicePorts, targetLines, type Proto } from './services';
import type { SluiceTcMode } from './sluice';

export interface PodPathOptions {
  h: Harness;
  root: string;
  services: number;
  rounds: number;
  perRound: number;
  protos: Proto[];
  makeTc: () => Promise<SluiceTcMode>;
  log: (msg: string) => void;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)]! : NaN;
};

export async function measurePodPath(o: PodPathOptions) {
  await o.h.setup();
  const stats = new ProgStats();
  stats.enable();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-podpart-'));
  try {
    const direct = new DirectMode(await o.h.addClient('direct'));
    const tc = await o.makeTc();
    if (tc.unavailable) throw new Error(`pod part: ${tc.unavailable}`);
    const ports = makeServicePorts(o.services, ['tcp', 'udp'], 4);
    const load = await tc.load(ports, 300_000);
    if (!load.loaded) throw new Error(`pod part: load failed: ${load.reason}`);
    o.log(`pod part: ${ports.length} service ports loaded in ${load.ms} ms`);
    const progs = ProgStats.linkPrograms(tc.bpffs!, /^pod-/);
    const plan = { perRound: o.perRound, warmup: 50, roundMaxMs: 6000 };
    const out: Record<string, unknown> = {};
    for (const proto of o.protos) {
      const files = { vip: path.join(dir, `vip-${proto}`), be: path.join(dir, `be-${proto}`) };
      fs.writeFileSync(files.vip, targetLines(serviceTargets(ports, proto)));
      fs.writeFileSync(files.be, targetLines(backendTargets(4)));
      const ratios = { service: [] as number[], nonService: [] as number[] };
      const p50 = { direct: [] as number[], service: [] as number[], nonService: [] as number[] };
      for (let r = 0; r < o.rounds; r++) {
        const seed = 1000 * o.services + 17 * r + 1;
        const one = async (m: Mode, file: string, series: string) =>
          (m === direct ? runRound(m, proto, file, plan, seed, o.h.serverPid) : stats.measure(`${series} ${proto}`, progs, () => runRound(m, proto, file, plan, seed, o.h.serverPid)));
        const svc = r % 2 === 0 ? await one(tc, files.vip, 'service') : undefined;
        const d = await one(direct, files.be, 'direct');
        const svc2 = svc ?? (await one(tc, files.vip, 'service'));
        const ns = await one(tc, files.be, 'non-service');
        for (const x of [svc2, ns]) if (x.ok < x.attempted) o.log(`pod part: ${x.attempted - x.ok} failed (errno ${x.last_errno})`);
        p50.direct.push(d.p50_us);
        p50.service.push(svc2.p50_us);
        p50.nonService.push(ns.p50_us);
        ratios.service.push(svc2.p50_us / d.p50_us);
        ratios.nonService.push(ns.p50_us / d.p50_us);
      }
      out[proto] = {
        p50_us: p50, ratio: ratios,
        median: { service: median(ratios.service), nonService: median(ratios.nonService) },
      };
    }
    out.progs = stats.rows().map((r) => ({ series: r.series, program: r.program, runs: r.runs, nsPerRun: Math.round(r.nsPerRun) }));
    return out;
  } finally {
    stats.restore();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
