// Direct Server Return over IPv6 e2e (issue 17 item 2, docs/dsr.md; the
// IPv6 twin of tc_dsr.test.ts): an external client reaches a NodePort (and
// a LoadBalancer IP) on node1 (ingress node, TC on eth0/eth1,
// --nodeport-mode dsr|hybrid) whose backend is a pod on node2 (TC on its
// devices, its own maps, snat mode). node1 sends the client's packet in
// ip6ip6 to the pod's address; node2 opens it, DNATs to the pod, and the
// pod's reply leaves node2 with the address the client talked to as source,
// straight to the client over a link of its own (tc_topology6.ts with
// addClientLink: node2's route to the client avoids node1). A
// packet socket inside node1's namespace counts the replies node1 sends to
// the client: none under DSR (all of them under SNAT, the control).
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { ip6ToBytes } from '../../src/datapath/addr';
import { writeNodePortMode, writeTcConfig, type NodePortMode } from '../../src/datapath/tc/config';
import { TypedMap, u8Codec } from '../../src/datapath/typedMap';
import { TcHarness, attachInNetns, type TcBackend, type TcFrontend } from '../bpf/tc_harness';
import { Tc6Maps } from '../bpf/tc_harness6';
import { PEER_SERVER6, Topology6, V6 } from './tc_topology6';

const NODE_PORT = 30080;
const LB_IP = '2001:db8:100::10'; // the client routes the VIP network to node1
const POD2_REMOTE: TcBackend = { id: 2, address: V6.pod2, port: 8080, local: false };
const POD2_LOCAL: TcBackend = { id: 2, address: V6.pod2, port: 8080, local: true };

let topo: Topology6;
let h1: TcHarness; // node1's maps (ingress node)
let h2: TcHarness; // node2's maps (backend node)
let v1: Tc6Maps;
let v2: Tc6Maps;

/** One request; prints "<answer>|<[address]:port the answer came from>". */
const CLIENT = `
const net = require('net'), dgram = require('dgram');
const [proto, host, port] = process.argv.slice(1);
const done = (s) => { process.stdout.write(s); process.exit(0); };
setTimeout(() => done('timeout'), 3000);
if (proto === 'tcp') {
  const s = net.connect(Number(port), host); let data = '';
  s.on('data', (d) => (data += d)); s.on('end', () => done(data + '|[' + s.remoteAddress + ']:' + s.remotePort)); s.on('error', (e) => done('error ' + e.code));
} else {
  const u = dgram.createSocket('udp6');
  u.on('message', (m, r) => done(String(m) + '|[' + r.address + ']:' + r.port));
  u.send('hi', Number(port), host);
}`;

/** Counts frames node1 sends out of any device from SRC:PORT to DST (IPv6 TCP/UDP), until stdin says stop. */
const CAPTURE = `
import socket, struct, select, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
src, dst, port = socket.inet_pton(socket.AF_INET6, sys.argv[1]), socket.inet_pton(socket.AF_INET6, sys.argv[2]), int(sys.argv[3])
n = 0
print('ready', flush=True)
while True:
    r, _, _ = select.select([s, sys.stdin], [], [], 20)
    if not r or sys.stdin in r:
        break
    data, addr = s.recvfrom(65535)
    if addr[2] != socket.PACKET_OUTGOING or len(data) < 58 or data[12:14] != b'\\x86\\xdd':
        continue
    ip = data[14:]
    if ip[6] in (6, 17) and ip[8:24] == src and ip[24:40] == dst and struct.unpack('!H', ip[40:42])[0] == port:
        n += 1
print(n, flush=True)
`;

class Capture {
  private constructor(private readonly child: ChildProcess) {}

