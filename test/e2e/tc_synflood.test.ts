// Conntrack under a SYN flood, with real traffic in namespaces (issue 10
// item 5): 300 000 SYNs from spoofed sources (build/synflood, AF_PACKET in
// the client namespace) hit a NodePort on node1 while 20 established
// connections through the same NodePort keep talking. The flood's entries
// carry the SYN timeout (3 s here), so once it has passed nothing of the
// flood is live and GC gives the table back; before the state machine they
// carried the established timeout (hours) from their first SYN.
//
// Topology: tc_topology.ts (cli, n1 with TC on eth0, pod p1 on n1). The
// NodePort has externalTrafficPolicy Local: DNAT only, so every SYN is one
// flow with two entries; n1 routes the spoofed range back towards the client
// namespace, so the backend's SYN-ACKs leave through eth0's egress program
// (the reply direction is seen, the handshake never completes) and die in
// the client namespace, which does not own those addresses.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { execFileSync, spawnSync, type ChildProcess } from 'node:child_process';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { monotonicNs } from '../../src/datapath/tc/conntrack';
import { TcHarness, TC_OBJECT, type TcBackend } from '../bpf/tc_harness';
import { ADDR, Topology } from './tc_topology';

const DIST = path.resolve(__dirname, '../..');
const SYNFLOOD = path.resolve(DIST, '../build/synflood');
const FLOOD = 300_000;
const SYN_TIMEOUT_S = 3;
const KEEPERS = 20;
const NODE_PORT = 30090;
const ECHO: TcBackend = { id: 1, address: ADDR.pod1, port: 9090, local: true };

/** TCP echo server; prints "ready". */
const ECHO_SERVER = `
const net = require('net');
net.createServer((s) => s.on('data', (d) => s.write(d)).on('error', () => {})).listen(Number(process.argv[1]), '0.0.0.0', () => process.stdout.write('ready\\n'));
`;

/**
 * KEEPERS connections to host:port, each sends a numbered line every 100 ms
 * and checks the echo. Prints "ready" once all are connected; on "stop" on
 * stdin, prints {"ok","failed","alive","maxWaitMs"} and exits. Bounded: exits
 * by itself after 120 s.
 */
const KEEPER = `
const net = require('net');
const [host, port, count] = process.argv.slice(1);
const conns = []; let ok = 0, failed = 0, maxWait = 0, connected = 0;
setTimeout(() => process.exit(3), 120000);
for (let i = 0; i < Number(count); i++) {
  const c = { sock: net.connect(Number(port), host), pending: null, alive: true, buf: '' };
  c.sock.setNoDelay(true);
  c.sock.on('connect', () => { if (++connected === Number(count)) process.stdout.write('ready\\n'); });
  c.sock.on('data', (d) => { c.buf += d; if (c.pending && c.buf.includes(c.pending.line)) { ok++; maxWait = Math.max(maxWait, Date.now() - c.pending.at); c.pending = null; c.buf = ''; } });
  c.sock.on('error', () => { c.alive = false; }); c.sock.on('close', () => { c.alive = false; });
  conns.push(c);
}
let n = 0;
const tick = setInterval(() => {
  for (const c of conns) {
    if (!c.alive || connected < Number(count)) continue;
    if (c.pending && Date.now() - c.pending.at > 3000) { failed++; c.pending = null; }
    if (!c.pending) { const line = 'ping ' + (n++) + '\\n'; c.pending = { line, at: Date.now() }; c.sock.write(line); }
  }
}, 100);
process.stdin.on('data', () => {
  clearInterval(tick);
  setTimeout(() => {
    const alive = conns.filter((c) => c.alive).length;
    for (const c of conns) if (c.pending) failed++;
    process.stdout.write(JSON.stringify({ ok, failed, alive, maxWaitMs: maxWait }) + '\\n');
    process.exit(0);
  }, 500);
});
`;

let topo: Topology;
let h: TcHarness;

function mac(role: 'cli' | 'n1'): string {
  const info = JSON.parse(execFileSync('ip', ['-n', topo.ns[role], '-j', 'link', 'show', 'eth0'], { encoding: 'utf8' })) as Array<{ address: string }>;
  return info[0]!.address;
}

