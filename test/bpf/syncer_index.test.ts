// The syncer's index of north-south frontend addresses (issue 12 item 5):
// what XDP's frontend-address set is fed after each sync, kept per Service
// as translate goes instead of walking every programmed frontend per sync.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import pino from 'pino';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { installSockLb, uninstall } from '../../src/datapath/sockLb';
import { openSockLbMaps, type SockLbMaps } from '../../src/datapath/maps';
import { ClusterState } from '../../src/agent/store';
import { Syncer } from '../../src/agent/syncer';
import { AgentMetrics } from '../../src/agent/metrics';
import { ProxyHealth } from '../../src/agent/health';
import { cgroup2Root, bpffsRoot } from '../helpers/sandbox';

let bpffs: string;
let cgroup: string;
let maps: SockLbMaps;

before(() => {
  const id = randomBytes(4).toString('hex');
  bpffs = path.join(bpffsRoot(), `sluice-syncidx-${id}`);
  cgroup = path.join(cgroup2Root(), `sluice-syncidx-${id}`);
  fs.mkdirSync(cgroup);
  installSockLb({ bpffs, cgroupPath: cgroup });
  maps = openSockLbMaps(bpffs);
});

after(() => {
  maps?.close();
  uninstall(bpffs);
  fs.rmdirSync(cgroup);
});

const service = (name: string, type: string, clusterIP: string, extra: Record<string, unknown> = {}): V1Service => ({
  metadata: { name, namespace: 'default', creationTimestamp: '2026-01-01T00:00:00Z' as never },
  spec: { type, clusterIP, clusterIPs: [clusterIP], ipFamilies: ['IPv4'], ports: [{ name: 'http', port: 80, protocol: 'TCP', ...(type === 'NodePort' ? { nodePort: 30080 } : {}) }], ...extra },
});
const slice = (svc: string, host: number): V1EndpointSlice => ({
  addressType: 'IPv4',
  metadata: { name: `${svc}-abc`, namespace: 'default', labels: { 'kubernetes.io/service-name': svc } },
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
  endpoints: [{ addresses: [`198.18.1.${host}`], conditions: { ready: true } }],
});
/** Until the syncer has finished `n` passes (bounded: 10 s). */
async function passes(syncer: Syncer, n: number): Promise<void> {
  const end = Date.now() + 10_000;
  while (syncer.reports.length < n) {
    if (Date.now() > end) throw new Error(`${syncer.reports.length} sync passes of ${n} within 10 s`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('north-south frontend addresses come from an index kept per Service; a ClusterIP change does not walk the programmed frontends', async () => {
  const state = new ClusterState(() => syncer.trigger());
  const syncer: Syncer = new Syncer(state, maps, {
    nodeName: 'n1', translate: { maxEndpointsPerService: 1000, ipFamilies: ['IPv4'] }, minSyncPeriodMs: 0, syncPeriodMs: 3600_000,
  }, new AgentMetrics(), new ProxyHealth(60_000), pino({ level: 'silent' }));
  try {
    state.setNode({ metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.10' }] } });
    state.upsertService(service('np', 'NodePort', '10.96.0.10'));
    state.upsertSlice(slice('np', 1));
    state.upsertService(service('ext', 'ClusterIP', '10.96.0.11', { externalIPs: ['198.18.200.1'] }));
    state.upsertSlice(slice('ext', 2));
    state.upsertService(service('plain', 'ClusterIP', '10.96.0.12'));
    state.upsertSlice(slice('plain', 3));
    syncer.start();
    await passes(syncer, 1);
    assert.deepEqual(syncer.reports.map((r) => r.failures), [0]);
    assert.ok(syncer.programmed().frontendCount() >= 4, `${syncer.programmed().frontendCount()} frontends programmed`);
    const first = syncer.northSouthFrontends();
    assert.deepEqual(first.map((f) => f.address).sort(), ['0.0.0.0', '198.18.200.1']);
    // A ClusterIP-only change: the same list object, and no walk of every programmed frontend.
    const p = syncer.programmed();
    const walk = p.programmedFrontends;
    let walks = 0;
    p.programmedFrontends = () => {
      walks++;
      return walk.call(p);
    };
    state.upsertSlice(slice('plain', 4));
    await passes(syncer, 2);
    assert.equal(syncer.northSouthFrontends(), first);
    assert.equal(walks, 0, 'a partial sync walked every programmed frontend');
    // The ExternalIP Service goes: its address leaves the list.
    state.deleteService(service('ext', 'ClusterIP', '10.96.0.11'));
    await passes(syncer, 3);
    assert.deepEqual(syncer.northSouthFrontends().map((f) => f.address), ['0.0.0.0']);
  } finally {
    syncer.stop();
  }
});

test('IPv6 north-south frontend addresses (NodePort per node address, ExternalIP) are in the list too: XDP\'s IPv6 set is fed from it', async () => {
  const state = new ClusterState(() => syncer.trigger());
  const syncer: Syncer = new Syncer(state, maps, {
    nodeName: 'n1', translate: { maxEndpointsPerService: 1000, ipFamilies: ['IPv4', 'IPv6'] }, minSyncPeriodMs: 0, syncPeriodMs: 3600_000,
  }, new AgentMetrics(), new ProxyHealth(60_000), pino({ level: 'silent' }));
  try {
    state.setNode({ metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.10' }, { type: 'InternalIP', address: 'fd00:18::10' }] } });
    state.upsertService(service('np6', 'NodePort', 'fd00:96::10', { clusterIPs: ['fd00:96::10'], ipFamilies: ['IPv6'], externalIPs: ['2001:db8:200::1'] }));
    state.upsertSlice({ ...slice('np6', 1), addressType: 'IPv6', endpoints: [{ addresses: ['fd00:1::1'], conditions: { ready: true } }] });
    syncer.start();
    await passes(syncer, 1);
    assert.deepEqual(syncer.reports.map((r) => r.failures), [0]);
    assert.deepEqual(syncer.northSouthFrontends().map((f) => f.address).sort(), ['2001:db8:200::1', 'fd00:18::10']);
  } finally {
    syncer.stop();
  }
});
