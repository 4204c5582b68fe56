// loadBalancerSourceRanges on the IPv6 socket path (issue 14): the twin of
// test/bpf/sock_src_range.test.ts for AF_INET6 sockets. kube-proxy's firewall
// chain (ip6tables/nftables ip6) drops a connection to an IPv6 LoadBalancer IP
// whose source is outside the Service's IPv6 ranges, for clients on the node
// and in pods too; ClusterIPs are not filtered. connect6()/sendmsg6() must not
// be a way around that: they fail with EHOSTUNREACH, as connect4()/sendmsg4()
// do. Source: the socket's bound address; an unbound socket of the host netns
// is judged by the node's IPv6 addresses (sluice_nodeip6), one of a pod netns
// by the IPv6 pod address the CNI plugin recorded for that netns at ADD
// (sluice_podaddr address6; refused, counted apart, when there is none).
// Real sockets in a throwaway cgroup + netns pair; the "host" namespace is the
// test's own netns (its cookie is in the config map). Addresses are fd00::/8.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { Sandbox, sluiceBin, waitFor } from '../helpers/sandbox';
import { installSockLb } from '../../src/datapath/sockLb';
import { openSockLbMaps, readCounter, type SockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';
import { netnsCookieOf } from '../../src/datapath/netnsCookie';
import { syncNodeAddresses6 } from '../../src/datapath/sockConfig';
import { BpfMap } from '../../src/bpf';
import { TypedMap, u32Codec } from '../../src/datapath/typedMap';
import type { EventView } from '../../src/cli/monitor';
import type { TraceResult } from '../../src/cli/trace';
import * as abi from '../../src/abi/generated';

const NODE_IP = 'fd00:22::1';      // the "node"'s IPv6 address (host netns)
const POD_IN = 'fd00:23::5';       // a pod address inside the ranges
const POD_OUT = 'fd00:24::5';      // a pod address outside them
const LB_IP = 'fd00:25::10';       // LoadBalancer ingress IP: no route anywhere here
const CLUSTER_IP = 'fd00:96::70';  // the same Service's ClusterIP
const BACKEND = (i: number) => `fd00:22::${10 + i}`;
// IPv4 through a dual-stack socket (::ffff:a.b.c.d) is judged by the IPv4 rule.
const POD_IN4 = '198.18.23.5';
const POD_OUT4 = '198.18.24.5';
const LB_IP4 = '198.18.25.10';

let sb: Sandbox;
let podNetns: string;
let maps: SockLbMaps;

const frontend = (address: string, port: number, flags: number, sourceRanges?: string[]): FrontendSpec => ({
  address, port, proto: 'udp', scope: 'external', flags, affinityTimeout: 0, sourceRanges,
  backends: [0, 1].map((i) => ({ address: address.includes(':') ? BACKEND(i) : `198.18.22.${10 + i}`, port: 5353, proto: 'udp' as const })),
});

/**
 * A UDP6 socket in netns, bound to source ('-': unbound), connected to
 * [address]:port ('connect': connect6) or sent one datagram ('send':
 * sendmsg6): 'frontend' when translated (getpeername shows the frontend) or
 * sent, else the errno code.
 */
async function from(netns: string, source: string, address: string, port: number, op: 'connect' | 'send' = 'connect'): Promise<string> {
  const act = op === 'connect'
    ? `s.connect(${port},'${address}',e=>{if(e)return done(e.code);const r=s.remoteAddress();done(r.address==='${address}'&&r.port===${port}?'frontend':r.address+'/'+r.port)})`
    : `s.send(Buffer.from('x'),${port},'${address}',e=>done(e?e.code:'frontend'))`;
  const script = `const s=require('dgram').createSocket({type:'udp6',ipv6Only:${!address.startsWith('::ffff:')}});const done=r=>{console.log(r);process.exit(0)};` +
    `s.on('error',e=>done(e.code));const go=()=>{${act}};` +
    (source === '-' ? 'go()' : `s.bind(0,'${source}',go)`);
  return (await sb.runInCgroup(['node', '-e', script], 30000, netns)).trim();
}

const counter = (index: number) => readCounter(maps.counters, index);

before(() => {
  sb = Sandbox.create('sluice-sock6-srcrng');
  podNetns = sb.addNetns('pod');
  for (const ns of [sb.netns, podNetns]) {
    sb.execInNetns(['sysctl', '-q', '-w', 'net.ipv6.conf.all.disable_ipv6=0'], ns);
    // A route to the backends (connected UDP needs one, nothing more).
    sb.execInNetns(['ip', 'addr', 'add', 'fd00:22::fe/64', 'dev', 'lo', 'nodad'], ns);
    sb.execInNetns(['ip', 'addr', 'add', '198.18.22.254/24', 'dev', 'lo'], ns);
  }
  for (const a of [POD_IN4, POD_OUT4]) sb.execInNetns(['ip', 'addr', 'add', `${a}/32`, 'dev', 'lo'], podNetns);
  sb.ip(['addr', 'add', `${NODE_IP}/128`, 'dev', 'lo', 'nodad']);
  for (const a of [POD_IN, POD_OUT]) sb.execInNetns(['ip', 'addr', 'add', `${a}/128`, 'dev', 'lo', 'nodad'], podNetns);
  installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, socketLb: { mode: 'all', hostNetnsCookie: netnsCookieOf(`/run/netns/${sb.netns}`) } });
  maps = openSockLbMaps(sb.bpffs);
  assert.ok(maps.v6?.sourceRanges, 'the socket object pins sluice_srcrng6');
  const ranged = abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE;
  const r = LbProgrammer.adopt(maps).apply([
    // Ranges without the node: only POD_IN may use port 53.
    frontend(LB_IP, 53, ranged, ['fd00:23::/64']),
    // Ranges with the node's address: the node's own unbound sockets may.
    frontend(LB_IP, 54, ranged, ['fd00:22::/64', 'fd00:23::/64']),
    // No ranges: everyone.
    frontend(LB_IP, 55, abi.LB_SVC_FLAG_LOADBALANCER),
    // The Service's ClusterIP: kube-proxy's firewall chain is for the LB IP only.
    frontend(CLUSTER_IP, 53, abi.LB_SVC_FLAG_CLUSTER_IP),
    frontend(LB_IP4, 53, ranged, ['198.18.23.0/24']),
  ], { prune: false });
  assert.deepEqual(r.failures, []);
  syncNodeAddresses6(maps.v6!.nodeIps, [NODE_IP]);
});

