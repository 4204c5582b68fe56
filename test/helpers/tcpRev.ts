// Shared by the TCP reverse-pair tests of both families
// (test/bpf/sock_tcp_rev.test.ts, sock_tcp_rev6.test.ts): a connection held
// open through a VIP, the stress clients of src/lab/rawSock.ts, and the
// slot churn of the race test (bogus sockets taking and leaving slots).
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { type Sandbox, waitFor, labScript } from './sandbox';
import { BpfMap as BpfMapClass, type BpfMap } from '../../src/bpf/map';

export async function rawSock(sb: Sandbox, args: string[], timeoutMs = 60000): Promise<Record<string, unknown>> {
  return JSON.parse(await sb.runInCgroup(['node', labScript('rawSock'), ...args], timeoutMs)) as Record<string, unknown>;
}

export interface HeldConnection {
  cookie: bigint;
  peer: string;
  release: () => Promise<{ peerAfter: string; greeting: string }>;
}

/** A TCP connection to address:port held open until release() (rawSock hold; extra: its BPFFS BACKEND arguments). */
export async function holdConnection(sb: Sandbox, flagDir: string, address: string, port: string, extra: string[] = []): Promise<HeldConnection> {
  const flag = path.join(flagDir, `release-${Math.random().toString(36).slice(2)}`);
  const child: ChildProcess = sb.spawnInCgroup(['node', labScript('rawSock'), 'hold', address, port, flag, '20000', ...extra]);
  const lines: string[] = [];
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => lines.push(...d.split('\n').filter(Boolean)));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => { stderr += d; });
  await waitFor(`rawSock hold connected (${stderr})`, () => lines.length >= 1);
  const first = JSON.parse(lines[0]!) as { cookie: string; peer: string };
  return {
    cookie: BigInt(first.cookie),
    peer: first.peer,
    release: async () => {
      fs.writeFileSync(flag, '');
      await waitFor(`rawSock hold finished (${stderr})`, () => lines.length >= 2);
      return JSON.parse(lines[1]!) as { peerAfter: string; greeting: string };
    },
  };
}

/**
 * The race test: four stress clients (two per frontend) connect in parallel
 * while free slots of the slot array are taken by bogus sockets (cookies at
 * or above bogusFloor, pairs naming the second frontend) and freed again,
 * for about 4 s. A real socket's slot overwritten between the read and the
 * write loses its pair (it shows backendPeer); it must never show a
 * frontend it did not dial. frontends: [address, port, peer as printed].
 */
export async function raceSlots(sb: Sandbox, slots: BpfMap, slotCount: number, frontends: [string, string, string][],
  bogus: Buffer, free: Buffer, bogusFloor: bigint, backendPeer: string): Promise<void> {
  const dialled = [frontends[0]!, frontends[1]!, frontends[0]!, frontends[1]!];
  const clients = dialled.map(([a, p]) => rawSock(sb, ['stress', a, p, '4000', '200000', 'tcp'], 60000));
  const at = Buffer.alloc(4);
  const end = Date.now() + 4000;
  let writes = 0;
  for (let i = 0; i < 2_000_000 && Date.now() < end; i++) {
    at.writeUInt32LE((i * 7919) % slotCount);
    const cookie = slots.lookup(at)!.readBigUInt64LE(8);
    if (cookie === 0n) slots.update(at, bogus);
    else if (cookie >= bogusFloor) slots.update(at, free);
    writes++;
    if (i % 512 === 511) await new Promise((r) => setImmediate(r));
  }
  const results = await Promise.all(clients);
  for (const [i, r] of results.entries()) {
    const want = dialled[i]![2];
    const wrong = Object.keys(r.wrongPeers as Record<string, number>).filter((p) => p !== backendPeer);
    console.log(`client of ${want}: ${r.count} connects, peers other than the VIP: ${JSON.stringify(r.wrongPeers)}, slot writes ${writes}`);
    assert.ok((r.count as number) > 200, `client made only ${r.count} connects`);
    assert.deepEqual({ wrong, refused: r.refused, errors: r.errors }, { wrong: [], refused: 0, errors: {} }, `client of ${want}`);
  }
}

/** Write every slot of the pinned slot array at mapPath: slot i gets value(i) (valueSize bytes), in batches. */
export function fillSlotArray(mapPath: string, valueSize: number, value: (index: number) => Buffer): void {
  const m = BpfMapClass.fromPinned(mapPath);
  const batch = 4096;
  const keys = Buffer.alloc(batch * 4);
  const values = Buffer.alloc(batch * valueSize);
  try {
    for (let base = 0; base < m.maxEntries; base += batch) {
      for (let i = 0; i < batch; i++) {
        keys.writeUInt32LE(base + i, i * 4);
        value(base + i).copy(values, i * valueSize);
      }
      m.updateBatch(keys, values, batch);
    }
  } finally {
    m.close();
  }
}
