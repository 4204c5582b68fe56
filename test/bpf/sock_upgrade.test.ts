// Installing over pins an older Sluice left (issue 10): the socket reverse
// table and LRU it no longer uses are unpinned, and a counters map pinned
// with fewer entries than LB_CNT_MAX is replaced so the socket-path counters
// (32..47) are not lost; the counts it had are carried (src/datapath/migrate.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Sandbox, sh, sluiceBin, labScript } from '../helpers/sandbox';
import { BpfMap } from '../../src/bpf/map';
import { installSockLb } from '../../src/datapath/sockLb';
import { openSockLbMaps, readCounter } from '../../src/datapath/maps';
import * as abi from '../../src/abi/generated';

const BPF_MAP_TYPE_ARRAY = 2;
const BPF_MAP_TYPE_PERCPU_ARRAY = 6;
const BPF_MAP_TYPE_LRU_HASH = 9;

test('install over an older layout: obsolete socket maps unpinned, a 16-entry counters map replaced', async () => {
  const sb = Sandbox.create('sluice-skup');
  try {
    fs.mkdirSync(sb.bpffs, { recursive: true });
    const old = [
      { name: 'sluice_sk_rev4', type: BPF_MAP_TYPE_LRU_HASH, keySize: 16, valueSize: 12, maxEntries: 1024 },
      { name: 'sluice_sk_slot4', type: BPF_MAP_TYPE_ARRAY, keySize: 4, valueSize: 32, maxEntries: 1024 },
      { name: abi.SLUICE_MAP_COUNTERS, type: BPF_MAP_TYPE_PERCPU_ARRAY, keySize: 4, valueSize: 8, maxEntries: 16 },
    ];
    for (const spec of old) {
      const m = BpfMap.create(spec);
      if (spec.name === abi.SLUICE_MAP_COUNTERS) {
        // A count the old programs made: carried into the bigger map (migrate.ts).
        const one = Buffer.alloc(8);
        one.writeBigUInt64LE(5n);
        const key = Buffer.alloc(4);
        key.writeUInt32LE(3);
        m.updatePerCpu(key, m.splitPerCpu(Buffer.alloc(m.valueBufferSize)).map((_, i) => (i === 0 ? one : Buffer.alloc(8))));
      }
      m.pin(path.join(sb.bpffs, spec.name));
      m.close();
    }
    installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup });
    const pinned = fs.readdirSync(sb.bpffs);
    assert.ok(!pinned.includes('sluice_sk_rev4') && !pinned.includes('sluice_sk_slot4'), pinned.join(' '));
    // TCP pairs moved out of socket storage into their own LRU: created by the upgrade, next to the storage UDP keeps.
    assert.ok(pinned.includes(abi.SLUICE_MAP_SOCK_TCP4) && pinned.includes(abi.SLUICE_MAP_SOCK4), pinned.join(' '));
    const maps = openSockLbMaps(sb.bpffs);
    try {
      assert.equal(maps.counters.maxEntries, abi.LB_CNT_MAX);
      assert.equal(readCounter(maps.counters, 3), 5n, 'the old counters are carried');
      // A socket-path counter (index >= 16) counts: the 2nd and 3rd datagram
      // of one socket reuse its backend (LB_CNT_SOCK_STICKY).
      sh(sluiceBin, ['service', 'upsert', '--frontend', '10.96.0.60:53/udp', '--backends', '198.18.18.2:5353', '--bpffs', sb.bpffs]);
      await sb.startBackends(['198.18.18.2'], [5353]);
      await sb.runInCgroup(['node', labScript('lbClient'), 'udp', '10.96.0.60', '53', '3']);
      assert.equal(readCounter(maps.counters, abi.LB_CNT_SOCK_STICKY), 2n);
    } finally {
      maps.close();
    }
  } finally {
    sb.close();
  }
});
