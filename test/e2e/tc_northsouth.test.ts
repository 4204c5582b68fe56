// North-south e2e: an external client namespace reaches NodePort, ExternalIP
// and LoadBalancer frontends on node1, whose LAN device runs the TC programs
// (pinned tcx links); backends are pods on node1 and on a routed node2.
// Real TCP and UDP; the backends report the peer address they see.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { syncSourceRanges } from '../../src/datapath/tc/sourceRanges';
import { listConntrack } from '../../src/datapath/tc/conntrack';
import { TcHarness, TC_OBJECT, attachInNetns, type TcBackend, type TcFrontend } from '../bpf/tc_harness';
import { ADDR, CLIENT_SCRIPT, SERVER_SCRIPT, Topology, type Role } from './tc_topology';

const DIST = path.resolve(__dirname, '../..');
const NODE_PORT = 30080;
const POD1: TcBackend = { id: 1, address: ADDR.pod1, port: 8080, local: true };
const POD2: TcBackend = { id: 2, address: ADDR.pod2, port: 8080, local: false };

let topo: Topology;
let h: TcHarness;

function attach(devices: string[]): void {
  // Inside node1's netns; the links are pinned under the test's bpffs dir.
  const r = attachInNetns(topo.netnsPath('n1'), h.pinDir, devices);
  assert.equal(r.status, 0, `attach failed: ${r.stderr}`);
}

function request(from: Role, proto: 'tcp' | 'udp', host: string, port: number): string {
  return topo.node(from, CLIENT_SCRIPT, [proto, host, String(port)]);
}

/** "pod1 198.18.0.10:40000" -> { pod: 'pod1', peer: '198.18.0.10' } */
function parse(answer: string): { pod: string; peer: string } {
  const m = /^(\w+) ([\d.]+):\d+$/.exec(answer);
  assert.ok(m, `unexpected answer ${JSON.stringify(answer)}`);
  return { pod: m[1]!, peer: m[2]! };
}

function frontend(f: Partial<TcFrontend> & Pick<TcFrontend, 'backends'>): TcFrontend {
  return { address: ADDR.node1, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, ...f };
}

before(async () => {
  topo = new Topology();
  topo.create();
  h = TcHarness.create('sluice-tce2e');
  attach(['eth0', 'vp1', 'vp1b']);
  await topo.start('p1', SERVER_SCRIPT, ['pod1', '8080']);
  await topo.start('p1b', SERVER_SCRIPT, ['pod1b', '8080']);
  await topo.start('p2', SERVER_SCRIPT, ['pod2', '8080']);
});

after(() => {
  topo?.destroy();
  h?.close();
});

beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: ADDR.node1 });
});

