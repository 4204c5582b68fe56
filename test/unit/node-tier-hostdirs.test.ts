// scripts/node-tier.sh's host mount points (/opt/cni/bin, /etc/cni/net.d, ...)
// with two clusters up at once (SLUICE_CONFORMANCE_PARALLEL=1: the
// kube-proxy side and the Sluice side): the first side's teardown must not
// remove the directories the other side's nodes still have mounts on (on
// Linux, rmdir of a mount point used in another mount namespace succeeds and
// detaches those mounts). The functions are sourced and run on directories
// in a temporary dir (SLUICE_HOST_DIRS, SLUICE_HOSTDIR_REFS): no cluster, no
// host directory touched.
import { test, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

const repo = path.resolve(__dirname, '..', '..', '..');
let tmp: string;
let dirs: string[];

beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-hostdirs-'));
  dirs = [path.join(tmp, 'opt'), path.join(tmp, 'opt', 'bin'), path.join(tmp, 'etc-cni')];
});
afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** Run `body` in bash with scripts/node-tier.sh sourced, as side `side` (its own state dir). */
function tier(side: string, body: string): void {
  const r = spawnSync('bash', ['-c', `set -euo pipefail; . scripts/node-tier.sh; R=$(state_dir); ${body}`], {
    cwd: repo, encoding: 'utf8', timeout: 20000,
    env: { PATH: process.env.PATH, SLUICE_NODE_DIR: path.join(tmp, `state-${side}`), SLUICE_HOST_DIRS: dirs.join(' '), SLUICE_HOSTDIR_REFS: path.join(tmp, 'refs') },
  });
  assert.equal(r.status, 0, `${side}: ${body}\n${r.stdout}${r.stderr}`);
}
const up = (side: string) => tier(side, 'mkdir -p "$R"; : >"$R/owned"; host_dirs');
const down = (side: string) => tier(side, 'down');
const present = () => dirs.filter((d) => fs.existsSync(d));

test('two sides up at once: the first teardown keeps the host dirs, the last one removes what was created', () => {
  up('kube-proxy');
  up('sluice');
  assert.deepEqual(present(), dirs);
  down('kube-proxy');
  assert.deepEqual(present(), dirs, 'the sluice side still has its mounts on them');
  down('sluice');
  assert.deepEqual(present(), [], 'created by the tier, removed by the last side down');
});

test('the side that did not create them may go down last; directories that existed before are never removed', () => {
  fs.mkdirSync(dirs[2]!);
  up('a');
  up('b');
  down('a');
  down('b');
  assert.deepEqual(present(), [dirs[2]]);
});

test('a side that vanished without teardown (its state dir gone) does not hold the dirs forever', () => {
  up('crashed');
  fs.rmSync(path.join(tmp, 'state-crashed'), { recursive: true, force: true });
  up('b');
  down('b');
  assert.deepEqual(present(), []);
});
