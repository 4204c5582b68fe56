// The CLI must not corrupt an agent's maps (issue 11.7): `sluice service
// upsert|delete` on a bpffs whose status entry names a live agent process is
// refused with one clear line unless --force. Through the real entry point.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { Sandbox, sluiceBin } from '../helpers/sandbox';
import { openSockLbMaps } from '../../src/datapath/maps';

let sb: Sandbox;
let fakeAgent: ChildProcess;
const run = (...args: string[]) => spawnSync(sluiceBin, [...args, '--bpffs', sb.bpffs], { encoding: 'utf8' });

/** Write the status entry an agent writes after each sync. */
function claim(pid: number): void {
  const maps = openSockLbMaps(sb.bpffs);
  try {
    maps.agent!.set(0, {
      last_sync_unix_ms: BigInt(Date.now()), last_full_sync_unix_ms: 0n, syncs: 1n, agent_pid: pid,
      services: 0, frontends: 0, backends: 0, last_sync_failures: 0,
    });
  } finally {
    maps.close();
  }
}

before(() => {
  sb = Sandbox.create('sluice-cliguard');
  assert.equal(spawnSync(sluiceBin, ['attach', '--cgroup', sb.cgroup, '--bpffs', sb.bpffs]).status, 0);
  fakeAgent = spawn('sleep', ['60']); // stands in for a running agent's pid
});

after(() => {
  fakeAgent?.kill('SIGKILL');
  sb?.close();
});

test('with no agent status the CLI writes as before', () => {
  const r = run('service', 'upsert', '--frontend', '10.96.60.1:80/tcp', '--backends', '198.18.1.1:8080');
  assert.equal(r.status, 0, r.stderr);
});

test('a live agent\'s bpffs: upsert and delete are refused in one line and nothing changes; --force writes', () => {
  claim(fakeAgent.pid!);
  const before = run('services', '-o', 'json').stdout;
  for (const args of [
    ['service', 'upsert', '--frontend', '10.96.60.2:80/tcp', '--backends', '198.18.1.2:8080'],
    ['service', 'delete', '--frontend', '10.96.60.1:80/tcp'],
  ]) {
    const r = run(...args);
    assert.equal(r.status, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`^sluice service: refused: the agent \\(pid ${fakeAgent.pid}\\) owns ${sb.bpffs}.*--force`));
  }
  assert.equal(run('services', '-o', 'json').stdout, before, 'the maps are untouched');
  const forced = run('service', 'delete', '--frontend', '10.96.60.1:80/tcp', '--force');
  assert.equal(forced.status, 0, forced.stderr);
  assert.match(forced.stdout, /^deleted 10\.96\.60\.1:80\/tcp/);
});

test('a status entry of an agent that is gone does not block the CLI', () => {
  const gone = spawnSync('true').pid!; // exited: /proc/<pid> no longer exists
  claim(gone);
  const r = run('service', 'upsert', '--frontend', '10.96.60.3:80/tcp', '--backends', '198.18.1.3:8080');
  assert.equal(r.status, 0, r.stderr);
});
