// The agent's node flags and environment are the same in the image, in the
// bin/sluice launcher and in the bench's and tests' agent processes (issue 12
// item 2: measured, not guessed).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { AGENT_ENV, AGENT_NODE_FLAGS } from '../../src/agent/nodeFlags';
import { agentNodeFlags } from '../../src/lab/agentProcess';
import { parseDockerfile } from '../node/dockerfile';

const ROOT = path.resolve(__dirname, '..', '..', '..');

test("the image's NODE_OPTIONS are the agent's node flags, its ENV has the agent's environment", () => {
  const dockerfile = fs.readFileSync(path.join(ROOT, 'deploy', 'Dockerfile'), 'utf8');
  const m = /NODE_OPTIONS=(\S+(?: \S+)*?)\s*$/m.exec(dockerfile);
  assert.ok(m, 'deploy/Dockerfile sets no NODE_OPTIONS');
  assert.deepEqual(m[1]!.replace(/^"|"$/g, '').split(' '), [...AGENT_NODE_FLAGS]);
  for (const [k, v] of Object.entries(AGENT_ENV)) {
    assert.match(dockerfile, new RegExp(`^\\s+${k}=${v} \\\\$`, 'm'), `deploy/Dockerfile: no ENV ${k}=${v}`);
  }
});

// scripts/image.sh writes the image config by hand (umoci, no Docker engine):
// its environment must be the Dockerfile's, checked here on every machine, not
// only where the node tier's cached image build runs (it drifted once: the
// image lacked MALLOC_ARENA_MAX).
test("scripts/image.sh gives the image exactly the Dockerfile's ENV", () => {
  const stage = parseDockerfile(fs.readFileSync(path.join(ROOT, 'deploy', 'Dockerfile'), 'utf8'));
  const script = fs.readFileSync(path.join(ROOT, 'scripts', 'image.sh'), 'utf8');
  const env = Object.fromEntries([...script.matchAll(/--config\.env (\w+)=(\S+)/g)].map((m) => [m[1]!, m[2]!]));
  assert.deepEqual(env, stage.env);
});

test('bin/sluice starts node with the same environment and flags', () => {
  const first = fs.readFileSync(path.join(ROOT, 'bin', 'sluice'), 'utf8').split('\n')[0]!;
  const m = /^#!\/usr\/bin\/env -S ((?:\w+=\S+ )*)node((?: \S+)*)$/.exec(first);
  assert.ok(m, `bin/sluice: first line ${first} is not "#!/usr/bin/env -S VAR=value... node flags..."`);
  const env = Object.fromEntries(m[1]!.trim().split(' ').filter(Boolean).map((kv) => kv.split('=') as [string, string]));
  assert.deepEqual(env, { ...AGENT_ENV });
  assert.deepEqual(m[2]!.trim().split(' ').filter(Boolean), [...AGENT_NODE_FLAGS]);
});

test('agent processes get the same flags unless $SLUICE_AGENT_NODE_FLAGS says otherwise', () => {
  const saved = process.env['SLUICE_AGENT_NODE_FLAGS'];
  try {
    delete process.env['SLUICE_AGENT_NODE_FLAGS'];
    assert.deepEqual(agentNodeFlags(), AGENT_NODE_FLAGS);
    process.env['SLUICE_AGENT_NODE_FLAGS'] = '';
    assert.deepEqual(agentNodeFlags(), []);
  } finally {
    if (saved === undefined) delete process.env['SLUICE_AGENT_NODE_FLAGS'];
    else process.env['SLUICE_AGENT_NODE_FLAGS'] = saved;
  }
});
