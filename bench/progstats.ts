// Program time per run inside `make bench` (issue 12): the kernel's own
// run_time_ns / run_cnt of each Sluice program (kernel.bpf_stats_enabled=1
// for the run only: switched on at the start if it was off, and back to 0 at
// the end; left alone when something else had it on, since the sysctl is
// machine-wide). Stats overhead (two clock reads per run) is included, as
// bpftool prog and every other reader of these counters includes it.
//
// Only the programs this bench attached are read (by kernel id: the ones on
// the bench cgroup, or behind the pinned links of the bench's bpffs
// directory), and each is read just before and just after the traffic of one
// series, so the time of another helper's copy of the same program, or of the
// same program under another series' traffic, is never counted.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { BpfLink } from '../src/bpf/link';
import { progInfo } from '../src/bpf/program';
import { run } from './exec';

const STATS_SYSCTL = '/proc/sys/kernel/bpf_stats_enabled';

export interface ProgRef {
  id: number;
  /** The kernel's name (the C function name, 15 characters at most). */
  name: string;
}

/** One program under one series' traffic. */
export interface ProgStatRow {
  /** What ran: e.g. "socket LB, 10000 Services, TCP". */
  series: string;
  services?: number;
  program: string;
  runs: number;
  ns: number;
  nsPerRun: number;
}

/** Targets of issue 12, ns per run; `series` picks the rows the target is judged on. */
export const PROGRAM_TARGETS: Array<{ program: string; maxNs: number; what: string; series: RegExp }> = [
  { program: 'sluice_connect4', maxNs: 150, what: 'connect4 (socket LB)', series: /^socket LB/ },
  { program: 'sluice_sendmsg4', maxNs: 200, what: 'sendmsg4 (socket LB, unconnected UDP)', series: /^socket LB/ },
  { program: 'sluice_recvmsg4', maxNs: 100, what: 'recvmsg4 (socket LB, unconnected UDP)', series: /^socket LB/ },
  { program: 'sluice_getpeer4', maxNs: 100, what: 'getpeername4 (socket LB)', series: /^socket LB/ },
  // Issue 14: the IPv6 hooks under the IPv6 rows' traffic, held to their IPv4 twins' limits.
  { program: 'sluice_connect6', maxNs: 150, what: 'connect6 (socket LB, IPv6)', series: /^socket LB \(IPv6\)/ },
  { program: 'sluice_sendmsg6', maxNs: 200, what: 'sendmsg6 (socket LB, IPv6, unconnected UDP)', series: /^socket LB \(IPv6\)/ },
  { program: 'sluice_recvmsg6', maxNs: 100, what: 'recvmsg6 (socket LB, IPv6, unconnected UDP)', series: /^socket LB \(IPv6\)/ },
  { program: 'sluice_getpeer6', maxNs: 100, what: 'getpeername6 (socket LB, IPv6)', series: /^socket LB \(IPv6\)/ },
  { program: 'sluice_tc_ingre', maxNs: 300, what: 'TC ingress of a known flow (NodePort, UDP flows)', series: /^NodePort .*UDP/ },
  { program: 'sluice_pod_ingr', maxNs: 400, what: 'pod ingress (pod veth, per packet)', series: /^per-packet/ },
];

export class ProgStats {
  private before?: string;
  private readonly acc = new Map<string, ProgStatRow>();
  notes: string[] = [];

  /** Turns kernel.bpf_stats_enabled on (remembering whether it was). */
  enable(): void {
    try {
      this.before = fs.readFileSync(STATS_SYSCTL, 'utf8').trim();
      if (this.before === '0') fs.writeFileSync(STATS_SYSCTL, '1');
    } catch (e) {
      this.notes.push(`program time not measured: ${(e as Error).message}`);
    }
  }

  /** Back to 0 if it was 0 before enable(). */
  restore(): void {
    if (this.before === '0') {
      try {
        fs.writeFileSync(STATS_SYSCTL, '0');
      } catch { /* reported by the next reader */ }
    }
    this.before = undefined;
  }

  get enabled(): boolean {
    return this.before !== undefined;
  }

  /** Programs attached to a cgroup with BPF_PROG_ATTACH (bench/sluiceload.c) or links. */
  static async cgroupPrograms(cgroup: string): Promise<ProgRef[]> {
    const r = await run(['bpftool', '-j', 'cgroup', 'show', cgroup], { timeoutMs: 5000, allowFailure: true });
    if (r.code !== 0 || !r.stdout.trim()) return [];
    return (JSON.parse(r.stdout) as Array<{ id: number; name: string }>).map((p) => ({ id: p.id, name: p.name }));
  }

  /** Programs behind the pinned links of a bpffs directory (<bpffs>/links/*), optionally only names matching. */
  static linkPrograms(bpffs: string, match?: RegExp): ProgRef[] {
    const dir = path.join(bpffs, 'links');
    const out: ProgRef[] = [];
    if (!fs.existsSync(dir)) return out;
    for (const f of fs.readdirSync(dir)) {
      if (match && !match.test(f)) continue;
      let link: BpfLink | undefined;
      try {
        link = BpfLink.fromPinned(path.join(dir, f));
        const id = link.info().progId;
        if (!out.some((p) => p.id === id)) out.push({ id, name: progInfo(id).name });
      } catch { /* gone meanwhile */ } finally {
        link?.close();
      }
    }
    return out;
  }

  private read(progs: ProgRef[]): Map<number, { runs: bigint; ns: bigint }> {
    const m = new Map<number, { runs: bigint; ns: bigint }>();
    for (const p of progs) {
      try {
        const i = progInfo(p.id);
        m.set(p.id, { runs: i.runCount, ns: i.runTimeNs });
      } catch { /* unloaded */ }
    }
    return m;
  }

  /** Runs fn and adds each program's runs and time during it to `series`. */
  async measure<T>(series: string, progs: ProgRef[], fn: () => Promise<T>, services?: number): Promise<T> {
    if (!this.enabled || progs.length === 0) return fn();
    const a = this.read(progs);
    const out = await fn();
    const b = this.read(progs);
    for (const p of progs) {
      const x = a.get(p.id);
      const y = b.get(p.id);
      if (!x || !y) continue;
      const key = `${series}\0${p.name}`;
      const row = this.acc.get(key) ?? { series, services, program: p.name, runs: 0, ns: 0, nsPerRun: NaN };
      row.runs += Number(y.runs - x.runs);
      row.ns += Number(y.ns - x.ns);
      row.nsPerRun = row.runs > 0 ? row.ns / row.runs : NaN;
      this.acc.set(key, row);
    }
    return out;
  }

  /** Rows with runs, in the order first measured. */
  rows(): ProgStatRow[] {
    return [...this.acc.values()].filter((r) => r.runs > 0);
  }
}
