// The socket path's rules for AF_INET6 sockets in the real kernel (issue 14):
// post_bind6 refuses binds that would shadow a NodePort, ExternalIP or
// LoadBalancer frontend (the post_bind4 rule; "::" on a dual-stack socket also
// covers IPv4 NodePorts, ::ffff:a.b.c.d asks the IPv4 table), and an IPv6
// ExternalIP that is not this node's address is not captured (CVE-2020-8554).
// The "host" namespace is the test's own netns; addresses are fd00::/8.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from '../helpers/sandbox';
import { installSockLb } from '../../src/datapath/sockLb';
import { openSockLbMaps, readCounter, type SockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';
import { netnsCookieOf } from '../../src/datapath/netnsCookie';
import { syncNodeAddresses, syncNodeAddresses6 } from '../../src/datapath/sockConfig';
import * as abi from '../../src/abi/generated';

const NODE_IP4 = '198.18.16.1';
const NODE_IP6 = 'fd00:16::1';
const LOCAL_EXT6 = 'fd00:16::2';   // an ExternalIP that is this node's address
const REMOTE_EXT6 = 'fd00:17::9';  // an ExternalIP of another node: no route here
const CLUSTER_IP6 = 'fd00:96::50';

let sb: Sandbox;
let podNetns: string;
let maps: SockLbMaps;

const frontend = (address: string, port: number, proto: 'tcp' | 'udp', flags: number): FrontendSpec => {
  const backend = address.includes(':') ? 'fd00:16::10' : '198.18.16.10';
  return { address, port, proto, scope: 'external', flags, affinityTimeout: 0, backends: [{ address: backend, port: 5353, proto }] };
};

/** bind() (listen for TCP) once inside the cgroup and netns: 'ok' or the errno code. */
async function bindFrom(netns: string, proto: 'tcp' | 'udp', address: string, port: number): Promise<string> {
  const script = proto === 'tcp'
    ? `const s=require('net').createServer();s.on('error',e=>{console.log(e.code);process.exit(0)});s.listen(${port},'${address}',()=>{console.log('ok');s.close()})`
    : `const s=require('dgram').createSocket({type:'udp6'});s.on('error',e=>{console.log(e.code);process.exit(0)});s.bind(${port},'${address}',()=>{console.log('ok');s.close()})`;
  return (await sb.runInCgroup(['node', '-e', script], 30000, netns)).trim();
}

/** A connected UDP socket to [address]:port: what getpeername() shows, or the errno code. */
async function connectFrom(netns: string, address: string, port: number): Promise<string> {
  const script = `const s=require('dgram').createSocket('udp6');s.on('error',e=>{console.log(e.code);process.exit(0)});` +
    `s.connect(${port},'${address}',e=>{if(e){console.log(e.code);process.exit(0)}const r=s.remoteAddress();console.log(r.address+'/'+r.port);s.close()})`;
  return (await sb.runInCgroup(['node', '-e', script], 30000, netns)).trim();
}

before(() => {
  sb = Sandbox.create('sluice-skrule6');
  podNetns = sb.addNetns('pod');
  for (const ns of [sb.netns, podNetns]) {
    sb.execInNetns(['sysctl', '-q', '-w', 'net.ipv6.conf.all.disable_ipv6=0'], ns);
    // A route to the backends (connected UDP needs one, nothing more).
    sb.execInNetns(['ip', 'addr', 'add', 'fd00:16::fe/64', 'dev', 'lo', 'nodad'], ns);
  }
  for (const a of [NODE_IP6, LOCAL_EXT6]) sb.ip(['addr', 'add', `${a}/128`, 'dev', 'lo', 'nodad']);
  sb.ip(['addr', 'add', `${NODE_IP4}/32`, 'dev', 'lo']);
  installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, socketLb: { mode: 'all', hostNetnsCookie: netnsCookieOf(`/run/netns/${sb.netns}`) } });
  maps = openSockLbMaps(sb.bpffs);
  const r = LbProgrammer.adopt(maps).apply([
    frontend(CLUSTER_IP6, 53, 'udp', abi.LB_SVC_FLAG_CLUSTER_IP),
    frontend(NODE_IP6, 30080, 'tcp', abi.LB_SVC_FLAG_NODEPORT),
    frontend(NODE_IP4, 30090, 'tcp', abi.LB_SVC_FLAG_NODEPORT),
    frontend(LOCAL_EXT6, 80, 'tcp', abi.LB_SVC_FLAG_EXTERNAL_IP),
    frontend(LOCAL_EXT6, 53, 'udp', abi.LB_SVC_FLAG_EXTERNAL_IP),
    frontend(REMOTE_EXT6, 53, 'udp', abi.LB_SVC_FLAG_EXTERNAL_IP),
  ], { prune: false });
  assert.deepEqual(r.failures, []);
  syncNodeAddresses(maps.nodeIps, [NODE_IP4]);
  assert.deepEqual(syncNodeAddresses6(maps.v6!.nodeIps, [NODE_IP6, LOCAL_EXT6, NODE_IP4]).added.sort(), [LOCAL_EXT6, NODE_IP6].sort());
});

