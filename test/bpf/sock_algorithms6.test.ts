// Backend selection algorithms for IPv6 frontends on the socket path
// (connect6), with real AF_INET6 connect() calls from a throwaway cgroup +
// netns: round-robin (N/k within ±1), source-hash (one client namespace, one
// backend; namespaces spread), maglev (every connection through the
// frontend's table, spread over every backend, make-before-break swaps), and
// ClientIP affinity first. The same properties as IPv4
// (sock_algorithms.test.ts, sock_maglev.test.ts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { Sandbox, sh, sluiceBin } from '../helpers/sandbox';
import { addClientNetns, connectFrom, histogram } from '../helpers/algorithms';
import { openSockLbMaps, readCounter } from '../../src/datapath/maps';
import { LbProgrammer } from '../../src/datapath/programmer';
import { readMaglevTable } from '../../src/datapath/maglev';

const VIP6 = 'fd00:96::20';
const BACKENDS6 = ['fd00:18::20:2', 'fd00:18::20:3', 'fd00:18::20:4', 'fd00:18::20:5'];
const CLIENT_NETNS = 6;

let sb: Sandbox;
const clients: string[] = [];

const sluice = (args: string[]): string => sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
const backendsFlag = (addresses: readonly string[]) => addresses.map((a) => `[${a}]:8080`).join(',');

function upsert(port: number, extra: string[], backends: readonly string[] = BACKENDS6): void {
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:${port}/tcp`, '--backends', backendsFlag(backends), ...extra]);
}

/** `count` TCP connections from `netns`, each a new AF_INET6 socket: the backend each reached. */
const connect = (port: number, count: number, netns = sb.netns) => connectFrom(sb, VIP6, port, count, netns);

function counters(): { picked: bigint; fallback: bigint } {
  const maps = openSockLbMaps(sb.bpffs);
  try {
    return { picked: readCounter(maps.counters, abi.LB_CNT_MAGLEV_PICKED), fallback: readCounter(maps.counters, abi.LB_CNT_MAGLEV_FALLBACK) };
  } finally {
    maps.close();
  }
}

before(async () => {
  sb = Sandbox.create('sluice-sockalg6');
  await sb.startBackends(BACKENDS6, [8080]);
  clients.push(...addClientNetns(sb, CLIENT_NETNS, BACKENDS6, 8080));
  sluice(['attach', '--cgroup', sb.cgroup]);
});

after(() => {
  sb?.close();
});

test('IPv6 round-robin: N connections give each of k backends N/k within ±1', async () => {
  upsert(80, ['--algorithm', 'rr']);
  const N = 42;
  const counts = histogram(await connect(80, N));
  for (const b of BACKENDS6) {
    const n = counts.get(`[${b}]:8080`) ?? counts.get(`${b}:8080`) ?? 0;
    assert.ok(Math.abs(n - N / BACKENDS6.length) <= 1, `${b}: ${n} of ${N}: ${JSON.stringify([...counts])}`);
  }
});

test('IPv6 source-hash: one client namespace always reaches the same backend; namespaces spread', async () => {
  upsert(81, ['--algorithm', 'sh']);
  const own = histogram(await connect(81, 20));
  assert.equal(own.size, 1, `one client, one backend: ${JSON.stringify([...own])}`);
  const perClient: string[] = [];
  for (const ns of clients) {
    const h = histogram(await connect(81, 5, ns));
    assert.equal(h.size, 1, `${ns}: ${JSON.stringify([...h])}`);
    perClient.push([...h.keys()][0]!);
  }
  // Seven netns cookies over four backends: all on one has probability 4^-6.
  assert.ok(new Set([...perClient, ...own.keys()]).size >= 2, `clients spread: ${perClient.join(' ')}`);
});

test('IPv6 maglev: every connection takes its backend from the frontend\'s table; sockets spread over every backend', async () => {
  upsert(82, ['--algorithm', 'maglev']);
  const maps = openSockLbMaps(sb.bpffs);
  try {
    const f = LbProgrammer.adopt(maps).programmedFrontends().find((x) => x.address === VIP6 && x.port === 82)!;
    assert.equal(f.algorithm, abi.LB_ALG_MAGLEV);
    const table = readMaglevTable(maps.maglev!, { revNatId: f.revNatId, proto: 'tcp', scope: 'external' });
    assert.ok(table, 'the frontend has a table in sluice_maglev4');
    assert.deepEqual(new Set(table.ids), new Set(f.backendIds));
  } finally {
    maps.close();
  }
  const c0 = counters();
  const picks = await connect(82, 40);
  const c1 = counters();
  assert.equal(c1.picked - c0.picked, 40n, 'each connect6 took its backend from the table');
  assert.equal(c1.fallback - c0.fallback, 0n);
  // 40 sockets over 4 backends: all reached unless the hash is broken (P < 4 * 0.75^40).
  assert.equal(new Set(picks).size, BACKENDS6.length, JSON.stringify(picks));
  const listed = JSON.parse(sluice(['services', '-o', 'json'])) as Array<{ frontend: string; algorithm: string }>;
  assert.equal(listed.find((s) => s.frontend === `[${VIP6}]:82/tcp`)?.algorithm, 'maglev');
});

test('IPv6 maglev: table swaps while a client connects in a loop: no failed connection, no fallback', async () => {
  upsert(83, ['--algorithm', 'maglev']);
  const c0 = counters();
  let stop = false;
  const swaps = (async () => {
    for (let i = 0; i < 8 && !stop; i++) {
      upsert(83, ['--algorithm', 'maglev'], i % 2 ? BACKENDS6 : BACKENDS6.slice(0, 3));
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  const picks = await connect(83, 60);
  stop = true;
  await swaps;
  assert.equal(picks.length, 60);
  const c1 = counters();
  assert.equal(c1.picked - c0.picked, 60n, 'every connect6 took its backend from a table');
  assert.equal(c1.fallback - c0.fallback, 0n, 'no pick fell back to a random slot');
});

test('IPv6: sessionAffinity ClientIP wins over maglev: one client, one backend', async () => {
  upsert(84, ['--algorithm', 'maglev', '--affinity-timeout', '300']);
  const h = histogram(await connect(84, 15));
  assert.equal(h.size, 1, JSON.stringify([...h]));
});
