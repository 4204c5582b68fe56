// Per-socket state of the socket LB in the real kernel (issue 10, items 1-3):
// an unconnected UDP socket stays on one backend per frontend; a socket's
// reverse translation cannot be taken over by another socket; a Service whose
// backends change under load never refuses a connect or shows a wrong peer.
// Throwaway cgroup + netns, real sockets.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { openSockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';
import { LB_SVC_FLAG_CLUSTER_IP } from '../../src/abi/generated';

const VIP = '10.96.0.30';
const VIP2 = '10.96.0.31';
const BACKENDS = ['198.18.13.2', '198.18.13.3', '198.18.13.4', '198.18.13.5'];
const OTHER = ['198.18.13.12', '198.18.13.13', '198.18.13.14'];

let sb: Sandbox;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

async function udpClient(address: string, port: number, count: number) {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), 'udp', address, String(port), String(count)]);
  return (JSON.parse(out) as { results: Array<{ backend?: string; peer?: string; error?: string }> }).results;
}

async function rawSock(args: string[], timeoutMs = 60000): Promise<Record<string, unknown>> {
  return JSON.parse(await sb.runInCgroup(['node', labScript('rawSock'), ...args], timeoutMs)) as Record<string, unknown>;
}

const list = (hosts: string[], port: number) => hosts.map((h) => `${h}:${port}`).join(',');

before(async () => {
  sb = Sandbox.create('sluice-skst');
  sb.ip(['addr', 'add', '198.18.14.254/24', 'dev', 'lo']); // item 3's backends: connected UDP needs only a route
  await sb.startBackends([...BACKENDS, ...OTHER], [8080, 5353]);
  sluice(['attach', '--cgroup', sb.cgroup]);
});

after(() => {
  sb?.close();
});

test('item 1: an unconnected UDP socket sends all its datagrams to one backend; replies show the VIP', async () => {
  sluice(['service', 'upsert', '--frontend', `${VIP}:53/udp`, '--backends', list(BACKENDS, 5353)]);
  const results = await udpClient(VIP, 53, 200); // one socket, 200 sendto()
  assert.deepEqual(results.filter((r) => r.error), []);
  const used = new Set(results.map((r) => r.backend));
  assert.equal(used.size, 1, `one socket reached ${used.size} backends: ${[...used].join(', ')}`);
  assert.ok(results.every((r) => r.peer === `${VIP}:53`), 'every reply shows the VIP');
  // Different sockets still spread: 12 sockets over 4 backends all on one backend is (1/4)^11.
  const firsts = new Set<string | undefined>();
  for (let i = 0; i < 12; i++) firsts.add((await udpClient(VIP, 53, 1))[0]?.backend);
  assert.ok(firsts.size >= 2, `12 sockets all chose ${[...firsts].join(',')}`);
});

// Two frontends on disjoint backends, one unconnected socket alternating
// between them: each frontend keeps its own backend, each reply shows its own
// VIP.
const TWO_FRONTENDS = `
const dgram = require('dgram');
const [a, b, n] = process.argv.slice(1);
const s = dgram.createSocket('udp4');
setTimeout(() => process.exit(2), 20000).unref();
const out = [];
let i = 0;
const next = () => {
  if (i === Number(n)) { console.log(JSON.stringify(out)); s.close(); return; }
  const to = i++ % 2 ? b : a;
  s.once('message', (m, r) => { out.push({ to, backend: m.toString().split(' ')[0], peer: r.address + ':' + r.port }); next(); });
  s.send('x', 53, to);
};
next();
`;

test('item 1: one socket talking to two frontends keeps one backend per frontend, and each reply shows its own frontend', async () => {
  sluice(['service', 'upsert', '--frontend', `${VIP}:53/udp`, '--backends', list(BACKENDS, 5353)]);
  sluice(['service', 'upsert', '--frontend', `${VIP2}:53/udp`, '--backends', list(OTHER, 5353)]);
  const out = JSON.parse(await sb.runInCgroup(['node', '-e', TWO_FRONTENDS, VIP, VIP2, '60'])) as Array<{ to: string; backend: string; peer: string }>;
  assert.equal(out.length, 60);
  for (const vip of [VIP, VIP2]) {
    const mine = out.filter((r) => r.to === vip);
    assert.equal(new Set(mine.map((r) => r.backend)).size, 1, `${vip}: ${mine.map((r) => r.backend).join(',')}`);
    assert.ok(mine.every((r) => r.peer === `${vip}:53`), `${vip}: replies show ${[...new Set(mine.map((r) => r.peer))].join(',')}`);
  }
});

// The socket sends, its backend is removed from the frontend, it sends again:
// the next datagrams go to one of the remaining backends (and stay there).
const REPICK = `
const dgram = require('dgram'), fs = require('fs');
const [vip, flag] = process.argv.slice(1);
const s = dgram.createSocket('udp4');
setTimeout(() => process.exit(2), 20000).unref();
const out = [];
const ask = (n, done) => {
  if (n === 0) return done();
  s.once('message', (m, r) => { out.push({ backend: m.toString().split(' ')[0], peer: r.address + ':' + r.port }); ask(n - 1, done); });
  s.send('x', 53, vip);
};
ask(5, () => {
  console.log(JSON.stringify(out.splice(0)));
  const t = setInterval(() => {
    if (!fs.existsSync(flag)) return;
    clearInterval(t);
    ask(20, () => { console.log(JSON.stringify(out)); s.close(); });
  }, 20);
});
`;