after(() => {
  maps?.close();
  sb?.close();
});

test('post_bind6: host binds that shadow an IPv6 (or, through "::" and ::ffff:, an IPv4) NodePort/ExternalIP are refused with EADDRINUSE', async () => {
  const refused = readCounter(maps.counters, abi.LB_CNT_SOCK_BIND_REFUSED);
  const seen = {
    nodePort: await bindFrom(sb.netns, 'tcp', NODE_IP6, 30080),
    wildcardNodePort: await bindFrom(sb.netns, 'tcp', '::', 30080),
    wildcardIpv4NodePort: await bindFrom(sb.netns, 'tcp', '::', 30090),
    mappedIpv4NodePort: await bindFrom(sb.netns, 'tcp', `::ffff:${NODE_IP4}`, 30090),
    externalIp: await bindFrom(sb.netns, 'tcp', LOCAL_EXT6, 80),
    // Allowed: other protocol or port, a ClusterIP port on a node address, any bind in a pod's namespace.
    otherProto: await bindFrom(sb.netns, 'udp', NODE_IP6, 30080),
    otherPort: await bindFrom(sb.netns, 'tcp', '::', 30082),
    clusterIpPortOnNode: await bindFrom(sb.netns, 'udp', NODE_IP6, 53),
    podWildcard: await bindFrom(podNetns, 'tcp', '::', 30080),
  };
  assert.deepEqual(seen, {
    nodePort: 'EADDRINUSE', wildcardNodePort: 'EADDRINUSE', wildcardIpv4NodePort: 'EADDRINUSE', mappedIpv4NodePort: 'EADDRINUSE', externalIp: 'EADDRINUSE',
    otherProto: 'ok', otherPort: 'ok', clusterIpPortOnNode: 'ok', podWildcard: 'ok',
  });
  assert.equal(readCounter(maps.counters, abi.LB_CNT_SOCK_BIND_REFUSED) - refused, 5n, 'bind_refused counts each refusal once');
});

test('an IPv6 ExternalIP that is not this node\'s address passes untouched; this node\'s one and ClusterIPs are translated', async () => {
  const passed = readCounter(maps.counters, abi.LB_CNT_SOCK_EXTIP_PASSED);
  assert.equal(await connectFrom(podNetns, REMOTE_EXT6, 53), 'ENETUNREACH', 'another node\'s ExternalIP must not be captured');
  assert.equal(readCounter(maps.counters, abi.LB_CNT_SOCK_EXTIP_PASSED) - passed, 1n);
  assert.equal(await connectFrom(podNetns, LOCAL_EXT6, 53), `${LOCAL_EXT6}/53`);
  assert.equal(await connectFrom(podNetns, CLUSTER_IP6, 53), `${CLUSTER_IP6}/53`);
});
