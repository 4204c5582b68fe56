// BpfMap: raw-bytes access to one BPF map by fd. Typed codecs live elsewhere
// (src/abi/); this layer moves Buffers to and from the kernel and turns every
// failure into a BpfError naming the map.
//
// Hot path (the agent writes ~100k entries at start-up): update/lookup/delete
// pass the caller's Buffers straight to libbpf as pointers, check lengths with
// two integer compares and allocate nothing except the returned value of
// lookup() (use lookupInto() to avoid even that).
import fs from 'node:fs';
import os from 'node:os';
import { BATCH_OPTS_SIZE, BatchOpts, BpfError, check, cString, libbpf, numPossibleCpus, objInfo } from './libbpf';
import { BPF_ANY, MapFlags, MapType, isPerCpuMapType, mapTypeName } from './constants';

const { E2BIG, ENOENT, EINVAL, ENOSPC, EOPNOTSUPP } = os.constants.errno;
const ENOTSUPP = 524;

/** What the kernel says about a map (struct bpf_map_info). */
export interface MapInfo {
  type: number;
  id: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
  name: string;
  ifindex: number;
  btfId: number;
  btfKeyTypeId: number;
  btfValueTypeId: number;
}

// struct bpf_map_info in libbpf 1.1.2's <linux/bpf.h>: 88 bytes. A newer
// kernel's larger struct is fine: it copies only the length we pass.
const MAP_INFO_SIZE = 88;

/** bpf_obj_get_info_by_fd on a map fd. */
export function mapInfo(fd: number, label = `fd ${fd}`): MapInfo {
  const b = objInfo(fd, MAP_INFO_SIZE, 'bpf_obj_get_info_by_fd', `map ${label}`);
  return {
    type: b.readUInt32LE(0),
    id: b.readUInt32LE(4),
    keySize: b.readUInt32LE(8),
    valueSize: b.readUInt32LE(12),
    maxEntries: b.readUInt32LE(16),
    flags: b.readUInt32LE(20),
    name: cString(b, 24, 40),
    ifindex: b.readUInt32LE(40),
    btfId: b.readUInt32LE(64),
    btfKeyTypeId: b.readUInt32LE(68),
    btfValueTypeId: b.readUInt32LE(72),
  };
}

/**
 * map_flags the kernel sets by itself when it creates a map of `type`, which
 * BPF_OBJ_GET_INFO reports but an object cannot declare (the kernel refuses
 * them at creation): DEVMAP and DEVMAP_HASH get BPF_F_RDONLY_PROG, because a
 * lookup from a program returns a pointer to the device's ifindex
 * (kernel/bpf/devmap.c, dev_map_init_map). Such a flag is no layout change.
 */
export function kernelAddedMapFlags(type: number): number {
  return type === MapType.DEVMAP || type === MapType.DEVMAP_HASH ? MapFlags.RDONLY_PROG : 0;
}

export interface MapDescription {
  name: string;
  type: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
}

export interface CreateMapOptions {
  type: number;
  /** At most 15 characters (BPF_OBJ_NAME_LEN - 1). */
  name: string;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags?: number;
  /** Map-in-map types: a map whose shape the inner maps must have. */
  innerMapFd?: number;
  /** BTF types of key and value (bpftool then prints named fields). */
  btf?: { fd: number; keyTypeId: number; valueTypeId: number };
}

export interface BatchLookupResult {
  /** count * keySize bytes. */
  keys: Buffer;
  /** count * valueBufferSize bytes (per-CPU maps: every CPU's slot, see lookupPerCpu). */
  values: Buffer;
  count: number;
}

const round8 = (n: number): number => (n + 7) & ~7;

export class BpfMap {
  readonly name: string;
  readonly type: number;
  readonly keySize: number;
  /** The value size as declared (one CPU's worth for per-CPU maps). */
  readonly valueSize: number;
  readonly maxEntries: number;
  readonly flags: number;
  readonly perCpu: boolean;
  /** Bytes of one value as user space reads/writes it: per-CPU maps carry round8(valueSize) per possible CPU. */
  readonly valueBufferSize: number;

