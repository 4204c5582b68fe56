// Direct Server Return e2e (issue 17 item 2, docs/dsr.md): an external client
// reaches a NodePort on node1 (ingress node, TC on eth0, --nodeport-mode
// dsr|hybrid) whose backend is a pod on node2 (TC on eth0 too, its own maps,
// snat mode). node1 sends the client's packet in IPIP to the pod's address;
// node2 opens it, DNATs to the pod, and the pod's reply leaves node2 with
// the NodePort address as source, straight to the client over the LAN.
// A packet socket inside node1's namespace counts the replies node1 sends
// to the client: none under DSR (all of them under SNAT, the control).
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { writeNodePortMode, writeTcConfig, type NodePortMode } from '../../src/datapath/tc/config';
import { listConntrack } from '../../src/datapath/tc/conntrack';
import { TcHarness, attachInNetns, type TcBackend, type TcFrontend } from '../bpf/tc_harness';
import { ADDR, SERVER_SCRIPT, Topology } from './tc_topology';

const NODE_PORT = 30080;
const POD2_REMOTE: TcBackend = { id: 2, address: ADDR.pod2, port: 8080, local: false };
const POD2_LOCAL: TcBackend = { id: 2, address: ADDR.pod2, port: 8080, local: true };

let topo: Topology;
let h1: TcHarness; // node1's maps (ingress node)
let h2: TcHarness; // node2's maps (backend node)

/** One request; prints "<answer>|<address:port the answer came from>". */
const CLIENT = `
const net = require('net'), dgram = require('dgram');
const [proto, host, port] = process.argv.slice(1);
const done = (s) => { process.stdout.write(s); process.exit(0); };
setTimeout(() => done('timeout'), 3000);
if (proto === 'tcp') {
  const s = net.connect(Number(port), host); let data = '';
  s.on('data', (d) => (data += d)); s.on('end', () => done(data + '|' + s.remoteAddress + ':' + s.remotePort)); s.on('error', (e) => done('error ' + e.code));
} else {
  const u = dgram.createSocket('udp4');
  u.on('message', (m, r) => done(String(m) + '|' + r.address + ':' + r.port));
  u.send('hi', Number(port), host);
}`;

/** Counts frames node1 sends out of eth0 from SRC:PORT to DST (IPv4 TCP/UDP), until stdin says stop. */
const CAPTURE = `
import socket, struct, select, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(('eth0', 0))
src, dst, port = socket.inet_aton(sys.argv[1]), socket.inet_aton(sys.argv[2]), int(sys.argv[3])
n = 0
print('ready', flush=True)
while True:
    r, _, _ = select.select([s, sys.stdin], [], [], 20)
    if not r or sys.stdin in r:
        break
    data, addr = s.recvfrom(65535)
    if addr[2] != socket.PACKET_OUTGOING or len(data) < 38 or data[12:14] != b'\\x08\\x00':
        continue
    ip = data[14:]
    ihl = (ip[0] & 15) * 4
    if ip[9] in (6, 17) and ip[12:16] == src and ip[16:20] == dst and struct.unpack('!H', ip[ihl:ihl + 2])[0] == port:
        n += 1
print(n, flush=True)
`;

class Capture {
  private constructor(private readonly child: ChildProcess) {}