describe('externalTrafficPolicy: Cluster', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: local and remote backends are SNATed to node1, as kube-proxy masquerades`, () => {
      h.upsertFrontend(frontend({ proto, backends: [POD1] }));
      // The reply of the local pod is restored by the program on its veth (vp1).
      assert.deepEqual(parse(request('cli', proto, ADDR.node1, NODE_PORT)), { pod: 'pod1', peer: ADDR.node1 });
      h.upsertFrontend(frontend({ proto, backends: [POD2] }));
      h.backends.delete(POD1.id);
      assert.deepEqual(parse(request('cli', proto, ADDR.node1, NODE_PORT)), { pod: 'pod2', peer: ADDR.node1 });
      const rows = listConntrack(h.tc.conntrack).filter((r) => r.backend.startsWith(ADDR.pod2));
      assert.ok(rows.length >= 1 && rows.every((r) => r.snat?.startsWith(`${ADDR.node1}:`)), JSON.stringify(rows));
    });
  }

  test('both backends are used over 24 connections; ExternalIP works the same way', () => {
    const seen = new Map<string, number>();
    h.upsertFrontend(frontend({ address: '198.18.100.10', port: 80, flags: abi.LB_SVC_FLAG_EXTERNAL_IP, backends: [POD1, POD2] }));
    for (let i = 0; i < 24; i++) {
      const { pod } = parse(request('cli', 'tcp', '198.18.100.10', 80));
      seen.set(pod, (seen.get(pod) ?? 0) + 1);
    }
    assert.deepEqual([...seen.keys()].sort(), ['pod1', 'pod2'], JSON.stringify([...seen]));
  });

  test('UDP: when the backend is replaced the same client socket reaches the new one (no stale conntrack)', () => {
    h.upsertFrontend(frontend({ proto: 'udp', backends: [POD2] }));
    const script = `
      const dgram = require('dgram'); const u = dgram.createSocket('udp4'); const [host, port] = process.argv.slice(1);
      const answers = []; let n = 0;
      const ask = () => u.send('hi', Number(port), host);
      u.on('message', (m) => { answers.push(String(m).split(' ')[0]); if (++n === 1) { process.stdout.write('first\\n'); } else { process.stdout.write(JSON.stringify(answers) + '\\n'); process.exit(0); } });
      process.stdin.on('data', ask); u.bind(0, () => ask());
      setTimeout(() => { process.stdout.write(JSON.stringify(answers) + '\\n'); process.exit(0); }, 4000);`;
    return (async () => {
      const child = await topo.start('cli', script, [ADDR.node1, String(NODE_PORT)]);
      // First answer came from pod2; now the agent swaps the backend to pod1.
      h.upsertFrontend(frontend({ proto: 'udp', backends: [POD1] }));
      // No conntrack purge by the agent here: the data path alone notices the
      // backend is gone on the next datagram (purgeBackends is tested in the bpf tier).
      h.backends.delete(POD2.id);
      const out = new Promise<string>((resolve) => child.stdout!.on('data', (d) => resolve(String(d).trim())));
      child.stdin!.write('again\n');
      assert.deepEqual(JSON.parse(await out), ['pod2', 'pod1']);
    })();
  });
});

describe('externalTrafficPolicy: Local', () => {
  // No local backend while POD2 is an endpoint elsewhere: the agent flags the
  // external scope DROP_NO_BACKEND (kube-proxy drops, does not reject).
  const local = (backends: TcBackend[]) =>
    frontend({ flags: abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES | (backends.length ? 0 : abi.LB_SVC_FLAG_DROP_NO_BACKEND), backends });

  test('the backend sees the client address; without local backends traffic is dropped; health check 200/503', async () => {
    const HC_SCRIPT = `
      const { HealthCheckServer } = require(${JSON.stringify(path.join(DIST, 'src/datapath/tc/healthcheck.js'))});
      const hc = new HealthCheckServer({ addresses: ['0.0.0.0'] });
      hc.syncServices([{ namespace: 'default', name: 'web', port: 32000 }]).then(() => process.stdout.write('ready\\n'));
      process.stdin.on('data', (d) => { hc.syncEndpoints(JSON.parse(String(d))); process.stdout.write('ok\\n'); });`;
    const hc = await topo.start('n1', HC_SCRIPT, [], 'nsenter');
    const setLocalEndpoints = (n: number) =>
      new Promise<void>((resolve) => { hc.stdout!.once('data', () => resolve()); hc.stdin!.write(JSON.stringify({ 'default/web': n })); });
    const probe = () => topo.node('cli', `
      require('http').get('http://${ADDR.node1}:32000/', (res) => { let b = ''; res.on('data', (d) => (b += d));
        res.on('end', () => { process.stdout.write(JSON.stringify({ status: res.statusCode, weight: res.headers['x-load-balancing-endpoint-weight'], body: JSON.parse(b) })); process.exit(0); }); })
        .on('error', (e) => { process.stdout.write(JSON.stringify({ error: e.code })); process.exit(0); });
      setTimeout(() => process.exit(1), 2000);`, []);

    // Two backends in the cluster, one local: the external scope holds only the local one.
    h.upsertFrontend(local([POD1]));
    h.upsertFrontend(frontend({ flags: abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES, backends: [POD1, POD2] }), abi.LB_SCOPE_INTERNAL);
    await setLocalEndpoints(1);
    for (let i = 0; i < 5; i++) assert.deepEqual(parse(request('cli', 'tcp', ADDR.node1, NODE_PORT)), { pod: 'pod1', peer: ADDR.client });
    assert.deepEqual(JSON.parse(probe()), {
      status: 200, weight: '1',
      body: { service: { namespace: 'default', name: 'web' }, localEndpoints: 1, serviceProxyHealthy: true },
    });

    // The local pod goes away: count 0 in the external scope.
    h.upsertFrontend(local([]));
    await setLocalEndpoints(0);
    const before = h.counter(abi.LB_CNT_TC_NO_BACKEND);
    assert.equal(request('cli', 'tcp', ADDR.node1, NODE_PORT), 'timeout', 'dropped, not refused');
    assert.ok(h.counter(abi.LB_CNT_TC_NO_BACKEND) > before);
    assert.equal(JSON.parse(probe()).status, 503);

    // It comes back.
    h.upsertFrontend(local([POD1]));
    await setLocalEndpoints(1);
    assert.equal(parse(request('cli', 'tcp', ADDR.node1, NODE_PORT)).peer, ADDR.client);
    assert.equal(JSON.parse(probe()).status, 200);
  });
});

// A connected UDP socket sending every 200 ms: prints the first answer, or
// the error an ICMP port unreachable quoting its datagram raises (ECONNREFUSED).
const CONNECTED_UDP = `
  const u = require('dgram').createSocket('udp4'); const [host, port] = process.argv.slice(1);
  const done = (s) => { process.stdout.write(s); process.exit(0); };
  u.on('error', (e) => done('error ' + e.code)); u.on('message', (m) => done(String(m)));
  u.connect(Number(port), host, () => { const tick = () => u.send('hi'); tick(); setInterval(tick, 200); });
  setTimeout(() => done('timeout'), 2000);`;

// kube-proxy REJECTs (icmp-port-unreachable) a NodePort / ExternalIP whose
// Service has no endpoints at all: the external client's connect() fails at
// once instead of timing out.
describe('a Service without any endpoint: rejected, as kube-proxy does', () => {
  for (const [name, address, flags] of [['NodePort', ADDR.node1, abi.LB_SVC_FLAG_NODEPORT], ['ExternalIP', '198.18.100.30', abi.LB_SVC_FLAG_EXTERNAL_IP]] as const) {
    test(`${name}: TCP connect() and connected UDP get ECONNREFUSED from the external namespace`, () => {
      h.upsertFrontend(frontend({ address, flags, backends: [] }));
      h.upsertFrontend(frontend({ address, flags, proto: 'udp', backends: [] }));
      const before = h.counter(abi.LB_CNT_TC_NO_BACKEND);
      assert.equal(request('cli', 'tcp', address, NODE_PORT), 'error ECONNREFUSED');
      assert.equal(topo.node('cli', CONNECTED_UDP, [address, String(NODE_PORT)]), 'error ECONNREFUSED');
      assert.ok(h.counter(abi.LB_CNT_TC_NO_BACKEND) - before >= 2n);
      assert.equal(listConntrack(h.tc.conntrack).length, 0);
    });
  }
});

describe('loadBalancerSourceRanges', () => {
  test('a client inside the ranges is served; after the ranges change it is dropped', () => {
    const LB_IP = '198.18.100.20';
    syncSourceRanges(h.tc.sourceRanges, 3, ['198.18.0.0/28']);
    h.upsertFrontend(frontend({ address: LB_IP, port: 443, revNatId: 3, flags: abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE, backends: [POD1, POD2] }));
    assert.match(request('cli', 'tcp', LB_IP, 443), /^pod/);
    syncSourceRanges(h.tc.sourceRanges, 3, ['198.18.0.128/25']);
    const before = h.counter(abi.LB_CNT_TC_SRC_RANGE_DROP);
    assert.equal(request('cli', 'tcp', LB_IP, 443), 'timeout');
    assert.ok(h.counter(abi.LB_CNT_TC_SRC_RANGE_DROP) > before);
  });
});

describe('hairpin: a pod reaches its own node\'s NodePort', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: to another local pod, to a remote pod, and to itself`, () => {
      h.upsertFrontend(frontend({ proto, backends: [POD1] }));
      assert.deepEqual(parse(request('p1b', proto, ADDR.node1, NODE_PORT)), { pod: 'pod1', peer: ADDR.node1 });
      h.upsertFrontend(frontend({ proto, backends: [POD2] }));
      h.backends.delete(POD1.id);
      assert.deepEqual(parse(request('p1b', proto, ADDR.node1, NODE_PORT)), { pod: 'pod2', peer: ADDR.node1 });
      // The pod is its own backend: SNAT to the node so the reply comes back through it.
      h.upsertFrontend(frontend({ proto, backends: [{ ...POD1, id: 5 }] }));
      assert.deepEqual(parse(request('p1', proto, ADDR.node1, NODE_PORT)), { pod: 'pod1', peer: ADDR.node1 });
    });
  }
});

