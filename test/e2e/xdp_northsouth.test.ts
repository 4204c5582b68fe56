// XDP north-south e2e (issue 17): the client namespace reaches a NodePort on
// node1, whose LAN veth runs xdp_lb in native mode in front of tc_lb; the
// backend is a pod on node2. XDP_TX sends the translated frames back out of
// node1's veth: a veth delivers XDP frames only to a peer with NAPI, so the
// peer (the bridge port in the LAN namespace) runs sluice_xdp_pass.
// The client plays an external machine: its device sends complete checksums
// (test/helpers/txcsum_off.c says why native XDP on a veth needs that).
// Real TCP and UDP; the backend reports the peer address it sees; the
// per-device XDP counters prove which path carried the packets.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { listConntrack } from '../../src/datapath/tc/conntrack';
import { openXdpMaps, readXdpStats, syncFrontendAddresses, type XdpDeviceStats, type XdpMaps } from '../../src/datapath/xdp/xdp';
import { xdpStatus } from '../../src/datapath/xdp/status';
import { TcHarness, attachInNetns, type TcBackend, type TcFrontend } from '../bpf/tc_harness';
import { xdpAttachInNetns } from '../bpf/xdp_harness';
import { ADDR, CLIENT_SCRIPT, SERVER_SCRIPT, Topology } from './tc_topology';

const TXCSUM_OFF = path.resolve(__dirname, '../../../build/txcsum_off');
const NODE_PORT = 30080;
const ECHO_PORT = 30081;
const POD2: TcBackend = { id: 2, address: ADDR.pod2, port: 8080, local: false };
const POD2_ECHO: TcBackend = { id: 3, address: ADDR.pod2, port: 8081, local: false };

/** A TCP server answering every line with "pod2 <peer address> <line>". */
const ECHO_SERVER = `
const net = require('net');
net.createServer((s) => { let buf = ''; s.on('data', (d) => { buf += d; let i;
  while ((i = buf.indexOf('\\n')) >= 0) { const line = buf.slice(0, i); buf = buf.slice(i + 1); s.write('pod2 ' + s.remoteAddress + ' ' + line + '\\n'); } });
}).listen(8081, '0.0.0.0', () => process.stdout.write('ready\\n'));
`;

/** One TCP connection: a line now, another each time stdin says so; prints each answer. */
const LONG_CLIENT = `
const net = require('net');
const [host, port] = process.argv.slice(1);
const s = net.connect(Number(port), host, () => s.write('one\\n'));
let buf = ''; s.on('data', (d) => { buf += d; let i; while ((i = buf.indexOf('\\n')) >= 0) { process.stdout.write(buf.slice(0, i) + '\\n'); buf = buf.slice(i + 1); } });
s.on('error', (e) => process.stdout.write('error ' + e.code + '\\n'));
process.stdin.on('data', (d) => s.write(String(d)));
setTimeout(() => process.exit(0), 20000);
`;

let topo: Topology;
let h: TcHarness;
let xdp: XdpMaps;
let eth0: number;

function attachXdp(): void {
  const r = xdpAttachInNetns(topo.netnsPath('n1'), h.pinDir, ['eth0'], ['--mode', 'native']);
  assert.equal(r.status, 0, `XDP attach failed: ${r.stderr}`);
  eth0 = (JSON.parse(r.stdout.trim().split('\n')[0]!) as { ifindex: number }).ifindex;
}

function stats(): XdpDeviceStats {
  return readXdpStats(xdp.stats, xdp.passed, [eth0]).find((s) => s.ifindex === eth0) ?? { ifindex: eth0, packets: 0n, passed: 0n, tx: 0n, redirected: 0n, dropped: 0n, fallback: 0n };
}

function frontend(f: Partial<TcFrontend> & Pick<TcFrontend, 'backends'>): TcFrontend {
  return { address: ADDR.node1, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, ...f };
}

function serve(f: TcFrontend): void {
  h.upsertFrontend(f);
  syncFrontendAddresses(xdp, [{ address: f.address, flags: f.flags }]);
}

function lines(child: { stdout: NodeJS.ReadableStream | null }): () => Promise<string> {
  const queue: string[] = [];
  const waiters: Array<(s: string) => void> = [];
  let buf = '';
  child.stdout!.on('data', (d) => {
    buf += String(d);
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const w = waiters.shift();
      if (w) w(line);
      else queue.push(line);
    }
  });
  return () => new Promise((resolve, reject) => {
    const q = queue.shift();
    if (q !== undefined) return resolve(q);
    const t = setTimeout(() => reject(new Error('no answer within 5 s')), 5000);
    waiters.push((s) => { clearTimeout(t); resolve(s); });
  });
}

