// Entries for the services map, encoded straight into one key buffer and one
// value buffer for a batch update. A cold start writes ~240 000 entries at
// 10k Services: building a [key, value] object pair for each was a fifth of
// the sync's time in allocation and garbage collection.
import * as abi from '../abi/generated';
import type { TypedMap } from './typedMap';

const KEY = abi.LB4_SERVICE_KEY_SIZE;
const VALUE = abi.LB4_SERVICE_SIZE;

export class ServiceEntryBatch {
  private keys: Buffer;
  private values: Buffer;
  count = 0;

  constructor(capacity = 256) {
    this.keys = Buffer.alloc(capacity * KEY);
    this.values = Buffer.alloc(capacity * VALUE);
  }

  /** Add an entry: `key` is encoded as it is now (callers reuse one key object). */
  add(key: abi.Lb4ServiceKey, value: abi.Lb4Service): void {
    if ((this.count + 1) * KEY > this.keys.length) this.grow();
    abi.encodeLb4ServiceKey(key, this.keys, this.count * KEY);
    abi.encodeLb4Service(value, this.values, this.count * VALUE);
    this.count++;
  }

  keyAt(i: number): abi.Lb4ServiceKey {
    return abi.decodeLb4ServiceKey(this.keys, i * KEY);
  }

  /** One batch update (no-op when empty). */
  writeTo(map: TypedMap<abi.Lb4ServiceKey, abi.Lb4Service>): void {
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
