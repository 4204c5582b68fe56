// bench/nodeport.ts: the in-kernel generator's packets/s rows (issue 17).
// The node's share of a live series is what is left of its CPU per packet
// once the round's generator+sink baseline is taken off, and the ratios pair
// each mode with the other modes' series of the same round (docs/bench.md,
// "How the packets/s rows are measured").
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { nodeRate, xdpRatios, type LiveFlood, type NodePortModeId, type NodePortModeResult, type NodePortRound } from '../../bench/nodeport';

/** A live series whose whole chain costs `ns` CPU ns per packet. */
function live(ns: number, arrived = 1_000_000): LiveFlood {
  const cpu = (ns * arrived) / 1e9;
  return { sent: arrived, arrived, elapsed_s: 2 * cpu, cpu_s: cpu, per_s: arrived / (2 * cpu), per_cpu_s: arrived / cpu };
}

function round(liveNs: number, baseNs: number, plainNs?: number): NodePortRound {
  return {
    rr: { ok: 1, failed: 0, per_s: 1, p50_us: 1, p99_us: 1 },
    pps: { sent: 1, received: 1, per_s: 1 },
    live: live(liveNs),
    liveBase: live(baseNs),
    ...(plainNs !== undefined ? { livePlain: live(plainNs) } : {}),
  };
}

function mode(id: NodePortModeId, rounds: NodePortRound[]): NodePortModeResult {
  return { id, label: id, rounds, rrPerS: NaN, rrP50Us: NaN, rrP99Us: NaN, ppsPerS: NaN, floodPerS: NaN, plainPerS: NaN, livePerCpuS: NaN, livePerS: NaN, liveNodeNs: NaN, liveBaseNs: NaN, failed: 0 };
}

test('nodeRate takes the baseline CPU per packet off the series', () => {
  // 700 ns per packet through generator + node + sink, 300 ns of it generator + sink.
  assert.equal(Math.round(1e9 / nodeRate(live(700), live(300))), 400);
  // Missing or non-positive remainders are NaN (filtered out of medians), never a negative rate.
  assert.ok(Number.isNaN(nodeRate(live(300), live(400))));
  assert.ok(Number.isNaN(nodeRate(undefined, live(300))));
  assert.ok(Number.isNaN(nodeRate(live(300), undefined)));
});

test('xdpRatios pairs the modes round by round, whole chain and node share', () => {
  // Round 1: a quiet machine; round 2: everything 1.5x slower (another job). Each
  // round's baseline moves with it, so the node-share ratio is the same in both.
  const modes: Record<string, NodePortModeResult> = {
    'sluice-xdp-native': mode('sluice-xdp-native', [{ ...round(500, 300, 640), livePlainXdpNs: 30 }, { ...round(750, 450, 960), livePlainXdpNs: 30 }]),
    'sluice-tc': mode('sluice-tc', [round(1100, 300, 600), round(1650, 450, 900)]),
    'iptables-legacy': mode('iptables-legacy', [round(1500, 300), round(2250, 450)]),
  };
  const x = xdpRatios(modes)!;
  // Whole chain: 1100/500 = 2.2 in both rounds.
  assert.equal(x.live['native/tc']!.toFixed(3), '2.200');
  // Node share: (1100-300)/(500-300) = 4, (1650-450)/(750-450) = 4.
  assert.equal(x.liveNode['native/tc']!.toFixed(3), '4.000');
  assert.equal(x.liveNode['native/iptables']!.toFixed(3), '6.000');
  assert.equal(x.liveNode['tc/iptables']!.toFixed(3), '1.500');
  // Per wall second, the series were 2x their CPU time in this fixture.
  assert.equal(x.liveWall['native/tc']!.toFixed(3), '2.200');
  // Non-Service: with / without XDP, whole chain 640/600 and node share (640-300)/(600-300).
  assert.equal(x.livePlainCost.native!.toFixed(4), '1.0667');
  assert.equal(x.livePlainNodeCost.native!.toFixed(4), '1.1333');
  assert.equal(x.livePlainCost.generic, undefined);
  // Derived: the program's 30 ns over the node's no-XDP time per non-Service packet
  // (median of the TC rounds' node rates: 1e9/300 and 1e9/450 -> 360 ns).
  assert.equal(x.livePlainNoXdpNs!.toFixed(1), '360.0');
  assert.equal(x.livePlainDerivedCost!.toFixed(4), '1.0833');
});

test('a round missing in one mode is left out of that pair only', () => {
  const modes: Record<string, NodePortModeResult> = {
    'sluice-xdp-native': mode('sluice-xdp-native', [round(500, 300), round(500, 300), round(600, 300)]),
    'sluice-tc': mode('sluice-tc', [round(1100, 300), round(900, 300)]),
  };
  // Rounds 1 and 2 pair (4x and 3x); round 3 has no TC partner. Median of [4, 3] = 3.5.
  assert.equal(xdpRatios(modes)!.liveNode['native/tc']!.toFixed(3), '3.500');
});
