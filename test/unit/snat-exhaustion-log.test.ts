// The agent's SNAT exhaustion report (issue 13 item 5): one warning per
// interval in which the data path dropped flows for want of a port, with the
// count, and none while the counter stands still.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import pino from 'pino';
import { SnatExhaustionReporter } from '../../src/agent/snatExhaustion';

test('SNAT exhaustion: one log line per interval that dropped flows, naming the count and the range', () => {
  const lines: Array<{ msg: string; dropped?: number; range?: string }> = [];
  const log = pino(new Writable({ write(chunk: Buffer, _enc, done) { lines.push(JSON.parse(chunk.toString())); done(); } }));
  let counter = 5n; // drops before the agent started are not reported
  const r = new SnatExhaustionReporter(() => counter, log, '61000-65535');
  assert.equal(r.check(), 0n);
  counter += 1000n; // a flood during one interval
  assert.equal(r.check(), 1000n);
  assert.equal(r.check(), 0n);
  counter += 1n;
  assert.equal(r.check(), 1n);
  assert.equal(lines.length, 2, lines.map((l) => l.msg).join('\n'));
  assert.equal(lines[0]?.dropped, 1000);
  assert.equal(lines[0]?.range, '61000-65535');
  assert.match(lines[0]?.msg ?? '', /SNAT ports exhausted: 1000 new flow/);
});
