// loadBalancerSourceRanges on the socket path (issue 11 item 1). kube-proxy
// drops a connection to a LoadBalancer IP whose source is outside the
// Service's ranges in its firewall chain, for clients on the node and in
// pods too; ClusterIPs are not filtered. The socket LB must not be a way
// around that: connect()/sendmsg() to the LB IP:port fail with EHOSTUNREACH
// (a socket cannot drop; the same answer as LB_SVC_FLAG_DROP_NO_BACKEND).
// Source: the socket's bound address; an unbound socket of the host netns is
// judged by the node's addresses (what kube-proxy sees for it), one of a pod
// netns by the pod address the CNI plugin recorded for that netns at ADD
// (sluice_podaddr; refused when there is none).
// Real sockets in a throwaway cgroup + netns pair; the "host" namespace is
// the test's own netns (its cookie is in the config map).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { BpfMap } from '../../src/bpf';
import { Sandbox, labScript } from '../helpers/sandbox';
import { installSockLb } from '../../src/datapath/sockLb';
import { openSockLbMaps, readCounter, type SockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';
import { netnsCookieOf } from '../../src/datapath/netnsCookie';
import { syncNodeAddresses } from '../../src/datapath/sockConfig';
import * as abi from '../../src/abi/generated';

const NODE_IP = '198.18.22.1';      // the "node"'s address (host netns)
const POD_IN = '198.18.23.5';       // a pod address inside the ranges
const POD_OUT = '198.18.24.5';      // a pod address outside them
const LB_IP = '198.18.25.10';       // LoadBalancer ingress IP: no route anywhere here
const CLUSTER_IP = '10.96.0.70';    // the same Service's ClusterIP
const BACKEND = (i: number) => `198.18.22.${10 + i}`;

let sb: Sandbox;
let podNetns: string;
let maps: SockLbMaps;

const frontend = (address: string, port: number, flags: number, sourceRanges?: string[]): FrontendSpec => ({
  address, port, proto: 'udp', scope: 'external', flags, affinityTimeout: 0, sourceRanges,
  backends: [0, 1].map((i) => ({ address: BACKEND(i), port: 5353, proto: 'udp' as const })),
});

/** Connected UDP from netns, bound to source ('-': unbound): 'frontend' when translated (getpeername shows it), else the errno. */
async function connectFrom(netns: string, source: string, address: string, port: number): Promise<string> {
  const out = JSON.parse(await sb.runInCgroup(['node', labScript('rawSock'), 'from', source, address, String(port)], 30000, netns)) as { result: string };
  return out.result === `${address}:${port}` ? 'frontend' : out.result;
}

const counter = (index: number) => readCounter(maps.counters, index);

before(() => {
  sb = Sandbox.create('sluice-sock2-srcrng');
  podNetns = sb.addNetns('pod');
  for (const ns of [sb.netns, podNetns]) sb.execInNetns(['ip', 'addr', 'add', '198.18.22.254/24', 'dev', 'lo'], ns);
  sb.ip(['addr', 'add', `${NODE_IP}/32`, 'dev', 'lo']);
  for (const a of [POD_IN, POD_OUT]) sb.execInNetns(['ip', 'addr', 'add', `${a}/32`, 'dev', 'lo'], podNetns);
  installSockLb({ bpffs: sb.bpffs, cgroupPath: sb.cgroup, socketLb: { mode: 'all', hostNetnsCookie: netnsCookieOf(`/run/netns/${sb.netns}`) } });
  maps = openSockLbMaps(sb.bpffs);
  const ranged = abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE;
  const r = LbProgrammer.adopt(maps).apply([
    // Ranges without the node: only POD_IN may use port 53.
    frontend(LB_IP, 53, ranged, ['198.18.23.0/24']),
    // Ranges with the node's address: the node's own unbound sockets may.
    frontend(LB_IP, 54, ranged, ['198.18.22.0/24', '198.18.23.0/24']),
    // No ranges: everyone.
    frontend(LB_IP, 55, abi.LB_SVC_FLAG_LOADBALANCER),
    // The Service's ClusterIP: kube-proxy's firewall chain is for the LB IP only.
    frontend(CLUSTER_IP, 53, abi.LB_SVC_FLAG_CLUSTER_IP),
  ], { prune: false });
  assert.deepEqual(r.failures, []);
  syncNodeAddresses(maps.nodeIps, [NODE_IP]);
});

after(() => {
  maps?.close();
  sb?.close();
});

test('a LoadBalancer IP with source ranges: only sources inside them are translated; the rest get EHOSTUNREACH', async () => {
  const outside = counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP);
  const seen = {
    podBoundInside: await connectFrom(podNetns, POD_IN, LB_IP, 53),
    podBoundOutside: await connectFrom(podNetns, POD_OUT, LB_IP, 53),
    hostUnboundNodeOutside: await connectFrom(sb.netns, '-', LB_IP, 53),
    hostBoundNodeOutside: await connectFrom(sb.netns, NODE_IP, LB_IP, 53),
    hostUnboundNodeInside: await connectFrom(sb.netns, '-', LB_IP, 54),
    podBoundInsidePort54: await connectFrom(podNetns, POD_IN, LB_IP, 54),
    noRanges: await connectFrom(podNetns, POD_OUT, LB_IP, 55),
    clusterIpFromOutside: await connectFrom(podNetns, POD_OUT, CLUSTER_IP, 53),
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
  });
  assert.equal(counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP) - outside, 3n);
});

