// Shared by the socket-path algorithm tests (sock_algorithms*.test.ts,
// sock_lc*.test.ts): connections from a sandbox netns, per-backend counts,
// client namespaces of their own, `sluice backends` as a map.
import assert from 'node:assert/strict';
import { isIPv6 } from 'node:net';
import { labScript, type Sandbox } from './sandbox';
import { Holder } from './holdClient';
import { readLcCounts } from '../../src/datapath/lcCounts';

/** `count` TCP connections from `netns`, each a new socket: the backend each reached. */
export async function connectFrom(sb: Sandbox, vip: string, port: number, count: number, netns = sb.netns): Promise<string[]> {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', vip, String(port), String(count)], 30000, netns);
  const { results } = JSON.parse(out) as { results: Array<{ backend?: string; error?: string }> };
  assert.deepEqual(results.filter((r) => r.error), [], `connections from ${netns}`);
  return results.map((r) => r.backend ?? 'none');
}

export function histogram(picks: string[]): Map<string, number> {
  const h = new Map<string, number>();
  for (const p of picks) h.set(p, (h.get(p) ?? 0) + 1);
  return h;
}

/** max - min of the counts. */
export function spread(h: Map<string, number>): number {
  const v = [...h.values()];
  return Math.max(...v) - Math.min(...v);
}

/**
 * `n` more client namespaces (other netns cookies), each with the backend
 * addresses on its loopback and a server behind them on `port`.
 */
export function addClientNetns(sb: Sandbox, n: number, backends: readonly string[], port: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const ns = sb.addNetns(`c${i}`);
    for (const b of backends) sb.execInNetns(isIPv6(b) ? ['ip', '-6', 'addr', 'add', `${b}/128`, 'dev', 'lo', 'nodad'] : ['ip', 'addr', 'add', `${b}/32`, 'dev', 'lo'], ns);
    sb.spawnInNetns(['node', labScript('backendServer'), ...backends.map((b) => `${b}:${port}`)], ns);
    out.push(ns);
  }
  return out;
}

/** `sluice backends -o json` (its output given): backend address:port -> {id, active}. */
export function backendsListed(json: string): Map<string, { id: number; active?: number }> {
  const rows = JSON.parse(json) as Array<{ id: number; address: string; port: number; active?: number }>;
  return new Map(rows.map((r) => [`${r.address}:${r.port}`, { id: r.id, active: r.active }]));
}

/**
 * least-connection across a re-install (agent restart) and a backend removal
 * (sock_lc*.test.ts, both families): 8 held connections over 4 backends,
 * re-install, remove the 4th backend (it keeps its 2 counts), 3 more
 * connections (3 each on the rest), then every count, the removed one's
 * too, back to 0 after the sockets close.
 */
export async function lcSurvivesReinstall(t: {
  sb: Sandbox; vip: string; backends: readonly string[]; port: number;
  upsert(backends: readonly string[]): void; reinstall(): void; listed(): Map<string, { id: number; active?: number }>;
}): Promise<void> {
  t.upsert(t.backends);
  const holder = new Holder(t.sb, t.vip, [...t.backends]);
  try {
    await holder.open(t.port, 8);
    const before = t.listed();
    const removed = `${t.backends[3]}:8080`;
    const removedId = before.get(removed)!.id;
    assert.equal(before.get(removed)!.active, 2, 'two of eight on each of four');
    // Re-install: maps adopted from their pins, links swapped in place.
    t.reinstall();
    t.upsert(t.backends.slice(0, 3));
    assert.equal(readLcCounts(t.sb.bpffs, [removedId])!.get(removedId), 2, 'a removed backend keeps the count of the connections it still has');
    await holder.open(t.port, 3);
    const after = t.listed();
    for (const b of t.backends.slice(0, 3)) assert.equal(after.get(`${b}:8080`)?.active, 3, `${b} after 3 more`);
    await holder.closeAll();
    const ids = [...after.values()].map((b) => b.id).concat(removedId);
    assert.deepEqual([...readLcCounts(t.sb.bpffs, ids)!.entries()].filter(([, n]) => n !== 0), [], 'all 0, the removed backend too');
  } finally {
    holder.kill();
  }
}