before(async () => {
  topo = new Topology('slxdp');
  topo.create();
  execFileSync('ip', ['netns', 'exec', topo.ns.cli, TXCSUM_OFF, 'eth0']);
  h = TcHarness.create('sluice-xdpe2e');
  const tc = attachInNetns(topo.netnsPath('n1'), h.pinDir, ['eth0']);
  assert.equal(tc.status, 0, `TC attach failed: ${tc.stderr}`);
  attachXdp();
  // NAPI on the far end of node1's veth, so XDP_TX frames are received there.
  const peer = xdpAttachInNetns(topo.netnsPath('lan'), h.pinDir, ['n1-l'], ['--mode', 'native', '--program', abi.SLUICE_PROG_XDP_PASS]);
  assert.equal(peer.status, 0, `XDP pass attach on the peer failed: ${peer.stderr}`);
  xdp = openXdpMaps(h.pinDir);
  await topo.start('p2', SERVER_SCRIPT, ['pod2', '8080']);
  await topo.start('p2', ECHO_SERVER, []);
});

after(() => {
  xdp?.close();
  topo?.destroy();
  h?.close();
});

beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: ADDR.node1 });
});

describe('XDP native on the ingress node, backend on another node', () => {
  test('status lists eth0 in native mode with its link and program', () => {
    const [row] = xdpStatus(h.pinDir);
    assert.equal(row?.device, 'eth0');
    assert.equal(row?.mode, 'native');
    assert.equal(row?.ifindex, eth0);
    assert.ok(row?.programId && row.linkId, JSON.stringify(row));
    // bpftool, in node1's namespace, lists the program on the device in driver mode.
    const net = execFileSync('ip', ['netns', 'exec', topo.ns.n1, 'bpftool', 'net', 'show', 'dev', 'eth0'], { encoding: 'utf8' });
    assert.match(net, /eth0\(\d+\) driver id (\d+)/);
    assert.equal(Number(/driver id (\d+)/.exec(net)![1]), row!.programId);
    assert.match(execFileSync('bpftool', ['prog', 'show', 'id', String(row!.programId)], { encoding: 'utf8' }), /xdp\s+name sluice_xdp/);
  });

  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: NodePort answered by pod2 through XDP_TX (SNAT to node1); replies through TC`, () => {
      serve(frontend({ proto, backends: [POD2] }));
      // The first packet may find node2's neighbour entry missing: TC sends it and resolves it.
      const first = topo.node('cli', CLIENT_SCRIPT, [proto, ADDR.node1, String(NODE_PORT)]);
      assert.match(first, new RegExp(`^pod2 ${ADDR.node1.replace(/\./g, '\\.')}:\\d+$`));
      const before = stats();
      for (let i = 0; i < 3; i++) {
        assert.match(topo.node('cli', CLIENT_SCRIPT, [proto, ADDR.node1, String(NODE_PORT)]), /^pod2 198\.18\.0\.1:\d+$/);
      }
      const after = stats();
      // TCP: SYN + ACK + data (+ FIN) per connection; UDP: one datagram.
      assert.ok(after.tx - before.tx >= 3n, `XDP_TX count ${before.tx} -> ${after.tx}`);
      assert.ok(listConntrack(h.tc.conntrack).every((r) => r.snat?.startsWith(`${ADDR.node1}:`)));
    });
  }

  test('a TCP connection that starts under XDP continues after XDP is detached (TC takes over the shared conntrack)', async () => {
    serve(frontend({ port: ECHO_PORT, backends: [POD2_ECHO], revNatId: 2 }));
    topo.node('cli', CLIENT_SCRIPT, ['tcp', ADDR.node1, String(NODE_PORT)]); // neighbour warm-up (any answer)
    const before = stats();
    const child = await topo.start('cli', LONG_CLIENT, [ADDR.node1, String(ECHO_PORT)]).catch(() => undefined);
    // start() consumed the first line ("pod2 ... one"); the connection is up.
    assert.ok(child, 'the long-lived client started and got its first answer');
    const next = lines(child);
    const underXdp = stats();
    assert.ok(underXdp.tx - before.tx >= 2n, `the handshake and first line went through XDP (tx ${before.tx} -> ${underXdp.tx})`);
    child.stdin!.write('two\n');
    assert.equal(await next(), `pod2 ${ADDR.node1} two`);

    const r = xdpAttachInNetns(topo.netnsPath('n1'), h.pinDir, ['eth0'], ['--detach']);
    assert.equal(r.status, 0, `XDP detach failed: ${r.stderr}`);
    assert.equal(xdpStatus(h.pinDir).filter((x) => x.mode !== 'off').length, 0, 'no XDP link left');
    const detached = stats();
    const [flow] = listConntrack(h.tc.conntrack).filter((f) => f.frontend === `${ADDR.node1}:${ECHO_PORT}`);
    assert.ok(flow, 'the flow is in the shared conntrack');
    child.stdin!.write('three\n');
    assert.equal(await next(), `pod2 ${ADDR.node1} three`, 'the same connection still works under TC');
    assert.equal(stats().packets, detached.packets, 'XDP saw nothing after the detach');
    const [later] = listConntrack(h.tc.conntrack).filter((f) => f.frontend === `${ADDR.node1}:${ECHO_PORT}`);
    assert.equal(later?.backend, flow.backend);
    assert.equal(later?.snat, flow.snat, 'same SNAT port: the flow was continued, not re-created');
    assert.ok((later?.packetsOriginal ?? 0) > flow.packetsOriginal, 'TC counted the new packets on the same entry');
    child.kill('SIGKILL');
    attachXdp(); // back for any later test
  });
});
