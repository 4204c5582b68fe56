// A BPF map seen through the generated codecs: typed keys and values instead
// of bytes, with the layout checked against the kernel's view before use.
import type { BpfMap } from '../bpf/map';
import type { Codec } from '../abi/types';
import { MapType } from '../bpf/constants';

export const u32Codec: Codec<number> = {
  size: 4,
  encode(value, buf = Buffer.alloc(4), off = 0) {
    buf.writeUInt32LE(value >>> 0, off);
    return buf;
  },
  decode: (buf, off = 0) => buf.readUInt32LE(off),
};

export const u8Codec: Codec<number> = {
  size: 1,
  encode(value, buf = Buffer.alloc(1), off = 0) {
    buf.writeUInt8(value & 0xff, off);
    return buf;
  },
  decode: (buf, off = 0) => buf.readUInt8(off),
};

export class TypedMap<K, V> {
  constructor(
    readonly map: BpfMap,
    readonly keyCodec: Codec<K>,
    readonly valueCodec: Codec<V>,
  ) {
    // The agent checks sizes before its first write (DESIGN: one source of truth).
    if (map.keySize !== keyCodec.size || map.valueSize !== valueCodec.size) {
      throw new Error(
        `map ${map.name}: kernel layout key ${map.keySize}/value ${map.valueSize} bytes, ` +
          `this build expects key ${keyCodec.size}/value ${valueCodec.size}: ` +
          'the pinned map was created by another Sluice version (remove it or use its matching agent)',
      );
    }
  }

  get name(): string {
    return this.map.name;
  }

  get(key: K): V | undefined {
    const raw = this.map.lookup(this.keyCodec.encode(key));
    return raw ? this.valueCodec.decode(raw) : undefined;
  }

  set(key: K, value: V): void {
    this.map.update(this.keyCodec.encode(key), this.valueCodec.encode(value));
  }

  delete(key: K): boolean {
    return this.map.delete(this.keyCodec.encode(key));
  }

  /** Write many entries with one syscall per batch. */
  setMany(entries: Array<[K, V]>): void {
    if (entries.length === 0) return;
    const ks = this.keyCodec.size;
    const vs = this.valueCodec.size;
    const keys = Buffer.alloc(ks * entries.length);
    const values = Buffer.alloc(vs * entries.length);
    entries.forEach(([k, v], i) => {
      this.keyCodec.encode(k, keys, i * ks);
      this.valueCodec.encode(v, values, i * vs);
    });
    this.map.updateBatch(keys, values, entries.length);
  }

  /** Delete many keys; keys that are already gone are not an error. */
  deleteMany(keys: K[]): void {
    for (const key of keys) this.delete(key);
  }

  *entries(): Generator<[K, V]> {
    for (const [k, v] of this.map.entries()) yield [this.keyCodec.decode(k), this.valueCodec.decode(v)];
  }

  /** All entries, read in batches where the map type allows it. */
  readAll(): Array<[K, V]> {
    const { keys, values, count } = this.map.lookupBatch();
    const out: Array<[K, V]> = [];
    for (let i = 0; i < count; i++) {
      out.push([this.keyCodec.decode(keys, i * this.keyCodec.size), this.valueCodec.decode(values, i * this.valueCodec.size)]);
    }
    return out;
  }
}

/**
 * An ARRAY map used as a table of dense ids (IPv4 backends and rev-NAT
 * entries): every index exists, and an all-zero value stands for "no entry".
 * get() and the reads skip such values; delete() writes one (an ARRAY entry
 * cannot be deleted).
 */
export class IdArrayMap<V> extends TypedMap<number, V> {
  private readonly zero: Buffer;

  constructor(map: BpfMap, keyCodec: Codec<number>, valueCodec: Codec<V>) {
    super(map, keyCodec, valueCodec);
    this.zero = Buffer.alloc(map.valueSize);
  }

  override get(key: number): V | undefined {
    if (key >= this.map.maxEntries) return undefined;
    const raw = this.map.lookup(this.keyCodec.encode(key));
    return raw && !raw.equals(this.zero) ? this.valueCodec.decode(raw) : undefined;
  }

  override delete(key: number): boolean {
    if (key >= this.map.maxEntries) return false;
    const k = this.keyCodec.encode(key);
    const raw = this.map.lookup(k);
    if (!raw || raw.equals(this.zero)) return false;
    this.map.update(k, this.zero);
    return true;
  }

  override *entries(): Generator<[number, V]> {
    for (const [k, v] of this.readAll()) yield [k, v];
  }

  override readAll(): Array<[number, V]> {
    const { keys, values, count } = this.map.lookupBatch(65536);
    const out: Array<[number, V]> = [];
    const vs = this.valueCodec.size;
    for (let i = 0; i < count; i++) {
      if (allZero(values, i * vs, vs)) continue;
      out.push([this.keyCodec.decode(keys, i * this.keyCodec.size), this.valueCodec.decode(values, i * vs)]);
    }
    return out;
  }

  /** Entries in use (not all-zero). */
  countUsed(): number {
    const { values, count } = this.map.lookupBatch(65536);
    const vs = this.valueCodec.size;
    let n = 0;
    for (let i = 0; i < count; i++) if (!allZero(values, i * vs, vs)) n++;
    return n;
  }
}

/**
 * Whether len bytes at off are all zero: a byte loop, no view or native call
 * per entry (an agent's start reads every slot of its ARRAY tables, 262 144
 * backends, most of them zero on a fresh node).
 */
function allZero(b: Buffer, off: number, len: number): boolean {
  for (let j = off, end = off + len; j < end; j++) if (b[j] !== 0) return false;
  return true;
}

/** A table of ids: IdArrayMap on an ARRAY, a plain TypedMap on a hash (IPv6, older pins). */
export function idTable<V>(map: BpfMap, valueCodec: Codec<V>): TypedMap<number, V> {
  return map.type === MapType.ARRAY ? new IdArrayMap(map, u32Codec, valueCodec) : new TypedMap(map, u32Codec, valueCodec);
}
