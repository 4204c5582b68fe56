// The IPv6 tables follow the node's families (issue 12, src/agent/mapSizing.ts):
// an agent on an IPv4-only Node pins small IPv6 tables (the full ones cost
// 26 MiB of kernel memory, empty), one on a dual-stack Node the full ones,
// and `ipv6Maps: full` overrides. bytes_memlock from bpftool, as the bench.
import { test, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { Sandbox, sh } from '../helpers/sandbox';
import { AgentProcess } from '../helpers/agentProcess';
import * as abi from '../../src/abi/generated';
import { IPV6_SMALL_ENTRIES } from '../../src/agent/mapSizing';

const NODE = 'node-a';
const V6_MAPS = [abi.SLUICE_MAP_SERVICES6, abi.SLUICE_MAP_RANGES6, abi.SLUICE_MAP_BACKENDS6, abi.SLUICE_MAP_REVNAT6, abi.SLUICE_MAP_AFFINITY6];

let cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const f of cleanup.reverse()) await f();
  cleanup = [];
});

function pinned(bpffs: string, name: string): { max_entries: number; bytes_memlock: number } {
  return JSON.parse(sh('bpftool', ['-j', 'map', 'show', 'pinned', path.join(bpffs, name)])) as { max_entries: number; bytes_memlock: number };
}

async function agentOn(node: Record<string, unknown>, extra: string[] = []): Promise<Sandbox> {
  const sb = Sandbox.create('sluice-mapsz');
  cleanup.push(() => sb.close());
  const api: ApiServerHandle = await startApiServer({ port: 0 });
  cleanup.push(() => api.close());
  api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: NODE }, ...node });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-mapsz-'));
  cleanup.push(() => fs.rmSync(tmp, { recursive: true, force: true }));
  const kubeconfig = path.join(tmp, 'kubeconfig');
  await api.writeKubeconfig(kubeconfig);
  const agent = new AgentProcess([
    '--kubeconfig', kubeconfig, '--node-name', NODE, '--cgroup-path', sb.cgroup, '--bpffs', sb.bpffs,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', ...extra,
  ]);
  cleanup.push(async () => { await agent.stop(); });
  await agent.waitForLog(/informers synced/);
  return sb;
}

const IPV4_ONLY = { spec: { podCIDRs: ['198.18.128.0/24'] }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } };
const DUAL = { spec: { podCIDRs: ['198.18.128.0/24', 'fd00:128::/64'] }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }, { type: 'InternalIP', address: 'fd00:18::1' }] } };

test('an IPv4-only Node: the IPv6 tables are pinned small (kernel memory a fraction of the full ones)', async () => {
  const sb = await agentOn(IPV4_ONLY);
  let bytes = 0;
  for (const name of V6_MAPS) {
    const m = pinned(sb.bpffs, name);
    assert.equal(m.max_entries, IPV6_SMALL_ENTRIES[name], `${name}: max_entries`);
    bytes += m.bytes_memlock;
  }
  assert.ok(bytes < 2 * 1048576, `IPv6 tables take ${(bytes / 1048576).toFixed(2)} MiB on an IPv4-only node (want < 2 MiB)`);
  assert.equal(pinned(sb.bpffs, abi.SLUICE_MAP_SERVICES4).max_entries, abi.MAP_SPECS[abi.SLUICE_MAP_SERVICES4]!.maxEntries, 'IPv4 tables unchanged');
});

test('a dual-stack Node, or ipv6Maps full: the IPv6 tables keep their declared capacities', async () => {
  for (const [node, extra] of [[DUAL, []], [IPV4_ONLY, ['--ipv6-maps', 'full']]] as const) {
    const sb = await agentOn(node, [...extra]);
    for (const name of V6_MAPS) assert.equal(pinned(sb.bpffs, name).max_entries, abi.MAP_SPECS[name]!.maxEntries, `${name} (${extra.join(' ') || 'dual-stack Node'})`);
    for (const f of cleanup.reverse()) await f();
    cleanup = [];
  }
});
