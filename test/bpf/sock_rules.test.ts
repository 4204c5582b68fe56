// The socket path's safety rules in the real kernel (issue 10, item 4):
// socketLB mode (host namespace only / pod namespaces only), ExternalIPs of
// other nodes not captured at the socket (CVE-2020-8554), and binds that
// would shadow a NodePort/ExternalIP/LoadBalancer frontend refused.
// The "host" namespace is the test's own netns (its cookie is written into
// the config map): the machine's root namespace is never involved.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, labScript } from '../helpers/sandbox';
import { installSockLb } from '../../src/datapath/sockLb';
import { openSockLbMaps, readCounter, type SockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';
import { netnsCookieOf, ownNetnsCookie } from '../../src/datapath/netnsCookie';
import { syncNodeAddresses, type SocketLbMode } from '../../src/datapath/sockConfig';
import * as abi from '../../src/abi/generated';

const NODE_IP = '198.18.16.1';        // this "node"'s address, on lo of the host netns
const LOCAL_EXT_IP = '198.18.16.2';   // an ExternalIP that is this node's address
const REMOTE_EXT_IP = '198.18.17.9';  // an ExternalIP of some other node: no route here
const LB_IP = '198.18.17.10';         // a LoadBalancer ingress IP: no route here
const CLUSTER_IP = '10.96.0.50';
const BACKEND = (i: number) => `198.18.16.${10 + i}`;

let sb: Sandbox;
let podNetns: string;
let hostCookie: bigint;
let maps: SockLbMaps;

function install(mode: SocketLbMode): void {
  installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, socketLb: { mode, hostNetnsCookie: hostCookie } });
}

const frontend = (address: string, port: number, proto: 'tcp' | 'udp', flags: number): FrontendSpec => ({
  address, port, proto, scope: 'external', flags, affinityTimeout: 0,
  backends: [0, 1, 2].map((i) => ({ address: BACKEND(i), port: 5353, proto })),
});

/** One connected-UDP connect() to address:port from netns: 'vip' when translated (getpeername shows the frontend), else the errno. */
async function connectFrom(netns: string, address: string, port: number): Promise<string> {
  const out = JSON.parse(await sb.runInCgroup(['node', labScript('rawSock'), 'stress', address, String(port), '5000', '1'], 30000, netns)) as {
    count: number; refused: number; wrongPeers: Record<string, number>; errors: Record<string, number>;
  };
  if (out.refused) return 'ECONNREFUSED';
  const errors = Object.keys(out.errors);
  if (errors.length) return errors.join(',');
  const wrong = Object.keys(out.wrongPeers);
  return wrong.length ? `peer ${wrong.join(',')}` : 'vip';
}

async function bindFrom(netns: string, proto: 'tcp' | 'udp', address: string, port: number): Promise<string> {
  const out = JSON.parse(await sb.runInCgroup(['node', labScript('rawSock'), 'bind', proto, address, String(port)], 30000, netns)) as { result: string };
  return out.result;
}

const counter = (name: string) => readCounter(maps.counters, (abi as unknown as Record<string, number>)[name]!);

before(() => {
  sb = Sandbox.create('sluice-skrule');
  podNetns = sb.addNetns('pod');
  for (const ns of [sb.netns, podNetns]) {
    // Backends reachable from both namespaces (connected UDP needs a route, nothing more).
    sb.execInNetns(['ip', 'addr', 'add', '198.18.16.254/24', 'dev', 'lo'], ns);
  }
  sb.ip(['addr', 'add', `${NODE_IP}/32`, 'dev', 'lo']);
  sb.ip(['addr', 'add', `${LOCAL_EXT_IP}/32`, 'dev', 'lo']);
  hostCookie = netnsCookieOf(`/run/netns/${sb.netns}`);
  install('all');
  maps = openSockLbMaps(sb.bpffs);
  const p = LbProgrammer.adopt(maps);
  const r = p.apply([
    frontend(CLUSTER_IP, 53, 'udp', abi.LB_SVC_FLAG_CLUSTER_IP),
    frontend(NODE_IP, 30080, 'tcp', abi.LB_SVC_FLAG_NODEPORT),
    frontend(NODE_IP, 30081, 'udp', abi.LB_SVC_FLAG_NODEPORT),
    frontend(LOCAL_EXT_IP, 80, 'tcp', abi.LB_SVC_FLAG_EXTERNAL_IP),
    frontend(LOCAL_EXT_IP, 53, 'udp', abi.LB_SVC_FLAG_EXTERNAL_IP),
    frontend(REMOTE_EXT_IP, 53, 'udp', abi.LB_SVC_FLAG_EXTERNAL_IP),
    frontend(LB_IP, 53, 'udp', abi.LB_SVC_FLAG_LOADBALANCER),
  ], { prune: false });
  assert.equal(r.failures.length, 0);
  syncNodeAddresses(maps.nodeIps, [NODE_IP, LOCAL_EXT_IP, 'fd00::1']);
});

