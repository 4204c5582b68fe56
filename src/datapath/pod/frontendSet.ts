// The pod path's frontend-address set (sluice_podfe4, native/sluice_abi.h;
// docs/pod-veth.md): every IPv4 address a pod reaches a frontend at, so pod
// ingress passes packets to other addresses after one lookup. Make before
// break, as with the frontends themselves: an address is added before the
// first frontend on it is written, removed only after the last one is gone,
// and the "maintained" marker (key 0.0.0.0) is written only once the set
// holds every programmed frontend's address; until then (and after any
// failed write, when the marker is taken away) the programs do the full
// lookups. The NodePort wildcard (0.0.0.0:port) stands for the node's
// addresses, which are therefore always in the set. Counts are kept in
// memory (frontend ids per address), so a sync costs one map write per
// address that comes or goes, not a walk of the set.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as abi from '../../abi/generated';
import { BpfMap } from '../../bpf';
import { ip4ToNumber, isIp6 } from '../addr';

const ONE = Buffer.from([1]);
const MARKER = abi.LB_POD_FE4_MAINTAINED;

function keyOf(address: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(address >>> 0); // __be32: network order
  return b;
}

/** The IPv4 address of a frontend id (programmer.ts frontendId: "a.b.c.d:port/proto..."), undefined for IPv6. */
function idAddress(id: string): number | undefined {
  if (id.startsWith('[')) return undefined;
  return ip4ToNumber(id.slice(0, id.indexOf(':')));
}

export class PodFrontendSet {
  private readonly present = new Set<number>();
  private readonly count = new Map<number, number>(); // frontend ids per address (0: the NodePort wildcard)
  private readonly ids = new Set<string>();
  private nodeAddresses = new Set<number>();
  private maintained = false;
  /** Why the set stopped being maintained (a failed write); the programs do the full lookups. */
  failed?: string;

  private constructor(private readonly map: BpfMap) {
    for (const k of map.keys()) {
      const a = k.readUInt32BE(0);
      if (a !== MARKER) this.present.add(a);
    }
  }

  /** The pinned set, or undefined when no pod_lb object pinned one (pod-veth programs off, or an older build). */
  static open(bpffs: string): PodFrontendSet | undefined {
    const pin = path.join(bpffs, abi.SLUICE_MAP_POD_FE4);
    return fs.existsSync(pin) ? new PodFrontendSet(BpfMap.fromPinned(pin)) : undefined;
  }

  private wanted(a: number): boolean {
    return (this.count.get(a) ?? 0) > 0 || this.nodeAddresses.has(a);
  }

  private guard(what: string, fn: () => void): void {
    if (this.failed) return;
    try {
      fn();
    } catch (err) {
      this.failed = `${this.map.name}: ${what}: ${(err as Error).message}`;
      try {
        this.map.delete(keyOf(MARKER)); // not trusted any more: full lookups
      } catch { /* the programs still see the marker: nothing better to do */ }
      this.maintained = false;
    }
  }

  private ensure(a: number): void {
    if (a === 0 || this.present.has(a)) return;
    this.map.update(keyOf(a), ONE);
    this.present.add(a);
  }

  /** Make: frontends about to be written (ids from programmer.ts frontendId). */
  add(ids: Iterable<string>): void {
    this.guard('add', () => {
      for (const id of ids) {
        if (this.ids.has(id)) continue;
        const a = idAddress(id);
        if (a === undefined) continue;
        this.ids.add(id);
        this.count.set(a, (this.count.get(a) ?? 0) + 1);
        this.ensure(a);
      }
    });
  }

  /** Break: frontends removed (ids still wanted by `kept` stay counted). */
  removed(ids: Iterable<string>, kept: ReadonlySet<string> = new Set()): void {
    this.guard('remove', () => {
      for (const id of ids) {
        if (kept.has(id) || !this.ids.delete(id)) continue;
        const a = idAddress(id)!;
        const n = (this.count.get(a) ?? 1) - 1;
        if (n > 0) this.count.set(a, n);
        else this.count.delete(a);
        if (a !== 0 && !this.wanted(a) && this.present.delete(a)) this.map.delete(keyOf(a));
      }
    });
  }

  /** The node's addresses (the wildcard's stand-ins): added at once, a gone one removed unless a frontend has it. */
  setNodeAddresses(addresses: Iterable<string>): void {
    this.guard('node addresses', () => {
      const before = this.nodeAddresses;
      this.nodeAddresses = new Set([...addresses].filter((a) => !isIp6(a)).map(ip4ToNumber).filter((a) => a !== 0));
      for (const a of this.nodeAddresses) this.ensure(a);
      for (const a of before) if (!this.wanted(a) && this.present.delete(a)) this.map.delete(keyOf(a));
    });
  }

  /**
   * After the first pass over every programmed frontend (`add` saw them all):
   * addresses left from an earlier run that nothing wants are removed, then
   * the set is marked maintained. Later calls do nothing.
   */
  markMaintained(): void {
    if (this.maintained) return;
    this.guard('mark', () => {
      for (const a of [...this.present]) {
        if (!this.wanted(a)) {
          this.map.delete(keyOf(a));
          this.present.delete(a);
        }
      }
      this.map.update(keyOf(MARKER), ONE);
      this.maintained = true;
    });
  }

  get size(): number {
    return this.present.size;
  }

  close(): void {
    this.map.close();
  }
}
