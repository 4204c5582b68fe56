// An unhandled promise rejection is logged and counted; the agent process
// keeps running. Checked in a child process, where Node's default would
// exit with code 1.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';

const guard = path.resolve(__dirname, '..', '..', 'src', 'agent', 'crashGuard.js');

const script = (install: boolean) => `
const pino = require('pino');
const counted = [];
${install ? `require(${JSON.stringify(guard)}).installRejectionGuard(pino(), (r) => counted.push(r));` : ''}
Promise.reject(new Error('boom from a watch callback'));
setTimeout(() => { console.log(JSON.stringify({ alive: true, counted })); }, 50);
`;

test('without the guard Node exits on an unhandled rejection (the failure the guard prevents)', () => {
  const r = spawnSync(process.execPath, ['-e', script(false)], { encoding: 'utf8', cwd: path.resolve(__dirname, '..', '..', '..') });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /boom from a watch callback/);
});

test('with the guard the process logs, counts and keeps running', () => {
  const r = spawnSync(process.execPath, ['-e', script(true)], { encoding: 'utf8', cwd: path.resolve(__dirname, '..', '..', '..') });
  assert.equal(r.status, 0, r.stderr);
  // pino() writes stdout asynchronously (sonic-boom) and console.log to a
  // pipe synchronously, so on a loaded machine the two lines come in either
  // order: find each by its content, not its position.
  const records = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
  const log = records.find((x) => 'msg' in x) as { msg: string; reason: string } | undefined;
  assert.ok(log, `no log record in ${r.stdout}`);
  assert.match(log.msg, /unhandled promise rejection.*boom from a watch callback/);
  assert.equal(log.reason, 'unhandled_rejection');
  assert.deepEqual(records.find((x) => 'alive' in x), { alive: true, counted: ['unhandled_rejection'] });
  assert.equal(records.length, 2);
});