test('item 1: when its backend leaves the frontend the socket moves to one remaining backend', async () => {
  const fs = await import('node:fs');
  const os = await import('node:os');
  const path = await import('node:path');
  sluice(['service', 'upsert', '--frontend', `${VIP}:53/udp`, '--backends', list(BACKENDS, 5353)]);
  const flag = path.join(os.tmpdir(), `sluice-skst-${process.pid}-${Date.now()}`);
  try {
    const child = sb.spawnInCgroup(['node', '-e', REPICK, VIP, flag]);
    const lines: string[] = [];
    child.stdout!.setEncoding('utf8').on('data', (d: string) => lines.push(...d.split('\n').filter(Boolean)));
    await waitFor('first replies', () => lines.length >= 1);
    const first = JSON.parse(lines[0]!) as Array<{ backend: string }>;
    assert.equal(new Set(first.map((r) => r.backend)).size, 1);
    const gone = first[0]!.backend.split(':')[0]!;
    sluice(['service', 'upsert', '--frontend', `${VIP}:53/udp`, '--backends', list(BACKENDS.filter((b) => b !== gone), 5353)]);
    fs.writeFileSync(flag, '');
    await waitFor('second replies', () => lines.length >= 2);
    const second = JSON.parse(lines[1]!) as Array<{ backend: string; peer: string }>;
    const used = new Set(second.map((r) => r.backend));
    assert.equal(used.size, 1, `after the removal: ${[...used].join(',')}`);
    assert.ok(!used.has(`${gone}:5353`), 'the removed backend is not used any more');
    assert.ok(second.every((r) => r.peer === `${VIP}:53`));
  } finally {
    fs.rmSync(flag, { force: true });
  }
});

test('item 2: a socket whose cookie equals another socket\'s modulo 262144 (the old slot table) keeps showing its own frontend', async () => {
  sluice(['service', 'upsert', '--frontend', `${VIP}:80/tcp`, '--backends', list(BACKENDS, 8080)]);
  // A second Service on the same pods: a wrong entry would show this VIP.
  sluice(['service', 'upsert', '--frontend', `${VIP2}:81/tcp`, '--backends', list(BACKENDS, 8080)]);
  const r = await rawSock(['alias', VIP, '80', VIP2, '81', String(262144), String(3 * 262144)], 120000);
  assert.ok(r.other !== undefined, `no socket with an aliasing cookie within ${r.iterations} sockets (cookie ${r.cookie})`);
  assert.equal(r.peerBefore, `${VIP}:80`);
  assert.equal(r.peerAfter, `${VIP}:80`, `socket ${r.cookie} shows ${r.peerAfter} after socket ${r.other} connected to ${VIP2}:81`);
});

test('item 3: backends grow and shrink in a tight loop while clients connect: 0 refusals, 0 wrong peers', async () => {
  const maps = openSockLbMaps(sb.bpffs);
  try {
    const programmer = LbProgrammer.adopt(maps);
    programmer.setBackendGrace(1000); // as the agent runs it (src/agent/syncer.ts)
    const frontend = (n: number): FrontendSpec => ({
      address: VIP, port: 5300, proto: 'udp', scope: 'external', flags: LB_SVC_FLAG_CLUSTER_IP, affinityTimeout: 0,
      backends: Array.from({ length: n }, (_, i) => ({ address: `198.18.14.${i + 1}`, port: 5353, proto: 'udp' as const })),
    });
    programmer.apply([frontend(16)], { prune: false });
    // The programmer's own path, as fast as it runs: grow = backends 2..16,
    // a new range of 16, the master; shrink = a new range of 1, the master,
    // then backends 2..16 deleted (a program holding the old master's copy
    // meets a deleted backend and re-reads the master). The old range is
    // reused only after the grace period.
    const clients = [0, 1].map(() => rawSock(['stress', VIP, '5300', '6000', '400000'], 60000));
    // Let the clients start, then churn for a bounded count and time.
    await new Promise((r) => setTimeout(r, 300));
    const end = Date.now() + 5000;
    let updates = 0;
    for (let i = 0; i < 200000 && Date.now() < end; i++) {
      const r = programmer.apply([frontend(i % 2 ? 1 : 16)], { prune: false });
      assert.equal(r.failures.length, 0, r.failures.map((f) => f.error.message).join('; '));
      if (i % 64 === 63) programmer.recycleIds();
      updates++;
    }
    const results = await Promise.all(clients);
    for (const r of results) {
      assert.ok((r.count as number) > 1000, `client made only ${r.count} connects`);
      console.log(`churn: ${updates} updates, ${r.count} connects`);
      assert.deepEqual({ refused: r.refused, wrongPeers: r.wrongPeers, errors: r.errors }, { refused: 0, wrongPeers: {}, errors: {} },
        `after ${updates} updates, ${r.count} connects`);
    }
  } finally {
    maps.close();
  }
});

