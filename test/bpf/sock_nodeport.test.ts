// NodePort frontends as one wildcard entry per port (address 0.0.0.0,
// bpf/lib/nodeport.h) on the socket path, in the real kernel: a connect()
// or sendmsg() to any address NodePorts listen on (sluice_nodeip4) is
// translated and getpeername()/recvmsg() show the address the client used;
// other addresses are left alone; an address removed from the map stops
// being one; binds that would shadow the NodePort are refused; an exact
// frontend on a node address (an ExternalIP) wins over the wildcard, as
// kube-proxy's KUBE-NODEPORTS is its last rule.
// The "host" namespace is the test's own netns.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, labScript } from '../helpers/sandbox';
import { installSockLb } from '../../src/datapath/sockLb';
import { openSockLbMaps, type SockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';
import { netnsCookieOf } from '../../src/datapath/netnsCookie';
import { syncNodeAddresses } from '../../src/datapath/sockConfig';
import * as abi from '../../src/abi/generated';

// The node's NodePort addresses are in sluice_nodeip4 but have no route in the
// test's namespaces: a connect() to one succeeds only when translated (the
// backends are routed), else fails with ENETUNREACH. BIND_IP is on lo, for
// the bind checks.
const NODE_IPS = ['198.18.27.1', '198.18.27.2', '198.18.27.3'];
const BIND_IP = '198.18.26.1';
const OTHER = '198.18.27.99';         // not a node address: untranslated
const BACKEND = (i: number) => i === 3 ? '198.18.28.1' : `198.18.26.${10 + i}`; // 3: no route

let sb: Sandbox;
let podNetns: string;
let maps: SockLbMaps;

const frontend = (address: string, port: number, proto: 'tcp' | 'udp', flags: number, backends = [0, 1, 2]): FrontendSpec => ({
  address, port, proto, scope: 'external', flags, affinityTimeout: 0,
  backends: backends.map((i) => ({ address: BACKEND(i), port: 5353, proto })),
});

/** Connected UDP from netns, 100 datagrams: 'vip' when translated and every reply shows address:port, else what went wrong. */
async function connectFrom(netns: string, address: string, port: number): Promise<string> {
  const out = JSON.parse(await sb.runInCgroup(['node', labScript('rawSock'), 'stress', address, String(port), '100', '1'], 30000, netns)) as {
    refused: number; wrongPeers: Record<string, number>; errors: Record<string, number>;
  };
  if (out.refused) return 'ECONNREFUSED';
  const errors = Object.keys(out.errors);
  if (errors.length) return errors.join(',');
  const wrong = Object.keys(out.wrongPeers);
  return wrong.length ? `peer ${wrong.join(',')}` : 'vip';
}

async function bindFrom(proto: 'tcp' | 'udp', address: string, port: number): Promise<string> {
  const out = JSON.parse(await sb.runInCgroup(['node', labScript('rawSock'), 'bind', proto, address, String(port)], 30000, sb.netns)) as { result: string };
  return out.result;
}

before(() => {
  sb = Sandbox.create('sluice-sknp');
  podNetns = sb.addNetns('pod');
  for (const ns of [sb.netns, podNetns]) sb.execInNetns(['ip', 'addr', 'add', '198.18.26.254/24', 'dev', 'lo'], ns);
  sb.ip(['addr', 'add', `${BIND_IP}/32`, 'dev', 'lo']);
  installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, socketLb: { mode: 'all', hostNetnsCookie: netnsCookieOf(`/run/netns/${sb.netns}`) } });
  maps = openSockLbMaps(sb.bpffs);
  const r = LbProgrammer.adopt(maps).apply([
    frontend('0.0.0.0', 30090, 'udp', abi.LB_SVC_FLAG_NODEPORT),
    frontend('0.0.0.0', 30091, 'tcp', abi.LB_SVC_FLAG_NODEPORT),
    // An ExternalIP that is a node address, on the NodePort's port: its own backend.
    frontend(NODE_IPS[2]!, 30090, 'udp', abi.LB_SVC_FLAG_EXTERNAL_IP, [3]),
  ], { prune: false });
  assert.deepEqual(r.failures, []);
  syncNodeAddresses(maps.nodeIps, [...NODE_IPS, BIND_IP]);
});

after(() => {
  maps?.close();
  sb?.close();
});

test('one wildcard entry serves the NodePort on every node address, from the node and from pods; other addresses pass', async () => {
  const seen: Record<string, string> = {};
  for (const a of NODE_IPS.slice(0, 2)) {
    seen[`host ${a}`] = await connectFrom(sb.netns, a, 30090);
    seen[`pod ${a}`] = await connectFrom(podNetns, a, 30090);
  }
  seen.other = await connectFrom(sb.netns, OTHER, 30090);
  assert.deepEqual(seen, {
    [`host ${NODE_IPS[0]}`]: 'vip', [`pod ${NODE_IPS[0]}`]: 'vip',
    [`host ${NODE_IPS[1]}`]: 'vip', [`pod ${NODE_IPS[1]}`]: 'vip',
    other: 'ENETUNREACH', // untranslated
  });
  const masters = [...maps.services.entries()].filter(([, v]) => v.flags & abi.LB_SVC_FLAG_NODEPORT);
  assert.equal(masters.length, 2, 'one master per NodePort, not one per node address');
});

test('an address removed from sluice_nodeip4 is no longer a NodePort address', async () => {
  syncNodeAddresses(maps.nodeIps, [NODE_IPS[0]!, NODE_IPS[2]!, BIND_IP]);
  try {
    assert.equal(await connectFrom(sb.netns, NODE_IPS[1]!, 30090), 'ENETUNREACH');
    assert.equal(await connectFrom(sb.netns, NODE_IPS[0]!, 30090), 'vip');
  } finally {
    syncNodeAddresses(maps.nodeIps, [...NODE_IPS, BIND_IP]);
  }
});

test('an exact frontend on a node address wins over the NodePort wildcard', async () => {
  // Its only backend has no route: the connect() fails there, where the wildcard's would succeed.
  assert.equal(await connectFrom(sb.netns, NODE_IPS[2]!, 30090), 'ENETUNREACH');
  assert.equal(await connectFrom(sb.netns, NODE_IPS[0]!, 30090), 'vip', 'another node address: the wildcard');
});

test('binds that would shadow the wildcard NodePort are refused: 0.0.0.0 and each node address', async () => {
  assert.deepEqual({
    wildcard: await bindFrom('tcp', '0.0.0.0', 30091),
    nodeAddress: await bindFrom('tcp', BIND_IP, 30091),
    otherProto: await bindFrom('udp', BIND_IP, 30091),
    otherAddress: await bindFrom('tcp', '198.18.26.254', 30091),
  }, { wildcard: 'EADDRINUSE', nodeAddress: 'EADDRINUSE', otherProto: 'ok', otherAddress: 'ok' });
});