/** Entries whose deadline has not passed, by direction. */
function liveEntries(): number {
  const now = monotonicNs();
  return h.tc.conntrack.readAll().filter(([, v]) => v.expires_ns > now).length;
}

before(async () => {
  topo = new Topology('slsyn');
  topo.create();
  // The spoofed sources are routed back towards the client namespace (which drops them).
  topo.in('n1', 'route', 'add', '198.19.0.0/16', 'via', ADDR.client);
  h = TcHarness.create('sluice-synflood');
  const r = spawnSync('nsenter', [`--net=${topo.netnsPath('n1')}`, process.execPath, path.join(DIST, 'src/datapath/tc/attachMain.js'),
    '--object', TC_OBJECT, '--bpffs', h.pinDir, '--device', 'eth0'], { encoding: 'utf8', timeout: 10000 });
  assert.equal(r.status, 0, `attach failed: ${r.stderr}`);
  await topo.start('p1', ECHO_SERVER, [String(ECHO.port)]);
});

after(() => {
  topo?.destroy();
  h?.close();
});

test(`a SYN flood of ${FLOOD} spoofed sources: established flows keep working, and the table recovers after the SYN timeout`, { timeout: 240_000 }, async () => {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: ADDR.node1, tcpSynTimeout: SYN_TIMEOUT_S });
  h.upsertFrontend({ address: ADDR.node1, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES, revNatId: 1, backends: [ECHO] });

  const keeper: ChildProcess = await topo.start('cli', KEEPER, [ADDR.node1, String(NODE_PORT), String(KEEPERS)]);
  let keeperOut = '';
  keeper.stdout!.on('data', (d) => (keeperOut += d));
  await new Promise((r) => setTimeout(r, 500));
  const flowsBefore = h.counter(abi.LB_CNT_TC_TRANSLATED);

  const flood = spawnSync('nsenter', [`--net=${topo.netnsPath('cli')}`, SYNFLOOD, '--dev', 'eth0', '--src-mac', mac('cli'), '--dst-mac', mac('n1'),
    '--dst', ADDR.node1, '--dport', String(NODE_PORT), '--src-base', '198.19.0.0', '--count', String(FLOOD), '--max-ms', '120000'],
  { encoding: 'utf8', timeout: 150_000 });
  assert.equal(flood.status, 0, `synflood: ${flood.stderr}`);
  const sent = JSON.parse(flood.stdout) as { sent: number; ms: number };
  assert.equal(sent.sent, FLOOD, `all SYNs sent (${JSON.stringify(sent)})`);
  const flooded = h.counter(abi.LB_CNT_TC_TRANSLATED) - flowsBefore;
  const liveAfterFlood = liveEntries();

  // The established connections talked through the whole flood.
  await new Promise((r) => setTimeout(r, 1000));
  keeper.stdin!.write('stop\n');
  await new Promise<void>((resolve) => keeper.once('exit', () => resolve()));
  const kept = JSON.parse(keeperOut.trim().split('\n').pop()!) as { ok: number; failed: number; alive: number; maxWaitMs: number };
  const diag = `flood ${JSON.stringify(sent)}, new flows ${flooded}, live entries after flood ${liveAfterFlood}, keepers ${JSON.stringify(kept)}`;
  assert.ok(flooded > FLOOD * 0.9, `the flood reached the program: ${diag}`);
  assert.equal(kept.alive, KEEPERS, `every established connection is still open: ${diag}`);
  assert.equal(kept.failed, 0, `no echo was lost: ${diag}`);
  assert.ok(kept.ok > KEEPERS * 5, `the connections kept talking: ${diag}`);

  // After the SYN timeout nothing of the flood is live; GC gives the table back.
  await new Promise((r) => setTimeout(r, SYN_TIMEOUT_S * 1000 + 500));
  const live = liveEntries();
  assert.ok(live <= 2 * KEEPERS + 4, `only the established flows are live ${SYN_TIMEOUT_S} s after the flood: ${live} live entries (${diag})`);
  const deleted = h.gc();
  const left = h.tc.conntrack.readAll().length;
  assert.ok(left <= 2 * KEEPERS + 4, `GC freed the flood's entries: deleted ${deleted}, ${left} left (${diag})`);
  console.log(`# synflood: ${diag}; ${live} live after ${SYN_TIMEOUT_S}s; GC deleted ${deleted}, ${left} left`);
});
