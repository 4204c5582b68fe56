// Throughput of the libbpf binding on the agent's start-up shape: a hash map
// with 12-byte keys and 20-byte values (lb4_service_key -> lb4_service), 100k
// entries. Standalone: `node dist/bench/libbpf-binding.js [entries]` as root.
// The map is created with bpf_map_create (no pin, no attachment) and closed at
// the end; nothing outlives the process.
import { BpfMap, MapType } from '../src/bpf';

const entries = Number(process.argv[2] ?? 100_000);
const KEY = 12;
const VALUE = 20;

function fillKey(buf: Buffer, off: number, i: number): void {
  buf.writeUInt32BE(0xc6120000 + (i >>> 16), off); // 198.18.x.x
  buf.writeUInt16BE(i & 0xffff, off + 4);
  buf.writeUInt16BE(6, off + 6);
  buf.writeUInt32LE(i, off + 8);
}

function rate(n: number, ns: bigint): string {
  const perSec = (n * 1e9) / Number(ns);
  return `${Math.round(perSec).toLocaleString('en-US').padStart(12)} /s  (${(Number(ns) / n).toFixed(0)} ns/op)`;
}

function time(fn: () => void): bigint {
  const t0 = process.hrtime.bigint();
  fn();
  return process.hrtime.bigint() - t0;
}

function main(): void {
  const map = BpfMap.create({ type: MapType.HASH, name: 'bench_binding', keySize: KEY, valueSize: VALUE, maxEntries: entries });
  try {
    const keys = Buffer.alloc(entries * KEY);
    const values = Buffer.alloc(entries * VALUE, 0x5a);
    for (let i = 0; i < entries; i++) fillKey(keys, i * KEY, i);
    const key = Buffer.alloc(KEY);
    const value = Buffer.alloc(VALUE, 0x5a);
    const out = Buffer.alloc(VALUE);
    const rows: Array<[string, string]> = [];

    // Warm up the JIT and the map's element cache, then start from empty.
    for (let i = 0; i < 2000; i++) {
      fillKey(key, 0, i);
      map.update(key, value);
    }
    map.deleteBatch(keys, Math.min(2000, entries));

    rows.push([
      'update (one syscall each, key reused)',
      rate(entries, time(() => {
        for (let i = 0; i < entries; i++) {
          fillKey(key, 0, i);
          map.update(key, value);
        }
      })),
    ]);
    rows.push([
      'update existing (BPF_EXIST)',
      rate(entries, time(() => {
        for (let i = 0; i < entries; i++) {
          fillKey(key, 0, i);
          map.update(key, value, 2);
        }
      })),
    ]);
    rows.push([
      'lookupInto',
      rate(entries, time(() => {
        for (let i = 0; i < entries; i++) {
          fillKey(key, 0, i);
          map.lookupInto(key, out);
        }
      })),
    ]);
    rows.push([
      'lookup (allocates the result)',
      rate(entries, time(() => {
        for (let i = 0; i < entries; i++) {
          fillKey(key, 0, i);
          map.lookup(key);
        }
      })),
    ]);
    rows.push(['lookupBatch (whole map)', rate(entries, time(() => void map.lookupBatch()))]);
    rows.push(['deleteBatch (whole map, one call)', rate(entries, time(() => void map.deleteBatch(keys, entries)))]);
    for (const batch of [entries, 10_000, 1_000, 100]) {
      if (batch > entries) continue;
      const ns = time(() => {
        for (let off = 0; off < entries; off += batch) {
          const n = Math.min(batch, entries - off);
          map.updateBatch(keys.subarray(off * KEY), values.subarray(off * VALUE), n);
        }
      });
      rows.push([`updateBatch (${batch} per call)`, rate(entries, ns)]);
      map.deleteBatch(keys, entries);
    }
    for (let i = 0; i < entries; i++) map.update(keys.subarray(i * KEY, i * KEY + KEY), value);
    rows.push([
      'delete (one syscall each)',
      rate(entries, time(() => {
        for (let i = 0; i < entries; i++) {
          fillKey(key, 0, i);
          map.delete(key);
        }
      })),
    ]);

    console.log(`libbpf binding, hash map ${KEY}-byte keys / ${VALUE}-byte values, ${entries} entries, node ${process.version}`);
    for (const [what, r] of rows) console.log(`  ${what.padEnd(40)} ${r}`);
  } finally {
    map.close();
  }
}

main();
