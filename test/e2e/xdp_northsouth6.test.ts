// XDP north-south e2e over IPv6 (issues 17 and 14; the twin of
// xdp_northsouth.test.ts): the client namespace reaches an IPv6 NodePort on
// node1 (test/e2e/tc_topology6.ts), whose public veth (eth0) runs xdp_lb in
// native mode in front of tc_lb; the backend is a pod behind node2, reached
// over node1's private veth (eth1). XDP translates the client's packets
// (DNAT + SNAT to node1's IPv6 address) and sends them to eth1 with
// XDP_REDIRECT; eth1 runs xdp_lb too (a redirect target), and its peer in
// node2 runs sluice_xdp_pass (a veth delivers XDP frames only to a peer with
// NAPI). Replies come back through TC. The client plays an external machine:
// its device sends complete checksums (test/helpers/txcsum_off.c).
// Real TCP and UDP; the backend reports the peer address it sees; the
// per-device XDP counters (what `sluice status` shows) prove which path
// carried the packets.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { openXdpMaps, syncFrontendAddresses6, type XdpMaps } from '../../src/datapath/xdp/xdp';
import { xdpStatus, type XdpDeviceStatus } from '../../src/datapath/xdp/status';
import { TcHarness, attachInNetns, type TcBackend, type TcFrontend } from '../bpf/tc_harness';
import { Tc6Maps } from '../bpf/tc_harness6';
import { xdpAttachInNetns } from '../bpf/xdp_harness';
import { BULK_TCP_CLIENT } from './multihome_topology';
import { SERVER6, Topology6, UDP_CLIENT6, V6 } from './tc_topology6';

const TXCSUM_OFF = path.resolve(__dirname, '../../../build/txcsum_off');
const NODE_PORT = 30080;
const ECHO_PORT = 30081;
const POD2: TcBackend = { id: 2, address: V6.pod2, port: 8080, local: false };
const POD2_ECHO: TcBackend = { id: 3, address: V6.pod2, port: 8081, local: false };

