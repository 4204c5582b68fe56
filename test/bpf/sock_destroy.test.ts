// Stale-socket termination in the real kernel (bpf/sock_destroy.bpf.c through
// src/datapath/sockTerm.ts): sockets in a test namespace, translated by the
// socket LB in a child cgroup; only those the LB connected to a deleted
// backend are destroyed, TCP only when asked for.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { Sandbox, sh, sluiceBin, waitFor } from '../helpers/sandbox';
import { REPORT_ON_SIGUSR1, askReport } from '../helpers/heldSockets';
import { StaleSocketTerminator, kernelSupportsSockDestroy, staleSocketStatus } from '../../src/datapath/sockTerm';

const VIP = '198.18.13.100';
const OTHER_VIP = '198.18.13.101';
const GONE = '198.18.13.2';
const LIVE = '198.18.13.3';

// Servers and clients in one process (in the cgroup and the namespace): UDP
// echo on GONE and LIVE :8080, a TCP server on GONE:9090 that keeps
// connections open. Four client sockets, then on SIGUSR1 each reports whether
// it still works.
const CLIENT = `
const dgram = require('dgram'), net = require('net');
const state = {};
const udpEcho = (addr) => new Promise((r) => { const s = dgram.createSocket('udp4'); s.on('message', (m, ri) => s.send('pong', ri.port, ri.address)); s.bind(8080, addr, r); });
const udpClient = (name, addr, port) => new Promise((r) => {
  const s = dgram.createSocket('udp4');
  state[name] = { sock: s, status: 'ok' };
  s.on('error', (e) => { state[name].status = 'error:' + e.code; });
  s.connect(port, addr, () => { s.once('message', () => r()); s.send('hi'); });
});
(async () => {
  await udpEcho('${GONE}'); await udpEcho('${LIVE}');
  const held = [];
  await new Promise((r) => net.createServer((c) => { c.on('error', () => {}); held.push(c); }).listen(9090, '${GONE}', r));
  await udpClient('udpViaVip', '${VIP}', 53);
  await udpClient('udpDirect', '${GONE}', 8080);
  await udpClient('udpOtherBackend', '${OTHER_VIP}', 53);
  await new Promise((r) => {
    const c = net.connect(90, '${VIP}', r);
    state.tcpViaVip = { sock: c, status: 'ok' };
    c.on('error', (e) => { state.tcpViaVip.status = 'error:' + e.code; });
    c.on('close', () => { if (state.tcpViaVip.status === 'ok') state.tcpViaVip.status = 'closed'; });
  });
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
  sb = Sandbox.create('sluice-sockterm');
  for (const a of [GONE, LIVE]) sb.ip(['addr', 'add', `${a}/32`, 'dev', 'lo']);
  sluice(['attach', '--cgroup', sb.cgroup]);
  sluice(['service', 'upsert', '--frontend', `${VIP}:53/udp`, '--backends', `${GONE}:8080`]);
  sluice(['service', 'upsert', '--frontend', `${OTHER_VIP}:53/udp`, '--backends', `${LIVE}:8080`]);
  sluice(['service', 'upsert', '--frontend', `${VIP}:90/tcp`, '--backends', `${GONE}:9090`]);
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

test('the kernel here can destroy sockets from BPF (Linux >= 6.5)', () => {
  assert.deepEqual(kernelSupportsSockDestroy(), { supported: true });
  assert.match(kernelSupportsSockDestroy('/dev/null').reason ?? '', /needs Linux 6\.5/);
});

test('UDP: only the socket the LB connected to the deleted backend is destroyed; TCP is left alone by default', async () => {
  const t = StaleSocketTerminator.load({ bpffs: sb.bpffs, tcp: false, netns: [`/run/netns/${sb.netns}`] });
  try {
    assert.deepEqual(staleSocketStatus(sb.bpffs).protocols, ['udp']);
    // An IPv6 backend in the same pass (dual-stack Service) must not stop the IPv4 ones (IPv6: sock_destroy6.test.ts).
    const report = t.terminate([{ address: GONE, port: 8080, proto: 'udp' }, { address: 'fd00:18::9', port: 8080, proto: 'udp' }, { address: GONE, port: 9090, proto: 'tcp' }]);
    assert.deepEqual(report.namespaceErrors, []);
    assert.equal(report.namespaces, 2, 'the agent\'s own namespace and the test namespace');
    assert.deepEqual(report.destroyed.map((s) => [s.backend, s.netns]), [[`${GONE}:8080/udp`, `/run/netns/${sb.netns}`]]);
    assert.deepEqual(report.failed, []);
  } finally {
    t.close();
  }
  assert.deepEqual(await check(), {
    udpViaVip: 'error:ECONNABORTED', // destroyed: the application sees it and reconnects
    udpDirect: 'ok', // dialled the Pod address itself: not ours to end
    udpOtherBackend: 'ok', // another backend
    tcpViaVip: 'ok', // kube-proxy leaves TCP connections alone; so do we by default
  });
});

test('with destroyStaleTcpSockets the TCP connection to the deleted backend is ended too', async () => {
  const t = StaleSocketTerminator.load({ bpffs: sb.bpffs, tcp: true, netns: [`/run/netns/${sb.netns}`] });
  try {
    assert.deepEqual(staleSocketStatus(sb.bpffs).protocols, ['udp', 'tcp']);
    const report = t.terminate([{ address: GONE, port: 9090, proto: 'tcp' }]);
    assert.deepEqual(report.destroyed.map((s) => s.backend), [`${GONE}:9090/tcp`]);
  } finally {
    t.close();
  }
  const after = await check();
  assert.match(after.tcpViaVip ?? '', /ECONNABORTED|closed/);
  assert.equal(after.udpDirect, 'ok');
  // The filter map is empty again after every pass.
  assert.deepEqual(JSON.parse(sh('bpftool', ['-j', 'map', 'dump', 'pinned', `${sb.bpffs}/sluice_sk_term4`])), []);
});
