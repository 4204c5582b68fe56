// Dual-stack pods on the pod-veth per-packet path (issue 14 item 4), wired
// by the real CNI chain: Debian's bridge + host-local (two ranges: an IPv4
// and an IPv6 one) + loopback, then the Sluice CNI plugin (build/sluice-cni)
// which attaches the pod-veth programs it embeds. The pods' processes are in
// no socket-LB cgroup: only the per-packet programs on the host veths turn
// Service traffic into backend traffic. Real TCP and UDP sockets; the
// servers report the peer they see.
//
//   node ns (forwarding v4+v6): bridge slds<sfx>, gateways from host-local
//     client pod: 198.18.99.x + fd00:99:1::x   (also a backend: hairpin)
//     server pod: 198.18.99.y + fd00:99:1::y
// Pods route only the Service, cluster and node ranges via the bridge.
//
// SLUICE_CNI_PLUGIN=<older sluice-cni> runs it with another plugin binary
// (the fail-first run: the old embedded object passed IPv6 untouched).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as abi from '../../src/abi/generated';
import { BpfLink, BpfMap } from '../../src/bpf';
import { bytesToIp6, ip4ToNumber } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TypedMap } from '../../src/datapath/typedMap';
import type { Codec } from '../../src/abi/types';
import { TcHarness } from '../bpf/tc_harness';
import { Tc6Maps } from '../bpf/tc_harness6';
import { CLIENT_SCRIPT } from './tc_topology';
import { cniAdd, cniDel, podIPv4, podIPv6, podNetworkConfList, type CniInvocation, type CniResult, type NetConfList } from '../cluster/cni';

const PLUGIN = process.env.SLUICE_CNI_PLUGIN ?? path.resolve(__dirname, '../../../build/sluice-cni');
const SYSTEM_CNI = '/usr/lib/cni';
const VIP4 = '198.19.96.20';
const VIP6 = 'fd00:96::20';

const suffix = randomBytes(3).toString('hex');
const nodeNs = `slds-${suffix}-n`;
const podNs = { client: `slds-${suffix}-c`, server: `slds-${suffix}-s` };
const workDir = fs.mkdtempSync(path.join(os.tmpdir(), `slds-${suffix}-`));
const binDir = path.join(workDir, 'bin');
const children: ChildProcess[] = [];
let h: TcHarness;
let v6: Tc6Maps;
let list: NetConfList;
const results: Partial<Record<keyof typeof podNs, CniResult>> = {};
const addr: Record<keyof typeof podNs, { v4: string; v6: string }> = { client: { v4: '', v6: '' }, server: { v4: '', v6: '' } };

const inv = (pod: keyof typeof podNs): CniInvocation => ({
  containerId: `sluice-ds-${suffix}-${pod}`,
  netnsPath: `/run/netns/${podNs[pod]}`,
  ifName: 'eth0',
  hostNetns: nodeNs,
  cniPath: `${binDir}:${SYSTEM_CNI}`,
});

/** A dual-stack TCP and UDP server (one socket per protocol on ::, IPv4 as ::ffff:a.b.c.d): "<name> <peer>". */
const SERVER = `
const net = require('net'), dgram = require('dgram');
const [name, port] = process.argv.slice(1);
const peer = (a, p) => (a.startsWith('::ffff:') ? a.slice(7) : a.includes(':') ? '[' + a + ']' : a) + ':' + p;
let ready = 0; const up = () => { if (++ready === 2) process.stdout.write('ready\\n'); };
net.createServer((s) => s.end(name + ' ' + peer(s.remoteAddress, s.remotePort))).listen({ port: Number(port), host: '::', ipv6Only: false }, up);
const u = dgram.createSocket({ type: 'udp6', ipv6Only: false });
u.on('message', (m, r) => u.send(name + ' ' + peer(r.address, r.port), r.port, r.address));
u.bind(Number(port), '::', up);
`;

/** A connected UDP6 socket with IPV6_DSTOPTS set (8 bytes: PadN): "ok", "error <code>" or "timeout". */
const DSTOPTS_UDP_CLIENT = `
import errno, socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_DSTOPTS, bytes([0, 0, 1, 4, 0, 0, 0, 0]))
s.settimeout(2)
s.connect((sys.argv[1], int(sys.argv[2])))
try:
    s.send(b'hello'); s.recv(100); print('ok')
except socket.timeout:
    print('timeout')
except OSError as e:
    print('error ' + errno.errorcode.get(e.errno, str(e.errno)))
`;

/** sluice_podaddr's key: the netns cookie. */
const u64Codec: Codec<bigint> = {
  size: 8,
  encode: (v, buf = Buffer.alloc(8), off = 0) => { buf.writeBigUInt64LE(v, off); return buf; },
  decode: (buf, off = 0) => buf.readBigUInt64LE(off),
};

const bracket = (a: string) => (a.includes(':') ? `[${a}]` : a);