after(() => {
  maps?.close();
  sb?.close();
});

test('4a: the host netns cookie is the test namespace\'s own, not the machine\'s', () => {
  assert.notEqual(hostCookie, ownNetnsCookie(), 'the test runner runs in the machine\'s namespace');
  assert.equal(maps.sockConfig.get(0)?.host_netns_cookie, hostCookie);
});

test('4a: socketLB all / hostNamespaceOnly / podNamespacesOnly decide which namespaces are translated', async () => {
  const seen: Record<string, { host: string; pod: string }> = {};
  for (const mode of ['all', 'hostNamespaceOnly', 'podNamespacesOnly'] as const) {
    install(mode);
    seen[mode] = { host: await connectFrom(sb.netns, CLUSTER_IP, 53), pod: await connectFrom(podNetns, CLUSTER_IP, 53) };
  }
  install('all');
  // Not translated: the ClusterIP has no route in either namespace.
  assert.deepEqual(seen, {
    all: { host: 'vip', pod: 'vip' },
    hostNamespaceOnly: { host: 'vip', pod: 'ENETUNREACH' },
    podNamespacesOnly: { host: 'ENETUNREACH', pod: 'vip' },
  });
});

test('4b: an ExternalIP that is not this node\'s address passes untouched; one that is, and LoadBalancer IPs, are translated', async () => {
  const passed = counter('LB_CNT_SOCK_EXTIP_PASSED');
  assert.equal(await connectFrom(podNetns, REMOTE_EXT_IP, 53), 'ENETUNREACH', 'another node\'s ExternalIP must not be captured');
  assert.equal(await connectFrom(sb.netns, REMOTE_EXT_IP, 53), 'ENETUNREACH');
  assert.equal(counter('LB_CNT_SOCK_EXTIP_PASSED') - passed, 2n);
  assert.equal(await connectFrom(podNetns, LOCAL_EXT_IP, 53), 'vip');
  assert.equal(await connectFrom(podNetns, LB_IP, 53), 'vip');
  // The agent learns the address is this node's: translated from then on.
  syncNodeAddresses(maps.nodeIps, [NODE_IP, LOCAL_EXT_IP, REMOTE_EXT_IP]);
  try {
    assert.equal(await connectFrom(podNetns, REMOTE_EXT_IP, 53), 'vip');
  } finally {
    syncNodeAddresses(maps.nodeIps, [NODE_IP, LOCAL_EXT_IP]);
  }
});

test('4c: host binds to a NodePort, ExternalIP or LoadBalancer address:port are refused with EADDRINUSE; 0.0.0.0 on a NodePort too', async () => {
  const refused = counter('LB_CNT_SOCK_BIND_REFUSED');
  const got = {
    nodePort: await bindFrom(sb.netns, 'tcp', NODE_IP, 30080),
    wildcardNodePort: await bindFrom(sb.netns, 'tcp', '0.0.0.0', 30080),
    wildcardUdpNodePort: await bindFrom(sb.netns, 'udp', '0.0.0.0', 30081),
    externalIp: await bindFrom(sb.netns, 'tcp', LOCAL_EXT_IP, 80),
    // Allowed: other protocol or port, and any bind inside a pod's namespace.
    otherProto: await bindFrom(sb.netns, 'udp', NODE_IP, 30080),
    otherPort: await bindFrom(sb.netns, 'tcp', '0.0.0.0', 30082),
    clusterIpPortOnNode: await bindFrom(sb.netns, 'udp', NODE_IP, 53),
    podWildcard: await bindFrom(podNetns, 'tcp', '0.0.0.0', 30080),
  };
  assert.deepEqual(got, {
    nodePort: 'EADDRINUSE',
    wildcardNodePort: 'EADDRINUSE',
    wildcardUdpNodePort: 'EADDRINUSE',
    externalIp: 'EADDRINUSE',
    otherProto: 'ok',
    otherPort: 'ok',
    clusterIpPortOnNode: 'ok',
    podWildcard: 'ok',
  });
  assert.equal(counter('LB_CNT_SOCK_BIND_REFUSED') - refused, 4n);
});
