// least-connection for IPv6 frontends on the socket path (connect6), with
// real long-lived AF_INET6 TCP connections held by a client in the test
// cgroup + netns: the same properties as IPv4 (sock_lc.test.ts): active
// counts within ±1 under skewed closes, the counts map equals what the
// client holds, and every count returns to 0 at sock_release.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, sh, sluiceBin } from '../helpers/sandbox';
import { Holder } from '../helpers/holdClient';
import { backendsListed, lcSurvivesReinstall, spread } from '../helpers/algorithms';
import { readLcCounts } from '../../src/datapath/lcCounts';

const VIP6 = 'fd00:96::30';
const BACKENDS6 = ['fd00:18::30:2', 'fd00:18::30:3', 'fd00:18::30:4', 'fd00:18::30:5'];
const LC_PORT = 90;
const N = 24;

let sb: Sandbox;

const sluice = (args: string[]): string => sh(sluiceBin, [...args, '--bpffs', sb.bpffs]);

function upsert(port: number, algorithm: string, backends = BACKENDS6): void {
  sluice(['service', 'upsert', '--frontend', `[${VIP6}]:${port}/tcp`, '--backends', backends.map((b) => `[${b}]:8080`).join(','), '--algorithm', algorithm]);
}


/** `sluice backends -o json`: backend address:port -> {id, active}. */
const listed = () => backendsListed(sluice(['backends', '-o', 'json']));

before(async () => {
  sb = Sandbox.create('sluice-lc6-sock');
  await sb.startBackends(BACKENDS6, [8080]);
  sluice(['attach', '--cgroup', sb.cgroup]);
});

after(() => {
  sb?.close();
});

test('IPv6 least-connection keeps active counts within ±1 under skewed closes; counts match what is held and return to 0', async () => {
  upsert(LC_PORT, 'lc');
  const lc = new Holder(sb, VIP6, BACKENDS6);
  const spreads: number[] = [];
  try {
    await lc.open(LC_PORT, N);
    for (let round = 0; round < 3; round++) {
      spreads.push(spread(lc.perBackend(8080)));
      const view = listed();
      for (const [b, n] of lc.perBackend(8080)) assert.equal(view.get(b)?.active, n, `${b}: map count vs held, round ${round}`);
      // Skewed close: every connection on one backend.
      const victim = `${BACKENDS6[round % BACKENDS6.length]}:8080`;
      const gone = [...lc.held].filter(([, b]) => b === victim).map(([id]) => id);
      await lc.close(gone);
      await lc.open(LC_PORT, gone.length);
    }
    spreads.push(spread(lc.perBackend(8080)));
    for (const s of spreads) assert.ok(s <= 1, `least-connection spread ${s}: ${spreads.join(' ')}`);
    const ids = [...listed().values()].map((b) => b.id);
    await lc.closeAll();
    const zero = readLcCounts(sb.bpffs, ids)!;
    assert.deepEqual([...zero.values()], ids.map(() => 0), 'every count back to 0 after the sockets are closed');
  } finally {
    lc.kill();
  }
});

test('IPv6: counts survive a re-install (agent restart) and a backend removed while it held connections goes back to 0', async () => {
  await lcSurvivesReinstall({
    sb, vip: VIP6, backends: BACKENDS6, port: LC_PORT, listed,
    upsert: (backends) => upsert(LC_PORT, 'lc', [...backends]), reinstall: () => sluice(['attach', '--cgroup', sb.cgroup]),
  });
});
