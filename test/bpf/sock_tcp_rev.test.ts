// TCP's reverse pair in the LRU sluice_sk_tcp4 (issue 10: socket storage is
// created for UDP only, so a TCP connect pays no allocation): where the pair
// lives, and what a user sees when the LRU recycles a live connection's pair
// (getpeername shows the backend, the stale-socket destroy leaves that
// socket alone; the connection itself keeps working). Throwaway cgroup +
// netns, real sockets.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { BpfMap } from '../../src/bpf/map';
import { TypedMap } from '../../src/datapath/typedMap';
import { StaleSocketTerminator } from '../../src/datapath/sockTerm';
import { ip4ToNumber } from '../../src/datapath/addr';
import * as abi from '../../src/abi/generated';

const VIP = '10.96.0.50';
const BACKEND = '198.18.16.2';

let sb: Sandbox;
let flagDir: string;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

function tcpPairs(): TypedMap<abi.Lb4SockTcpKey, abi.Lb4SockTcp> {
  return new TypedMap(BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_TCP4)), abi.lb4_sock_tcp_keyCodec, abi.lb4_sock_tcpCodec);
}

/** A TCP connection through the VIP held open until release() (rawSock hold). */
async function holdConnection(legacy = false): Promise<{ cookie: bigint; peer: string; release: () => Promise<{ peerAfter: string; greeting: string }> }> {
  const flag = path.join(flagDir, `release-${Math.random().toString(36).slice(2)}`);
  const child: ChildProcess = sb.spawnInCgroup(['node', labScript('rawSock'), 'hold', VIP, '80', flag, '20000', ...(legacy ? [sb.bpffs, `${BACKEND}:8080`] : [])]);
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

before(async () => {
  sb = Sandbox.create('sluice-sock2-tcprev');
  flagDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-sock2-tcprev-'));
  await sb.startBackends([BACKEND], [8080]);
  sluice(['attach', '--cgroup', sb.cgroup]);
  sluice(['service', 'upsert', '--frontend', `${VIP}:80/tcp`, '--backends', `${BACKEND}:8080`]);
});

after(() => {
  sb?.close();
  if (flagDir) fs.rmSync(flagDir, { recursive: true, force: true });
});

test('a TCP connect writes its one pair into sluice_sk_tcp4 under its socket cookie and the backend', async () => {
  const conn = await holdConnection();
  const m = tcpPairs();
  try {
    assert.equal(conn.peer, `${VIP}:80`);
    const pair = m.get({ cookie: conn.cookie, backend_address: ip4ToNumber(BACKEND), backend_port: 8080 });
    assert.ok(pair, `no pair for cookie ${conn.cookie}`);
    assert.equal(pair.frontend_address, ip4ToNumber(VIP));
    assert.equal(pair.frontend_port, 80);
    assert.notEqual(pair.rev_nat_id, 0);
    // Closing the socket (sock_release) deletes its pair: the LRU holds live
    // connections only, so nothing is left behind once every socket is gone.
    await conn.release();
    await waitFor('the pair deleted at sock_release', () => !m.get({ cookie: conn.cookie, backend_address: ip4ToNumber(BACKEND), backend_port: 8080 }));
  } finally {
    m.map.close();
  }
  assert.deepEqual(await conn.release(), { peerAfter: `${VIP}:80`, greeting: `${BACKEND}:8080 ${BACKEND}` });
});

test('a live connection whose pair the LRU recycled: getpeername shows the backend, traffic works, destroy leaves it alone', async () => {
  const conn = await holdConnection();
  const key = { cookie: conn.cookie, backend_address: ip4ToNumber(BACKEND), backend_port: 8080 };
  const m = tcpPairs();
  try {
    assert.equal(conn.peer, `${VIP}:80`);
    // What recycling does to this socket: its entry is gone.
    assert.ok(m.delete(key), 'the pair was there to recycle');
  } finally {
    m.map.close();
  }
  const t = StaleSocketTerminator.load({ bpffs: sb.bpffs, tcp: true, netns: [`/run/netns/${sb.netns}`] });
  try {
    const report = t.terminate([{ address: BACKEND, port: 8080, proto: 'tcp' }]);
    assert.deepEqual(report.destroyed, [], 'a socket without its pair is not known as translated: not destroyed');
  } finally {
    t.close();
  }
  assert.deepEqual(await conn.release(), { peerAfter: `${BACKEND}:8080`, greeting: `${BACKEND}:8080 ${BACKEND}` });
  // New connections are not affected.
  const next = await holdConnection();
  assert.equal(next.peer, `${VIP}:80`);
  assert.equal((await next.release()).peerAfter, `${VIP}:80`);
});

test('the LRU under pressure (twice its capacity in other sockets\' pairs): a live connection shows the VIP or its backend, nothing else', async () => {
  const conn = await holdConnection();
  const m = BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_SOCK_TCP4));
  const batch = 4096;
  const keys = Buffer.alloc(batch * 16);
  const values = Buffer.alloc(batch * 12);
  try {
    // Bogus sockets (cookies far above any real one) sent to another
    // frontend on the same backend: a wrong pair would show 10.96.0.51:81.
    for (let i = 0; i < batch; i++) abi.encodeLb4SockTcp({ frontend_address: ip4ToNumber('10.96.0.51'), frontend_port: 81, rev_nat_id: 1 }, values, i * 12);
    for (let base = 0; base < 2 * m.maxEntries; base += batch) {
      for (let i = 0; i < batch; i++) {
        abi.encodeLb4SockTcpKey({ cookie: (1n << 62n) + BigInt(base + i), backend_address: ip4ToNumber(BACKEND), backend_port: 8080 }, keys, i * 16);
      }
      m.updateBatch(keys, values, batch);
    }
  } finally {
    m.close();
  }
  const after = await conn.release();
  assert.ok([`${VIP}:80`, `${BACKEND}:8080`].includes(after.peerAfter), `peer after the flood: ${after.peerAfter}`);
  assert.equal(after.greeting, `${BACKEND}:8080 ${BACKEND}`);
  const next = await holdConnection();
  assert.equal(next.peer, `${VIP}:80`, 'a new connection gets its own pair');
  await next.release();
});

test('a TCP connection made before the upgrade to the LRU (its pair in socket storage): getpeername still shows the VIP and destroy still ends it', async () => {
  const conn = await holdConnection(true);
  const m = tcpPairs();
  try {
    assert.equal(m.get({ cookie: conn.cookie, backend_address: ip4ToNumber(BACKEND), backend_port: 8080 }), undefined, 'the pair is in storage only');
  } finally {
    m.map.close();
  }
  assert.equal(conn.peer, `${VIP}:80`, 'getpeername falls back to the socket storage');
  const t = StaleSocketTerminator.load({ bpffs: sb.bpffs, tcp: true, netns: [`/run/netns/${sb.netns}`] });
  try {
    const report = t.terminate([{ address: BACKEND, port: 8080, proto: 'tcp' }]);
    assert.deepEqual(report.destroyed.map((d) => d.backend), [`${BACKEND}:8080/tcp`]);
  } finally {
    t.close();
  }
  // Destroyed: no longer connected (what the greeting read finds is what had arrived before).
  assert.equal((await conn.release()).peerAfter, 'ENOTCONN');
});
