// The Sluice rows of the bench.
//
// Socket LB: the lead's object build/sock_lb.bpf.o, loaded by bench/sluiceload
// (libbpf) with its services/backends/rev-NAT maps sized for the scale,
// pinned under a bench bpffs directory and attached to a bench child cgroup
// that the client process joins; the maps are filled with batch updates in the
// agent's make-before-break order. Loading through our own small loader (and
// not the `sluice attach` CLI) is what lets 100 000 Services fit: the default
// range array in sluice_abi.h holds 524 288 backend ids.
//
// Extension points: when the agent's programmatic API should program the
// maps instead (to time programming, issue item 4), replace SluiceSockMode.fill;
// the per-packet path (TC on the pod veth, build/pod_lb.bpf.o) is SluiceTcMode.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { run } from './exec';
import type { ClientNs } from './harness';
import type { LoadOutcome, Mode } from './modes';
import { backends, Family, familyOf, hostPort, ServicePort } from './services';

/** sluiceload's default service entries (masters); SLUICE_MAX_RANGE4 in native/sluice_abi.h. */
const DEFAULT_SERVICE_ENTRIES = 262144;
const DEFAULT_RANGE_ENTRIES = 524288;
/** SLUICE_MAX_SERVICE_ENTRIES: the IPv6 map's masters (one per service port, as IPv4). */
// Masters only (the range layout, as IPv4): was 524 288 for the slot layout, which sized sluice_rng6 at 5 M ids (40 MiB).
const DEFAULT_SERVICE6_ENTRIES = 262144;

/**
 * The one setup path of both Sluice modes: sock_lb's maps attached by
 * sluiceload with capacities for the scale, then filled with batch updates.
 *
 * Attach with the default capacities of sluice_abi.h (what the agent
 * creates), or, when a scale needs more service entries than that, in a
 * fresh cgroup + bpffs directory with maps sized for it: max_entries is fixed
 * at map creation, and a hash map's bucket array follows max_entries, so
 * sizing every scale for 100 000 Services would inflate the memory measured
 * at 10 000. The old cgroup and directory go at cleanup.
 */
class SizedMaps {
  bpffs?: string;
  cgroup?: string;
  private capacity = 0;

  constructor(
    private readonly tag: string,
    private readonly makeCgroup: (tag: string) => string,
    private readonly makeBpffs: (tag: string) => string,
    private readonly root: string,
    /** LB_ALG_* of every master entry (random by default). */
    private readonly algorithm = 0,
  ) {}

  static missing(root: string): string | undefined {
    for (const f of [path.join(root, 'build', 'sock_lb.bpf.o'), path.join(root, 'build', 'sluiceload')]) {
      if (!fs.existsSync(f)) return `${f} not built (make build; make bench)`;
    }
    return undefined;
  }

  private get loader(): string {
    return path.join(this.root, 'build', 'sluiceload');
  }

  /** Maps with room for `servicePorts`; returns the previous bpffs directory when it made new ones. */
  async ensure(servicePorts: number): Promise<{ fresh: boolean; previous?: string }> {
    // One master per service port in the hash, ten backend ids each in the range array.
    const needed = servicePorts * 10;
    if (this.bpffs && needed <= this.capacity) return { fresh: false };
    const ranges = Math.max(DEFAULT_RANGE_ENTRIES, Math.ceil(needed * 1.05));
    const entries = Math.max(DEFAULT_SERVICE_ENTRIES, Math.ceil(servicePorts * 1.05));
    const tag = `${this.tag}${ranges > DEFAULT_RANGE_ENTRIES ? ranges : ''}`;
    const cgroup = this.makeCgroup(tag);
    const bpffs = this.makeBpffs(tag);
    await run([
      this.loader, 'attach', '--obj', path.join(this.root, 'build', 'sock_lb.bpf.o'), '--bpffs', bpffs, '--cgroup', cgroup,
      '--service-entries', String(entries), '--ranges', String(ranges), '--backends', '131072', '--revnat', String(Math.max(65536, servicePorts)),
      // IPv6: one master per service port too (its range array is sized by the loader).
      '--service6-entries', String(Math.max(DEFAULT_SERVICE6_ENTRIES, Math.ceil(servicePorts * 1.05))),
    ], { timeoutMs: 30000 });
    const previous = this.bpffs;
    this.cgroup = cgroup;
    this.bpffs = bpffs;
    this.capacity = ranges;
    return { fresh: true, previous };
  }