describe('ICMP errors for translated flows', () => {
  // A connected UDP socket reports ECONNREFUSED when an ICMP port unreachable
  // quoting its own datagram (client -> frontend) comes back: the error must
  // have been translated on its way.

  for (const [where, backend] of [['local', { ...POD1, port: 9999 }], ['remote (SNAT)', { ...POD2, port: 9999 }]] as const) {
    test(`port unreachable from a ${where} backend reaches the client as ECONNREFUSED`, () => {
      h.upsertFrontend(frontend({ proto: 'udp', backends: [backend] }));
      const before = h.counter(abi.LB_CNT_TC_REV_XLATED);
      assert.equal(topo.node('cli', CONNECTED_UDP, [ADDR.node1, String(NODE_PORT)]), 'error ECONNREFUSED');
      assert.ok(h.counter(abi.LB_CNT_TC_REV_XLATED) > before, 'the ICMP error was translated');
    });
  }
});

describe('attachments outlive the process that made them', () => {
  test('attaching again swaps the program in the pinned links (same link, new program); traffic flows throughout', () => {
    h.upsertFrontend(frontend({ backends: [POD1, POD2] }));
    const show = () => spawnSync('nsenter', [`--net=${topo.netnsPath('n1')}`, process.execPath, path.join(DIST, 'src/datapath/tc/attachMain.js'),
      '--object', TC_OBJECT, '--bpffs', h.pinDir, '--device', 'eth0'], { encoding: 'utf8', timeout: 10000 });
    const first = show();
    assert.equal(first.status, 0, first.stderr);
    const a = first.stdout.trim().split('\n').map((l) => JSON.parse(l) as { linkId: number; programId: number });
    assert.match(request('cli', 'tcp', ADDR.node1, NODE_PORT), /^pod/);
    const second = show();
    assert.equal(second.status, 0, second.stderr);
    const b = second.stdout.trim().split('\n').map((l) => JSON.parse(l) as { linkId: number; programId: number });
    assert.deepEqual(b.map((x) => x.linkId), a.map((x) => x.linkId), 'same links');
    assert.notDeepEqual(b.map((x) => x.programId), a.map((x) => x.programId), 'new programs');
    assert.match(request('cli', 'tcp', ADDR.node1, NODE_PORT), /^pod/);
  });
});

