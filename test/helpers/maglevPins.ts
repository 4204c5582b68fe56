// sluice_maglev4 as an older Sluice pinned it (layout 1: a HASH_OF_MAPS keyed
// by struct lb4_maglev_key {rev_nat_id u32, proto u8, scope u8, pad[2]}),
// for the upgrade tests of test/bpf/maglev_migrate*.test.ts.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { BpfMap } from '../../src/bpf/map';
import { MapType } from '../../src/bpf/constants';
import { recordLayouts } from '../../src/datapath/migrate';

const BPF_F_NO_PREALLOC = 1;
const BPF_F_INNER_MAP = 1 << 12;

/** Layout 1's outer key of a TCP frontend. */
export function layout1Key(revNatId: number, scope: number): Buffer {
  const k = Buffer.alloc(8);
  k.writeUInt32LE(revNatId, 0);
  k.writeUInt8(abi.LB_PROTO_TCP, 4);
  k.writeUInt8(scope, 5);
  return k;
}

/**
 * Replace the pinned sluice_maglev4 under `bpffs` by a layout-1 hash of maps
 * whose entries ({rev-NAT id, scope (abi.LB_SCOPE_*)} -> inner map id) name
 * the given (existing) inner tables, and record layout 1.
 */
export function pinLayout1Maglev(bpffs: string, entries: Array<{ revNatId: number; scope: number; innerMapId: number }>): void {
  const template = BpfMap.create({ type: MapType.ARRAY, name: 'h_mg_tmpl', keySize: 4, valueSize: abi.LB_MAGLEV_ROW * 4, maxEntries: 1, flags: BPF_F_INNER_MAP });
  const old = BpfMap.create({ type: MapType.HASH_OF_MAPS, name: abi.SLUICE_MAP_MAGLEV4, keySize: 8, valueSize: 4, maxEntries: 1024, flags: BPF_F_NO_PREALLOC, innerMapFd: template.fd });
  try {
    const fd = Buffer.alloc(4);
    for (const e of entries) {
      const inner = BpfMap.fromId(e.innerMapId);
      try {
        fd.writeUInt32LE(inner.fd, 0);
        old.update(layout1Key(e.revNatId, e.scope), fd);
      } finally {
        inner.close();
      }
    }
    const pin = path.join(bpffs, abi.SLUICE_MAP_MAGLEV4);
    fs.rmSync(pin);
    old.pin(pin);
  } finally {
    old.close();
    template.close();
  }
  recordLayouts(bpffs, [[abi.SLUICE_MAP_MAGLEV4, 1]]);
}
