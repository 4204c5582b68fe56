// --nodeport-mode / nodePortMode (issue 17 item 2, docs/dsr.md): default snat,
// the config file's value, the flag wins, anything else refused naming the choices.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { resolveConfig, defaultConfig, AGENT_FLAGS } from '../../src/agent/config';

test('nodePortMode: default snat; config file value; --nodeport-mode wins; bad values refused', () => {
  assert.equal(defaultConfig().nodePortMode, 'snat');
  assert.ok(AGENT_FLAGS.includes('nodeport-mode'));
  assert.equal(resolveConfig(new Map([['nodeport-mode', 'dsr']])).nodePortMode, 'dsr');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-npmode-'));
  try {
    const file = path.join(dir, 'config.yaml');
    fs.writeFileSync(file, 'nodePortMode: hybrid\n');
    assert.equal(resolveConfig(new Map([['config', file]])).nodePortMode, 'hybrid');
    assert.equal(resolveConfig(new Map([['config', file], ['nodeport-mode', 'snat']])).nodePortMode, 'snat');
    assert.throws(() => resolveConfig(new Map([['nodeport-mode', 'geneve']])), /--nodeport-mode: "geneve" is not one of snat, dsr, hybrid/);
    fs.writeFileSync(file, 'nodePortMode: direct\n');
    assert.throws(() => resolveConfig(new Map([['config', file]])), /config file .*: nodePortMode: "direct" is not one of/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
