// Pod-veth e2e: pods on one node's bridge, as the bridge CNI wires them. The
// client pod's process is in no socket-LB cgroup (no socket hooks are
// attached anywhere here), so only the pod-veth program (build/pod_lb.bpf.o,
// tcx on the host side of the client's veth) can turn its ClusterIP traffic
// into backend traffic. Real TCP and UDP; the servers report the peer they see.
//
//   node ns: br0 198.18.64.1/24 (gateway), ip_forward
//     vpc ─ pc  198.18.64.10  client pod (also a backend, for hairpin)
//     vpa ─ pa  198.18.64.20  backend pod
//     vpb ─ pb  198.18.64.21  backend pod
// Pods route only 10.96.0.0/12 (the VIPs) via the gateway: no default route.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { listConntrack } from '../../src/datapath/tc/conntrack';
import { BpfLink } from '../../src/bpf';
import { pinPodPrograms } from '../../src/datapath/pod/attach';
import { TcHarness, type TcBackend } from '../bpf/tc_harness';
import { SERVER_SCRIPT } from './tc_topology';

const DIST = path.resolve(__dirname, '../..');
const POD_OBJECT = path.resolve(DIST, '../build/pod_lb.bpf.o');
const GW = '198.18.64.1';
const PC = '198.18.64.10';
const PA = '198.18.64.20';
const PB = '198.18.64.21';
const VIP = '10.96.0.10';
const BE_A: TcBackend = { id: 1, address: PA, port: 8080, local: true };
const BE_B: TcBackend = { id: 2, address: PB, port: 8080, local: true };
const BE_SELF: TcBackend = { id: 3, address: PC, port: 8080, local: true };

type Role = 'node' | 'pc' | 'pa' | 'pb';
const suffix = randomBytes(3).toString('hex');
const ns: Record<Role, string> = { node: `slpod-${suffix}-n`, pc: `slpod-${suffix}-pc`, pa: `slpod-${suffix}-pa`, pb: `slpod-${suffix}-pb` };
const children: ChildProcess[] = [];
let h: TcHarness;

const ip = (...args: string[]): void => void execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
const sysctl = (role: Role, kv: string): void => void execFileSync('ip', ['netns', 'exec', ns[role], 'sysctl', '-qw', kv]);

function createTopology(): void {
  for (const r of Object.keys(ns) as Role[]) {
    ip('netns', 'add', ns[r]);
    ip('-n', ns[r], 'link', 'set', 'lo', 'up');
  }
  ip('-n', ns.node, 'link', 'add', 'br0', 'type', 'bridge');
  ip('-n', ns.node, 'addr', 'add', `${GW}/24`, 'dev', 'br0');
  ip('-n', ns.node, 'link', 'set', 'br0', 'up');
  for (const [role, address, dev] of [['pc', PC, 'vpc'], ['pa', PA, 'vpa'], ['pb', PB, 'vpb']] as const) {
    ip('-n', ns.node, 'link', 'add', dev, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns[role]);
    ip('-n', ns.node, 'link', 'set', dev, 'master', 'br0', 'up');
    ip('-n', ns[role], 'addr', 'add', `${address}/24`, 'dev', 'eth0');
    ip('-n', ns[role], 'link', 'set', 'eth0', 'up');
    ip('-n', ns[role], 'route', 'add', '10.96.0.0/12', 'via', GW, 'dev', 'eth0');
  }
  sysctl('node', 'net.ipv4.ip_forward=1');
  for (const k of ['all', 'default', 'br0']) {
    sysctl('node', `net.ipv4.conf.${k}.rp_filter=0`);
    sysctl('node', `net.ipv4.conf.${k}.send_redirects=0`);
  }
}

function destroyTopology(): void {
  for (const c of children) if (c.exitCode === null && c.pid) c.kill('SIGKILL');
  for (const r of Object.keys(ns) as Role[]) spawnSync('ip', ['netns', 'del', ns[r]]);
}

