// NumberIndex (src/datapath/numberIndex.ts), the typed-array map behind the
// programmer's backend index: the same answers as a Map under random inserts,
// overwrites and deletes of 49-bit backend keys (growth and tombstone reuse
// included), and a clear error for a key or value it cannot hold.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NumberIndex } from '../../src/datapath/numberIndex';
import { backendKeyOf } from '../../src/datapath/backendTable';

test('answers as a Map does under random inserts, overwrites and deletes', () => {
  let seed = 12345;
  const random = (n: number) => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed % n;
  };
  const index = new NumberIndex();
  const model = new Map<number, number>();
  // Keys as the backend table makes them: address, port, protocol (addresses in 198.18.0.0/15 and near 2^32).
  const keyAt = (i: number) => backendKeyOf({ address: i % 2 ? `198.18.${(i >> 8) & 255}.${i & 255}` : `255.255.${(i >> 8) & 255}.${i & 255}`, port: 8000 + (i % 7), proto: i % 3 ? 'tcp' : 'udp' }) as number;
  for (let step = 0; step < 60_000; step++) {
    const key = keyAt(random(5000));
    const op = random(10);
    if (op < 6) {
      const value = random(0x7fffffff);
      index.set(key, value);
      model.set(key, value);
    } else if (op < 9) {
      assert.equal(index.delete(key), model.delete(key), `delete ${key} at step ${step}`);
    } else {
      assert.equal(index.get(key), model.get(key), `get ${key} at step ${step}`);
      assert.equal(index.has(key), model.has(key));
    }
    assert.equal(index.size, model.size);
  }
  for (const [key, value] of model) assert.equal(index.get(key), value);
  assert.deepEqual([...index.values()].sort((a, b) => a - b), [...model.values()].sort((a, b) => a - b));
  assert.ok(keyAt(0) > 2 ** 48, 'keys above 2^48 were in the mix');
});

test('holds 200 000 keys (the backends of 10k Services x 10 endpoints x 2 protocols)', () => {
  const index = new NumberIndex();
  for (let id = 0; id < 200_000; id++) index.set(backendKeyOf({ address: `10.${id >> 16}.${(id >> 8) & 255}.${id & 255}`, port: 8080, proto: 'tcp' }) as number, id);
  assert.equal(index.size, 200_000);
  for (let id = 0; id < 200_000; id += 997) assert.equal(index.get(backendKeyOf({ address: `10.${id >> 16}.${(id >> 8) & 255}.${id & 255}`, port: 8080, proto: 'tcp' }) as number), id);
  assert.equal(index.get(backendKeyOf({ address: '10.99.0.1', port: 8080, proto: 'tcp' }) as number), undefined);
});

test('refuses a key or value it cannot hold, naming it', () => {
  const index = new NumberIndex();
  assert.throws(() => index.set(2 ** 53, 1), /key 9007199254740992 is not a non-negative safe integer/);
  assert.throws(() => index.set(-1, 1), /key -1/);
  assert.throws(() => index.set(1.5, 1), /key 1.5/);
  assert.throws(() => index.set(1, -1), /value -1 is not a non-negative int32/);
  assert.throws(() => index.set(1, 2 ** 31), /value 2147483648/);
});