after(() => {
  maps?.close();
  sb?.close();
});

test('IPv6: a LoadBalancer IP with source ranges: only sources inside them are translated (connect6 and sendmsg6); the rest get EHOSTUNREACH', async () => {
  const outside = counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP);
  const seen = {
    podBoundInside: await from(podNetns, POD_IN, LB_IP, 53),
    podBoundOutside: await from(podNetns, POD_OUT, LB_IP, 53),
    hostUnboundNodeOutside: await from(sb.netns, '-', LB_IP, 53),
    hostBoundNodeOutside: await from(sb.netns, NODE_IP, LB_IP, 53),
    hostUnboundNodeInside: await from(sb.netns, '-', LB_IP, 54),
    podBoundInsidePort54: await from(podNetns, POD_IN, LB_IP, 54),
    noRanges: await from(podNetns, POD_OUT, LB_IP, 55),
    clusterIpFromOutside: await from(podNetns, POD_OUT, CLUSTER_IP, 53),
    sendmsgBoundInside: await from(podNetns, POD_IN, LB_IP, 53, 'send'),
    sendmsgBoundOutside: await from(podNetns, POD_OUT, LB_IP, 53, 'send'),
  };
  assert.deepEqual(seen, {
    podBoundInside: 'frontend',
    podBoundOutside: 'EHOSTUNREACH',
    hostUnboundNodeOutside: 'EHOSTUNREACH',
    hostBoundNodeOutside: 'EHOSTUNREACH',
    hostUnboundNodeInside: 'frontend',
    podBoundInsidePort54: 'frontend',
    noRanges: 'frontend',
    clusterIpFromOutside: 'frontend',
    sendmsgBoundInside: 'frontend',
    sendmsgBoundOutside: 'EHOSTUNREACH',
  });
  assert.equal(counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP) - outside, 4n);
});

