// IPv6 north-south e2e (issue 14 item 3): an external client namespace
// reaches NodePort and ExternalIP frontends over IPv6 through the TC program
// on node1's devices (pinned tcx links), to a backend pod on node1 and one
// behind node2 (test/e2e/tc_topology6.ts). Real TCP and UDP; the backends
// report the peer address they see.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TcHarness, attachInNetns, type TcBackend, type TcFrontend } from '../bpf/tc_harness';
import { Tc6Maps } from '../bpf/tc_harness6';
import { BULK_TCP_CLIENT } from './multihome_topology';
import { SERVER6, Topology6, UDP_CLIENT6, V6, type V6Role } from './tc_topology6';

const NODE_PORT = 30080;
const POD1: TcBackend = { id: 1, address: V6.pod1, port: 8080, local: true };
const POD2: TcBackend = { id: 2, address: V6.pod2, port: 8080, local: false };
const LOCAL_POLICY = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;

let topo: Topology6;
let h: TcHarness;
let v6: Tc6Maps;

function frontend(f: Partial<TcFrontend> & Pick<TcFrontend, 'backends'>): TcFrontend {
  return { address: V6.node1Public, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, ...f };
}

/** TCP: "<pod> <peer>" after a small exchange; UDP: "<pod> <peer>". */
function request(proto: 'tcp' | 'udp', host: string, port: number, from: V6Role = 'cli'): string {
  if (proto === 'udp') return topo.node(from, UDP_CLIENT6, [host, String(port)]).replace(/:\d+$/, '');
  const out = topo.node(from, BULK_TCP_CLIENT, [host, String(port), '1000', '2000']);
  const m = /^ok (\w+) (\S+) 1000$/.exec(out);
  return m ? `${m[1]} ${m[2]}` : out;
}

before(async () => {
  topo = new Topology6();
  topo.create();
  h = TcHarness.create('sluice-tc6e2e');
  v6 = new Tc6Maps(h);
  const r = attachInNetns(topo.netnsPath('n1'), h.pinDir, ['eth0', 'eth1', 'vp1']);
  assert.equal(r.status, 0, `attach failed: ${r.stderr}`);
  await topo.start('p1', SERVER6, ['pod1', '8080']);
  await topo.start('p2', SERVER6, ['pod2', '8080']);
});

after(() => {
  topo?.destroy();
  h?.close();
});

beforeEach(() => {
  h.reset();
  v6.reset();
  topo.setPrivateMtu(1500);
  writeTcConfig(h.tc.config, {});
  v6.setSnat(V6.node1Public);
});

describe('IPv6 NodePort, externalTrafficPolicy Cluster: SNAT to node1\'s IPv6 address', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: a remote and a local backend both see node1; replies come back translated`, () => {
      v6.upsertFrontend(frontend({ proto, backends: [POD2] }));
      assert.equal(request(proto, V6.node1Public, NODE_PORT), `pod2 ${V6.node1Public}`);
      v6.upsertFrontend(frontend({ proto, backends: [POD1] }));
      v6.backends.delete(POD2.id);
      // The local pod's reply is restored by the program on its veth (vp1).
      assert.equal(request(proto, V6.node1Public, NODE_PORT), `pod1 ${V6.node1Public}`);
      assert.ok([...v6.conntrack.entries()].some(([, e]) => e.flags & abi.LB_CT_FLAG_SNAT), 'SNATed flows in sluice_ct6');
    });
  }

  test('an IPv6 ExternalIP works the same way', () => {
    v6.upsertFrontend(frontend({ address: '2001:db8:100::10', port: 80, flags: abi.LB_SVC_FLAG_EXTERNAL_IP, backends: [POD2] }));
    assert.equal(request('tcp', '2001:db8:100::10', 80), `pod2 ${V6.node1Public}`);
  });
});

describe('IPv6 NodePort, externalTrafficPolicy Local: the backend sees the client\'s IPv6 address', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: DNAT only, the reply restored on egress`, () => {
      v6.upsertFrontend(frontend({ proto, flags: LOCAL_POLICY, backends: [POD1] }));
      assert.equal(request(proto, V6.node1Public, NODE_PORT), `pod1 ${V6.client}`);
    });
  }
});