describe('bulk transfer', () => {
  // Large segments (GSO on veth, checksums left to offload) through DNAT+SNAT
  // and the FIB redirect: every byte must arrive, in both directions.
  // The server answers, after the request's FIN (half-close), with one JSON
  // line about what it received, then 8 MiB of its own.
  const BULK_SERVER = `
    const net = require('net'), crypto = require('crypto');
    net.createServer({ allowHalfOpen: true }, (s) => { const h = crypto.createHash('sha256'); let n = 0;
      s.on('data', (d) => { h.update(d); n += d.length; });
      s.on('end', () => { s.write(JSON.stringify({ got: n, sha: h.digest('hex') }) + '\\n');
        const block = Buffer.alloc(65536, 7); for (let i = 0; i < 128; i++) s.write(block); s.end(); }); })
      .listen(9000, '0.0.0.0', () => process.stdout.write('ready\\n'));`;
  const BULK_CLIENT = `
    const net = require('net'), crypto = require('crypto'); const [host, port] = process.argv.slice(1);
    const s = net.connect(Number(port), host); const block = crypto.randomBytes(65536); const h = crypto.createHash('sha256');
    for (let i = 0; i < 128; i++) { s.write(block); h.update(block); } s.end();
    const chunks = []; s.on('data', (d) => chunks.push(d));
    s.on('end', () => { const all = Buffer.concat(chunks); const nl = all.indexOf(10);
      const summary = JSON.parse(String(all.subarray(0, nl))); const body = all.subarray(nl + 1);
      process.stdout.write(JSON.stringify({ sentSha: h.digest('hex'), serverGot: summary.got, serverSha: summary.sha,
        recvLen: body.length, recvOk: body.every((b) => b === 7) })); process.exit(0); });
    s.on('error', (e) => { process.stdout.write('error ' + e.code); process.exit(0); });
    setTimeout(() => { process.stdout.write('timeout'); process.exit(0); }, 15000);`;

  test('8 MiB each way through a remote (SNAT) and a local (DNAT) backend, bytes intact', async () => {
    await topo.start('p2', BULK_SERVER, []);
    await topo.start('p1', BULK_SERVER, []);
    for (const backend of [{ ...POD2, port: 9000 }, { ...POD1, port: 9000 }]) {
      h.upsertFrontend(frontend({ backends: [backend] }));
      const out = topo.node('cli', BULK_CLIENT, [ADDR.node1, String(NODE_PORT)], 20000);
      const r = JSON.parse(out) as { sentSha: string; serverGot: number; serverSha: string; recvLen: number; recvOk: boolean };
      assert.equal(r.serverGot, 128 * 65536, `bytes the ${backend.address} backend received`);
      assert.equal(r.serverSha, r.sentSha, 'request intact');
      assert.equal(r.recvLen, 128 * 65536);
      assert.ok(r.recvOk, 'response intact');
    }
  });
});
