// North-south e2e where node1 finishes the checksums it forwards in software
// (TX checksum offload off on its LAN device and on pod1's veth), so the
// receivers check every TCP/UDP checksum the TC programs left.
//
// Why (issue 12, bpf/lib/rewrite4.h): a local socket's packet crosses the
// veths with its L4 checksum still CHECKSUM_PARTIAL (the field holds only the
// pseudo-header sum); the rewrite must fold the address change into it and
// leave the port change to whoever finishes the sum. On plain veths nobody
// ever finishes or checks it (the receiver trusts CHECKSUM_PARTIAL), so a
// wrong seed goes unnoticed there; here node1's devices compute the final
// checksum from that seed (skb_checksum_help) and the receiving stack
// verifies it (CHECKSUM_NONE), so a wrong seed loses the connection.
// BPF_PROG_TEST_RUN cannot express CHECKSUM_PARTIAL (test/bpf/tc_rewrite.test.ts).
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import * as abi from '../../src/abi/generated';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TcHarness, attachInNetns, type TcBackend, type TcFrontend } from '../bpf/tc_harness';
import { ADDR, CLIENT_SCRIPT, SERVER_SCRIPT, Topology } from './tc_topology';

const TXCSUM_OFF = path.resolve(__dirname, '../../../build/txcsum_off');
const NODE_PORT = 30080;
const POD1: TcBackend = { id: 1, address: ADDR.pod1, port: 8080, local: true };
const POD2: TcBackend = { id: 2, address: ADDR.pod2, port: 8080, local: false };
const LOCAL_POLICY = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_TWO_SCOPES;

let topo: Topology;
let h: TcHarness;

function frontend(f: Partial<TcFrontend> & Pick<TcFrontend, 'backends'>): TcFrontend {
  return { address: ADDR.node1, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 1, ...f };
}

/** The backend's answer "pod2 198.18.0.1:40000" from the client, or '' when nothing came back. */
function request(proto: 'tcp' | 'udp', port = NODE_PORT): string {
  try {
    return topo.node('cli', CLIENT_SCRIPT, [proto, ADDR.node1, String(port)]);
  } catch {
    return '';
  }
}

before(async () => {
  topo = new Topology('sltcsum');
  topo.create();
  // Off on the devices node1 forwards translated packets out of: toward
  // node2 and the client (eth0) and toward pod1 (vp1).
  for (const dev of ['eth0', 'vp1']) execFileSync('ip', ['netns', 'exec', topo.ns.n1, TXCSUM_OFF, dev]);
  h = TcHarness.create('sluice-tcsum');
  const r = attachInNetns(topo.netnsPath('n1'), h.pinDir, ['eth0', 'vp1', 'vp1b']);
  assert.equal(r.status, 0, `attach failed: ${r.stderr}`);
  await topo.start('p1', SERVER_SCRIPT, ['pod1', '8080']);
  await topo.start('p2', SERVER_SCRIPT, ['pod2', '8080']);
});

after(() => {
  topo?.destroy();
  h?.close();
});

beforeEach(() => {
  h.reset();
  writeTcConfig(h.tc.config, { snatAddress: ADDR.node1 });
});

describe('checksums finished in software after the TC rewrite', () => {
  for (const proto of ['tcp', 'udp'] as const) {
    test(`${proto}: SNAT + DNAT to a remote backend and the reply back (addresses and ports change)`, () => {
      h.upsertFrontend(frontend({ proto, backends: [POD2] }));
      const answer = request(proto);
      assert.match(answer, new RegExp(`^pod2 ${ADDR.node1.replace(/\./g, '\\.')}:\\d+$`), 'pod2 answered through node1');
    });

    test(`${proto}: DNAT only to a local backend (externalTrafficPolicy Local) and the reply on egress`, () => {
      h.upsertFrontend(frontend({ proto, flags: LOCAL_POLICY, backends: [POD1] }));
      const answer = request(proto);
      assert.match(answer, new RegExp(`^pod1 ${ADDR.client.replace(/\./g, '\\.')}:\\d+$`), 'pod1 answered and saw the client');
    });
  }
});
