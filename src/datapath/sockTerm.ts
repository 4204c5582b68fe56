// Stale socket termination: when backends are deleted, end the sockets that
// the socket LB connected to them (bpf/sock_destroy.bpf.c), so applications
// reconnect and their new connect() lands on a live backend.
//
// How one pass works: the deleted backends go into SLUICE_MAP_SOCKTERM4 (IPv4)
// and SLUICE_MAP_SOCKTERM6 (IPv6), the UDP (and, when enabled, TCP) iterators
// of the families that have any run once in the agent's own network
// namespace and once in every Pod namespace it is told about, then the map is
// emptied. Socket iterators walk the namespace of the thread that created the
// iterator fd, so for a Pod the agent enters the namespace for one
// bpf_iter_create() (setns, CAP_SYS_ADMIN) and returns before reading it.
//
// Limits (docs/deploy.md): kernel >= 6.5 (bpf_sock_destroy); Pod namespaces
// only with CAP_SYS_ADMIN and only those listed in the configured
// directories (/run/netns: containerd's and CRI-O's); a UDP socket whose
// reverse entry was evicted from the LRU is not recognised as translated and
// is left alone.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as abi from '../abi/generated';
import { BpfObject } from '../bpf/object';
import { BpfIterator, readIter } from '../bpf/iter';
import { inNetns, netnsInode } from '../bpf/netns';
import { ensureBpffsDir } from '../bpf/bpffs';
import { bytesToIp6, hostPort, ip4ToNumber, ip6ToBytes, isIp6, numberToIp4, protoNumber, protoName, type ProtoName } from './addr';
import { TypedMap, u8Codec } from './typedMap';
import { bpfObjectPath } from './sockLb';

export interface RemovedBackend {
  address: string;
  port: number;
  proto: ProtoName;
}

export interface DestroyedSocket {
  cookie: bigint;
  backend: string; // address:port/proto, [v6]:port/proto
  netns: string;
  /** bpf_sock_destroy()'s result: 0, or a negative errno. */
  result: number;
}

export interface TerminationReport {
  destroyed: DestroyedSocket[];
  failed: DestroyedSocket[];
  /** Namespaces walked (the agent's own counts as "host"). */
  namespaces: number;
  /** Namespaces that could not be entered or walked, with why. */
  namespaceErrors: Array<{ netns: string; error: string }>;
}

export interface StaleSocketOptions {
  bpffs: string;
  /** Also end TCP connections to deleted backends (kube-proxy leaves them; default off). */
  tcp: boolean;
  /** Pod network namespaces: files, or directories whose every entry is one. */
  netns: string[];
}

/** Where the iterator links are pinned (`cat` one to run it by hand in your namespace). */
export const sockTermDir = (bpffs: string) => path.join(bpffs, 'sockterm');

/**
 * Whether this kernel can destroy sockets from BPF: bpf_sock_destroy() is a
 * kfunc in the kernel's BTF from Linux 6.5. A cheap check for `sluice status`;
 * the agent's real test is loading the object.
 */
export function kernelSupportsSockDestroy(btfPath = '/sys/kernel/btf/vmlinux'): { supported: boolean; reason?: string } {
  let btf: Buffer;
  try {
    btf = fs.readFileSync(btfPath);
  } catch (err) {
    return { supported: false, reason: `cannot read ${btfPath}: ${(err as Error).message}` };
  }
  if (btf.includes('\0bpf_sock_destroy\0') && btf.includes('\0bpf_iter_udp\0')) return { supported: true };
  return { supported: false, reason: 'the kernel has no bpf_sock_destroy() kfunc (needs Linux 6.5 or later)' };
}

export class StaleSocketTerminator {
  private podNamespacesOff = false;

  private constructor(
    private readonly obj: BpfObject,
    private readonly filter: TypedMap<abi.Lb4SockTermKey, number>,
    private readonly filter6: TypedMap<abi.Lb6SockTermKey, number>,
    /** Per family: AF_INET6 sockets connected to ::ffff:a.b.c.d are the IPv4 iterators' (their state is IPv4). */
    private readonly iterators: Record<Family, Map<ProtoName, BpfIterator>>,
    private readonly netnsSources: string[],
  ) {}

