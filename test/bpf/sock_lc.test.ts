// least-connection on the socket path (issue 15), with real long-lived TCP
// connections from a client held in the test cgroup + netns: the pick keeps
// per-backend active counts within ±1 under skewed closes (random drifts,
// measured side by side), the counts map matches what the client holds, and
// every count returns to 0 when the sockets are released (sock_release),
// also after a re-install (agent restart) and for a backend removed while
// it held connections. A TCP socket's count sits in its reverse-pair slot
// (no socket storage to create at connect); with the slots busy it falls
// back to socket storage, and a frontend deleted under a live connection
// leaves its count held until the socket goes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, sh, sluiceBin } from '../helpers/sandbox';
import { Holder } from '../helpers/holdClient';
import { backendsListed, lcSurvivesReinstall, spread } from '../helpers/algorithms';
import { readLcCounts } from '../../src/datapath/lcCounts';
import { freeSlots, occupyFreeSlots, slotLcCounts } from '../helpers/sockSlots';

const VIP = '10.96.0.30';
const BACKENDS = ['198.18.30.2', '198.18.30.3', '198.18.30.4', '198.18.30.5'];
const LC_PORT = 90;
const RANDOM_PORT = 91;
const N = 40;

let sb: Sandbox;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

function upsert(port: number, algorithm: string, backends = BACKENDS): void {
  sluice(['service', 'upsert', '--frontend', `${VIP}:${port}/tcp`, '--backends', backends.map((b) => `${b}:8080`).join(','), '--algorithm', algorithm]);
}


/** Skewed close: every connection on the first backend, every other one on the second. */
function skewedVictims(holder: Holder, round: number): number[] {
  const first = `${BACKENDS[round % BACKENDS.length]}:8080`;
  const second = `${BACKENDS[(round + 1) % BACKENDS.length]}:8080`;
  const out: number[] = [];
  let alternate = false;
  for (const [id, b] of holder.held) {
    if (b === first) out.push(id);
    else if (b === second && (alternate = !alternate)) out.push(id);
  }
  return out;
}

/** `sluice backends -o json`: backend address:port -> {id, active}. */
const listed = () => backendsListed(sluice(['backends', '-o', 'json']));

before(async () => {
  sb = Sandbox.create('sluice-lc-sock');
  await sb.startBackends(BACKENDS, [8080]);
  sluice(['attach', '--cgroup', sb.cgroup]);
});

after(() => {
  sb?.close();
});

test('least-connection keeps active counts within ±1 under skewed closes; random drifts (measured); counts match and return to 0', async () => {
  upsert(LC_PORT, 'lc');
  upsert(RANDOM_PORT, 'random');
  const lc = new Holder(sb, VIP, BACKENDS);
  const rnd = new Holder(sb, VIP, BACKENDS);
  const spreads = { lc: [] as number[], random: [] as number[] };
  try {
    await lc.open(LC_PORT, N);
    await rnd.open(RANDOM_PORT, N);
    for (let round = 0; round < 4; round++) {
      spreads.lc.push(spread(lc.perBackend(8080)));
      spreads.random.push(spread(rnd.perBackend(8080)));
      // The data path's counts are exactly what the client holds.
      const view = listed();
      for (const [b, n] of lc.perBackend(8080)) assert.equal(view.get(b)?.active, n, `${b}: map count vs held, round ${round}`);
      const lcGone = skewedVictims(lc, round);
      const rndGone = skewedVictims(rnd, round);
      await lc.close(lcGone);
      await rnd.close(rndGone);
      await lc.open(LC_PORT, lcGone.length);
      await rnd.open(RANDOM_PORT, rndGone.length);
    }
    spreads.lc.push(spread(lc.perBackend(8080)));
    spreads.random.push(spread(rnd.perBackend(8080)));
    process.stdout.write(`# active-count spread (max-min over 4 backends, ${N} connections) per round: least-connection ${spreads.lc.join(' ')}; random ${spreads.random.join(' ')}\n`);
    for (const s of spreads.lc) assert.ok(s <= 1, `least-connection spread ${s}: ${spreads.lc.join(' ')}`);
    // Random over 40 connections: every round within ±1 has probability far
    // below 1e-6; it is measured here to show the difference, not tuned.
    assert.ok(Math.max(...spreads.random) >= 2, `random drifts: ${spreads.random.join(' ')}`);
    // Random frontends take no counts.
    const ids = [...listed().values()].map((b) => b.id);
    await lc.closeAll();
    const zero = readLcCounts(sb.bpffs, ids)!;
    assert.deepEqual([...zero.values()], ids.map(() => 0), 'every count back to 0 after the sockets are closed');
  } finally {
    lc.kill();
    rnd.kill();
  }
  await rndDone();
});