test('an unbound pod socket (its source is not known at connect()) is refused on a ranged LB IP, and counted apart', async () => {
  const unknown = counter(abi.LB_CNT_SOCK_SRC_RANGE_UNKNOWN);
  assert.equal(await connectFrom(podNetns, '-', LB_IP, 53), 'EHOSTUNREACH');
  assert.equal(await connectFrom(podNetns, '-', LB_IP, 55), 'frontend', 'no ranges: not affected');
  assert.equal(counter(abi.LB_CNT_SOCK_SRC_RANGE_UNKNOWN) - unknown, 1n);
});

// The CNI plugin (socket mode: it attaches nothing) run as a runtime would,
// from the "host" namespace, for a pod whose network namespace is netns.
const PLUGIN = path.resolve(__dirname, '../../../build/sluice-cni');
function cni(command: 'ADD' | 'DEL', netns: string, containerId: string, podIp: string): void {
  const prevResult = { cniVersion: '1.0.0', interfaces: [{ name: 'eth0', sandbox: `/run/netns/${netns}` }], ips: [{ address: `${podIp}/24`, interface: 0 }, { address: '2001:db8::5/64', interface: 0 }] };
  const r = spawnSync('nsenter', [`--net=/run/netns/${sb.netns}`, PLUGIN], {
    input: JSON.stringify({ cniVersion: '1.0.0', name: 'srcrng', type: 'sluice', mode: 'socket', bpffs: sb.bpffs, prevResult }),
    encoding: 'utf8', timeout: 10000,
    env: { PATH: process.env.PATH, CNI_COMMAND: command, CNI_CONTAINERID: containerId, CNI_NETNS: `/run/netns/${netns}`, CNI_IFNAME: 'eth0', CNI_PATH: '/nonexistent' },
  });
  assert.equal(r.status, 0, `${command}: ${r.stdout}${r.stderr}`);
}

function podAddrEntries(): number {
  const m = BpfMap.fromPinned(path.join(sb.bpffs, abi.SLUICE_MAP_POD_ADDR));
  try {
    return [...m.keys()].length;
  } finally {
    m.close();
  }
}

test('an unbound pod socket is judged by the pod IP the CNI plugin recorded for its netns (what kube-proxy sees)', async () => {
  const otherNetns = sb.addNetns('pod2');
  sb.execInNetns(['ip', 'addr', 'add', '198.18.22.254/24', 'dev', 'lo'], otherNetns);
  const refused = { outside: counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP), unknown: counter(abi.LB_CNT_SOCK_SRC_RANGE_UNKNOWN) };
  cni('ADD', podNetns, 'srcrng-in', POD_IN);
  cni('ADD', otherNetns, 'srcrng-out', POD_OUT);
  assert.equal(podAddrEntries(), 2);
  const seen = {
    podInside: await connectFrom(podNetns, '-', LB_IP, 53),
    podOutside: await connectFrom(otherNetns, '-', LB_IP, 53),
    podOutsideBoundInside: await connectFrom(podNetns, POD_OUT, LB_IP, 53),
  };
  assert.deepEqual(seen, { podInside: 'frontend', podOutside: 'EHOSTUNREACH', podOutsideBoundInside: 'EHOSTUNREACH' });
  assert.equal(counter(abi.LB_CNT_SOCK_SRC_RANGE_DROP) - refused.outside, 2n);
  assert.equal(counter(abi.LB_CNT_SOCK_SRC_RANGE_UNKNOWN) - refused.unknown, 0n);
  // DEL removes the pod's entry (found by owner): back to "unknown".
  cni('DEL', podNetns, 'srcrng-in', POD_IN);
  cni('DEL', podNetns, 'srcrng-in', POD_IN); // idempotent
  assert.equal(podAddrEntries(), 1);
  assert.equal(await connectFrom(podNetns, '-', LB_IP, 53), 'EHOSTUNREACH');
  assert.equal(counter(abi.LB_CNT_SOCK_SRC_RANGE_UNKNOWN) - refused.unknown, 1n);
  cni('DEL', otherNetns, 'srcrng-out', POD_OUT);
  assert.equal(podAddrEntries(), 0);
});