  /** Walk only the agent's own namespace from now on (e.g. setns is not permitted). */
  skipPodNamespaces(): void {
    this.podNamespacesOff = true;
  }

  /** Load the iterators next to the pinned socket-LB maps; throws (with the reason) where the kernel cannot. */
  static load(opts: StaleSocketOptions): StaleSocketTerminator {
    const obj = BpfObject.open(bpfObjectPath('sock_destroy.bpf.o'), { pinDir: opts.bpffs });
    const iterators: Record<Family, Map<ProtoName, BpfIterator>> = { 4: new Map(), 6: new Map() };
    try {
      obj.load();
      const filter = new TypedMap(obj.map(abi.SLUICE_MAP_SOCKTERM4), abi.lb4_sock_term_keyCodec, u8Codec);
      const filter6 = new TypedMap(obj.map(abi.SLUICE_MAP_SOCKTERM6), abi.lb6_sock_term_keyCodec, u8Codec);
      filter.deleteMany([...filter.entries()].map(([k]) => k)); // a crash mid-pass left these
      filter6.deleteMany([...filter6.entries()].map(([k]) => k));
      const dir = sockTermDir(opts.bpffs);
      ensureBpffsDir(dir);
      // Pinned as udp, tcp (IPv4) and udp6, tcp6.
      const wanted: Array<[Family, ProtoName, string]> = [[4, 'udp', abi.SLUICE_PROG_SOCKTERM_UDP], [6, 'udp', abi.SLUICE_PROG_SOCKTERM_UDP6]];
      if (opts.tcp) wanted.push([4, 'tcp', abi.SLUICE_PROG_SOCKTERM_TCP], [6, 'tcp', abi.SLUICE_PROG_SOCKTERM_TCP6]);
      for (const pin of ['udp', 'tcp', 'udp6', 'tcp6']) fs.rmSync(path.join(dir, pin), { force: true });
      for (const [family, proto, prog] of wanted) {
        const it = BpfIterator.attach(obj.program(prog));
        iterators[family].set(proto, it);
        it.pin(path.join(dir, family === 4 ? proto : `${proto}6`));
      }
      return new StaleSocketTerminator(obj, filter, filter6, iterators, opts.netns);
    } catch (err) {
      for (const family of [4, 6] as const) for (const it of iterators[family].values()) it.close();
      obj.close();
      throw err;
    }
  }

  /** Protocols whose sockets are ended. */
  get protocols(): ProtoName[] {
    return [...this.iterators[4].keys()];
  }

  /** End the sockets connected (through the socket LB) to these deleted backends. */
  terminate(backends: RemovedBackend[]): TerminationReport {
    const report: TerminationReport = { destroyed: [], failed: [], namespaces: 0, namespaceErrors: [] };
    const wanted = backends.filter((b) => this.iterators[4].has(b.proto));
    const v4 = wanted.filter((b) => !isIp6(b.address));
    const v6 = wanted.filter((b) => isIp6(b.address));
    const keys = v4.map((b): abi.Lb4SockTermKey => ({ address: ip4ToNumber(b.address), port: b.port, proto: protoNumber(b.proto) }));
    const keys6 = v6.map((b): abi.Lb6SockTermKey => ({ address: ip6ToBytes(b.address), port: b.port, proto: protoNumber(b.proto) }));
    const walked = new Set<string>(); // a namespace walked for both families counts once
    // Larger sets are done in rounds of what the filter map holds.
    for (let i = 0; i < keys.length; i += abi.SLUICE_MAX_SOCKTERM4) {
      const round = keys.slice(i, i + abi.SLUICE_MAX_SOCKTERM4);
      this.filter.setMany(round.map((k) => [k, 1]));
      try {
        this.walkNamespaces(4, new Set(v4.map((b) => b.proto)), report, walked);
      } finally {
        this.filter.deleteMany(round);
      }
    }
    for (let i = 0; i < keys6.length; i += abi.SLUICE_MAX_SOCKTERM6) {
      const round = keys6.slice(i, i + abi.SLUICE_MAX_SOCKTERM6);
      this.filter6.setMany(round.map((k) => [k, 1]));
      try {
        this.walkNamespaces(6, new Set(v6.map((b) => b.proto)), report, walked);
      } finally {
        this.filter6.deleteMany(round);
      }
    }
    report.namespaces = walked.size;
    return report;
  }

