// Stale-socket termination for AF_INET6 sockets (issue 14), in the real
// kernel: IPv6 sockets the socket LB connected to a deleted IPv6 backend, and
// dual-stack sockets it connected to a deleted IPv4 backend through
// ::ffff:a.b.c.d (what Java and Go do), are destroyed; sockets that dialled
// the backend themselves, or talk to another backend, are left alone.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { Sandbox, sh, sluiceBin, waitFor } from '../helpers/sandbox';
import { REPORT_ON_SIGUSR1, askReport } from '../helpers/heldSockets';
import { StaleSocketTerminator } from '../../src/datapath/sockTerm';

const VIP6 = 'fd00:96::13';
const OTHER_VIP6 = 'fd00:96::14';
const GONE6 = 'fd00:18::13:2';
const LIVE6 = 'fd00:18::13:3';
const VIP4 = '198.18.13.110';
const GONE4 = '198.18.13.12';

// One process in the cgroup and the namespace: UDP echo servers, TCP servers
// that hold their connections, and the client sockets; on SIGUSR1 each client
// reports whether it still works.
const CLIENT = `
const dgram = require('dgram'), net = require('net');
const state = {};
const udpEcho = (type, addr) => new Promise((r) => { const s = dgram.createSocket(type); s.on('message', (m, ri) => s.send('pong', ri.port, ri.address)); s.bind(8080, addr, r); });
const udpClient = (name, addr, port) => new Promise((r) => {
  const s = dgram.createSocket('udp6'); // dual-stack: reaches ::ffff:a.b.c.d too
  state[name] = { sock: s, status: 'ok' };
  s.on('error', (e) => { state[name].status = 'error:' + e.code; });
  s.connect(port, addr, () => { s.once('message', () => r()); s.send('hi'); });
});
const tcpClient = (name, addr, port) => new Promise((r) => {
  const c = net.connect({ port, host: addr }, r);
  state[name] = { sock: c, status: 'ok' };
  c.on('error', (e) => { state[name].status = 'error:' + e.code; });
  c.on('close', () => { if (state[name].status === 'ok') state[name].status = 'closed'; });
});
(async () => {
  await udpEcho('udp6', '${GONE6}'); await udpEcho('udp6', '${LIVE6}'); await udpEcho('udp4', '${GONE4}');
  const held = [];
  for (const a of ['${GONE6}', '${GONE4}']) await new Promise((r) => net.createServer((c) => { c.on('error', () => {}); held.push(c); }).listen(9090, a, r));
  await udpClient('udp6ViaVip', '${VIP6}', 53);
  await udpClient('udp6Direct', '${GONE6}', 8080);
  await udpClient('udp6OtherBackend', '${OTHER_VIP6}', 53);
  await udpClient('udpMappedViaVip4', '::ffff:${VIP4}', 53);
  await tcpClient('tcp6ViaVip', '${VIP6}', 90);
  await tcpClient('tcp6Direct', '${GONE6}', 9090);
  await tcpClient('tcpMappedViaVip4', '::ffff:${VIP4}', 90);
${REPORT_ON_SIGUSR1}
})();
`;

let sb: Sandbox;
let client: ChildProcess;
let lines: string[] = [];

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

function check(): Promise<Record<string, string>> {
  return askReport(client, lines);
}

before(async () => {
  sb = Sandbox.create('sluice-sockterm6');
  for (const a of [GONE6, LIVE6]) sb.ip(['-6', 'addr', 'add', `${a}/128`, 'dev', 'lo', 'nodad']);
  sb.ip(['addr', 'add', `${GONE4}/32`, 'dev', 'lo']);
  sluice(['attach', '--cgroup', sb.cgroup]);
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:53/udp`, '--backends', `[${GONE6}]:8080`]);
  sluice(['service', 'upsert', '--frontend', `[${OTHER_VIP6}]:53/udp`, '--backends', `[${LIVE6}]:8080`]);
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:90/tcp`, '--backends', `[${GONE6}]:9090`]);
  sluice(['service', 'upsert', '--frontend', `${VIP4}:53/udp`, '--backends', `${GONE4}:8080`]);
  sluice(['service', 'upsert', '--frontend', `${VIP4}:90/tcp`, '--backends', `${GONE4}:9090`]);
  client = sb.spawnInCgroup(['node', '-e', CLIENT]);
  let buf = '';
  client.stdout!.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      lines.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  });
  await waitFor('client sockets', () => lines.includes('ready'), 10000);
  lines = [];
});

after(() => {
  sb?.close();
});

test('UDP: the IPv6 socket sent to the deleted IPv6 backend and the dual-stack socket sent to the deleted IPv4 backend are destroyed', async () => {
  const t = StaleSocketTerminator.load({ bpffs: sb.bpffs, tcp: false, netns: [`/run/netns/${sb.netns}`] });
  try {
    const report = t.terminate([
      { address: GONE6, port: 8080, proto: 'udp' },
      { address: GONE4, port: 8080, proto: 'udp' },
      { address: GONE6, port: 9090, proto: 'tcp' }, // TCP not asked for: left alone
    ]);
    assert.deepEqual(report.namespaceErrors, []);
    assert.deepEqual(report.failed, []);
    assert.deepEqual(report.destroyed.map((s) => [s.backend, s.netns]).sort(), [
      [`${GONE4}:8080/udp`, `/run/netns/${sb.netns}`],
      [`[${GONE6}]:8080/udp`, `/run/netns/${sb.netns}`],
    ]);
  } finally {
    t.close();
  }
  assert.deepEqual(await check(), {
    udp6ViaVip: 'error:ECONNABORTED',
    udp6Direct: 'ok', // dialled the Pod address itself
    udp6OtherBackend: 'ok',
    udpMappedViaVip4: 'error:ECONNABORTED', // AF_INET6 socket, IPv4 backend: ended by the IPv4 pass
    tcp6ViaVip: 'ok',
    tcp6Direct: 'ok',
    tcpMappedViaVip4: 'ok',
  });
  // Both filter maps are empty again after the pass.
  for (const m of ['sluice_sk_term4', 'sluice_sk_term6']) assert.deepEqual(JSON.parse(sh('bpftool', ['-j', 'map', 'dump', 'pinned', `${sb.bpffs}/${m}`])), [], m);
});

test('TCP (destroyStaleTcpSockets): the IPv6 connection and the dual-stack one to deleted backends are ended, the direct one is not', async () => {
  const t = StaleSocketTerminator.load({ bpffs: sb.bpffs, tcp: true, netns: [`/run/netns/${sb.netns}`] });
  try {
    const report = t.terminate([{ address: GONE6, port: 9090, proto: 'tcp' }, { address: GONE4, port: 9090, proto: 'tcp' }]);
    assert.deepEqual(report.failed, []);
    assert.deepEqual(report.destroyed.map((s) => s.backend).sort(), [`${GONE4}:9090/tcp`, `[${GONE6}]:9090/tcp`]);
  } finally {
    t.close();
  }
  const after = await check();
  assert.match(after.tcp6ViaVip ?? '', /ECONNABORTED|closed/);
  assert.match(after.tcpMappedViaVip4 ?? '', /ECONNABORTED|closed/);
  assert.equal(after.tcp6Direct, 'ok');
});