  static async start(frontend: string, port: number): Promise<Capture> {
    const child = spawn('ip', ['netns', 'exec', topo.ns.n1, 'python3', '-c', CAPTURE, frontend, V6.client, String(port)], { stdio: ['pipe', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      child.stdout!.once('data', () => resolve());
      child.once('exit', (code) => reject(new Error(`capture exited ${code}`)));
    });
    return new Capture(child);
  }

  /** Frames node1 sent to the client from the frontend. */
  stop(): Promise<number> {
    return new Promise((resolve) => {
      let out = '';
      this.child.stdout!.on('data', (d) => (out += d));
      this.child.once('exit', () => resolve(Number(out.trim())));
      this.child.stdin!.end('stop\n');
    });
  }
}

interface Answer { pod: string; peer: string; from: string }

function request(proto: 'tcp' | 'udp', host: string = V6.node1Public, port = NODE_PORT): Answer {
  const answer = topo.node('cli', CLIENT, [proto, host, String(port)]);
  const m = /^(\w+) ([\da-f:]+)\|(\[[\da-f:]+\]:\d+)$/.exec(answer);
  assert.ok(m, `unexpected answer ${JSON.stringify(answer)}`);
  return { pod: m[1]!, peer: m[2]!, from: m[3]! };
}

function frontend(proto: 'tcp' | 'udp', address: string, backends: TcBackend[], flags: number = abi.LB_SVC_FLAG_NODEPORT, port = NODE_PORT): TcFrontend {
  return { address, port, proto, flags, revNatId: flags === abi.LB_SVC_FLAG_NODEPORT ? 1 : 2, backends };
}

function setMode(mode: NodePortMode): void {
  assert.ok(h1.tc.dsr, 'sluice_dsr_cfg is pinned');
  writeNodePortMode(h1.tc.dsr, mode);
}

before(async () => {
  topo = new Topology6('sldsr6');
  topo.create();
  topo.addClientLink(); // node2 answers the client without node1
  h1 = TcHarness.create('sluice-dsr6e2e-n1');
  h2 = TcHarness.create('sluice-dsr6e2e-n2');
  v1 = new Tc6Maps(h1);
  v2 = new Tc6Maps(h2);
  for (const [role, h, devices] of [['n1', h1, ['eth0', 'eth1', 'vp1']], ['n2', h2, ['eth1', 'eth2', 'vp2']]] as const) {
    const r = attachInNetns(topo.netnsPath(role), h.pinDir, [...devices]);
    assert.equal(r.status, 0, `attach in ${role} failed: ${r.stderr}`);
  }
  await topo.start('p2', PEER_SERVER6, ['pod2', '8080']);
});

after(() => {
  topo?.destroy();
  h1?.close();
  h2?.close();
});

beforeEach(() => {
  h1.reset();
  h2.reset();
  v1.reset();
  v2.reset();
  writeTcConfig(h1.tc.config, { snatAddress: '198.18.0.1' });
  writeTcConfig(h2.tc.config, { snatAddress: '198.18.0.2' });
  v1.setSnat(V6.node1Private);
  v2.setSnat(V6.node2Private);
  // node2's own address, as the agent writes it (sockConfig.ts): its
  // NodePorts are one frontend per node address.
  new TypedMap(h2.obj.map(abi.SLUICE_MAP_NODEIP6), abi.lb6_node_ipCodec, u8Codec).set({ address: ip6ToBytes(V6.node2Private) }, 1);
  for (const proto of ['tcp', 'udp'] as const) {
    v1.upsertFrontend(frontend(proto, V6.node1Public, [POD2_REMOTE]));
    v2.upsertFrontend(frontend(proto, V6.node2Private, [POD2_LOCAL]));
    v1.upsertFrontend(frontend(proto, LB_IP, [POD2_REMOTE], abi.LB_SVC_FLAG_LOADBALANCER, 80));
    v2.upsertFrontend(frontend(proto, LB_IP, [POD2_LOCAL], abi.LB_SVC_FLAG_LOADBALANCER, 80));
  }
});

/** Three requests of `proto`; returns what node1 sent the client meanwhile and the answers. */
async function three(proto: 'tcp' | 'udp', host: string = V6.node1Public, port = NODE_PORT): Promise<{ sentByNode1: number; answers: Answer[] }> {
  const capture = await Capture.start(host, port);
  const answers = [request(proto, host, port), request(proto, host, port), request(proto, host, port)];
  return { sentByNode1: await capture.stop(), answers };
}

const node1 = `[${V6.node1Public}]:${NODE_PORT}`;

// First: the client's route must not know the smaller PMTU yet (the TCP tests teach it).
describe('--nodeport-mode dsr over IPv6: MTU (ip6ip6 takes 40 bytes)', () => {
  test('udp: a 1500-byte datagram gets a Packet Too Big (MTU 1460) from node1; the client fragments to fit and is answered', () => {
    setMode('dsr');
    const sent = h1.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT);
    // 1452 bytes of payload = a 1500-byte packet: 1540 once encapsulated. The
    // client then fragments its 3000-byte datagram to 1460 bytes; node2 opens
    // the later fragments by the ports of the first (sluice_frag6).
    const script = `
      const u = require('dgram').createSocket('udp6'); const [host, port] = process.argv.slice(1);
      u.on('message', (m, r) => { process.stdout.write(String(m) + '|[' + r.address + ']:' + r.port); process.exit(0); });
      u.send(Buffer.alloc(1452, 97), Number(port), host);
      setTimeout(() => u.send(Buffer.alloc(3000, 98), Number(port), host), 500);
      setTimeout(() => { process.stdout.write('timeout'); process.exit(0); }, 2500);`;
    const out = topo.node('cli', script, [V6.node1Public, String(NODE_PORT)]);
    assert.equal(h1.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT) - sent, 1n, 'Packet Too Big sent once');
    assert.match(execFileSync('ip', ['-n', topo.ns.cli, '-6', 'route', 'get', V6.node1Public], { encoding: 'utf8' }), /mtu 1460/);
    assert.equal(out, `pod2 ${V6.client}|${node1}`, 'the fragmented datagram reached the pod by DSR and was answered from the NodePort');
  });