async function startServer(role: Role, name: string): Promise<void> {
  const child = spawn('ip', ['netns', 'exec', ns[role], process.execPath, '-e', SERVER_SCRIPT, '--', name, '8080'], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server ${name} did not start within 5s`)), 5000);
    child.stdout!.once('data', () => { clearTimeout(timer); resolve(); });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`server ${name} exited ${code}`)); });
  });
}

/** One TCP request or one datagram on a *connected* UDP socket (so ICMP errors surface as ECONNREFUSED). */
const CLIENT = `
const net = require('net'), dgram = require('dgram');
const [proto, host, port] = process.argv.slice(1);
const done = (s) => { process.stdout.write(s); process.exit(0); };
setTimeout(() => done('timeout'), 2000);
if (proto === 'tcp') {
  const s = net.connect(Number(port), host); let data = '';
  s.on('data', (d) => (data += d)); s.on('end', () => done(data)); s.on('error', (e) => done('error ' + e.code));
} else {
  const u = dgram.createSocket('udp4');
  u.on('message', (m) => done(String(m)));
  u.on('error', (e) => done('error ' + e.code));
  u.connect(Number(port), host, () => {
    u.send('hi');
    setTimeout(() => u.send('hi again'), 300);
  });
}
`;

function request(proto: 'tcp' | 'udp', host: string, port = 80): string {
  const r = spawnSync('ip', ['netns', 'exec', ns.pc, process.execPath, '-e', CLIENT, '--', proto, host, String(port)], { encoding: 'utf8', timeout: 5000 });
  if (r.error) throw new Error(`client in ${ns.pc}: ${r.error.message}`);
  return (r.stdout ?? '').trim();
}

/** "pa 198.18.64.10:40000" -> { pod: 'pa', peer: '198.18.64.10' } */
function parse(answer: string): { pod: string; peer: string } {
  const m = /^(\w+) ([\d.]+):\d+$/.exec(answer);
  assert.ok(m, `unexpected answer ${JSON.stringify(answer)}`);
  return { pod: m[1]!, peer: m[2]! };
}

before(async () => {
  createTopology();
  h = TcHarness.create('sluice-pode2e');
  const r = spawnSync('nsenter', [`--net=/run/netns/${ns.node}`, process.execPath, path.join(DIST, 'src/datapath/pod/attachMain.js'),
    '--object', POD_OBJECT, '--bpffs', h.pinDir, '--device', 'vpc', '--container', `test-${suffix}`, '--ifname', 'eth0'], { encoding: 'utf8', timeout: 10000 });
  assert.equal(r.status, 0, `attach failed: ${r.stderr}`);
  await startServer('pc', 'pc');
  await startServer('pa', 'pa');
  await startServer('pb', 'pb');
});

after(() => {
  destroyTopology();
  h?.close();
});

beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, {});
});

describe('ClusterIP from a pod outside the socket LB', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: the backends see the pod's own address; both are used`, () => {
      h.upsertFrontend({ address: VIP, port: 80, proto, flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 1, backends: [BE_A, BE_B] });
      const seen = new Set<string>();
      for (let i = 0; i < 16 && seen.size < 2; i++) {
        const { pod, peer } = parse(request(proto, VIP));
        assert.equal(peer, PC, 'DNAT only: the backend sees the client pod');
        seen.add(pod);
      }
      assert.deepEqual([...seen].sort(), ['pa', 'pb']);
      const rows = listConntrack(h.tc.conntrack);
      assert.ok(rows.length >= 2 && rows.every((r) => r.client.startsWith(`${PC}:`) && r.frontend === `${VIP}:80`), JSON.stringify(rows));
    });

    test(`${proto}: hairpin — the client pod is the only backend; it sees the ClusterIP as its peer`, () => {
      h.upsertFrontend({ address: VIP, port: 80, proto, flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 2, backends: [BE_SELF] });
      assert.deepEqual(parse(request(proto, VIP)), { pod: 'pc', peer: VIP });
    });

    test(`${proto}: a ClusterIP without backends is refused at once (ICMP port unreachable)`, () => {
      h.upsertFrontend({ address: VIP, port: 80, proto, flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 3, backends: [] });
      const started = Date.now();
      assert.equal(request(proto, VIP), 'error ECONNREFUSED');
      assert.ok(Date.now() - started < 1500, 'refused without waiting for a timeout');
    });
  }

  test('traffic that is not for a frontend passes untouched', () => {
    h.upsertFrontend({ address: VIP, port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 4, backends: [BE_A] });
    assert.deepEqual(parse(request('tcp', PB, 8080)), { pod: 'pb', peer: PC });
    assert.equal(listConntrack(h.tc.conntrack).length, 0);
  });

  test('pinPodPrograms again (an agent upgrade) swaps the new programs into the pod links; traffic goes on', () => {
    const pin = path.join(h.pinDir, 'links', `pod-test-${suffix}-eth0-ingress`);
    const progOf = (): number => {
      const link = BpfLink.fromPinned(pin);
      try {
        return link.info().progId;
      } finally {
        link.close();
      }
    };
    const before = progOf();
    const pinned = pinPodPrograms(POD_OBJECT, h.pinDir);
    assert.equal(pinned.linksUpdated, 2);
    assert.notEqual(pinned.ingressProgId, before);
    assert.equal(progOf(), pinned.ingressProgId);
    h.upsertFrontend({ address: VIP, port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 5, backends: [BE_A] });
    assert.deepEqual(parse(request('tcp', VIP)), { pod: 'pa', peer: PC });
  });

  test('the links are pinned tcx links on the client pod veth', () => {
    for (const dir of ['ingress', 'egress']) {
      const link = BpfLink.fromPinned(path.join(h.pinDir, 'links', `pod-test-${suffix}-eth0-${dir}`));
      try {
        const info = link.info();
        assert.equal(info.type, 11, 'BPF_LINK_TYPE_TCX');
        assert.equal(info.attachType, dir === 'ingress' ? 46 : 47);
      } finally {
        link.close();
      }
    }
  });
});
