// --snat-address per family (issue 14): the agent takes one IPv4 and one IPv6
// value ("198.18.31.9,fd00:31::9"), and without it takes each family's
// address from the first external device, as it did for IPv4 only. The real
// agent in a throwaway node namespace (veth eth0 with 198.18.31.1/24 and
// fd00:31::1/64); no traffic is sent.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { NodeAgent } from '../helpers/nodeAgent';
import { waitFor } from '../helpers/sandbox';
import { snatAddresses } from '../../src/agent/config';

const ns = `slsn-${randomBytes(3).toString('hex')}`;
const peer = `${ns}-p`;
const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });

before(() => {
  ip('netns', 'add', ns);
  ip('netns', 'add', peer);
  execFileSync('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-w', 'net.ipv6.conf.all.disable_ipv6=0', 'net.ipv6.conf.default.disable_ipv6=0']);
  ip('-n', ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', peer);
  ip('-n', ns, 'addr', 'add', '198.18.31.1/24', 'dev', 'eth0');
  ip('-n', ns, 'addr', 'add', 'fd00:31::1/64', 'dev', 'eth0', 'nodad');
  ip('-n', ns, 'link', 'set', 'lo', 'up');
  ip('-n', ns, 'link', 'set', 'eth0', 'up');
});

after(() => {
  spawnSync('ip', ['netns', 'del', ns]);
  spawnSync('ip', ['netns', 'del', peer]);
});

/** The agent's "TC attached" log record. */
async function attachedRecord(args: string[]): Promise<Record<string, unknown>> {
  const agent = await NodeAgent.start(`/run/netns/${ns}`, 'n1', ['--devices', 'eth0', ...args]);
  try {
    await waitFor('the TC attach log', () => agent.log.includes('TC attached to the external devices'), 5000)
      .catch((err: Error) => { throw new Error(`${err.message}: ${agent.log.slice(-2000)}`); });
    const line = agent.log.split('\n').find((l) => l.includes('TC attached to the external devices'))!;
    return JSON.parse(line) as Record<string, unknown>;
  } finally {
    await agent.stop();
  }
}

test('--snat-address takes one address per family; two of one family or a non-address are refused', () => {
  assert.deepEqual(snatAddresses('198.18.31.9,fd00:31::9'), { v4: '198.18.31.9', v6: 'fd00:31::9' });
  assert.deepEqual(snatAddresses('fd00:31::9'), { v6: 'fd00:31::9' });
  assert.throws(() => snatAddresses('198.18.31.9,198.18.31.10'), /two IPv4 addresses/);
  assert.throws(() => snatAddresses('eth0'), /not an IP address/);
});

test('without --snat-address each family\'s SNAT address comes from the external device', async () => {
  const r = await attachedRecord([]);
  assert.equal(r.snatAddress, '198.18.31.1');
  assert.equal(r.snatAddress6, 'fd00:31::1');
});

test('--snat-address 198.18.31.9,fd00:31::9 sets both families', async () => {
  const r = await attachedRecord(['--snat-address', '198.18.31.9,fd00:31::9']);
  assert.equal(r.snatAddress, '198.18.31.9');
  assert.equal(r.snatAddress6, 'fd00:31::9');
});
