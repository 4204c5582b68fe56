// IPv6 fragments through the north-south TC path, with real traffic (issue
// 14 item 3, issue 10 item 8): a client namespace, node1 with the TC
// programs on its public device (eth0), its private device (eth1) and its
// local pod's device (vp1), a local pod p1 and a pod p2 behind node2
// (test/e2e/tc_topology6.ts; every link 1 500 bytes).
//
// A 4 000-byte UDP datagram crosses the links as three fragments each way
// (IPv6 routers never fragment: the sender's kernel does, with a Fragment
// header); only the first carries the UDP header, so every later fragment of
// the request and of the reply must be translated with the first one's
// ports (sluice_frag6). The client sees the same bytes come back.
//
// IPv6 PMTU through Sluice (Packet Too Big sent by node1 for a SNATed flow)
// is shown by test/e2e/tc_northsouth6.test.ts; its byte-exact fixture is in
// test/bpf/tc_frag6.test.ts.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TcHarness, attachInNetns, type TcBackend, type TcFrontend } from '../bpf/tc_harness';
import { Tc6Maps } from '../bpf/tc_harness6';
import { BIG_UDP_CLIENT } from './multihome_topology';
import { Topology6, V6 } from './tc_topology6';

const NODE_PORT = 30090;
const POD1: TcBackend = { id: 1, address: V6.pod1, port: 8080, local: true };
const POD2: TcBackend = { id: 2, address: V6.pod2, port: 8080, local: false };
const LOCAL_POLICY = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;

/** UDP echo on [::]:port (the whole datagram back to its sender). */
const UDP_ECHO6 = `
const u = require('dgram').createSocket('udp6'); const [port] = process.argv.slice(1);
u.on('message', (m, r) => u.send(m, r.port, r.address));
u.bind(Number(port), '::', () => process.stdout.write('ready\\n'));
`;

/** multihome_topology.ts's client: it opens an AF_INET6 socket for an IPv6 host. */
const BIG_UDP_CLIENT6 = BIG_UDP_CLIENT;
assert.match(BIG_UDP_CLIENT6, /includes\(':'\) \? 'udp6'/);

let topo: Topology6;
let h: TcHarness;
let v6: Tc6Maps;

function frontend(f: Partial<TcFrontend> & Pick<TcFrontend, 'backends'>): TcFrontend {
  return { address: V6.node1Public, port: NODE_PORT, proto: 'udp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, ...f };
}

before(async () => {
  topo = new Topology6('slf6');
  topo.create();
  h = TcHarness.create('sluice-tcfrag6e2e');
  v6 = new Tc6Maps(h);
  const r = attachInNetns(topo.netnsPath('n1'), h.pinDir, ['eth0', 'eth1', 'vp1']);
  assert.equal(r.status, 0, `attach failed: ${r.stderr}`);
  await topo.start('p1', UDP_ECHO6, ['8080']);
  await topo.start('p2', UDP_ECHO6, ['8080']);
});

after(() => {
  topo?.destroy();
  h?.close();
});

beforeEach(() => {
  h.reset();
  v6.reset();
  writeTcConfig(h.tc.config, {});
  v6.setSnat(V6.node1Public);
});

describe('a 4 000-byte UDP datagram through an IPv6 NodePort (1 500-byte MTU): fragments both ways', () => {
  const cases: Array<[string, TcFrontend]> = [
    ['remote backend on node2 (SNAT to node1\'s address, reply fragments arrive on the private device)', frontend({ backends: [POD2] })],
    ['local backend, externalTrafficPolicy Cluster (SNAT, reply fragments on the pod device)', frontend({ backends: [POD1] })],
    ['local backend, externalTrafficPolicy Local (DNAT only, reply fragments restored on egress)', frontend({ flags: LOCAL_POLICY, backends: [POD1] })],
  ];
  for (const [what, f] of cases) {
    test(what, () => {
      v6.upsertFrontend(f);
      const found = h.counter(abi.LB_CNT_TC6_FRAG_FOUND);
      const unknown = h.counter(abi.LB_CNT_TC6_FRAG_UNKNOWN);
      assert.equal(topo.node('cli', BIG_UDP_CLIENT6, [V6.node1Public, String(NODE_PORT), '4000']), 'ok 4000',
        'the datagram arrived whole at the backend and its echo whole at the client');
      // Two later fragments each way went through the fragment map.
      const n = h.counter(abi.LB_CNT_TC6_FRAG_FOUND) - found;
      assert.ok(n >= 4n, `later fragments translated: ${n}`);
      assert.equal(h.counter(abi.LB_CNT_TC6_FRAG_UNKNOWN) - unknown, 0n, 'no fragment passed untranslated');
      // A small datagram still works on the same flow.
      assert.equal(topo.node('cli', BIG_UDP_CLIENT6, [V6.node1Public, String(NODE_PORT), '100']), 'ok 100');
    });
  }
});
