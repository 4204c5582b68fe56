// External devices without Ethernet headers (tun, WireGuard, IPIP: packets
// start at the IP header) would be misparsed by the TC programs, which read
// IPv4 at offset 14. They are refused at attach, with an error naming the
// device and its link type; the agent logs it, counts it
// (sluice_errors_total{reason="tc_device_not_ethernet"}) and serves the
// other devices. Only tun can be created on this kernel (no ipip/wireguard
// modules); its link type "none" is the one WireGuard devices have too.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as path from 'node:path';
import { TcHarness, attachInNetns } from '../bpf/tc_harness';
import { NodeAgent } from '../helpers/nodeAgent';
import { waitFor } from '../helpers/sandbox';

const ns = `sldt-${randomBytes(3).toString('hex')}`;
const peer = `${ns}-p`;
let h: TcHarness;

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });

before(() => {
  ip('netns', 'add', ns);
  ip('netns', 'add', peer);
  ip('-n', ns, 'tuntap', 'add', 'dev', 'tun0', 'mode', 'tun');
  ip('-n', ns, 'tuntap', 'add', 'dev', 'tap0', 'mode', 'tap');
  ip('-n', ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', peer);
  ip('-n', ns, 'addr', 'add', '198.18.30.1/24', 'dev', 'eth0');
  ip('-n', ns, 'link', 'set', 'lo', 'up');
  ip('-n', ns, 'link', 'set', 'eth0', 'up');
  h = TcHarness.create('sluice-tcdevtype');
});

after(() => {
  h?.close();
  spawnSync('ip', ['netns', 'del', ns]);
  spawnSync('ip', ['netns', 'del', peer]);
});

const attach = (device: string) => attachInNetns(`/run/netns/${ns}`, h.pinDir, [device]);

test('a tun device (no Ethernet header) is refused at attach, naming the device and its link type', () => {
  const r = attach('tun0');
  assert.equal(r.status, 1, `stdout ${r.stdout}`);
  assert.match(r.stderr, /device tun0: link type "none" is not Ethernet/);
  assert.equal(r.stdout, '', 'nothing attached');
  assert.equal(spawnSync('ls', [path.join(h.pinDir, 'links', 'tc-tun0-ingress')]).status, 2, 'no link pinned for tun0');
});

test('Ethernet devices (veth, tap) attach', () => {
  for (const dev of ['eth0', 'tap0']) {
    const r = attach(dev);
    assert.equal(r.status, 0, `${dev}: ${r.stderr}`);
    assert.equal(r.stdout.trim().split('\n').length, 2, `${dev}: ingress and egress`);
  }
});

test('the agent refuses the tun device with an error log and a metric, and serves the Ethernet one', async () => {
  const agent = await NodeAgent.start(`/run/netns/${ns}`, 'n1', ['--devices', 'tun0,eth0']);
  try {
    await waitFor('the refusal is logged', () => /device tun0: link type \\"none\\" is not Ethernet/.test(agent.log), 5000)
      .catch((err: Error) => { throw new Error(`${err.message}: ${agent.log.slice(-2000)}`); });
    assert.match(agent.log, /"device":"eth0".*"snatAddress":"198\.18\.30\.1","msg":"TC attached to the external devices"/);
    const serving = /"metrics":"([\d.]+:\d+)"/.exec(agent.log);
    assert.ok(serving, 'metrics address logged');
    const metrics = spawnSync('nsenter', [`--net=/run/netns/${ns}`, process.execPath, '-e',
      `require('http').get('http://${serving[1]}/metrics', (r) => { let b = ''; r.on('data', (d) => (b += d)); r.on('end', () => process.stdout.write(b)); });`], { encoding: 'utf8', timeout: 5000 });
    assert.match(metrics.stdout, /sluice_errors_total\{reason="tc_device_not_ethernet"\} 1/);
  } finally {
    await agent.stop();
  }
});
