// `sluice services` reads the pinned maps in three passes (backends, then the
// masters and their ranges) while the agent may be writing. The agent writes
// a new backend before the master that names it, so a Service that gained
// backends between the passes names ids the first pass did not see: the view
// must look those up again and show them, not print them as missing (the
// node-tier smoke saw "?:0,?:0" for a Service right after its endpoints came).
// The interleaving is made exact here: the backends pass returns the snapshot
// taken before the write.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { Sandbox, sluiceBin } from '../helpers/sandbox';
import { openSockLbMaps, type SockLbMaps } from '../../src/datapath/maps';
import { servicesView } from '../../src/cli/inspect';

let sb: Sandbox;
const run = (...args: string[]) => spawnSync(sluiceBin, [...args, '--bpffs', sb.bpffs], { encoding: 'utf8' });

before(() => {
  sb = Sandbox.create('sluice-clisnap');
  assert.equal(spawnSync(sluiceBin, ['attach', '--cgroup', sb.cgroup, '--bpffs', sb.bpffs]).status, 0);
});

after(() => sb?.close());

/** The maps as the CLI saw them when its backends pass ran before `write`. */
function snapshotBefore(maps: SockLbMaps, write: () => void): SockLbMaps {
  const b4 = maps.backends.readAll();
  const b6 = maps.v6?.backends.readAll() ?? [];
  write();
  const stale4 = Object.assign(Object.create(Object.getPrototypeOf(maps.backends) as object) as typeof maps.backends, maps.backends, { readAll: () => b4 });
  const v6 = maps.v6 && { ...maps.v6, backends: Object.assign(Object.create(Object.getPrototypeOf(maps.v6.backends) as object) as typeof maps.v6.backends, maps.v6.backends, { readAll: () => b6 }) };
  return { ...maps, backends: stale4, ...(v6 ? { v6 } : {}) };
}

test('backends written between the backends pass and the masters pass are shown, IPv4 and IPv6', () => {
  assert.equal(run('service', 'upsert', '--frontend', '10.96.61.1:80/tcp', '--backends', '198.18.2.1:8080').status, 0);
  const maps = openSockLbMaps(sb.bpffs);
  try {
    const view = servicesView(snapshotBefore(maps, () => {
      let r = run('service', 'upsert', '--frontend', '10.96.61.1:80/tcp', '--backends', '198.18.2.1:8080,198.18.2.2:8080,198.18.2.3:8080');
      assert.equal(r.status, 0, r.stderr);
      r = run('service', 'upsert', '--frontend', '[fd00:96::61]:80/tcp', '--backends', '[fd00:18::2]:8080,[fd00:18::3]:8080');
      assert.equal(r.status, 0, r.stderr);
    }));
    const v4 = view.find((v) => v.address === '10.96.61.1');
    assert.deepEqual(v4?.backends.map((b) => `${b.address}:${b.port}`).sort(), ['198.18.2.1:8080', '198.18.2.2:8080', '198.18.2.3:8080']);
    const v6 = view.find((v) => v.address === 'fd00:96::61');
    assert.deepEqual(v6?.backends.map((b) => `[${b.address}]:${b.port}`).sort(), ['[fd00:18::2]:8080', '[fd00:18::3]:8080']);
    assert.ok(view.every((v) => v.backends.every((b) => !b.flags.includes('missing'))), JSON.stringify(view));
  } finally {
    maps.close();
  }
});

test('a backend that is really gone still shows as missing', () => {
  const maps = openSockLbMaps(sb.bpffs);
  try {
    const fe = servicesView(maps).find((v) => v.address === '10.96.61.1')!;
    const gone = fe.backends[0]!.id;
    maps.backends.delete(gone); // the master still names it: what a crash between the two writes leaves
    const after = servicesView(maps).find((v) => v.address === '10.96.61.1')!;
    assert.deepEqual(after.backends.find((b) => b.id === gone), { id: gone, address: '?', port: 0, flags: ['missing'] });
  } finally {
    maps.close();
  }
});
