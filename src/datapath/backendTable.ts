// The programmer's backends, by id and by identity, without one JS object per
// backend (issue 12 item 2). At 10k Services x 10 endpoints x 2 protocols the
// agent keeps 200 000 backends; as ProgrammedBackend objects in two Maps
// (by key, by id) with their address strings they were 35 MiB of the
// agent's 90 MiB heap (heap snapshot, docs/bench.md). Here an IPv4 backend is
// a few typed-array cells indexed by its id (the ids are small and dense: the
// backends map is an ARRAY) plus one slot in a typed-array key -> id index
// (numberIndex.ts); objects are made only for the callers that ask (CLI,
// drift repair, deleted backends).
import { ip4ToNumber, numberToIp4, type ProtoName } from './addr';
import { NumberIndex } from './numberIndex';

export interface BackendRecord {
  id: number;
  address: string;
  port: number;
  proto: ProtoName;
  flags: number;
  zone: number;
}

/**
 * A backend's identity as one number (address 32 bits, port 16, protocol 1:
 * 49 bits, exact in a double); IPv6 backends (issue 14), rare next to IPv4,
 * keep a string key.
 */
export function backendKeyOf(b: { address: string; port: number; proto: string }): number | string {
  return b.address.includes(':') ? [b.address, ':', b.port, '/', b.proto].join('') : ip4ToNumber(b.address) * 131072 + b.port * 2 + (b.proto === 'udp' ? 1 : 0);
}

/** An IPv4 backend's identity number (backendKeyOf) back into its parts. */
export function ip4BackendOfKey(key: number): { address: number; port: number; udp: boolean } {
  return { address: Math.floor(key / 131072), port: Math.floor(key / 2) % 65536, udp: key % 2 === 1 };
}

const PRESENT = 1;
const UDP = 2;

export class BackendTable {
  /** IPv4 keys (numbers) in typed arrays; IPv6 ones (strings) in a Map. */
  private readonly byNumber = new NumberIndex();
  private readonly byString = new Map<string, number>();
  private addr = new Uint32Array(1024);
  private port = new Uint16Array(1024);
  /** PRESENT | UDP. */
  private bits = new Uint8Array(1024);
  private flagsOf = new Uint8Array(1024);
  private zoneOf = new Uint32Array(1024);
  /** IPv6 backends' addresses (their cells hold no address). */
  private readonly addr6 = new Map<number, string>();

  get size(): number {
    return this.byNumber.size + this.byString.size;
  }

  /** The id of the backend with this identity (backendKeyOf), if it is in the table. */
  idOf(key: number | string): number | undefined {
    return typeof key === 'number' ? this.byNumber.get(key) : this.byString.get(key);
  }

  has(key: number | string): boolean {
    return typeof key === 'number' ? this.byNumber.has(key) : this.byString.has(key);
  }

  /** Whether id's flags and zone are these (the backend exists). */
  same(id: number, flags: number, zone: number): boolean {
    return (this.bits[id]! & PRESENT) !== 0 && this.flagsOf[id] === flags && this.zoneOf[id] === zone;
  }

  flags(id: number): number {
    return this.flagsOf[id]!;
  }

  zone(id: number): number {
    return this.zoneOf[id]!;
  }

  set(b: BackendRecord): void {
    this.grow(b.id);
    const key = backendKeyOf(b);
    const v6 = typeof key === 'string';
    if (v6) this.byString.set(key, b.id);
    else this.byNumber.set(key, b.id);
    this.addr[b.id] = v6 ? 0 : ip4ToNumber(b.address);
    if (v6) this.addr6.set(b.id, b.address);
    else this.addr6.delete(b.id);
    this.port[b.id] = b.port;
    this.bits[b.id] = PRESENT | (b.proto === 'udp' ? UDP : 0);
    this.flagsOf[b.id] = b.flags;
    this.zoneOf[b.id] = b.zone;
  }

  /** An IPv4 backend from its identity number (backendKeyOf): no address string parsed again. */
  setIp4(id: number, key: number, flags: number, zone: number): void {
    this.grow(id);
    this.byNumber.set(key, id);
    const b = ip4BackendOfKey(key);
    this.addr[id] = b.address;
    if (this.addr6.size > 0) this.addr6.delete(id);
    this.port[id] = b.port;
    this.bits[id] = PRESENT | (b.udp ? UDP : 0);
    this.flagsOf[id] = flags;
    this.zoneOf[id] = zone;
  }

  /** Removes backend `id` (and its key, if the key still names it). */
  deleteId(id: number): void {
    const b = this.byId(id);
    if (!b) return;
    const key = backendKeyOf(b);
    if (this.idOf(key) === id) {
      if (typeof key === 'number') this.byNumber.delete(key);
      else this.byString.delete(key);
    }
    this.bits[id] = 0;
    this.addr6.delete(id);
  }

  byId(id: number): BackendRecord | undefined {
    if (id >= this.bits.length || (this.bits[id]! & PRESENT) === 0) return undefined;
    const a6 = this.addr6.get(id);
    return {
      id,
      address: a6 ?? numberToIp4(this.addr[id]!),
      port: this.port[id]!,
      proto: this.bits[id]! & UDP ? 'udp' : 'tcp',
      flags: this.flagsOf[id]!,
      zone: this.zoneOf[id]!,
    };
  }

  get(key: number | string): BackendRecord | undefined {
    const id = this.idOf(key);
    return id === undefined ? undefined : this.byId(id);
  }

  /** Every backend, by id. */
  *values(): IterableIterator<BackendRecord> {
    const ids = [...this.byNumber.values(), ...this.byString.values()].sort((a, b) => a - b);
    for (const id of ids) yield this.byId(id)!;
  }

  private grow(id: number): void {
    if (id < this.bits.length) return;
    const n = Math.max(id + 1, this.bits.length * 2);
    const grow = <T extends Uint8Array | Uint16Array | Uint32Array>(a: T, make: (n: number) => T): T => {
      const g = make(n);
      g.set(a);
      return g;
    };
    this.addr = grow(this.addr, (k) => new Uint32Array(k));
    this.port = grow(this.port, (k) => new Uint16Array(k));
    this.bits = grow(this.bits, (k) => new Uint8Array(k));
    this.flagsOf = grow(this.flagsOf, (k) => new Uint8Array(k));
    this.zoneOf = grow(this.zoneOf, (k) => new Uint32Array(k));
  }
}