function request(proto: 'tcp' | 'udp', host: string, port: number): string {
  const r = spawnSync('ip', ['netns', 'exec', podNs.client, process.execPath, '-e', CLIENT_SCRIPT, '--', proto, host, String(port)], { encoding: 'utf8', timeout: 5000 });
  return r.stdout.trim();
}

async function startServer(pod: keyof typeof podNs, name: string, port: number): Promise<void> {
  const server = spawn('ip', ['netns', 'exec', podNs[pod], process.execPath, '-e', SERVER, '--', name, String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(server);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start within 5s`)), 5000);
    server.stdout!.once('data', () => { clearTimeout(timer); resolve(); });
  });
}

function hostVeth(result: CniResult): string {
  for (const i of result.interfaces ?? []) {
    if (i.sandbox) continue;
    const [link] = JSON.parse(execFileSync('ip', ['-n', nodeNs, '-j', '-d', 'link', 'show', 'dev', i.name], { encoding: 'utf8' })) as Array<{ linkinfo?: { info_kind?: string } }>;
    if (link?.linkinfo?.info_kind === 'veth') return i.name;
  }
  throw new Error(`no host veth in ${JSON.stringify(result.interfaces)}`);
}

before(async () => {
  fs.mkdirSync(binDir);
  fs.symlinkSync(PLUGIN, path.join(binDir, 'sluice'));
  for (const n of [nodeNs, ...Object.values(podNs)]) {
    execFileSync('ip', ['netns', 'add', n]);
    execFileSync('ip', ['-n', n, 'link', 'set', 'lo', 'up']);
    // No duplicate address detection: addresses usable at once (nothing else is on these links).
    for (const k of ['all', 'default']) execFileSync('ip', ['netns', 'exec', n, 'sysctl', '-qw', `net.ipv6.conf.${k}.accept_dad=0`]);
  }
  for (const s of ['net.ipv4.ip_forward=1', 'net.ipv4.conf.all.send_redirects=0', 'net.ipv6.conf.all.forwarding=1']) {
    execFileSync('ip', ['netns', 'exec', nodeNs, 'sysctl', '-qw', s]);
  }
  h = TcHarness.create('sluice-dse2e');
  v6 = new Tc6Maps(h);
  writeTcConfig(h.tc.config, {});
  list = podNetworkConfList({
    name: `slds-${suffix}`, bridge: `slds${suffix}`, ipamDataDir: path.join(workDir, 'ipam'),
    podCidr: '198.18.99.0/24', serviceCidr: '198.19.96.0/24', clusterCidr: '198.18.99.0/24', nodeCidr: '198.18.98.0/24',
    podCidr6: 'fd00:99:1::/64', serviceCidr6: 'fd00:96::/112', clusterCidr6: 'fd00:99::/48', nodeCidr6: 'fd00:98::/64',
    extraPlugins: [{ type: 'sluice', mode: 'per-packet', bpffs: h.pinDir }],
  });
});

after(async () => {
  for (const c of children) if (c.exitCode === null && c.pid) c.kill('SIGKILL');
  for (const pod of Object.keys(podNs) as Array<keyof typeof podNs>) {
    if (results[pod]) await cniDel(list, inv(pod), results[pod]).catch(() => undefined);
  }
  for (const n of [...Object.values(podNs), nodeNs]) spawnSync('ip', ['netns', 'del', n]);
  h?.close();
  fs.rmSync(workDir, { recursive: true, force: true });
});

describe('dual-stack pods through the CNI chain (host-local with an IPv4 and an IPv6 range)', () => {
  test('ADD: both addresses in prevResult, both recorded in sluice_podaddr, the programs attached once per direction', async () => {
    for (const pod of ['client', 'server'] as const) {
      results[pod] = await cniAdd(list, inv(pod));
      const v6addr = podIPv6(results[pod]!);
      assert.ok(v6addr, `an IPv6 address for ${pod}: ${JSON.stringify(results[pod]!.ips)}`);
      addr[pod] = { v4: podIPv4(results[pod]!), v6: v6addr };
    }
    const podAddr = new TypedMap(BpfMap.fromPinned(path.join(h.pinDir, abi.SLUICE_MAP_POD_ADDR)), u64Codec, abi.lb_pod_addrCodec);
    try {
      const rows = [...podAddr.entries()].map(([, v]) => v);
      for (const pod of ['client', 'server'] as const) {
        const row = rows.find((v) => v.address4 === ip4ToNumber(addr[pod].v4));
        assert.ok(row, `${pod}'s IPv4 address recorded: ${JSON.stringify(rows.map((v) => v.address4))}`);
        assert.equal(row.flags, abi.LB_POD_ADDR_HAS4 | abi.LB_POD_ADDR_HAS6, 'both families flagged');
        assert.equal(bytesToIp6(row.address6), addr[pod].v6, `${pod}'s IPv6 address recorded next to it`);
      }
    } finally {
      podAddr.map.close();
    }
    // One tcx link per direction on the host veth, for both families (this bpftool lists no tcx in `net show`).
    const pins = fs.readdirSync(path.join(h.pinDir, 'links')).sort();
    for (const pod of ['client', 'server'] as const) {
      const dev = hostVeth(results[pod]!);
      const [link] = JSON.parse(execFileSync('ip', ['-n', nodeNs, '-j', 'link', 'show', 'dev', dev], { encoding: 'utf8' })) as Array<{ ifindex: number }>;
      const mine = pins.filter((p) => p.startsWith(`pod-${inv(pod).containerId}-`));
      assert.deepEqual(mine, ['ingress', 'egress'].map((d) => `pod-${inv(pod).containerId}-eth0-${d}`).sort(), `${pod}: ${pins.join(' ')}`);
      for (const pin of mine) {
        const l = BpfLink.fromPinned(path.join(h.pinDir, 'links', pin));
        try {
          const info = l.info();
          assert.equal(info.type, 11, 'a tcx link');
          assert.equal(info.ifindex, link!.ifindex, `${pin} on ${dev}`);
        } finally {
          l.close();
        }
      }
    }
  });

  test('the client pod reaches an IPv4 and an IPv6 ClusterIP over TCP and UDP; the backend sees the pod\'s own address', async () => {
    await startServer('server', 'srv', 8080);
    for (const proto of ['tcp', 'udp'] as const) {
      h.upsertFrontend({ address: VIP4, port: 80, proto, flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 61, backends: [{ id: 61, address: addr.server.v4, port: 8080, local: true }] });
      v6.upsertFrontend({ address: VIP6, port: 80, proto, flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 62, backends: [{ id: 62, address: addr.server.v6, port: 8080, local: true }] });
      assert.match(request(proto, VIP4, 80), new RegExp(`^srv ${addr.client.v4.replace(/\./g, '\\.')}:\\d+$`), `${proto} via ${VIP4}`);
      assert.match(request(proto, VIP6, 80), new RegExp(`^srv \\[${addr.client.v6}\\]:\\d+$`), `${proto} via [${VIP6}]`);
    }
    const pod6 = [...v6.conntrack.entries()].filter(([, e]) => e.flags & abi.LB_CT_FLAG_POD);
    assert.ok(pod6.length >= 4, `IPv6 pod flows in sluice_ct6 (both entries of each): ${pod6.length}`);
  });

  test('hairpin: the client pod reaches itself through an IPv4 and an IPv6 Service and sees the ClusterIP as its peer', async () => {
    await startServer('client', 'self', 8081);
    for (const proto of ['tcp', 'udp'] as const) {
      h.upsertFrontend({ address: VIP4, port: 81, proto, flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 63, backends: [{ id: 63, address: addr.client.v4, port: 8081, local: true }] });
      v6.upsertFrontend({ address: VIP6, port: 81, proto, flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 64, backends: [{ id: 64, address: addr.client.v6, port: 8081, local: true }] });
      for (const vip of [VIP4, VIP6]) {
        assert.match(request(proto, vip, 81), new RegExp(`^self ${bracket(vip).replace(/[.[\]]/g, '\\$&')}:\\d+$`), `${proto} hairpin via ${vip}`);
      }
    }
  });

  test('an IPv6 Service without endpoints: TCP connect fails at once with ECONNREFUSED (ICMPv6 port unreachable)', () => {
    v6.upsertFrontend({ address: VIP6, port: 82, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 65, backends: [] });
    // Within the client's 2 s limit (else it prints "timeout"): no SYN retransmission was needed.
    assert.equal(request('tcp', VIP6, 82), 'error ECONNREFUSED');
  });

  test('a UDP socket whose packets carry a destination-options header gets ECONNREFUSED too (the ICMPv6 quotes past the header)', () => {
    v6.upsertFrontend({ address: VIP6, port: 83, proto: 'udp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 66, backends: [] });
    // An 8-byte destination-options header (PadN) between IPv6 and UDP: a
    // 48-byte quote (IPv6 header + 8 bytes) would end before the UDP header
    // and the kernel could not match the error to the socket (RFC 4443 2.4 (c)).
    assert.equal(spawnSync('ip', ['netns', 'exec', podNs.client, 'python3', '-c', DSTOPTS_UDP_CLIENT, VIP6, '83'], { encoding: 'utf8', timeout: 5000 }).stdout.trim(), 'error ECONNREFUSED');
  });

  test('non-Service IPv6 (pod to pod directly) passes untouched', () => {
    assert.match(request('tcp', addr.server.v6, 8080), new RegExp(`^srv \\[${addr.client.v6}\\]:\\d+$`));
    assert.match(request('udp', addr.server.v6, 8080), new RegExp(`^srv \\[${addr.client.v6}\\]:\\d+$`));
  });
});
