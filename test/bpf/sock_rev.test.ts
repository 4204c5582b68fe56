// Socket-LB reverse translation in the real kernel: where each socket's
// reverse entry lives (a TCP socket's in the cookie-indexed slot table
// sluice_sk_slot4, a UDP socket's in the sluice_sk_rev4 LRU; see lb4_sock_slot in native/sluice_abi.h) and that every
// path shows the frontend. Throwaway cgroup + netns, real sockets.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { BpfMap } from '../../src/bpf/map';
import * as abi from '../../src/abi/generated';

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

function withPinned<T>(name: string, fn: (m: BpfMap) => T): T {
  const m = BpfMap.fromPinned(path.join(sb.bpffs, name));
  try {
    return fn(m);
  } finally {
    m.close();
  }
}

/** Entries of the LRU, decoded. */
function lruEntries(): abi.Lb4SockRevKey[] {
  return withPinned(abi.SLUICE_MAP_SOCKREV4, (m) => [...m.keys()].map((k) => abi.lb4_sock_rev_keyCodec.decode(k)));
}

/** Slots in use (cookie != 0), decoded. */
function usedSlots(): abi.Lb4SockSlot[] {
  return withPinned(abi.SLUICE_MAP_SOCKSLOT4, (m) => {
    const { values, count } = m.lookupBatch(65536);
    const out: abi.Lb4SockSlot[] = [];
    for (let i = 0; i < count; i++) {
      const slot = abi.lb4_sock_slotCodec.decode(values, i * abi.LB4_SOCK_SLOT_SIZE);
      if (slot.key.cookie !== 0n) out.push(slot);
    }
    return out;
  });
}

const ipv4 = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');

before(async () => {
  sb = Sandbox.create('sluice-skrev');
  for (const b of BACKENDS) sb.ip(['addr', 'add', `${b}/32`, 'dev', 'lo']);
  const server = sb.spawnInNetns(['node', labScript('backendServer'), ...BACKENDS.flatMap((b) => [`${b}:8080`, `${b}:5353`])]);
  let ready = false;
  server.stdout!.on('data', (d) => { if (String(d).includes('ready')) ready = true; });
  await waitFor('backend servers', () => ready);
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

test('TCP: every socket keeps its reverse entry in its slot, none in the LRU; getpeername shows the VIP', async () => {
  const { results } = await client('tcp', VIP, 80, 40);
  assert.deepEqual(results.filter((r) => r.error), []);
  assert.ok(results.every((r) => r.peer === `${VIP}:80`), `getpeername must show the VIP: ${results.map((r) => r.peer).join(',')}`);
  assert.deepEqual(lruEntries().filter((k) => k.proto === abi.LB_PROTO_TCP), []);
  const slots = usedSlots().filter((s) => s.key.proto === abi.LB_PROTO_TCP);
  assert.equal(slots.length, 40, 'one slot per TCP socket');
  for (const s of slots) {
    assert.ok(BACKENDS.includes(ipv4(s.key.address)), `slot names backend ${ipv4(s.key.address)}`);
    assert.equal(`${ipv4(s.rev.address)}:${s.rev.port}`, `${VIP}:80`);
  }
});

test('one unconnected UDP socket spread over every backend: all replies come from the VIP; its entries are in the LRU, not in slots', async () => {
  const { results } = await client('udp', VIP, 53, 60); // one socket, 60 sendto() with a random backend each
  assert.deepEqual(results.filter((r) => r.error), []);
  assert.ok(results.every((r) => r.peer === `${VIP}:53`), `reply source must be the VIP: ${results.map((r) => r.peer).join(',')}`);
  const used = new Set(results.map((r) => r.backend));
  assert.ok(used.size >= 2, `60 draws over 3 backends reached only ${[...used].join(',')}`);
  // UDP entries stay in the LRU, which recvmsg() keeps fresh for a long-lived socket.
  assert.equal(usedSlots().filter((s) => s.key.proto === abi.LB_PROTO_UDP).length, 0, 'no UDP slot');
  const lru = lruEntries().filter((k) => k.proto === abi.LB_PROTO_UDP);
  const cookies = new Set(lru.map((k) => k.cookie));
  assert.equal(cookies.size, 1, 'one socket');
  assert.equal(lru.length, used.size, `one LRU entry per backend the socket reached`);
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
