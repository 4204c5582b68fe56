// The node's interface addresses (NodePorts listen on them) are read after a
// pass, not inside it: reading them (getifaddrs, an object per address) was
// a quarter of the agent's part of one EndpointSlice change at 10k Services
// (docs/bench.md, "one change"). An address that comes or goes still reaches
// the maps: the check after a pass starts the next pass at once. Real Syncer
// over maps pinned in a throwaway bpffs directory (the TC object's maps), an
// IPv6 NodePort Service (one frontend per node address).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { ClusterState } from '../../src/agent/store';
import { Syncer } from '../../src/agent/syncer';
import { AgentMetrics } from '../../src/agent/metrics';
import { ProxyHealth } from '../../src/agent/health';
import { openSockLbMaps, type SockLbMaps } from '../../src/datapath/maps';
import { TcHarness } from './tc_harness';

const NODE = 'n1';
const NODE4 = '198.18.0.1';
const NODE6 = 'fd00:18::1';
const ADDED6 = 'fd00:18::2';

let h: TcHarness;
let maps: SockLbMaps;

before(() => {
  h = TcHarness.create('sluice-synclocal');
  maps = openSockLbMaps(h.pinDir);
});
after(() => {
  maps?.close();
  h?.close();
});

const service = {
  apiVersion: 'v1', kind: 'Service',
  metadata: { name: 'web6', namespace: 'default', uid: 'uid-web6', creationTimestamp: '2026-01-01T00:00:00Z' },
  spec: {
    type: 'NodePort', clusterIP: 'fd00:96::10', clusterIPs: ['fd00:96::10'], ipFamilies: ['IPv6'], ipFamilyPolicy: 'SingleStack',
    ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30081, protocol: 'TCP' }],
  },
};

function slice(addresses: string[]) {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: 'web6-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web6' } },
    addressType: 'IPv6',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: addresses.map((ip) => ({ addresses: [ip], conditions: { ready: true }, nodeName: NODE })),
  };
}

test('a partial pass does not read the interfaces; an address that appears is programmed by the pass the check after it starts', async () => {
  let syncer: Syncer | undefined;
  const state = new ClusterState(() => syncer?.trigger());
  const interfaces = [NODE4, NODE6];
  let reads = 0;
  let passes = 0;
  let onPass: () => void = () => undefined;
  syncer = new Syncer(state, maps, {
    nodeName: NODE,
    localAddresses: () => {
      reads++;
      return [...interfaces];
    },
    onSyncDone: () => {
      passes++;
      onPass();
    },
    translate: { maxEndpointsPerService: 1000, ipFamilies: ['IPv4', 'IPv6'] },
    minSyncPeriodMs: 0,
    syncPeriodMs: 3_600_000,
  }, new AgentMetrics(), new ProxyHealth(60_000), pino({ level: 'silent' }));
  const passWhere = (what: string, ok: () => boolean) => new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no pass within 10 s: ${what}`)), 10_000);
    onPass = () => {
      if (!ok()) return;
      clearTimeout(timer);
      onPass = () => undefined;
      resolve();
    };
  });
  const nodePorts = () => syncer!.programmed().programmedFrontends().filter((f) => f.port === 30081).map((f) => f.address).sort();
  try {
    state.setNode({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE },
      status: { addresses: [{ type: 'InternalIP', address: NODE4 }, { type: 'InternalIP', address: NODE6 }] } } as never);
    state.upsertService(service as never);
    state.upsertSlice(slice(['fd00:20::2']) as never);
    const first = passWhere('first sync', () => true);
    syncer.start();
    await first;
    assert.deepEqual(nodePorts(), [NODE6], 'the IPv6 NodePort listens on the node address');
    await new Promise((r) => setTimeout(r, 50)); // the check after the first pass

    // One EndpointSlice change: the pass writes it without reading the interfaces.
    const readsBefore = reads;
    state.upsertSlice(slice(['fd00:20::2', 'fd00:20::3']) as never);
    syncer.syncOnce();
    assert.equal(reads, readsBefore, 'the partial pass used the addresses read before it');
    const f = syncer.programmed().programmedFrontends().find((x) => x.port === 30081 && x.address === NODE6);
    assert.equal(f?.backendIds.length, 2, 'the change is programmed');

    // An interface address appears; the next change's pass is followed by a check that finds it.
    interfaces.push(ADDED6);
    const added = passWhere(`${ADDED6} programmed`, () => nodePorts().includes(ADDED6));
    state.upsertSlice(slice(['fd00:20::2']) as never);
    await added;
    assert.deepEqual(nodePorts(), [NODE6, ADDED6]);
    assert.ok(passes >= 4, `a pass of its own took the new address (${passes} passes)`);
  } finally {
    syncer.stop();
  }
});
