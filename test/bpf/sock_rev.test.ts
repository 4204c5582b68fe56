// Socket-LB reverse translation in the real kernel: each translated UDP
// socket keeps its (frontend, backend) pairs in its own socket-local storage
// (sluice_sock4, see lb4_sock_state in native/sluice_abi.h), each TCP socket
// its one pair in the LRU sluice_sk_tcp4 under its cookie, and every path
// shows the frontend. Throwaway cgroup + netns, real sockets.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { BpfMap } from '../../src/bpf/map';
import * as abi from '../../src/abi/generated';
import { readCounter } from '../../src/datapath/maps';

const VIP = '10.96.0.20';
const BACKENDS = ['198.18.11.2', '198.18.11.3', '198.18.11.4'];

let sb: Sandbox;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

async function client(mode: 'tcp' | 'udp', address: string, port: number, count: number) {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), mode, address, String(port), String(count)]);
  return JSON.parse(out) as { results: Array<{ backend?: string; peer?: string; error?: string }> };
}

function counter(name: string): bigint {
  const m = BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_COUNTERS));
  try {
    return readCounter(m, (abi as unknown as Record<string, number>)[name]!);
  } finally {
    m.close();
  }
}

before(async () => {
  sb = Sandbox.create('sluice-skrev');
  await sb.startBackends(BACKENDS, [8080, 5353]);
  sluice(['attach', '--cgroup', sb.cgroup]);
  sluice(['service', 'upsert', '--frontend', `${VIP}:80/tcp`, '--backends', BACKENDS.map((b) => `${b}:8080`).join(',')]);
  sluice(['service', 'upsert', '--frontend', `${VIP}:53/udp`, '--backends', BACKENDS.map((b) => `${b}:5353`).join(',')]);
});

after(() => {
  sb?.close();
});

test('the socket-LB object does not create the TC conntrack map', () => {
  assert.ok(!sh('ls', [sb.bpffs]).split('\n').includes(abi.SLUICE_MAP_CT4), `${abi.SLUICE_MAP_CT4} pinned by the socket LB`);
});

test('TCP: getpeername shows the VIP for every connection; the old shared tables are gone', async () => {
  const before = counter('LB_CNT_SOCK_REV_XLATED');
  const { results } = await client('tcp', VIP, 80, 40);
  assert.deepEqual(results.filter((r) => r.error), []);
  assert.ok(results.every((r) => r.peer === `${VIP}:80`), `getpeername must show the VIP: ${results.map((r) => r.peer).join(',')}`);
  assert.ok(counter('LB_CNT_SOCK_REV_XLATED') - before >= 40n, 'each getpeername was translated');
  const pinned = sh('ls', [sb.bpffs]).split('\n');
  for (const gone of ['sluice_sk_rev4', 'sluice_sk_slot4']) assert.ok(!pinned.includes(gone), `${gone} is still pinned`);
  assert.ok(pinned.includes(abi.SLUICE_MAP_SOCK4) && pinned.includes(abi.SLUICE_MAP_SOCK_TCP4));
});

test('one unconnected UDP socket: every reply comes from the VIP, and it stays on one backend', async () => {
  const sticky = counter('LB_CNT_SOCK_STICKY');
  const { results } = await client('udp', VIP, 53, 60); // one socket, 60 sendto()
  assert.deepEqual(results.filter((r) => r.error), []);
  assert.ok(results.every((r) => r.peer === `${VIP}:53`), `reply source must be the VIP: ${results.map((r) => r.peer).join(',')}`);
  assert.equal(new Set(results.map((r) => r.backend)).size, 1);
  assert.equal(counter('LB_CNT_SOCK_STICKY') - sticky, 59n, 'the first datagram picks, the 59 others reuse');
});

test('a socket that was not translated sees its real peer', async () => {
  const { results } = await client('tcp', BACKENDS[0]!, 8080, 5);
  for (const r of results) assert.equal(r.peer, `${BACKENDS[0]}:8080`);
});

// One UDP socket: a request to the VIP (its slot now maps backend B -> VIP),
// then the frontend is deleted, then a request straight to B. The reply from
// B must show B: the slot names a rev-NAT entry that no longer exists.
const STALE_CLIENT = `
const dgram = require('dgram'), fs = require('fs');
const [vip, port, flag] = process.argv.slice(1);
const s = dgram.createSocket('udp4');
setTimeout(() => process.exit(2), 10000).unref();
s.once('message', (m, r) => {
  const backend = m.toString().trim().split(' ')[0];
  console.log(JSON.stringify({ first: r.address + ':' + r.port, backend }));
  const t = setInterval(() => {
    if (!fs.existsSync(flag)) return;
    clearInterval(t);
    const [a, p] = backend.split(':');
    s.once('message', (m2, r2) => { console.log(JSON.stringify({ second: r2.address + ':' + r2.port })); s.close(); });
    s.send('again', Number(p), a);
  }, 20);
});
s.send('first', Number(port), vip);
`;

test('a reverse entry whose frontend was deleted is not used: the reply shows the backend', async () => {
  const flag = path.join(os.tmpdir(), `sluice-skrev-${process.pid}-${Date.now()}`);
  try {
    const child = sb.spawnInCgroup(['node', '-e', STALE_CLIENT, VIP, '53', flag]);
    const lines: string[] = [];
    child.stdout!.setEncoding('utf8').on('data', (d: string) => lines.push(...d.split('\n').filter(Boolean)));
    await waitFor('first reply', () => lines.length >= 1);
    const first = JSON.parse(lines[0]!) as { first: string; backend: string };
    assert.equal(first.first, `${VIP}:53`);
    sluice(['service', 'delete', '--frontend', `${VIP}:53/udp`]);
    fs.writeFileSync(flag, '');
    await waitFor('second reply', () => lines.length >= 2);
    const second = JSON.parse(lines[1]!) as { second: string };
    assert.equal(second.second, first.backend, 'a deleted frontend must not be shown');
  } finally {
    fs.rmSync(flag, { force: true });
  }
});