  /** The Services (of one family) with the bench's ten backends each, in the agent's make-before-break order. */
  async fill(ports: ServicePort[], budgetMs: number): Promise<LoadOutcome> {
    if (!this.bpffs) throw new Error(`${this.tag}: no bpffs directory after attach`);
    const file = path.join(os.tmpdir(), `sluice-bench-${this.tag}-${process.pid}.txt`);
    fs.writeFileSync(file, ports.map((p) => `${p.vip} ${p.port} ${p.proto}`).join('\n') + '\n');
    const t0 = Date.now();
    try {
      const be = backends(familyOf(ports)).map((b) => hostPort(b.address, b.port)).join(',');
      const r = await run([this.loader, 'fill', '--bpffs', this.bpffs, '--services', file, '--backends', be, '--algorithm', String(this.algorithm)], { timeoutMs: budgetMs, allowFailure: true });
      if (r.timedOut) return { loaded: false, ms: Date.now() - t0, reason: `not loadable within the budget (${Math.round(budgetMs / 1000)} s)` };
      if (r.code !== 0) return { loaded: false, ms: Date.now() - t0, reason: `sluiceload fill failed: ${r.stderr.trim()}` };
    } finally {
      fs.rmSync(file, { force: true });
    }
    return { loaded: true, ms: Date.now() - t0 };
  }
}

export class SluiceSockMode implements Mode {
  readonly id: string = 'sluice-sock';
  readonly label: string = 'Sluice socket LB';
  readonly usesVips = true;
  readonly families: readonly Family[] = [4, 6];
  unavailable?: string;
  private readonly maps: SizedMaps;

  constructor(
    readonly client: ClientNs,
    makeCgroup: (tag: string) => string,
    makeBpffs: (tag: string) => string,
    root: string,
    /** Another algorithm than random (bench/lcconnect.ts): its own maps and cgroup, and its name in id and label. */
    algorithm?: { name: string; code: number },
  ) {
    this.unavailable = SizedMaps.missing(root);
    if (algorithm) {
      this.id = `sluice-sock-${algorithm.name}`;
      this.label = `Sluice socket LB, ${algorithm.name}`;
    }
    this.maps = new SizedMaps(algorithm ? `sock${algorithm.name}` : 'sock', makeCgroup, makeBpffs, root, algorithm?.code);
  }

  /** The client joins this cgroup: its connects go through the socket hooks. */
  get cgroup(): string | undefined {
    return this.maps.cgroup;
  }

  /** The pinned maps' directory (h-maglev: the algorithm rows re-mark its masters). */
  get bpffs(): string | undefined {
    return this.maps.bpffs;
  }

  async ensureCapacity(servicePorts: number): Promise<void> {
    await this.maps.ensure(servicePorts);
  }

  async load(ports: ServicePort[], budgetMs: number): Promise<LoadOutcome> {
    await this.maps.ensure(ports.length);
    return this.maps.fill(ports, budgetMs);
  }

  /**
   * Nothing to do: scales run in increasing order and service port i is the
   * same (VIP, port, proto) at every scale, so the next fill overwrites these
   * entries and adds the rest; the maps always hold exactly the current scale.
   * Everything goes with the bpffs directory and the cgroup at the end.
   */
  async unload(): Promise<void> {}