  private fdValue: number;
  private idValue: number | undefined;
  /** false when the fd belongs to a BpfObject (which closes it). */
  private readonly ownsFd: boolean;
  private readonly count = new Uint32Array(1);
  private readonly batchOpts: BatchOpts = { sz: 0, elem_flags: 0, flags: 0 };

  /** Use BpfMap.fromPinned / fromFd / fromId / create, or BpfObject.map(). */
  constructor(fd: number, desc: MapDescription, ownsFd: boolean, id?: number) {
    this.fdValue = fd;
    this.name = desc.name;
    this.type = desc.type;
    this.keySize = desc.keySize;
    this.valueSize = desc.valueSize;
    this.maxEntries = desc.maxEntries;
    this.flags = desc.flags;
    this.perCpu = isPerCpuMapType(desc.type);
    this.valueBufferSize = this.perCpu ? round8(desc.valueSize) * numPossibleCpus() : desc.valueSize;
    this.ownsFd = ownsFd;
    this.idValue = id;
  }

  /** Opens a map pinned in bpffs (bpf_obj_get). The caller closes it. */
  static fromPinned(path: string): BpfMap {
    const fd = check(libbpf().bpf_obj_get(path), 'bpf_obj_get', path);
    return BpfMap.adoptFd(fd, path);
  }

  /** Opens a map by kernel id (bpf_map_get_fd_by_id). The caller closes it. */
  static fromId(id: number): BpfMap {
    const fd = check(libbpf().bpf_map_get_fd_by_id(id), 'bpf_map_get_fd_by_id', `map id ${id}`);
    return BpfMap.adoptFd(fd, `map id ${id}`);
  }

  /** Wraps an fd the caller already owns; the BpfMap takes ownership (close() closes it). */
  static fromFd(fd: number): BpfMap {
    return BpfMap.adoptFd(fd, `fd ${fd}`);
  }

  /** Creates a map that belongs to no object (bpf_map_create): for tests, benchmarks, scratch maps. */
  static create(opts: CreateMapOptions): BpfMap {
    let createOpts: Buffer | null = null;
    if (opts.flags || opts.innerMapFd !== undefined || opts.btf) {
      // struct bpf_map_create_opts (48 bytes): sz at 0, btf_fd/key/value type
      // ids at 8/12/16, inner_map_fd at 24, map_flags at 28.
      createOpts = Buffer.alloc(48);
      createOpts.writeBigUInt64LE(48n, 0);
      if (opts.btf) {
        createOpts.writeUInt32LE(opts.btf.fd, 8);
        createOpts.writeUInt32LE(opts.btf.keyTypeId, 12);
        createOpts.writeUInt32LE(opts.btf.valueTypeId, 16);
      }
      createOpts.writeUInt32LE(opts.innerMapFd ?? 0, 24);
      createOpts.writeUInt32LE(opts.flags ?? 0, 28);
    }
    const fd = check(
      libbpf().bpf_map_create(opts.type, opts.name, opts.keySize, opts.valueSize, opts.maxEntries, createOpts),
      'bpf_map_create',
      opts.name,
    );
    return BpfMap.adoptFd(fd, opts.name);
  }

  private static adoptFd(fd: number, label: string): BpfMap {
    try {
      const info = mapInfo(fd, label);
      return new BpfMap(fd, info, true, info.id);
    } catch (err) {
      fs.closeSync(fd);
      throw err;
    }
  }

  get fd(): number {
    return this.fdValue;
  }

  /** The kernel's id for this map (stable while it exists; what `bpftool map show` lists). */
  get id(): number {
    return (this.idValue ??= mapInfo(this.fdValue, this.name).id);
  }

  /** Fresh bpf_map_info from the kernel. */
  info(): MapInfo {
    return mapInfo(this.fdValue, this.name);
  }

  // ---- single elements -------------------------------------------------------

