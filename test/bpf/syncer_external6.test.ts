// The agent's index of externally reachable backends (Syncer
// setExternalBackends / takeExternalBackends, issue 14): the agent attaches
// the TC program to the device of every local backend of a NodePort /
// ExternalIP / LoadBalancer frontend, so that SNATed replies entering there
// are translated. An IPv6-only local backend must be in that index too (it
// was skipped: its pod's veth got no TC, and the replies of its SNATed IPv6
// flows were never restored), and so must a remote IPv6 one (skipped too:
// its node-to-node device got no TC nor IPv6 SNAT address on a multi-homed
// node). Real Syncer over maps pinned in a throwaway bpffs directory (the TC
// object's maps), a NodePort Service per family.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { ClusterState } from '../../src/agent/store';
import { Syncer, type SyncerOptions } from '../../src/agent/syncer';
import { AgentMetrics } from '../../src/agent/metrics';
import { ProxyHealth } from '../../src/agent/health';
import { openSockLbMaps, type SockLbMaps } from '../../src/datapath/maps';
import { TcHarness } from './tc_harness';

const NODE = 'n1';
const NODE4 = '198.18.0.1';
const NODE6 = 'fd00:18::1';

let h: TcHarness;
let maps: SockLbMaps;

before(() => {
  h = TcHarness.create('sluice-syncext6');
  maps = openSockLbMaps(h.pinDir);
});
after(() => {
  maps?.close();
  h?.close();
});

function service(name: string, family: 'IPv4' | 'IPv6', clusterIP: string, nodePort: number) {
  return {
    apiVersion: 'v1', kind: 'Service',
    metadata: { name, namespace: 'default', uid: `uid-${name}`, creationTimestamp: '2026-01-01T00:00:00Z' },
    spec: {
      type: 'NodePort', clusterIP, clusterIPs: [clusterIP], ipFamilies: [family], ipFamilyPolicy: 'SingleStack',
      ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort, protocol: 'TCP' }],
    },
  };
}

function slice(name: string, family: 'IPv4' | 'IPv6', endpoints: Array<[string, string]>) {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: `${name}-1`, namespace: 'default', labels: { 'kubernetes.io/service-name': name } },
    addressType: family,
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: endpoints.map(([ip, node]) => ({ addresses: [ip], conditions: { ready: true }, nodeName: node })),
  };
}

/** A Syncer over the test's maps for node NODE, both families, no periodic sync. */
function newSyncer(state: ClusterState, opts: Pick<SyncerOptions, 'localAddresses' | 'onSyncDone' | 'onExternalBackends'>): Syncer {
  return new Syncer(state, maps, {
    nodeName: NODE,
    ...opts,
    translate: { maxEndpointsPerService: 1000, ipFamilies: ['IPv4', 'IPv6'] },
    minSyncPeriodMs: 0,
    syncPeriodMs: 3_600_000,
  }, new AgentMetrics(), new ProxyHealth(60_000), pino({ level: 'silent' }));
}

test('local and remote backends of IPv4 and IPv6 NodePorts are both in the external-backend index', async () => {
  let syncer: Syncer | undefined;
  const state = new ClusterState(() => syncer?.trigger());
  let synced: () => void = () => undefined;
  syncer = newSyncer(state, { localAddresses: () => [NODE4, NODE6], onSyncDone: () => synced() });
  try {
    state.setNode({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE },
      status: { addresses: [{ type: 'InternalIP', address: NODE4 }, { type: 'InternalIP', address: NODE6 }] } } as never);
    state.upsertService(service('web4', 'IPv4', '198.19.0.10', 30080) as never);
    state.upsertSlice(slice('web4', 'IPv4', [['198.18.20.2', NODE], ['198.18.30.2', 'n2']]) as never);
    state.upsertService(service('web6', 'IPv6', 'fd00:96::10', 30081) as never);
    state.upsertSlice(slice('web6', 'IPv6', [['fd00:20::2', NODE], ['fd00:30::2', 'n2']]) as never);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no sync within 10 s')), 10_000);
      synced = () => { clearTimeout(timer); resolve(); };
      syncer!.start();
    });
    const programmed = syncer.programmed().programmedFrontends().map((f) => `${f.address}:${f.port}`);
    assert.ok(programmed.includes(`${NODE6}:30081`), `the IPv6 NodePort is programmed: ${programmed.join(' ')}`);
    const { local, remote } = syncer.takeExternalBackends();
    assert.deepEqual([...local ?? []].sort(), ['198.18.20.2', 'fd00:20::2'],
      'the local IPv6 backend is indexed: the agent attaches TC to its device for the SNATed replies');
    // Remote backends of both families name node-to-node devices by their family's routes
    // (multi-homed nodes, per-device SNAT): the IPv6 one was left out before.
    assert.deepEqual([...remote ?? []].sort(), ['198.18.30.2', 'fd00:30::2'],
      'the remote IPv6 backend is indexed: the agent finds its node-to-node device by the IPv6 routes');
  } finally {
    syncer.stop();
  }
});

// The agent attaches TC to a node-to-node device, and writes that device's
// SNAT address, for the remote backends it is told of. It was told after the
// pass had written the frontends (onSyncDone): a NodePort flow that arrived
// in between was SNATed to the external device's address and its reply came
// back on the wrong network (test/e2e/northsouth_multihome.test.ts, "a
// backend behind the private device", failed that way under load). Now the
// pass hands them over before it writes the frontends that use them.
test('the external backends reach the agent before the frontends that use them are written', async () => {
  let syncer: Syncer | undefined;
  const state = new ClusterState(() => syncer?.trigger());
  let synced: () => void = () => undefined;
  const seen: Array<{ local: string[]; remote: string[]; nodePortWritten: boolean }> = [];
  const nodePortWritten = () => syncer!.programmed().programmedFrontends().some((f) => f.port === 30090);
  syncer = newSyncer(state, {
    localAddresses: () => [NODE4],
    onExternalBackends: ({ local, remote }) => {
      seen.push({ local: [...local ?? []].sort(), remote: [...remote ?? []].sort(), nodePortWritten: nodePortWritten() });
    },
    onSyncDone: () => synced(),
  });
  try {
    state.setNode({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE },
      status: { addresses: [{ type: 'InternalIP', address: NODE4 }] } } as never);
    state.upsertService(service('multi', 'IPv4', '198.19.0.20', 30090) as never);
    state.upsertSlice(slice('multi', 'IPv4', [['198.18.20.5', NODE], ['198.18.31.5', 'n2']]) as never);
    const sync = () => new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no sync within 10 s')), 10_000);
      synced = () => { clearTimeout(timer); synced = () => undefined; resolve(); };
    });
    let done = sync();
    syncer.start();
    await done;
    assert.ok(nodePortWritten(), 'the NodePort is programmed');
    assert.deepEqual(seen, [{ local: ['198.18.20.5'], remote: ['198.18.31.5'], nodePortWritten: false }],
      'told of both backends once, before the NodePort was written');

    // A partial pass with a new remote backend: told before that pass writes.
    seen.length = 0;
    done = sync();
    state.upsertSlice(slice('multi', 'IPv4', [['198.18.20.5', NODE], ['198.18.31.5', 'n2'], ['198.18.32.5', 'n3']]) as never);
    await done;
    assert.equal(seen.length, 1, 'told once of the change');
    assert.deepEqual(seen[0]!.remote, ['198.18.31.5', '198.18.32.5']);
    const backends = syncer.programmed().programmedFrontends().find((f) => f.port === 30090)?.backendIds.length;
    assert.equal(backends, 3, 'the pass then wrote the new backend');
  } finally {
    syncer.stop();
  }
});