  private walkNamespaces(family: Family, protos: Set<ProtoName>, report: TerminationReport, walked: Set<string>): void {
    const seen = new Set<bigint>([netnsInode('/proc/thread-self/ns/net')]);
    this.runIn(family, 'host', undefined, protos, report, walked);
    if (this.podNamespacesOff) return;
    for (const ns of this.podNamespaces()) {
      let ino: bigint;
      try {
        ino = netnsInode(ns);
      } catch (err) {
        report.namespaceErrors.push({ netns: ns, error: (err as Error).message });
        continue;
      }
      if (seen.has(ino)) continue;
      seen.add(ino);
      this.runIn(family, ns, ns, protos, report, walked);
    }
  }

  private runIn(family: Family, label: string, nsPath: string | undefined, protos: Set<ProtoName>, report: TerminationReport, walked: Set<string>): void {
    try {
      // Create in the namespace, read back home: the walk is bound at create time.
      const fds: Array<[ProtoName, number]> = [];
      const create = () => {
        for (const [proto, it] of this.iterators[family]) if (protos.has(proto)) fds.push([proto, it.create()]);
      };
      if (nsPath) inNetns(nsPath, create);
      else create();
      walked.add(label);
      for (const [proto, fd] of fds) {
        for (const event of decodeEvents(family, readIter(fd, `${proto} sockets of ${label}`))) {
          const socket: DestroyedSocket = {
            cookie: event.cookie,
            backend: `${event.address}/${protoName(event.proto)}`,
            netns: label,
            result: event.result | 0,
          };
          (socket.result === 0 ? report.destroyed : report.failed).push(socket);
        }
      }
    } catch (err) {
      report.namespaceErrors.push({ netns: label, error: (err as Error).message });
    }
  }

  /** The configured namespace files, directories expanded (missing ones skipped). */
  private podNamespaces(): string[] {
    const out: string[] = [];
    for (const source of this.netnsSources) {
      let st: fs.Stats;
      try {
        st = fs.statSync(source);
      } catch {
        continue;
      }
      if (!st.isDirectory()) out.push(source);
      else for (const name of fs.readdirSync(source).sort()) out.push(path.join(source, name));
    }
    return out;
  }

  /** Closes the object and the iterator links; the pins stay for the next agent to replace. */
  close(): void {
    for (const family of [4, 6] as const) for (const it of this.iterators[family].values()) it.close();
    this.obj.close();
  }
}

type Family = 4 | 6;

/** The iterator's records, the backend as `address:port` ([v6]:port). */
function decodeEvents(family: Family, buf: Buffer): Array<{ cookie: bigint; address: string; proto: number; result: number }> {
  const size = family === 4 ? abi.LB4_SOCK_TERM_EVENT_SIZE : abi.LB6_SOCK_TERM_EVENT_SIZE;
  const events = [];
  for (let off = 0; off + size <= buf.length; off += size) {
    const e = family === 4 ? abi.decodeLb4SockTermEvent(buf, off) : abi.decodeLb6SockTermEvent(buf, off);
    const address = typeof e.address === 'number' ? numberToIp4(e.address) : bytesToIp6(e.address);
    events.push({ cookie: e.cookie, address: hostPort(address, e.port), proto: e.proto, result: e.result });
  }
  return events;
}

export interface StaleSocketStatus {
  /** An agent loaded the iterators (their links are pinned under <bpffs>/sockterm). */
  enabled: boolean;
  protocols: ProtoName[];
  kernelSupported: boolean;
  /** Why sockets to deleted backends are not destroyed, when they are not. */
  reason?: string;
}

/** For `sluice status`: read from the pins and the kernel's BTF, without the agent. */
export function staleSocketStatus(bpffs: string): StaleSocketStatus {
  const protocols = (['udp', 'tcp'] as const).filter((p) => fs.existsSync(path.join(sockTermDir(bpffs), p)));
  const kernel = kernelSupportsSockDestroy();
  const status: StaleSocketStatus = { enabled: protocols.length > 0, protocols: [...protocols], kernelSupported: kernel.supported };
  if (!status.enabled) {
    status.reason = kernel.supported
      ? 'no agent has loaded the iterators (destroyStaleSockets: false, or no agent started on these maps)'
      : kernel.reason;
  }
  return status;
}
