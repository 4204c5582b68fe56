// What both families' tests of the slot -> range migration check after the
// load (test/bpf/map_migrate.test.ts, test/bpf/map_migrate6.test.ts): the
// three maps migrated as a layout change with every entry carried, layout 2
// recorded, and the agent adopting the result and allocating after it.
import assert from 'node:assert/strict';
import { readLayouts, type MigratedMap } from '../../src/datapath/migrate';
import { openSockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';

/** frontends: [address, rev-NAT id, backend ids in slot order]; `next` is programmed after adoption. */
export function assertSlotsMigrated(bpffs: string, migrated: MigratedMap[], maps: string[], frontends: Array<[string, number, number[]]>, next: FrontendSpec): void {
  const got = Object.fromEntries(migrated.map((m) => [m.map, [m.why, m.carried, m.dropped]]));
  assert.deepEqual(got, Object.fromEntries(maps.map((n) => [n, ['layout', 2, 0]])));
  for (const name of maps) assert.equal(readLayouts(bpffs).get(name), 2, `${name} layout recorded`);
  // The agent adopts what the migration wrote: same frontends, same backend ids, in slot order.
  const pinned = openSockLbMaps(bpffs);
  try {
    const p = LbProgrammer.adopt(pinned);
    assert.deepEqual(p.programmedFrontends().map((f) => [f.address, f.revNatId, f.backendIds]).sort(), frontends.map(([vip, revNat, ids]) => [vip, revNat, ids]).sort());
    // ... and writes a new range next to them, not over them.
    p.apply([next], { prune: false });
    const cells = p.programmedFrontends().flatMap((f) => f.backendIds.map((_, i) => f.rangeStart! + i)).sort((a, b) => a - b);
    assert.deepEqual(cells, [0, 1, 2, 3], 'the migrated ranges fill 0-2 (in the old map\'s order), the new one follows at 3');
  } finally {
    pinned.close();
  }
}

export interface Held { backend?: string; peerStart?: string; peerEnd?: string; sent: number; echoed: number; error?: string }

/**
 * lbClient's `hold` and `loop` output across a migration: every held
 * connection lived through it talking to `backend` with `vip:80` as its peer
 * before and after, and the loop saw no failed connect. Returns them for the
 * summary line.
 */
export async function assertTrafficSurvived(hold: Promise<string>, loop: Promise<string>, backend: string, vip: string): Promise<{ held: Held[]; ok: number }> {
  const held = (JSON.parse(await hold) as { results: Held[] }).results;
  for (const c of held) {
    assert.equal(c.error, undefined, `a long-lived connection broke across the migration: ${JSON.stringify(c)}`);
    assert.equal(c.backend, `${backend}:8080`);
    assert.equal(c.peerStart, `${vip}:80`);
    assert.equal(c.peerEnd, `${vip}:80`, 'getpeername after the migration still shows the Service');
    assert.ok(c.sent >= 15 && c.echoed === c.sent, JSON.stringify(c));
  }
  const looped = JSON.parse(await loop) as { ok: number; errors: Record<string, number> };
  assert.deepEqual(looped.errors, {}, 'connects during the migration');
  assert.ok(looped.ok > 10, `${looped.ok} connects`);
  return { held, ok: looped.ok };
}