  /** BPF map memory (bpftool's memlock) of the maps pinned for this mode. */
  async facts(): Promise<Record<string, number | string>> {
    const bpffs = this.maps.bpffs;
    if (!bpffs) return {};
    const out: Record<string, number | string> = {};
    let total = 0;
    for (const name of fs.readdirSync(bpffs)) {
      const r = await run(['bpftool', '-j', 'map', 'show', 'pinned', path.join(bpffs, name)], { timeoutMs: 5000, allowFailure: true });
      if (r.code !== 0) continue;
      const info = JSON.parse(r.stdout) as { bytes_memlock?: number };
      if (typeof info.bytes_memlock === 'number') {
        out[`map_bytes_${name}`] = info.bytes_memlock;
        total += info.bytes_memlock;
      }
    }
    out.map_bytes_total = total;
    return out;
  }
}

/**
 * Sluice per-packet path: build/pod_lb.bpf.o on the client's veth, as the
 * CNI plugin attaches it to a pod whose socket LB is bypassed. The client
 * process joins no cgroup (Mode.cgroup stays undefined), so every Service
 * packet is translated at TC ingress of client.hostVeth (in the backend
 * namespace) and every reply restored at its egress, with conntrack.
 *
 * The maps come from the same SizedMaps setup as SluiceSockMode's (sock_lb
 * also goes on a fresh, empty cgroup that no process ever joins: harmless,
 * and it keeps one loader for both modes); pod_lb is then loaded against
 * those pinned maps and attached with pinned tcx links
 * (src/datapath/pod/attachMain.ts, inside the backend namespace). A larger
 * scale gets a new bpffs directory: the old links are unpinned first so
 * exactly one pod_lb runs on the veth.
 */
export class SluiceTcMode implements Mode {
  readonly id = 'sluice-tc';
  readonly label = 'Sluice per-packet (pod veth TC)';
  readonly usesVips = true;
  /** IPv4 only here: the pod-veth IPv6 path is issue 14 item 4's own work. */
  readonly families: readonly Family[] = [4];
  unavailable?: string;
  private readonly maps: SizedMaps;

  constructor(
    readonly client: ClientNs,
    private readonly backendNs: string,
    makeCgroup: (tag: string) => string,
    makeBpffs: (tag: string) => string,
    private readonly root: string,
  ) {
    this.unavailable = SizedMaps.missing(root);
    for (const f of [this.object, this.attachMain]) {
      if (!fs.existsSync(f)) this.unavailable = `${f} not built (make build; make bench)`;
    }
    this.maps = new SizedMaps('podtc', makeCgroup, makeBpffs, root);
  }

  /** SLUICE_BENCH_POD_OBJECT: another build's pod_lb.bpf.o, to measure two builds side by side. */
  private get object(): string {
    return process.env.SLUICE_BENCH_POD_OBJECT ?? path.join(this.root, 'build', 'pod_lb.bpf.o');
  }
  private get attachMain(): string {
    return path.join(this.root, 'dist', 'src', 'datapath', 'pod', 'attachMain.js');
  }

  async load(ports: ServicePort[], budgetMs: number): Promise<LoadOutcome> {
    const { fresh, previous } = await this.maps.ensure(ports.length);
    if (fresh) {
      if (previous) {
        for (const dir of ['ingress', 'egress']) fs.rmSync(path.join(previous, 'links', `pod-bench-eth0-${dir}`), { force: true });
      }
      await run([
        'nsenter', `--net=/run/netns/${this.backendNs}`, process.execPath, this.attachMain,
        '--object', this.object, '--bpffs', this.maps.bpffs!, '--device', this.client.hostVeth, '--container', 'bench', '--ifname', 'eth0',
      ], { timeoutMs: 30000 });
    }
    return this.maps.fill(ports, budgetMs);
  }

  /** The pinned maps' and links' directory (the bench reads pod_lb's run time through its links). */
  get bpffs(): string | undefined {
    return this.maps.bpffs;
  }

  /** As SluiceSockMode: the next scale overwrites; everything goes with the bpffs directory and the namespaces. */
  async unload(): Promise<void> {}
}