  /** The value for key, or undefined when absent. Per-CPU maps: valueBufferSize bytes, see lookupPerCpu. */
  lookup(key: Buffer): Buffer | undefined {
    const value = Buffer.allocUnsafe(this.valueBufferSize);
    return this.lookupInto(key, value) ? value : undefined;
  }

  /** Like lookup, into a caller-owned buffer of at least valueBufferSize bytes; false when absent. */
  lookupInto(key: Buffer, out: Buffer): boolean {
    if (key.length !== this.keySize) this.badKey('bpf_map_lookup_elem', key);
    if (out.length < this.valueBufferSize) this.badValue('bpf_map_lookup_elem', out, 'at least ');
    const ret = libbpf().bpf_map_lookup_elem(this.fdValue, key, out);
    if (ret === 0) return true;
    if (ret === -ENOENT) return false;
    throw new BpfError('bpf_map_lookup_elem', this.name, -ret);
  }

  /** Per-CPU maps: one valueSize-byte view per possible CPU, or undefined when absent. */
  lookupPerCpu(key: Buffer): Buffer[] | undefined {
    if (!this.perCpu) throw new BpfError('lookupPerCpu', this.name, EINVAL, { hint: `${mapTypeName(this.type)} is not a per-CPU map` });
    const all = this.lookup(key);
    if (!all) return undefined;
    return this.splitPerCpu(all);
  }

  /** Splits one per-CPU value buffer (valueBufferSize bytes) into one valueSize view per CPU. */
  splitPerCpu(all: Buffer): Buffer[] {
    const stride = round8(this.valueSize);
    const out: Buffer[] = [];
    for (let off = 0; off + stride <= all.length; off += stride) out.push(all.subarray(off, off + this.valueSize));
    return out;
  }

  /** Writes key → value. flags: BPF_ANY (default), BPF_NOEXIST, BPF_EXIST. */
  update(key: Buffer, value: Buffer, flags: number = BPF_ANY): void {
    if (key.length !== this.keySize) this.badKey('bpf_map_update_elem', key);
    if (value.length !== this.valueBufferSize) this.badValue('bpf_map_update_elem', value, '');
    const ret = libbpf().bpf_map_update_elem(this.fdValue, key, value, flags);
    if (ret < 0) throw new BpfError('bpf_map_update_elem', this.name, -ret, ret === -E2BIG ? { hint: this.e2bigMeaning() } : undefined);
  }

  /** Per-CPU maps: writes one valueSize buffer per possible CPU. */
  updatePerCpu(key: Buffer, values: Buffer[], flags: number = BPF_ANY): void {
    const stride = round8(this.valueSize);
    if (!this.perCpu || values.length !== this.valueBufferSize / stride) {
      throw new BpfError('updatePerCpu', this.name, EINVAL, { hint: `expected a per-CPU map and ${this.valueBufferSize / stride} values` });
    }
    const all = Buffer.alloc(this.valueBufferSize);
    values.forEach((v, i) => v.copy(all, i * stride, 0, this.valueSize));
    this.update(key, all, flags);
  }

  /** Deletes key; false when it was not there. */
  delete(key: Buffer): boolean {
    if (key.length !== this.keySize) this.badKey('bpf_map_delete_elem', key);
    const ret = libbpf().bpf_map_delete_elem(this.fdValue, key);
    if (ret === 0) return true;
    if (ret === -ENOENT) return false;
    throw new BpfError('bpf_map_delete_elem', this.name, -ret);
  }

  // ---- iteration -------------------------------------------------------------

  /**
   * Every key (copies), via bpf_map_get_next_key. As with bpftool, a hash map
   * changed during the walk may restart from its first bucket (when the current
   * key is deleted) or miss concurrent inserts.
   */
  *keys(): Generator<Buffer> {
    const fns = libbpf();
    let prev: Buffer | null = null;
    for (;;) {
      const next = Buffer.allocUnsafe(this.keySize);
      const ret = fns.bpf_map_get_next_key(this.fdValue, prev, next);
      if (ret === -ENOENT) return;
      check(ret, 'bpf_map_get_next_key', this.name);
      yield next;
      prev = next;
    }
  }

