// Master entries for the IPv4 services map (one per frontend), encoded
// straight into one key buffer and one value buffer for a batch update, and
// the backend ids of their ranges (RangeBatch). Building a [key, value]
// object pair per entry was a fifth of a cold start's time in allocation and
// garbage collection.
import * as abi from '../abi/generated';
import type { TypedMap } from './typedMap';
import { ip4BackendOfKey } from './backendTable';

const KEY = abi.LB4_FRONTEND_KEY_SIZE;
const VALUE = abi.LB4_SERVICE_SIZE;
const BACKEND = abi.LB4_BACKEND_SIZE;

export class ServiceEntryBatch {
  private keys: Buffer;
  private values: Buffer;
  count = 0;

  constructor(capacity = 256) {
    this.keys = Buffer.alloc(capacity * KEY);
    this.values = Buffer.alloc(capacity * VALUE);
  }

  /** Add an entry: `key` is encoded as it is now (callers reuse one key object). */
  add(key: abi.Lb4FrontendKey, value: abi.Lb4Service): void {
    if ((this.count + 1) * KEY > this.keys.length) this.grow();
    abi.encodeLb4FrontendKey(key, this.keys, this.count * KEY);
    abi.encodeLb4Service(value, this.values, this.count * VALUE);
    this.count++;
  }

  keyAt(i: number): abi.Lb4FrontendKey {
    return abi.decodeLb4FrontendKey(this.keys, i * KEY);
  }

  /** One batch update (no-op when empty). */
  writeTo(map: TypedMap<abi.Lb4FrontendKey, abi.Lb4Service>): void {
    if (this.count === 0) return;
    map.map.updateBatch(this.keys.subarray(0, this.count * KEY), this.values.subarray(0, this.count * VALUE), this.count);
  }

  private grow(): void {
    const keys = Buffer.alloc(this.keys.length * 2);
    const values = Buffer.alloc(this.values.length * 2);
    this.keys.copy(keys);
    this.values.copy(values);
    this.keys = keys;
    this.values = values;
  }
}

/** Backend ids for the range array: index -> id, one batch update. */
export class RangeBatch {
  private keys: Uint32Array;
  private values: Uint32Array;
  count = 0;

  constructor(capacity = 1024) {
    this.keys = new Uint32Array(capacity);
    this.values = new Uint32Array(capacity);
  }

  /** ids at start, start + 1, ... */
  add(start: number, ids: number[]): void {
    while (this.count + ids.length > this.keys.length) this.grow();
    for (let i = 0; i < ids.length; i++) {
      this.keys[this.count] = start + i;
      this.values[this.count++] = ids[i]!;
    }
  }

  writeTo(map: TypedMap<number, number>): void {
    if (this.count === 0) return;
    const keys = Buffer.from(this.keys.buffer, 0, this.count * 4);
    const values = Buffer.from(this.values.buffer, 0, this.count * 4);
    map.map.updateBatch(keys, values, this.count);
  }

  private grow(): void {
    const keys = new Uint32Array(this.keys.length * 2);
    const values = new Uint32Array(this.values.length * 2);
    keys.set(this.keys);
    values.set(this.values);
    this.keys = keys;
    this.values = values;
  }
}

/**
 * IPv4 backend entries (id -> lb4_backend) for one batch update, encoded
 * from a backend's identity number (backendKeyOf) so the address string is
 * parsed once per backend, not once per use; flags and zone may still change
 * while the batch fills (a later frontend of the batch names the backend with
 * other flags: the entry is rewritten in place, the id stays).
 */
export class BackendBatch {
  private ids: Uint32Array;
  /** backendKeyOf() of each entry (address * 2^17 + port * 2 + udp). */
  private keys: Float64Array;
  private flags: Uint8Array;
  private zones: Uint32Array;
  private values: Buffer;
  private readonly scratch: abi.Lb4Backend = { address: 0, port: 0, proto: 0, flags: 0, zone: 0 };
  count = 0;

  constructor(capacity = 1024) {
    this.ids = new Uint32Array(capacity);
    this.keys = new Float64Array(capacity);
    this.flags = new Uint8Array(capacity);
    this.zones = new Uint32Array(capacity);
    this.values = Buffer.alloc(capacity * BACKEND);
  }

  /** Adds backend `id` with identity `key`; returns its index in the batch. */
  add(id: number, key: number, flags: number, zone: number): number {
    if (this.count === this.ids.length) this.grow();
    const i = this.count++;
    this.ids[i] = id;
    this.keys[i] = key;
    this.setMeta(i, flags, zone);
    return i;
  }

  /** (Re)encodes entry i with these flags and zone, through the generated codec (one scratch record, no allocation). */
  setMeta(i: number, flags: number, zone: number): void {
    this.flags[i] = flags;
    this.zones[i] = zone;
    const b = ip4BackendOfKey(this.keys[i]!);
    const v = this.scratch;
    v.address = b.address;
    v.port = b.port;
    v.proto = b.udp ? abi.LB_PROTO_UDP : abi.LB_PROTO_TCP;
    v.flags = flags;
    v.zone = zone;
    abi.encodeLb4Backend(v, this.values, i * BACKEND);
  }

  idAt(i: number): number {
    return this.ids[i]!;
  }

  keyAt(i: number): number {
    return this.keys[i]!;
  }

  flagsAt(i: number): number {
    return this.flags[i]!;
  }

  zoneAt(i: number): number {
    return this.zones[i]!;
  }

  /** One batch update (no-op when empty). */
  writeTo(map: TypedMap<number, abi.Lb4Backend>): void {
    if (this.count === 0) return;
    map.map.updateBatch(Buffer.from(this.ids.buffer, 0, this.count * 4), this.values.subarray(0, this.count * BACKEND), this.count);
  }

  private grow(): void {
    const ids = new Uint32Array(this.ids.length * 2);
    const keys = new Float64Array(this.keys.length * 2);
    const flags = new Uint8Array(this.flags.length * 2);
    const zones = new Uint32Array(this.zones.length * 2);
    const values = Buffer.alloc(this.values.length * 2);
    ids.set(this.ids);
    keys.set(this.keys);
    flags.set(this.flags);
    zones.set(this.zones);
    this.values.copy(values);
    this.ids = ids;
    this.keys = keys;
    this.flags = flags;
    this.zones = zones;
    this.values = values;
  }
}