/** A TCP server on [::]:8081 answering every line with "pod2 <peer address> <line>". */
const ECHO_SERVER6 = `
const net = require('net');
net.createServer((s) => { let buf = ''; s.on('data', (d) => { buf += d; let i;
  while ((i = buf.indexOf('\\n')) >= 0) { const line = buf.slice(0, i); buf = buf.slice(i + 1); s.write('pod2 ' + s.remoteAddress + ' ' + line + '\\n'); } });
}).listen(8081, '::', () => process.stdout.write('ready\\n'));
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

let topo: Topology6;
let h: TcHarness;
let v6: Tc6Maps;
let xdp: XdpMaps;

function attachXdp(): void {
  const r = xdpAttachInNetns(topo.netnsPath('n1'), h.pinDir, ['eth0', 'eth1'], ['--mode', 'native']);
  assert.equal(r.status, 0, `XDP attach failed: ${r.stderr}`);
}

/** node1's eth0 as `sluice status` shows it. */
function eth0(): XdpDeviceStatus {
  const row = xdpStatus(h.pinDir).find((x) => x.device === 'eth0');
  assert.ok(row, JSON.stringify(xdpStatus(h.pinDir)));
  return row;
}

const n = (s: string) => BigInt(s);

function serve(f: TcFrontend): void {
  v6.upsertFrontend(f);
  // (absent from an object older than IPv6 at XDP: the fail-first runs load one)
  syncFrontendAddresses6(xdp, [{ address: f.address, flags: f.flags }]);
}

function frontend(f: Partial<TcFrontend> & Pick<TcFrontend, 'backends'>): TcFrontend {
  return { address: V6.node1Public, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, ...f };
}

/** TCP: "<pod> <peer>" after an exchange; UDP: "<pod> <peer>". */
function request(proto: 'tcp' | 'udp', port = NODE_PORT): string {
  if (proto === 'udp') return topo.node('cli', UDP_CLIENT6, [V6.node1Public, String(port)]).replace(/:\d+$/, '');
  const out = topo.node('cli', BULK_TCP_CLIENT, [V6.node1Public, String(port), '1000', '2000']);
  const m = /^ok (\w+) (\S+) 1000$/.exec(out);
  return m ? `${m[1]} ${m[2]}` : out;
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
  topo = new Topology6('slx6');
  topo.create();
  execFileSync('ip', ['netns', 'exec', topo.ns.cli, TXCSUM_OFF, 'eth0']);
  h = TcHarness.create('sluice-xdp6e2e');
  v6 = new Tc6Maps(h);
  const tc = attachInNetns(topo.netnsPath('n1'), h.pinDir, ['eth0', 'eth1']);
  assert.equal(tc.status, 0, `TC attach failed: ${tc.stderr}`);
  // NAPI on the far end of node1's eth1, so redirected frames are received
  // there. First: loading the object again (attachMain) leaves the redirect
  // targets empty, and node1's attach lists them.
  const peer = xdpAttachInNetns(topo.netnsPath('n2'), h.pinDir, ['eth1'], ['--mode', 'native', '--program', abi.SLUICE_PROG_XDP_PASS]);
  assert.equal(peer.status, 0, `XDP pass attach on node2 failed: ${peer.stderr}`);
  attachXdp();
  xdp = openXdpMaps(h.pinDir);
  assert.equal([...xdp.targets.entries()].length, 2, 'eth0 and eth1 are redirect targets');
  await topo.start('p2', SERVER6, ['pod2', '8080']);
  await topo.start('p2', ECHO_SERVER6, []);
});

after(() => {
  xdp?.close();
  topo?.destroy();
  h?.close();
});

beforeEach(() => {
  h.reset();
  v6.reset();
  writeTcConfig(h.tc.config, {});
  v6.setSnat(V6.node1Public);
});

describe('IPv6: XDP native on the ingress node, backend on another node', () => {
  test('status lists eth0 and eth1 in native mode; bpftool shows the program in driver mode', () => {
    const rows = xdpStatus(h.pinDir).filter((x) => x.mode !== 'off');
    assert.deepEqual(rows.map((x) => [x.device, x.mode]).sort(), [['eth0', 'native'], ['eth1', 'native']]);
    const net = execFileSync('ip', ['netns', 'exec', topo.ns.n1, 'bpftool', 'net', 'show', 'dev', 'eth0'], { encoding: 'utf8' });
    assert.equal(Number(/driver id (\d+)/.exec(net)?.[1]), eth0().programId);
  });

  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: NodePort answered by pod2 through XDP_REDIRECT (SNAT to node1's IPv6 address); replies through TC`, () => {
      serve(frontend({ proto, backends: [POD2] }));
      // The first packet may find node2's neighbour entry missing: TC sends it and resolves it.
      assert.equal(request(proto), `pod2 ${V6.node1Public}`);
      const before = eth0();
      for (let i = 0; i < 3; i++) assert.equal(request(proto), `pod2 ${V6.node1Public}`);
      const after = eth0();
      // TCP: SYN + ACK + data (+ FIN) per connection; UDP: one datagram.
      assert.ok(n(after.redirected) - n(before.redirected) >= 3n, `XDP_REDIRECT count ${before.redirected} -> ${after.redirected}`);
      assert.ok([...v6.conntrack.entries()].every(([, e]) => e.flags & abi.LB_CT_FLAG_SNAT), 'SNATed flows in sluice_ct6');
    });
  }

  test('a TCP connection that starts under XDP continues after XDP is detached (TC takes over sluice_ct6)', async () => {
    serve(frontend({ port: ECHO_PORT, backends: [POD2_ECHO], revNatId: 2 }));
    serve(frontend({ backends: [POD2] }));
    request('tcp'); // neighbour warm-up (any answer)
    const before = eth0();
    const child = await topo.start('cli', LONG_CLIENT, [V6.node1Public, String(ECHO_PORT)]).catch(() => undefined);
    // start() consumed the first line ("pod2 ... one"); the connection is up.
    assert.ok(child, 'the long-lived client started and got its first answer');
    try {
      const next = lines(child);
      const underXdp = eth0();
      assert.ok(n(underXdp.redirected) - n(before.redirected) >= 2n, `the handshake and first line went through XDP (redirected ${before.redirected} -> ${underXdp.redirected})`);
      // Known-flow packets (the data, the ACKs) are sent by the FIB-cache path, which counts
      // every one as a full lookup (57) or a cached answer (58) (bpf/lib/xdp_fc6.h).
      const known = () => h.counter(abi.LB_CNT_XDP_FIB_LOOKUP) + h.counter(abi.LB_CNT_XDP_FIB_CACHED);
      const knownBefore = known();
      child.stdin!.write('two\n');
      assert.equal(await next(), `pod2 ${V6.node1Public} two`);
      assert.ok(known() - knownBefore >= 1n, `known IPv6 flow packets counted in rows 57/58 (${knownBefore} -> ${known()})`);

      const r = xdpAttachInNetns(topo.netnsPath('n1'), h.pinDir, ['eth0', 'eth1'], ['--detach']);
      assert.equal(r.status, 0, `XDP detach failed: ${r.stderr}`);
      assert.equal(xdpStatus(h.pinDir).filter((x) => x.mode !== 'off').length, 0, 'no XDP link left');
      const detached = xdpStatus(h.pinDir).find((x) => x.ifindex === underXdp.ifindex)!;
      const flowOf = () => [...v6.conntrack.entries()].find(([k, e]) => k.dir === abi.LB_CT_DIR_ORIGINAL && e.frontend_port === ECHO_PORT)?.[1];
      const flow = flowOf();
      assert.ok(flow, 'the flow is in sluice_ct6');
      child.stdin!.write('three\n');
      assert.equal(await next(), `pod2 ${V6.node1Public} three`, 'the same connection still works under TC');
      const now = xdpStatus(h.pinDir).find((x) => x.ifindex === underXdp.ifindex)!;
      assert.equal(now.packets, detached.packets, 'XDP saw nothing after the detach');
      const later = flowOf()!;
      assert.equal(later.backend_id, flow.backend_id);
      assert.equal(later.nat_port, flow.nat_port, 'same SNAT port: the flow was continued, not re-created');
      assert.ok(later.packets > flow.packets, 'TC counted the new packets on the same entry');
    } finally {
      child.kill('SIGKILL');
      attachXdp(); // back for any later test
    }
  });
});
