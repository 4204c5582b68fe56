// --xdp-mode / xdpMode (issue 17): default off, the config file's value, the
// flag wins, anything else refused naming the choices.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { resolveConfig, defaultConfig, AGENT_FLAGS } from '../../src/agent/config';

test('xdpMode: default off; config file value; --xdp-mode wins; bad values refused', () => {
  assert.equal(defaultConfig().xdpMode, 'off');
  assert.ok(AGENT_FLAGS.includes('xdp-mode'));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-xdpmode-'));
  try {
    const file = path.join(dir, 'config.yaml');
    fs.writeFileSync(file, 'xdpMode: native\n');
    assert.equal(resolveConfig(new Map([['config', file]])).xdpMode, 'native');
    assert.equal(resolveConfig(new Map([['config', file], ['xdp-mode', 'auto']])).xdpMode, 'auto');
    assert.throws(() => resolveConfig(new Map([['xdp-mode', 'driver']])), /--xdp-mode: "driver" is not one of native, generic, off, auto/);
    fs.writeFileSync(file, 'xdpMode: fast\n');
    assert.throws(() => resolveConfig(new Map([['config', file]])), /config file .*: xdpMode: "fast" is not one of/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