describe('IPv6 loadBalancerSourceRanges', () => {
  test('a client inside the IPv6 range is served; outside it, dropped', () => {
    const LB_IP = '2001:db8:100::20';
    v6.addSourceRange(3, '2001:db8:1::/64');
    v6.upsertFrontend(frontend({ address: LB_IP, port: 443, revNatId: 3, flags: abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE, backends: [POD2] }));
    assert.equal(request('tcp', LB_IP, 443), `pod2 ${V6.node1Public}`);
    for (const [k] of [...v6.sourceRanges.entries()]) v6.sourceRanges.delete(k);
    v6.addSourceRange(3, '2001:db8:9::/64');
    const before = h.counter(abi.LB_CNT_TC_SRC_RANGE_DROP);
    assert.match(request('tcp', LB_IP, 443), /^timeout/);
    assert.ok(h.counter(abi.LB_CNT_TC_SRC_RANGE_DROP) > before);
  });
});

describe('IPv6 hairpin: a pod reaches its own node\'s NodePort', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: to a remote pod, and to itself (SNAT to node1 so the reply comes back through it)`, () => {
      v6.upsertFrontend(frontend({ proto, backends: [POD2] }));
      assert.equal(request(proto, V6.node1Public, NODE_PORT, 'p1'), `pod2 ${V6.node1Public}`);
      v6.upsertFrontend(frontend({ proto, backends: [{ ...POD1, id: 5 }] }));
      v6.backends.delete(POD2.id);
      assert.equal(request(proto, V6.node1Public, NODE_PORT, 'p1'), `pod1 ${V6.node1Public}`);
    });
  }
});

/** The client's route to an address, with the path MTU it learnt ("... mtu 1280 ..."). */
const clientRoute = (address: string) => execFileSync('ip', ['-n', topo.ns.cli, '-6', 'route', 'get', address], { encoding: 'utf8' });

describe('IPv6 PMTU, externalTrafficPolicy Local: the node\'s own Packet Too Big', () => {
  test('quoting client -> pod, it is fixed on egress to quote client -> frontend; the client learns the MTU and the transfer completes', () => {
    // A 1 280 hop to the local pod that the pod does not advertise (advmss
    // 1440): the client's 1 500-byte segments, DNATed, are too big for vp1,
    // and node1's stack answers with Packet Too Big about client -> pod.
    topo.in('n1', 'link', 'set', 'vp1', 'mtu', '1280');
    topo.in('p1', '-6', 'route', 'replace', '2001:db8::/32', 'via', 'fe80::1', 'dev', 'eth0', 'mtu', '1280', 'advmss', '1440');
    topo.in('cli', 'link', 'set', 'dev', 'eth0', 'gso_max_segs', '1');
    topo.in('cli', '-6', 'route', 'flush', 'cache');
    try {
      assert.doesNotMatch(clientRoute(V6.node1Public), /mtu 1280/, 'no path MTU learnt yet');
      v6.upsertFrontend(frontend({ flags: LOCAL_POLICY, backends: [POD1] }));
      const answer = topo.node('cli', BULK_TCP_CLIENT, [V6.node1Public, String(NODE_PORT), String(300 * 1024), '8000'], 12000);
      assert.equal(answer, `ok pod1 ${V6.client} ${300 * 1024}`);
      assert.match(clientRoute(V6.node1Public), /mtu 1280/, 'the client took the Packet Too Big for the frontend');
    } finally {
      topo.in('n1', 'link', 'set', 'vp1', 'mtu', '1500');
      topo.in('p1', '-6', 'route', 'replace', '2001:db8::/32', 'via', 'fe80::1', 'dev', 'eth0');
      topo.in('cli', '-6', 'route', 'flush', 'cache');
    }
  });
});

describe('IPv6 PMTU through a smaller-MTU hop (node1-node2 at 1 280, client link 1 500)', () => {
  test('a 300 KB TCP transfer through the NodePort completes; node1 sent Packet Too Big to the client', () => {
    topo.setPrivateMtu(1280);
    // A real NIC puts MTU-sized segments on the wire; a veth would carry TSO
    // super-packets whole and hide the problem (see tc_fragments.test.ts).
    topo.in('cli', 'link', 'set', 'dev', 'eth0', 'gso_max_segs', '1');
    v6.upsertFrontend(frontend({ backends: [POD2] }));
    const before = h.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT);
    const answer = topo.node('cli', BULK_TCP_CLIENT, [V6.node1Public, String(NODE_PORT), String(300 * 1024), '8000'], 12000);
    assert.equal(answer, `ok pod2 ${V6.node1Public} ${300 * 1024}`);
    assert.ok(h.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT) > before, 'the client learnt the path MTU from node1');
  });
});