  static async start(): Promise<Capture> {
    const child = spawn('ip', ['netns', 'exec', topo.ns.n1, 'python3', '-c', CAPTURE, ADDR.node1, ADDR.client, String(NODE_PORT)], { stdio: ['pipe', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      child.stdout!.once('data', () => resolve());
      child.once('exit', (code) => reject(new Error(`capture exited ${code}`)));
    });
    return new Capture(child);
  }

  /** Frames node1 sent to the client from the NodePort. */
  stop(): Promise<number> {
    return new Promise((resolve) => {
      let out = '';
      this.child.stdout!.on('data', (d) => (out += d));
      this.child.once('exit', () => resolve(Number(out.trim())));
      this.child.stdin!.end('stop\n');
    });
  }
}

function request(proto: 'tcp' | 'udp'): { pod: string; peer: string; from: string } {
  const answer = topo.node('cli', CLIENT, [proto, ADDR.node1, String(NODE_PORT)]);
  const m = /^(\w+) ([\d.]+):\d+\|([\d.:]+)$/.exec(answer);
  assert.ok(m, `unexpected answer ${JSON.stringify(answer)}`);
  return { pod: m[1]!, peer: m[2]!, from: m[3]! };
}

function frontend(proto: 'tcp' | 'udp', address: string, backends: TcBackend[]): TcFrontend {
  return { address, port: NODE_PORT, proto, flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, backends };
}

function setMode(mode: NodePortMode): void {
  assert.ok(h1.tc.dsr, 'sluice_dsr_cfg is pinned');
  writeNodePortMode(h1.tc.dsr, mode);
}

before(async () => {
  topo = new Topology('sldsr');
  topo.create();
  h1 = TcHarness.create('sluice-dsre2e-n1');
  h2 = TcHarness.create('sluice-dsre2e-n2');
  for (const [role, h, devices] of [['n1', h1, ['eth0', 'vp1', 'vp1b']], ['n2', h2, ['eth0', 'vp2']]] as const) {
    const r = attachInNetns(topo.netnsPath(role), h.pinDir, [...devices]);
    assert.equal(r.status, 0, `attach in ${role} failed: ${r.stderr}`);
  }
  await topo.start('p2', SERVER_SCRIPT, ['pod2', '8080']);
});

after(() => {
  topo?.destroy();
  h1?.close();
  h2?.close();
});

beforeEach(() => {
  h1.reset();
  h2.reset();
  writeTcConfig(h1.tc.config, { snatAddress: ADDR.node1 });
  writeTcConfig(h2.tc.config, { snatAddress: ADDR.node2 });
  for (const proto of ['tcp', 'udp'] as const) {
    h1.upsertFrontend(frontend(proto, ADDR.node1, [POD2_REMOTE]));
    // node2's NodePort is the wildcard 0.0.0.0:<port>, as the agent writes it.
    h2.upsertFrontend(frontend(proto, '0.0.0.0', [POD2_LOCAL]));
  }
});

/** Three requests of `proto`; returns what node1 sent the client meanwhile and the answers. */
async function three(proto: 'tcp' | 'udp'): Promise<{ sentByNode1: number; answers: Array<ReturnType<typeof request>> }> {
  const capture = await Capture.start();
  const answers = [request(proto), request(proto), request(proto)];
  return { sentByNode1: await capture.stop(), answers };
}

// First: the client's route must not know the smaller PMTU yet (the TCP tests teach it).
describe('--nodeport-mode dsr: MTU (IPIP takes 20 bytes)', () => {
  test('udp: a full-size datagram with DF gets "fragmentation needed" (MTU 1480) from node1; the client fragments to fit and is answered', () => {
    setMode('dsr');
    const sent = h1.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT);
    // 1472 bytes of payload = a 1500-byte packet: 1520 once encapsulated. Linux
    // UDP sockets set DF (IP_PMTUDISC_WANT); the ICMP sets the route's PMTU,
    // and the client then fragments its 3000-byte datagram to 1480 bytes.
    const script = `
      const dgram = require('dgram'); const u = dgram.createSocket('udp4'); const [host, port] = process.argv.slice(1);
      u.on('message', (m, r) => { process.stdout.write(String(m) + '|' + r.address + ':' + r.port); process.exit(0); });
      u.send(Buffer.alloc(1472, 97), Number(port), host);
      setTimeout(() => u.send(Buffer.alloc(3000, 98), Number(port), host), 500);
      setTimeout(() => { process.stdout.write('timeout'); process.exit(0); }, 2500);`;
    const out = topo.node('cli', script, [ADDR.node1, String(NODE_PORT)]);
    assert.equal(h1.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT) - sent, 1n, 'ICMP fragmentation needed sent once');
    assert.match(execFileSync('ip', ['-n', topo.ns.cli, 'route', 'get', ADDR.node1], { encoding: 'utf8' }), /mtu 1480/);
    assert.match(out, /^pod2 198\.18\.0\.10:\d+\|198\.18\.0\.1:30080$/, 'the fragmented datagram reached the pod by DSR and was answered from the NodePort');
  });
});