async function rndDone(): Promise<void> {
  // A killed holder releases its sockets as the process exits.
  const ids = [...listed().values()].map((b) => b.id);
  for (let i = 0; i < 50; i++) {
    if ([...readLcCounts(sb.bpffs, ids)!.values()].every((n) => n === 0)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`counts not 0: ${JSON.stringify([...readLcCounts(sb.bpffs, ids)!])}`);
}

test('counts survive a re-install (agent restart) and a backend removed while it held connections goes back to 0', async () => {
  await lcSurvivesReinstall({
    sb, vip: VIP, backends: BACKENDS, port: LC_PORT, listed,
    upsert: (backends) => upsert(LC_PORT, 'lc', [...backends]), reinstall: () => sluice(['attach', '--cgroup', sb.cgroup]),
  });
  assert.match(sluice(['backends']), /ID\s+BACKEND\s+FLAGS\s+ACTIVE/);
});

test('TCP sockets hold their counts in their reverse-pair slots, else (slots busy) in socket storage; a frontend deleted under them keeps the counts until release', async () => {
  const port = LC_PORT + 10;
  upsert(port, 'lc');
  const idOf = new Map([...listed()].map(([b, v]) => [b, v.id]));
  const byId = (h: Map<string, number>) => new Map([...h].filter(([, n]) => n > 0).map(([b, n]) => [idOf.get(b)!, n]));
  const inSlots = new Holder(sb, VIP, BACKENDS);
  const inStorage = new Holder(sb, VIP, BACKENDS);
  let taken: number[] = [];
  try {
    await inSlots.open(port, 8);
    // Each socket's count is in its own slot, on the backend it talks to.
    assert.deepEqual(slotLcCounts(sb.bpffs), byId(inSlots.perBackend(8080)), 'slot counts vs held');
    taken = occupyFreeSlots(sb.bpffs);
    await inStorage.open(port, 8);
    freeSlots(sb.bpffs, taken);
    taken = [];
    // Not in a slot (every one was busy), counted all the same.
    assert.deepEqual(slotLcCounts(sb.bpffs), byId(inSlots.perBackend(8080)), 'the fallback sockets took no slot');
    const held = () => {
      const all = new Map(inSlots.perBackend(8080));
      for (const [b, n] of inStorage.perBackend(8080)) all.set(b, all.get(b)! + n);
      return all;
    };
    const ids = [...idOf.values()];
    const counts = () => new Map([...readLcCounts(sb.bpffs, ids)!].filter(([, n]) => n > 0));
    assert.deepEqual(counts(), byId(held()), 'map counts vs held, both homes');
    // The frontend goes: getpeername() shows the backend (the stale pair is
    // forgotten), and the connections still hold their counts.
    sluice(['service', 'delete', '--frontend', `${VIP}:${port}/tcp`]);
    for (const h of [inSlots, inStorage]) {
      for (const [id, peer] of await h.peers()) assert.equal(peer, h.held.get(id), `connection ${id}: the backend once its frontend is gone`);
    }
    assert.deepEqual(counts(), byId(held()), 'counts held after the frontend was deleted');
    await inSlots.closeAll();
    await inStorage.closeAll();
    assert.deepEqual([...readLcCounts(sb.bpffs, ids)!.values()], ids.map(() => 0), 'every count back to 0');
    assert.deepEqual(slotLcCounts(sb.bpffs), new Map(), 'no slot holds a count');
  } finally {
    if (taken.length) freeSlots(sb.bpffs, taken);
    inSlots.kill();
    inStorage.kill();
  }
});
