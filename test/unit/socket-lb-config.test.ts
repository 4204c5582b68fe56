// The socketLB agent setting (issue 10, item 4a): config key and flag, with a
// clear error naming where a bad value came from.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { resolveConfig, defaultConfig, AGENT_FLAGS } from '../../src/agent/config';
import { SOCKET_LB_MODES } from '../../src/datapath/sockConfig';
import * as abi from '../../src/abi/generated';

test('socketLB: default all; config file value; --socket-lb wins; --host-netns names the host namespace', () => {
  assert.equal(defaultConfig().socketLB, 'all');
  assert.ok(AGENT_FLAGS.includes('socket-lb') && AGENT_FLAGS.includes('host-netns'));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-socketlb-'));
  try {
    const file = path.join(dir, 'config.yaml');
    fs.writeFileSync(file, 'socketLB: hostNamespaceOnly\nhostNetns: /run/netns/test\n');
    const fromFile = resolveConfig(new Map([['config', file]]));
    assert.equal(fromFile.socketLB, 'hostNamespaceOnly');
    assert.equal(fromFile.hostNetns, '/run/netns/test');
    assert.equal(resolveConfig(new Map([['config', file], ['socket-lb', 'podNamespacesOnly']])).socketLB, 'podNamespacesOnly');
    fs.writeFileSync(file, 'socketLB: hostOnly\n');
    assert.throws(() => resolveConfig(new Map([['config', file]])), /config file .*: socketLB: "hostOnly" is not a socket LB mode \(all, hostNamespaceOnly, podNamespacesOnly\)/);
    assert.throws(() => resolveConfig(new Map([['socket-lb', 'pods']])), /--socket-lb: "pods" is not a socket LB mode/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('socketLB modes map onto the data path values', () => {
  assert.deepEqual(SOCKET_LB_MODES, { all: abi.LB_SOCK_LB_ALL, hostNamespaceOnly: abi.LB_SOCK_LB_HOST_NS_ONLY, podNamespacesOnly: abi.LB_SOCK_LB_POD_NS_ONLY });
});
