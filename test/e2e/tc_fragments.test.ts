// Fragments and PMTU through the north-south TC path, with real traffic:
// a client namespace, node1 with the TC programs on its public device (eth0),
// its private device (eth1) and its local pod's device (vp1), a local pod p1
// and a pod p2 behind node2 (test/e2e/multihome_topology.ts).
//
// - A 4 000-byte UDP datagram crosses 1 500-byte links as three fragments
//   each way: every fragment of the request and of the reply must be
//   translated (only the first carries the ports).
// - With a 1 280-byte link between node1 and node2 (a hop neither end sees),
//   a TCP transfer of 300 KB through the NodePort must complete: node1 answers
//   the client's too-big segments with ICMP "fragmentation needed" (the
//   kernel cannot: the translated packet has a local source and would be
//   dropped as martian), and the client lowers its path MTU.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TcHarness, attachInNetns, type TcBackend, type TcFrontend } from '../bpf/tc_harness';
import { MultiHomeTopology, MH, ECHO_SERVER, BIG_UDP_CLIENT, BULK_TCP_CLIENT } from './multihome_topology';

const NODE_PORT = 30090;
const POD1: TcBackend = { id: 1, address: MH.pod1, port: 8080, local: true };
const POD2: TcBackend = { id: 2, address: MH.pod2, port: 8080, local: false };

let topo: MultiHomeTopology;
let h: TcHarness;

function frontend(f: Partial<TcFrontend> & Pick<TcFrontend, 'backends'>): TcFrontend {
  return { address: MH.node1Public, port: NODE_PORT, proto: 'udp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, ...f };
}

const LOCAL_POLICY = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;

function setPrivateMtu(mtu: number): void {
  topo.in('n1', 'link', 'set', 'eth1', 'mtu', String(mtu));
  topo.in('n2', 'link', 'set', 'eth1', 'mtu', String(mtu));
}

before(async () => {
  topo = new MultiHomeTopology('slfr');
  topo.create();
  h = TcHarness.create('sluice-tcfrag');
  const r = attachInNetns(topo.netnsPath('n1'), h.pinDir, ['eth0', 'eth1', 'vp1']);
  assert.equal(r.status, 0, `attach failed: ${r.stderr}`);
  await topo.start('p1', ECHO_SERVER, ['pod1', '8080']);
  await topo.start('p2', ECHO_SERVER, ['pod2', '8080']);
});

after(() => {
  topo?.destroy();
  h?.close();
});

beforeEach(() => {
  h.reset();
  setPrivateMtu(1500);
  writeTcConfig(h.tc.config, { snatAddress: MH.node1Public });
});

describe('a 4 000-byte UDP datagram through a NodePort (1 500-byte MTU): fragments both ways', () => {
  const cases: Array<[string, TcFrontend]> = [
    ['remote backend (SNAT, reply on the private device)', frontend({ backends: [POD2] })],
    ['local backend, externalTrafficPolicy Cluster (SNAT, reply on the pod device)', frontend({ backends: [POD1] })],
    ['local backend, externalTrafficPolicy Local (DNAT only, reply restored on egress)', frontend({ flags: LOCAL_POLICY, backends: [POD1] })],
  ];
  for (const [what, f] of cases) {
    test(what, () => {
      h.upsertFrontend(f);
      const before = h.counter(abi.LB_CNT_TC_FRAG_FOUND);
      assert.equal(topo.node('cli', BIG_UDP_CLIENT, [MH.node1Public, String(NODE_PORT), '4000']), 'ok 4000',
        'the datagram arrived whole at the backend and its echo whole at the client');
      // Two later fragments each way went through the fragment map.
      assert.ok(h.counter(abi.LB_CNT_TC_FRAG_FOUND) - before >= 4n, `fragments found: ${h.counter(abi.LB_CNT_TC_FRAG_FOUND) - before}`);
      // A small datagram still works on the same flow.
      assert.equal(topo.node('cli', BIG_UDP_CLIENT, [MH.node1Public, String(NODE_PORT), '100']), 'ok 100');
    });
  }
});

describe('PMTU discovery through a smaller-MTU hop (node1-node2 at 1 280, client link 1 500)', () => {
  test('a 300 KB TCP transfer through the NodePort completes; node1 sent "fragmentation needed" to the client', () => {
    setPrivateMtu(1280);
    // A real NIC puts MTU-sized segments on the wire; a veth would carry the
    // client's TSO super-packets whole across the 1 280 link (veths do not
    // enforce the MTU on GSO packets) and hide the problem.
    topo.in('cli', 'link', 'set', 'dev', 'eth0', 'gso_max_segs', '1');
    h.upsertFrontend(frontend({ proto: 'tcp', backends: [POD2] }));
    const before = h.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT);
    const answer = topo.node('cli', BULK_TCP_CLIENT, [MH.node1Public, String(NODE_PORT), String(300 * 1024), '8000'], 12000);
    assert.equal(answer, `ok pod2 ${MH.node1Public} ${300 * 1024}`);
    assert.ok(h.counter(abi.LB_CNT_TC_FRAG_NEEDED_SENT) > before, 'the client learnt the path MTU from node1');
  });
});