describe('--nodeport-mode dsr: the reply goes from node2 to the client, not through node1', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: the pod sees the client; the client sees the NodePort address; node1 sends it nothing`, async () => {
      setMode('dsr');
      const counters = () => [h1.counter(abi.LB_CNT_TC_DSR_ENCAP), h2.counter(abi.LB_CNT_TC_DSR_DECAP), h2.counter(abi.LB_CNT_TC_REV_XLATED), h1.counter(abi.LB_CNT_TC_REV_XLATED)];
      const was = counters();
      const { sentByNode1, answers } = await three(proto);
      const [encap1, decap2, rev2, rev1] = counters().map((v, i) => v - was[i]!);
      for (const a of answers) assert.deepEqual(a, { pod: 'pod2', peer: ADDR.client, from: `${ADDR.node1}:${NODE_PORT}` });
      assert.equal(sentByNode1, 0, 'replies that left node1 toward the client');
      assert.ok(encap1! >= 3n, `node1 encapsulated ${encap1}`);
      assert.ok(decap2! >= 3n, `node2 decapsulated ${decap2}`);
      assert.ok(rev2! >= 3n, `node2 restored the NodePort as source ${rev2} times`);
      assert.equal(rev1, 0n, 'node1 translated no reply');
      const rows = listConntrack(h2.tc.conntrack);
      assert.ok(rows.length >= 3 && rows.every((r) => r.snat === undefined && r.backend === `${ADDR.pod2}:8080`), JSON.stringify(rows));
    });
  }

  test('tcp: 2 MB in one connection (GSO segments made 20 bytes smaller for the outer header)', () => {
    setMode('dsr');
    const script = `
      const net = require('net'); const [host, port] = process.argv.slice(1);
      const s = net.connect(Number(port), host, () => { s.write(Buffer.alloc(2 * 1024 * 1024, 120)); });
      let data = ''; s.on('data', (d) => (data += d)); s.on('end', () => { process.stdout.write(data); process.exit(0); });
      s.on('error', (e) => { process.stdout.write('error ' + e.code); process.exit(0); });
      setTimeout(() => { process.stdout.write('timeout'); process.exit(0); }, 8000);`;
    // The server answers at once and closes; the upload must still be carried (no RST for a lost segment).
    const out = topo.node('cli', script, [ADDR.node1, String(NODE_PORT)], 10000);
    assert.match(out, /^pod2 198\.18\.0\.10:\d+$/);
  });
});

describe('control: --nodeport-mode snat (default) sends every reply back through node1', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: the pod sees node1; node1 sends the client each reply`, async () => {
      const { sentByNode1, answers } = await three(proto);
      for (const a of answers) assert.deepEqual(a, { pod: 'pod2', peer: ADDR.node1, from: `${ADDR.node1}:${NODE_PORT}` });
      assert.ok(sentByNode1 >= 3, `node1 sent ${sentByNode1} replies`);
    });
  }
});

describe('--nodeport-mode hybrid: TCP by DSR, UDP SNATed', () => {
  test('tcp skips node1 on the way back, udp goes through it', async () => {
    setMode('hybrid');
    const status = execFileSync(process.execPath, [path.resolve(__dirname, '../../src/cli/main.js'), 'status', '--bpffs', h1.pinDir], { encoding: 'utf8' });
    assert.match(status, /^nodeport mode: hybrid \(Direct Server Return \(IPIP, ip6ip6 for IPv6\) for TCP, SNAT for UDP\)$/m);
    const tcp = await three('tcp');
    for (const a of tcp.answers) assert.deepEqual(a, { pod: 'pod2', peer: ADDR.client, from: `${ADDR.node1}:${NODE_PORT}` });
    assert.equal(tcp.sentByNode1, 0);
    const udp = await three('udp');
    for (const a of udp.answers) assert.deepEqual(a, { pod: 'pod2', peer: ADDR.node1, from: `${ADDR.node1}:${NODE_PORT}` });
    assert.ok(udp.sentByNode1 >= 3, `node1 sent ${udp.sentByNode1} replies`);
  });
});
