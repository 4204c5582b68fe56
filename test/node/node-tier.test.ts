// The node tier end to end (scripts/node-tier.sh run): two kubelet +
// containerd nodes joined to a real control plane, no kube-proxy, Sluice
// installed from deploy/kubernetes with `kubectl apply`, the smoke
// (scripts/node-tier/smoke.sh), and a teardown that must leave nothing behind.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';

const repo = join(__dirname, '..', '..', '..');

function run(argv: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    // Its own process group: a timeout signals flock and the script alike.
    const p = spawn(argv[0]!, argv.slice(1), { cwd: repo, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let out = '';
    p.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    p.stderr.on('data', (d: Buffer) => { out += d.toString(); });
    // SIGTERM runs the script's EXIT trap (teardown) before it goes.
    const timer = setTimeout(() => { try { process.kill(-p.pid!, 'SIGTERM'); } catch { /* already gone */ } }, timeoutMs);
    p.on('close', (code) => { clearTimeout(timer); resolve({ code, out }); });
  });
}

test('node tier: real nodes, Sluice from deploy/kubernetes, smoke, clean teardown', { timeout: 25 * 60_000 }, async (t) => {
  const dir = `/tmp/slnodes-${randomBytes(3).toString('hex')}`;
  const version = (JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { version: string }).version;
  const archive = join(repo, 'build', 'image', `sluice-${version}.oci.tar`);
  const env: NodeJS.ProcessEnv = { ...process.env, SLUICE_NODE_DIR: dir };
  // image.test.ts (same tier, runs first) has just built it from this dist/.
  if (existsSync(archive) && statSync(archive).mtimeMs > statSync(join(repo, 'dist', '.stamp')).mtimeMs) env.IMAGE_ARCHIVE = archive;
  const t0 = Date.now();
  // The cluster lock (shared with the cluster tier): waited for up to 10 min, then a skip, not a failure.
  const { code, out } = await run(['flock', '-w', '600', '-E', '75', '/tmp/sluice-cluster.lock',
    'bash', join(repo, 'scripts', 'node-tier.sh'), 'run'], env, 23 * 60_000);
  if (code === 75) return t.skip('the cluster lock /tmp/sluice-cluster.lock stayed busy for 10 min');
  const skipped = /^node-tier: SKIPPED: (.*)$/m.exec(out);
  if (code === 4 && skipped) return t.skip(skipped[1]);
  for (const line of out.split('\n').filter((l) => /^(smoke|node-tier):/.test(l))) t.diagnostic(line);
  const prefix = /prefix (slnd[0-9a-f]+)/.exec(out)?.[1];
  assert.equal(code, 0, `scripts/node-tier.sh run exited ${code}:\n${out.split('\n').slice(-60).join('\n')}`);
  t.diagnostic(`node tier ran in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  for (const check of ['capabilities kube-proxy-free', 'clusterIP', 'nodePort', 'kubernetes', 'exec', 'restart', 'rollout',
    'capabilities CNI-chaining', 'chaining', 'clusterIP \\(chained\\)', 'nodePort \\(chained\\)', 'kubernetes \\(chained\\)']) {
    assert.match(out, new RegExp(`^smoke: ok ${check} `, 'm'), `smoke check ${check} did not pass`);
  }
  assert.match(out, /smoke: ok restart \d+ connections, 0 failed/);
  assert.match(out, /smoke: ok rollout \d+ connections, 0 failed/);

  // Nothing left behind: namespaces, mounts, cgroups, processes, the directory.
  assert.ok(prefix, 'no prefix in the output');
  const netns = execFileSync('ip', ['netns', 'list']).toString();
  assert.ok(!netns.includes(prefix), `netns left: ${netns}`);
  const mounts = readFileSync('/proc/mounts', 'utf8');
  assert.ok(!mounts.includes(dir), `mounts left under ${dir}`);
  for (const h of readdirSync('/sys/fs/cgroup')) {
    assert.ok(!existsSync(join('/sys/fs/cgroup', h, prefix)), `cgroup left: /sys/fs/cgroup/${h}/${prefix}`);
  }
  const ps = execFileSync('ps', ['-eo', 'args']).toString();
  assert.ok(!ps.includes(dir), `processes left:\n${ps.split('\n').filter((l) => l.includes(dir)).join('\n')}`);
  assert.ok(!existsSync(dir), `${dir} left`);
});