test('IPv4 through a dual-stack socket: ::ffff:LB-IP is judged by the IPv4 ranges and the socket\'s IPv4 source', async () => {
  const outside = counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP);
  assert.deepEqual({
    inside: await from(podNetns, `::ffff:${POD_IN4}`, `::ffff:${LB_IP4}`, 53),
    outside: await from(podNetns, `::ffff:${POD_OUT4}`, `::ffff:${LB_IP4}`, 53),
    sendmsgInside: await from(podNetns, `::ffff:${POD_IN4}`, `::ffff:${LB_IP4}`, 53, 'send'),
  }, { inside: 'frontend', outside: 'EHOSTUNREACH', sendmsgInside: 'frontend' });
  assert.equal(counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP) - outside, 1n);
});

test('IPv6: an unbound pod socket whose netns has no recorded address is refused on a ranged LB IP, and counted apart', async () => {
  const unknown = counter(abi.LB_CNT_SOCK_SRC_RANGE_UNKNOWN);
  assert.equal(await from(podNetns, '-', LB_IP, 53), 'EHOSTUNREACH');
  assert.equal(await from(podNetns, '-', LB_IP, 55), 'frontend', 'no ranges: not affected');
  assert.equal(counter(abi.LB_CNT_SOCK_SRC_RANGE_UNKNOWN) - unknown, 1n);
});

// The CNI plugin (socket mode: it attaches nothing) run as a runtime would,
// from the "host" namespace, for a pod whose network namespace is netns.
const PLUGIN = path.resolve(__dirname, '../../../build/sluice-cni');
function cni(command: 'ADD' | 'DEL', netns: string, containerId: string, ips: string[]): void {
  const prevResult = { cniVersion: '1.0.0', interfaces: [{ name: 'eth0', sandbox: `/run/netns/${netns}` }], ips: ips.map((address) => ({ address, interface: 0 })) };
  const r = spawnSync('nsenter', [`--net=/run/netns/${sb.netns}`, PLUGIN], {
    input: JSON.stringify({ cniVersion: '1.0.0', name: 'srcrng6', type: 'sluice', mode: 'socket', bpffs: sb.bpffs, prevResult }),
    encoding: 'utf8', timeout: 10000,
    env: { PATH: process.env.PATH, CNI_COMMAND: command, CNI_CONTAINERID: containerId, CNI_NETNS: `/run/netns/${netns}`, CNI_IFNAME: 'eth0', CNI_PATH: '/nonexistent' },
  });
  assert.equal(r.status, 0, `${command}: ${r.stdout}${r.stderr}`);
}