  /** Every [key, value] pair (copies); keys deleted during the walk are skipped. */
  *entries(): Generator<[Buffer, Buffer]> {
    for (const key of this.keys()) {
      const value = this.lookup(key);
      if (value) yield [key, value];
    }
  }

  // ---- batches -----------------------------------------------------------------

  /**
   * Writes count entries in one syscall (bpf_map_update_batch). keys is
   * count*keySize bytes, values count*valueBufferSize bytes. On failure the
   * error says how many entries were written first (the kernel stops there).
   */
  updateBatch(keys: Buffer, values: Buffer, count: number, elemFlags: number = BPF_ANY): void {
    this.checkBatchSizes('bpf_map_update_batch', keys, count, values);
    if (count === 0) return;
    this.count[0] = count;
    const opts = this.opts(elemFlags);
    const ret = libbpf().bpf_map_update_batch(this.fdValue, keys, values, this.count, opts);
    if (ret < 0) {
      const done = this.count[0] ?? 0;
      const full = ret === -E2BIG ? `${this.e2bigMeaning()}; ` : '';
      throw new BpfError('bpf_map_update_batch', this.name, -ret, { hint: `${full}${done} of ${count} entries written before the failure` });
    }
  }

  /**
   * Deletes count keys (count*keySize bytes) with bpf_map_delete_batch. Keys
   * that are not in the map are skipped (the kernel stops at the first missing
   * key; this resumes after it). Returns the number of entries deleted.
   */
  deleteBatch(keys: Buffer, count: number): number {
    this.checkBatchSizes('bpf_map_delete_batch', keys, count);
    const fns = libbpf();
    const opts = this.opts(BPF_ANY);
    let start = 0;
    let deleted = 0;
    while (start < count) {
      this.count[0] = count - start;
      const slice = start === 0 ? keys : keys.subarray(start * this.keySize);
      const ret = fns.bpf_map_delete_batch(this.fdValue, slice, this.count, opts);
      const done = this.count[0] ?? 0;
      deleted += done;
      if (ret === 0) break;
      if (ret !== -ENOENT) {
        throw new BpfError('bpf_map_delete_batch', this.name, -ret, { hint: `${deleted} of ${count} keys deleted before the failure` });
      }
      start += done + 1; // skip the missing key
    }
    return deleted;
  }