  test('tcp: 1 MB upload in one connection (Packet Too Big shrinks the client\'s segments; GSO segments made 40 bytes smaller)', () => {
    setMode('dsr');
    const script = `
      const net = require('net'); const [host, port] = process.argv.slice(1);
      const s = net.connect(Number(port), host, () => { s.write(Buffer.alloc(1024 * 1024, 120)); });
      let data = ''; s.on('data', (d) => (data += d)); s.on('end', () => { process.stdout.write(data); process.exit(0); });
      s.on('error', (e) => { process.stdout.write('error ' + e.code); process.exit(0); });
      setTimeout(() => { process.stdout.write('timeout'); process.exit(0); }, 8000);`;
    const out = topo.node('cli', script, [V6.node1Public, String(NODE_PORT)], 10000);
    assert.equal(out, `pod2 ${V6.client}`);
  });
});

describe('--nodeport-mode dsr over IPv6: the reply goes from node2 to the client, not through node1', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: the pod sees the client; the client sees the NodePort address; node1 sends it nothing`, async () => {
      setMode('dsr');
      const counters = () => [h1.counter(abi.LB_CNT_TC_DSR_ENCAP), h2.counter(abi.LB_CNT_TC_DSR_DECAP), h2.counter(abi.LB_CNT_TC_REV_XLATED), h1.counter(abi.LB_CNT_TC_REV_XLATED)];
      const was = counters();
      const { sentByNode1, answers } = await three(proto);
      const [encap1, decap2, rev2, rev1] = counters().map((v, i) => v - was[i]!);
      for (const a of answers) assert.deepEqual(a, { pod: 'pod2', peer: V6.client, from: node1 });
      assert.equal(sentByNode1, 0, 'replies that left node1 toward the client');
      assert.ok(encap1! >= 3n, `node1 encapsulated ${encap1}`);
      assert.ok(decap2! >= 3n, `node2 decapsulated ${decap2}`);
      assert.ok(rev2! >= 3n, `node2 restored the NodePort as source ${rev2} times`);
      assert.equal(rev1, 0n, 'node1 translated no reply');
      const rows = v2.rows();
      assert.ok(rows.length >= 6 && rows.every((r) => !(r.flags & abi.LB_CT_FLAG_SNAT) && (r.flags & abi.LB_CT_FLAG_DSR_RX) && r.backend === `[${V6.pod2}]:8080`), JSON.stringify(rows));
    });
  }

  test('tcp to a LoadBalancer IP: the same, the client sees the VIP', async () => {
    setMode('dsr');
    const { sentByNode1, answers } = await three('tcp', LB_IP, 80);
    for (const a of answers) assert.deepEqual(a, { pod: 'pod2', peer: V6.client, from: `[${LB_IP}]:80` });
    assert.equal(sentByNode1, 0);
  });
});

describe('control over IPv6: --nodeport-mode snat (default) sends every reply back through node1', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: the pod sees node1; node1 sends the client each reply`, async () => {
      const { sentByNode1, answers } = await three(proto);
      for (const a of answers) assert.deepEqual(a, { pod: 'pod2', peer: V6.node1Private, from: node1 });
      assert.ok(sentByNode1 >= 3, `node1 sent ${sentByNode1} replies`);
    });
  }
});

describe('--nodeport-mode hybrid over IPv6: TCP by DSR, UDP SNATed', () => {
  test('tcp skips node1 on the way back, udp goes through it', async () => {
    setMode('hybrid');
    const status = execFileSync(process.execPath, [path.resolve(__dirname, '../../src/cli/main.js'), 'status', '--bpffs', h1.pinDir], { encoding: 'utf8' });
    assert.match(status, /^nodeport mode: hybrid \(Direct Server Return \(IPIP, ip6ip6 for IPv6\) for TCP, SNAT for UDP\)$/m);
    const tcp = await three('tcp');
    for (const a of tcp.answers) assert.deepEqual(a, { pod: 'pod2', peer: V6.client, from: node1 });
    assert.equal(tcp.sentByNode1, 0);
    const udp = await three('udp');
    for (const a of udp.answers) assert.deepEqual(a, { pod: 'pod2', peer: V6.node1Private, from: node1 });
    assert.ok(udp.sentByNode1 >= 3, `node1 sent ${udp.sentByNode1} replies`);
  });
});