test('IPv6: an unbound pod socket is judged by the IPv6 pod IP the CNI plugin recorded for its netns; an IPv4-only pod is unknown', async () => {
  const other = sb.addNetns('pod2');
  const v4only = sb.addNetns('pod3');
  for (const ns of [other, v4only]) {
    sb.execInNetns(['sysctl', '-q', '-w', 'net.ipv6.conf.all.disable_ipv6=0'], ns);
    sb.execInNetns(['ip', 'addr', 'add', 'fd00:22::fe/64', 'dev', 'lo', 'nodad'], ns);
  }
  const refused = { outside: counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP), unknown: counter(abi.LB_CNT_SOCK_SRC_RANGE_UNKNOWN) };
  // Dual-stack pods (the IPv4 address is inside no IPv6 range: only address6 counts here).
  cni('ADD', podNetns, 'srcrng6-in', ['198.18.24.5/24', `${POD_IN}/64`]);
  cni('ADD', other, 'srcrng6-out', ['198.18.23.5/24', `${POD_OUT}/64`]);
  cni('ADD', v4only, 'srcrng6-v4', ['198.18.23.6/24']);
  try {
    const seen = {
      podInside: await from(podNetns, '-', LB_IP, 53),
      podOutside: await from(other, '-', LB_IP, 53),
      podInsideBoundOutside: await from(podNetns, POD_OUT, LB_IP, 53),
      podIpv4Only: await from(v4only, '-', LB_IP, 53),
      podInsideSendmsg: await from(podNetns, '-', LB_IP, 53, 'send'),
      podOutsideSendmsg: await from(other, '-', LB_IP, 53, 'send'),
    };
    assert.deepEqual(seen, {
      podInside: 'frontend', podOutside: 'EHOSTUNREACH', podInsideBoundOutside: 'EHOSTUNREACH',
      podIpv4Only: 'EHOSTUNREACH', podInsideSendmsg: 'frontend', podOutsideSendmsg: 'EHOSTUNREACH',
    });
    assert.equal(counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP) - refused.outside, 3n);
    assert.equal(counter(abi.LB_CNT_SOCK_SRC_RANGE_UNKNOWN) - refused.unknown, 1n);
  } finally {
    cni('DEL', podNetns, 'srcrng6-in', []);
    cni('DEL', other, 'srcrng6-out', []);
    cni('DEL', v4only, 'srcrng6-v4', []);
  }
});

function listenerOf(bpffs: string): number {
  const m = BpfMap.fromPinned(`${bpffs}/${abi.SLUICE_MAP_EVENTS_ON}`);
  try {
    return new TypedMap(m, u32Codec, abi.lb_events_ctlCodec).get(0)?.listener_pid ?? -1;
  } finally {
    m.close();
  }
}

test('IPv6: `sluice monitor` shows a source-range refusal with its reason and the [frontend]:port', async () => {
  const child: ChildProcess = spawn(sluiceBin, ['monitor', '--bpffs', sb.bpffs, '-o', 'json', '--duration', '20', '--type', 'refused', '--count', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  let out = '';
  child.stdout!.on('data', (d) => { out += String(d); });
  try {
    await waitFor('monitor to claim the listener flag', () => listenerOf(sb.bpffs) > 0);
    assert.equal(await from(podNetns, POD_OUT, LB_IP, 53), 'EHOSTUNREACH');
    assert.equal(await exited, 0);
    const e = JSON.parse(out.trim().split('\n')[0]!) as EventView;
    assert.deepEqual([e.type, e.reason, e.frontend, e.proto], ['refused', 'socket/source_range_drop/original', `[${LB_IP}]:53`, 'udp']);
  } finally {
    child.kill();
  }
});

test('IPv6: `sluice trace` on the socket path gives the verdict connect6() gets for a source outside the ranges', () => {
  const trace = (client: string, port: number) => JSON.parse(spawnSync(sluiceBin, ['trace', client, `[${LB_IP}]:${port}/udp`, '-o', 'json', '--bpffs', sb.bpffs], { encoding: 'utf8' }).stdout) as TraceResult;
  const out = trace(POD_OUT, 53);
  assert.deepEqual(out.sourceRange, { applies: true, allowed: false, enforced: true });
  assert.deepEqual([out.verdict.action, out.verdict.counter], ['refuse', 'socket/source_range_drop/original']);
  assert.match(out.verdict.reason, /EHOSTUNREACH/);
  const inside = trace(POD_IN, 53);
  assert.deepEqual([inside.sourceRange?.allowed, inside.verdict.action], [true, 'translate']);
});
