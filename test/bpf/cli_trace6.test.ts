// `sluice trace` for IPv6 (issue 14), socket path: the IPv6 frontends, their
// backends and the verdict connect() gets, read from real pinned maps made
// by `sluice attach` + `sluice service upsert` in a throwaway sandbox; then a
// real IPv6 connect() confirms the "refuse" verdict. The TC paths:
// test/bpf/cli_trace6_tc.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { Sandbox, sh, sluiceBin, labScript } from '../helpers/sandbox';
import type { TraceResult } from '../../src/cli/trace';

const VIP6 = 'fd00:96::31';
const EMPTY6 = 'fd00:96::32';
const BACKENDS6 = ['fd00:18::31:2', 'fd00:18::31:3'];
let sb: Sandbox;

function sluice(args: string[]): string {
  return sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);
}

function trace(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(sluiceBin, ['trace', ...args, '--bpffs', sb.bpffs], { encoding: 'utf8' });
}

before(() => {
  sb = Sandbox.create('sluice-trace6');
  sluice(['attach', '--cgroup', sb.cgroup]);
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:80/tcp`, '--backends', BACKENDS6.map((b) => `[${b}]:8080`).join(',')]);
  sluice(['service', 'upsert', '--frontend', `[${EMPTY6}]:80/tcp`, '--backends', '']);
});

after(() => sb?.close());

test('an IPv6 frontend: its backends and the translate verdict, as JSON and as text', () => {
  const r = trace('fd00:18::9', `[${VIP6}]:80/tcp`, '-o', 'json');
  assert.equal(r.status, 0, r.stderr);
  const t = JSON.parse(r.stdout) as TraceResult;
  assert.equal(t.path, 'socket');
  assert.equal(t.frontend?.frontend, `[${VIP6}]:80/tcp`);
  assert.deepEqual(t.frontend?.backends.map((b) => `[${b.address}]:${b.port}`).sort(), BACKENDS6.map((b) => `[${b}]:8080`).sort());
  assert.equal(t.verdict.action, 'translate');
  const text = trace('[fd00:18::9]:40000', `[${VIP6}]:80/tcp`);
  assert.equal(text.status, 0, text.stderr);
  assert.match(text.stdout, /^packet: +\[fd00:18::9\]:40000 -> \[fd00:96::31\]:80\/tcp \(path socket\)$/m);
  assert.match(text.stdout, /^verdict: +TRANSLATE: /m);
});

test('no backends: refuse, and a real IPv6 connect() is refused at once; not a frontend: pass', async () => {
  const t = JSON.parse(trace('fd00:18::9', `[${EMPTY6}]:80/tcp`, '-o', 'json').stdout) as TraceResult;
  assert.equal(t.verdict.action, 'refuse');
  assert.match(t.verdict.reason, /ECONNREFUSED/);
  const out = JSON.parse(await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', EMPTY6, '80', '1'])) as { results: Array<{ error?: string }> };
  assert.match(out.results[0]?.error ?? '', /ECONNREFUSED/);
  const none = JSON.parse(trace('fd00:18::9', '[fd00:96::99]:80/tcp', '-o', 'json').stdout) as TraceResult;
  assert.equal(none.verdict.action, 'pass');
});

test('families must match (the TC paths trace IPv6 too: test/bpf/cli_trace6_tc.test.ts)', () => {
  const mixed = trace('198.18.0.9', `[${VIP6}]:80/tcp`);
  assert.equal(mixed.status, 2);
  assert.match(mixed.stderr, /same family/);
});