  /**
   * Reads the whole map with bpf_map_lookup_batch, batchSize entries per
   * syscall; falls back to get_next_key + lookup for map types without batch
   * support. Not a snapshot: concurrent changes may or may not be seen.
   */
  lookupBatch(batchSize = 4096): BatchLookupResult {
    const fns = libbpf();
    const opts = this.opts(BPF_ANY);
    let batch = Math.max(1, Math.min(batchSize, this.maxEntries || 1));
    // Hash maps use a 4-byte bucket cursor, arrays the key itself: room for either.
    const tokenSize = Math.max(this.keySize, 8);
    let inBatch: Buffer | null = null;
    let outBatch: Buffer = Buffer.alloc(tokenSize);
    let spare: Buffer = Buffer.alloc(tokenSize);
    const keyChunks: Buffer[] = [];
    const valueChunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const keys = Buffer.allocUnsafe(batch * this.keySize);
      const values = Buffer.allocUnsafe(batch * this.valueBufferSize);
      this.count[0] = batch;
      const ret = fns.bpf_map_lookup_batch(this.fdValue, inBatch, outBatch, keys, values, this.count, opts);
      const n = this.count[0] ?? 0;
      if (ret < 0 && ret !== -ENOENT) {
        if (ret === -ENOSPC && n === 0) {
          batch *= 2; // one hash bucket holds more entries than the batch
          continue;
        }
        if (total === 0 && (ret === -EINVAL || ret === -EOPNOTSUPP || ret === -ENOTSUPP)) return this.lookupAllByIteration();
        throw new BpfError('bpf_map_lookup_batch', this.name, -ret, { hint: `after ${total} entries` });
      }
      if (n > 0) {
        keyChunks.push(keys.subarray(0, n * this.keySize));
        valueChunks.push(values.subarray(0, n * this.valueBufferSize));
        total += n;
      }
      if (ret === -ENOENT || n === 0) break; // end of map (n === 0 only guards against a kernel that never says ENOENT)
      // The kernel's out cursor becomes the next call's in cursor.
      inBatch = outBatch;
      outBatch = spare;
      spare = inBatch;
    }
    return { keys: Buffer.concat(keyChunks), values: Buffer.concat(valueChunks), count: total };
  }

  private lookupAllByIteration(): BatchLookupResult {
    const keyChunks: Buffer[] = [];
    const valueChunks: Buffer[] = [];
    for (const [k, v] of this.entries()) {
      keyChunks.push(k);
      valueChunks.push(v);
    }
    return { keys: Buffer.concat(keyChunks), values: Buffer.concat(valueChunks), count: keyChunks.length };
  }

  // ---- lifetime ----------------------------------------------------------------

  /** Pins the map at a bpffs path (bpf_obj_pin). */
  pin(path: string): void {
    check(libbpf().bpf_obj_pin(this.fdValue, path), 'bpf_obj_pin', `${this.name} at ${path}`);
  }

  /** Closes the fd (maps owned by a BpfObject are closed by the object instead). Idempotent. */
  close(): void {
    if (this.ownsFd && this.fdValue >= 0) fs.closeSync(this.fdValue);
    this.fdValue = -1;
  }

  /** @internal BpfObject.close(): the object closed the fd; later use fails with EBADF. */
  invalidate(): void {
    this.fdValue = -1;
  }

  // ---- checks ----------------------------------------------------------------------

  /** E2BIG from an update: hash-like maps are full; arrays got an index past max_entries. */
  private e2bigMeaning(): string {
    const arrayLike = this.type === MapType.ARRAY || this.type === MapType.PERCPU_ARRAY || this.type === MapType.PROG_ARRAY;
    return arrayLike ? `index out of range (max_entries ${this.maxEntries})` : `map is full (${this.maxEntries} entries)`;
  }

  private opts(elemFlags: number): BatchOpts {
    this.batchOpts.sz = BATCH_OPTS_SIZE;
    this.batchOpts.elem_flags = elemFlags;
    return this.batchOpts;
  }

  private checkBatchSizes(op: string, keys: Buffer, count: number, values?: Buffer): void {
    if (!Number.isInteger(count) || count < 0 || count > 0xffffffff) {
      throw new BpfError(op, this.name, EINVAL, { hint: `count ${count} is not a valid entry count` });
    }
    if (keys.length < count * this.keySize) {
      throw new BpfError(op, this.name, EINVAL, { hint: `keys buffer is ${keys.length} bytes, ${count} keys of ${this.keySize} bytes need ${count * this.keySize}` });
    }
    if (values && values.length < count * this.valueBufferSize) {
      throw new BpfError(op, this.name, EINVAL, {
        hint: `values buffer is ${values.length} bytes, ${count} values of ${this.valueBufferSize} bytes need ${count * this.valueBufferSize}`,
      });
    }
  }

  private badKey(op: string, key: Buffer): never {
    throw new BpfError(op, this.name, EINVAL, { hint: `key is ${key.length} bytes, the map's keys are ${this.keySize} bytes` });
  }

  private badValue(op: string, value: Buffer, qualifier: string): never {
    const perCpu = this.perCpu ? ` (${mapTypeName(this.type)}: round8(${this.valueSize}) x ${numPossibleCpus()} CPUs)` : '';
    throw new BpfError(op, this.name, EINVAL, {
      hint: `value buffer is ${value.length} bytes, the map needs ${qualifier}${this.valueBufferSize}${perCpu}`,
    });
  }
}
