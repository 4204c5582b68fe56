// The store stamps when the oldest change not yet taken arrived
// (process.hrtime, CLOCK_MONOTONIC): the syncer's `sync done` line carries it
// as changedAtNs, and bench/controlplane.ts splits each one-change sample
// there into the API's and watch's share and the agent's own.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ClusterState } from '../../src/agent/store';
import { ep, slice, svc } from './translate-fixtures';

test('takeDirty returns when the oldest pending change arrived, then starts over', () => {
  const state = new ClusterState(() => undefined);
  assert.equal(state.takeDirty().firstChangeAtNs, 0n, 'nothing pending: no stamp');
  const before = process.hrtime.bigint();
  state.upsertService(svc({ name: 'a' }));
  const between = process.hrtime.bigint();
  state.upsertSlice(slice('b-1', [ep('198.18.0.1')], { service: 'b' }));
  state.setNode({ metadata: { name: 'n' } });
  const taken = state.takeDirty();
  assert.ok(taken.firstChangeAtNs >= before && taken.firstChangeAtNs <= between, 'the first change of the batch, not a later one');
  assert.equal(state.takeDirty().firstChangeAtNs, 0n, 'taken: no stamp until the next change');
  const later = process.hrtime.bigint();
  state.setNode({ metadata: { name: 'n', labels: { a: 'b' } } });
  const t = state.takeDirty();
  assert.ok(t.nodeChanged && t.firstChangeAtNs >= later, 'a Node change is stamped too');
});
