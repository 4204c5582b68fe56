// The node both program-cost benches (bench/xdpcost.ts, bench/dsrcost.ts)
// measure on, inside the harness's throwaway namespace: device ext0 with the
// node's address, a gateway neighbour and a route to the remote backends, the
// TC config (SNAT to the node), and NodePort NODE:30080 -> a backend on
// another node (198.18.2.20:8080), so the FIB lookups the programs do succeed.
// setUpCostNode6 adds the IPv6 twin (bench/xdpcost.ts's known IPv6 flow).
import * as abi from '../src/abi/generated';
import { writeTcConfig } from '../src/datapath/tc/config';
import { syncFrontendAddresses6 } from '../src/datapath/xdp/xdp';
import type { XdpHarness } from '../test/bpf/xdp_harness';
import { Tc6Maps } from '../test/bpf/tc_harness6';

export const NODE = '198.18.0.1';
export const NODE_PORT = 30080;

export interface CostNode {
  ifindex: number;
  /** A __sk_buff context for BPF_PROG_TEST_RUN of a TC program: arrived on ext0. */
  tcCtx: Buffer;
}

export function setUpCostNode(h: XdpHarness): CostNode {
  h.ip('link', 'add', 'ext0', 'address', '02:00:00:00:00:01', 'type', 'veth', 'peer', 'name', 'ext0p');
  h.ip('link', 'set', 'ext0p', 'up');
  h.ip('addr', 'add', `${NODE}/24`, 'dev', 'ext0');
  h.ip('link', 'set', 'ext0', 'up');
  h.ip('neigh', 'add', '198.18.0.2', 'lladdr', '02:00:00:00:00:22', 'dev', 'ext0', 'nud', 'permanent');
  h.ip('route', 'add', '198.18.2.0/24', 'via', '198.18.0.2', 'dev', 'ext0');
  const ifindex = h.ifindex('ext0');
  writeTcConfig(h.tc.tc.config, { snatAddress: NODE });
  h.tc.upsertFrontend({
    address: NODE, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 7,
    backends: [{ id: 2, address: '198.18.2.20', port: 8080, local: false }],
  });
  const tcCtx = Buffer.alloc(192);
  tcCtx.writeUInt32LE(ifindex, 36); // __sk_buff.ingress_ifindex
  return { ifindex, tcCtx };
}

export const NODE6 = 'fd00:18::1';

/**
 * After setUpCostNode: the node's IPv6 address on ext0 (also its IPv6 SNAT
 * address), a gateway neighbour, a route to fd00:2::/64, and NodePort
 * [NODE6]:30080 -> [fd00:2::20]:8080 in the IPv6 tables and XDP's set.
 */
export function setUpCostNode6(h: XdpHarness): void {
  h.sysctl('net.ipv6.conf.all.forwarding=1'); // bpf_fib_lookup: FWD_DISABLED otherwise
  h.ip('-6', 'addr', 'add', `${NODE6}/64`, 'dev', 'ext0', 'nodad');
  h.ip('-6', 'neigh', 'add', 'fd00:18::2', 'lladdr', '02:00:00:00:00:22', 'dev', 'ext0', 'nud', 'permanent');
  h.ip('-6', 'route', 'add', 'fd00:2::/64', 'via', 'fd00:18::2', 'dev', 'ext0');
  const v6 = new Tc6Maps(h.tc);
  v6.setSnat(NODE6);
  v6.upsertFrontend({
    address: NODE6, port: NODE_PORT, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT, revNatId: 8,
    backends: [{ id: 3, address: 'fd00:2::20', port: 8080, local: false }],
  });
  syncFrontendAddresses6(h.maps, [{ address: NODE6, flags: abi.LB_SVC_FLAG_NODEPORT }]);
}
