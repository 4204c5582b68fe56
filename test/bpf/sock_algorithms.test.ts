// Backend selection algorithms on the socket path, with real connect() calls
// from a throwaway cgroup + netns: round-robin, source-hash (the client is
// its network namespace: one pod, one backend), affinity first.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, sh, sluiceBin } from '../helpers/sandbox';
import { addClientNetns, connectFrom, histogram } from '../helpers/algorithms';
import { netnsCookieOf } from '../../src/datapath/netnsCookie';
import type { TraceResult } from '../../src/cli/trace';

const VIP = '10.96.0.20';
const BACKENDS = ['198.18.20.2', '198.18.20.3', '198.18.20.4', '198.18.20.5'];
const CLIENT_NETNS = 8;

let sb: Sandbox;
const clients: string[] = [];

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

function upsert(port: number, extra: string[]): void {
  sluice(['service', 'upsert', '--frontend', `${VIP}:${port}/tcp`, '--backends', BACKENDS.map((b) => `${b}:8080`).join(','), ...extra]);
}

const connect = (port: number, count: number, netns = sb.netns) => connectFrom(sb, VIP, port, count, netns);

before(async () => {
  sb = Sandbox.create('sluice-sockalg');
  await sb.startBackends(BACKENDS, [8080]);
  // More clients: namespaces of their own (other netns cookies), each with the
  // same backend addresses on its loopback and a server behind them.
  clients.push(...addClientNetns(sb, CLIENT_NETNS, BACKENDS, 8080));
  sluice(['attach', '--cgroup', sb.cgroup]);
});

after(() => {
  sb?.close();
});

test('round-robin: N connections give each of k backends N/k within ±1; sluice services shows it', async () => {
  upsert(80, ['--algorithm', 'rr']);
  const N = 42;
  const picks = await connect(80, N);
  const counts = histogram(picks);
  for (const b of BACKENDS) {
    const n = counts.get(`${b}:8080`) ?? 0;
    assert.ok(Math.abs(n - N / BACKENDS.length) <= 1, `${b}: ${n} of ${N}: ${JSON.stringify([...counts])}`);
  }
  const listed = JSON.parse(sluice(['services', '-o', 'json'])) as Array<{ frontend: string; algorithm: string }>;
  assert.equal(listed.find((s) => s.frontend === `${VIP}:80/tcp`)?.algorithm, 'round-robin');
  assert.match(sluice(['services']), new RegExp(`${VIP.replace(/\./g, '\\.')}:80/tcp\\s+-\\s+external\\s+ClusterIP\\s+round-robin\\s`));
});

test('source-hash: one client namespace always reaches the same backend; namespaces spread', async () => {
  upsert(81, ['--algorithm', 'source-hash']);
  const own = histogram(await connect(81, 20));
  assert.equal(own.size, 1, `one client, one backend: ${JSON.stringify([...own])}`);
  const perClient: string[] = [];
  for (const ns of clients) {
    const h = histogram(await connect(81, 5, ns));
    assert.equal(h.size, 1, `${ns}: ${JSON.stringify([...h])}`);
    perClient.push([...h.keys()][0]!);
  }
  // Nine netns cookies over four backends: all on one backend has
  // probability 4 * 4^-9 (about 1.5e-5) for a uniform hash.
  assert.ok(new Set([...perClient, ...own.keys()]).size >= 2, `clients spread: ${perClient.join(' ')}`);
  // `sluice trace --netns-cookie` names, for each client, the backend its connections reached.
  [sb.netns, ...clients].forEach((ns, i) => {
    const r = JSON.parse(sluice(['trace', '198.18.20.1', `${VIP}:81/tcp`, '--netns-cookie', String(netnsCookieOf(`/run/netns/${ns}`)), '-o', 'json'])) as TraceResult;
    assert.equal(r.pick?.backend, i === 0 ? [...own.keys()][0] : perClient[i - 1], `${ns}: ${JSON.stringify(r.pick)}`);
  });
});

test('sessionAffinity ClientIP wins over round-robin', async () => {
  upsert(82, ['--algorithm', 'round-robin', '--affinity-timeout', '60']);
  const h = histogram(await connect(82, 12));
  assert.equal(h.size, 1, `affinity keeps one backend: ${JSON.stringify([...h])}`);
});

test('an algorithm that is not implemented is refused by name and the frontend keeps what it had', async () => {
  upsert(83, ['--algorithm', 'rr']);
  assert.throws(() => upsert(83, ['--algorithm', 'wlc']), /--algorithm "wlc" refused: weighted schedulers need endpoint weights/);
  const listed = JSON.parse(sluice(['services', '-o', 'json'])) as Array<{ frontend: string; algorithm: string }>;
  assert.equal(listed.find((s) => s.frontend === `${VIP}:83/tcp`)?.algorithm, 'round-robin');
});
