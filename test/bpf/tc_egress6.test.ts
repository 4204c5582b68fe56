// The IPv6 SNAT address of the egress device on the TC path (issue 14 item 3
// with issue 10 item 9, multi-homed nodes), on crafted packets
// (BPF_PROG_TEST_RUN) compared byte by byte with packets built from scratch
// (test/bpf/tc_packet6.ts). The FIB decides the egress device, so the runs
// are in a throwaway namespace with routes (test/bpf/tc_netns.ts): in0
// (2001:db8::1/64, where clients' packets arrive) and out0 (fd00:21::1/64,
// the node-to-node device) with the route to the backends' prefix.
import { after, before, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as abi from '../../src/abi/generated';
import { ip6ToBytes } from '../../src/datapath/addr';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TypedMap, u32Codec } from '../../src/datapath/typedMap';
import { TcHarness } from './tc_harness';
import { Tc6Maps } from './tc_harness6';
import { TcNetns } from './tc_netns';
import { TC_ACT_REDIRECT, TCP_ACK, TCP_SYN, diffHex } from './tc_packet';
import { frame6, type L4Spec6 } from './tc_packet6';

const CLIENT = '2001:db8::10';
const NODE = '2001:db8::1'; // NodePort address and the configured IPv6 SNAT address
const NODE_PRIVATE = 'fd00:21::1';
const NODE_PORT = 30080;
const REMOTE_BE = { id: 2, address: 'fd00:2::20', port: 8080, local: false };

let h: TcHarness;
let v6: Tc6Maps;
let ns: TcNetns;
let snatDevices6: TypedMap<number, abi.Lb6SnatDevice>;
let in0 = 0;
let out0 = 0;

before(() => {
  h = TcHarness.create('sluice-tcegress6');
  v6 = new Tc6Maps(h);
  snatDevices6 = new TypedMap(h.obj.map(abi.SLUICE_MAP_SNAT_DEV6), u32Codec, abi.lb6_snat_deviceCodec);
  ns = new TcNetns(h.pinDir);
  // bpf_fib_lookup answers FWD_DISABLED on a device that does not forward.
  execFileSync('ip', ['netns', 'exec', ns.name, 'sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1', 'net.ipv6.conf.all.accept_dad=0', 'net.ipv6.conf.default.accept_dad=0']);
  ns.ip('link', 'add', 'in0', 'type', 'veth', 'peer', 'name', 'in0p');
  ns.ip('link', 'add', 'out0', 'type', 'veth', 'peer', 'name', 'out0p');
  for (const dev of ['in0', 'in0p', 'out0', 'out0p']) ns.ip('link', 'set', dev, 'up');
  ns.ip('-6', 'addr', 'add', `${NODE}/64`, 'dev', 'in0', 'nodad');
  ns.ip('-6', 'addr', 'add', `${NODE_PRIVATE}/64`, 'dev', 'out0', 'nodad');
  ns.ip('-6', 'route', 'add', 'fd00:2::/64', 'via', 'fd00:21::2', 'dev', 'out0');
  in0 = ns.ifindex('in0');
  out0 = ns.ifindex('out0');
});
after(() => {
  ns?.destroy();
  h?.close();
});
beforeEach(() => {
  h.reset();
  v6.reset();
  for (const [k] of [...snatDevices6.entries()]) snatDevices6.delete(k);
  writeTcConfig(h.tc.config, {});
  v6.setSnat(NODE);
  v6.upsertFrontend({ address: NODE, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 5, backends: [REMOTE_BE] });
});

function expectPacket(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

test('an IPv6 flow leaving by a device with its own IPv6 SNAT address takes it; its reply there is restored', () => {
  snatDevices6.set(out0, { address: ip6ToBytes(NODE_PRIVATE) });
  const before = h.counter(abi.LB_CNT_TC_SNAT_EGRESS_DEV);
  const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62001, dport: NODE_PORT, tcpFlags: TCP_SYN };
  const r = ns.run('ingress', frame6(syn), in0);
  assert.equal(r.verdict, TC_ACT_REDIRECT, 'forwarded by the program (redirect to out0)');
  // Forwarded by us: the hop limit drops by one, as through any router.
  expectPacket(r.out, frame6({ ...syn, src: NODE_PRIVATE, dst: REMOTE_BE.address, dport: REMOTE_BE.port, hopLimit: 63 }), 'SNAT to out0\'s IPv6 address');
  assert.equal(h.counter(abi.LB_CNT_TC_SNAT_EGRESS_DEV) - before, 1n);
  assert.ok(v6.rows().every((row) => row.nat === `[${NODE_PRIVATE}]:62001`), JSON.stringify(v6.rows()));

  // The backend's answer to the private address, entering on out0: back to the client from the frontend.
  const reply: L4Spec6 = { proto: 'tcp', src: REMOTE_BE.address, dst: NODE_PRIVATE, sport: REMOTE_BE.port, dport: 62001, tcpFlags: TCP_SYN | TCP_ACK };
  const back = ns.run('ingress', frame6(reply), out0);
  assert.equal(back.verdict, TC_ACT_REDIRECT, 'the reply is forwarded to in0 by the program');
  expectPacket(back.out, frame6({ ...reply, src: NODE, sport: NODE_PORT, dst: CLIENT, dport: 62001, hopLimit: 63 }), 'reply restored');
});

test('without a per-device entry the flow takes the configured IPv6 SNAT address (--snat-address or the first device\'s)', () => {
  const before = h.counter(abi.LB_CNT_TC_SNAT_EGRESS_DEV);
  const syn: L4Spec6 = { proto: 'tcp', src: CLIENT, dst: NODE, sport: 62002, dport: NODE_PORT, tcpFlags: TCP_SYN };
  const r = ns.run('ingress', frame6(syn), in0);
  assert.equal(r.verdict, TC_ACT_REDIRECT);
  expectPacket(r.out, frame6({ ...syn, src: NODE, dst: REMOTE_BE.address, dport: REMOTE_BE.port, hopLimit: 63 }), 'SNAT to the configured address');
  assert.equal(h.counter(abi.LB_CNT_TC_SNAT_EGRESS_DEV) - before, 0n);
});
