// bench/nodeportDsr.ts and bench/report-dsr.ts: the NodePort bench's DSR
// mode (issue 17 item 2). Its ratios pair each DSR round with the SNAT (TC)
// and iptables rounds of the same round, and the verdict "replies around the
// ingress node" holds only when the ingress node encapsulated, translated no
// reply back and its client-facing veth sent (next to) nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dsrSummary, type DsrPath } from '../../bench/nodeportDsr';
import { dsrMarkdown } from '../../bench/report-dsr';
import type { NodePortResult } from '../../bench/nodeport';

const ENCAP = 'north_south/dsr_encapsulated/original';
const DECAP = 'north_south/dsr_decapsulated/original';
const REV = 'north_south/reverse_translated/reply';
const direct: DsrPath = { ingressToClient: 1, ingressFromBackend: 1, ingressToBackend: 1000, clientDirect: 900 };
// Round 2 runs on a machine 2x slower for every mode: the per-round ratios do not move.
const rounds = {
  dsr: [{ rr: 3000, rrP50: 100, echo: 40000 }, { rr: 1500, rrP50: 200, echo: 20000 }],
  others: { tc: [{ rr: 6000, rrP50: 125, echo: 50000 }, { rr: 3000, rrP50: 250, echo: 25000 }], iptables: [{ rr: 2000, rrP50: 200, echo: 40000 }, { rr: 1000, rrP50: 400, echo: 20000 }] },
};

test('dsrSummary: per-round ratios against SNAT and iptables; replies around the ingress node', () => {
  const d = dsrSummary({ rounds, path: direct, ingress: { [ENCAP]: 1000 }, backend: { [DECAP]: 1000, [REV]: 900 } });
  assert.equal(d.rr['dsr/tc'], 0.5);
  assert.equal(d.rr['dsr/iptables'], 1.5);
  assert.equal(d.echo['dsr/tc'], 0.8);
  assert.equal(d.echo['dsr/iptables'], 1);
  assert.equal(d.rrP50['dsr/tc'], 0.8);
  assert.equal(d.rrP50['dsr/iptables'], 0.5);
  assert.deepEqual([d.ingress.encapsulated, d.ingress.reverseTranslated, d.backend.decapsulated, d.backend.reverseTranslated], [1000, 0, 1000, 900]);
  assert.equal(d.repliesBypassedIngress, true);
});

test('dsrSummary: a reply through the ingress node, or no encapsulation, is not DSR', () => {
  const viaIngress = dsrSummary({ rounds, path: { ...direct, ingressToClient: 900, clientDirect: 0 }, ingress: { [ENCAP]: 1000, [REV]: 900 }, backend: {} });
  assert.equal(viaIngress.ingress.reverseTranslated, 900);
  assert.equal(viaIngress.repliesBypassedIngress, false);
  assert.equal(dsrSummary({ rounds, path: direct, ingress: {}, backend: {} }).repliesBypassedIngress, false);
  // The socket path's reverse translations count too (any path, reason reverse_translated).
  assert.equal(dsrSummary({ rounds, path: direct, ingress: { [ENCAP]: 1, 'socket/reverse_translated/reply': 2 }, backend: {} }).repliesBypassedIngress, false);
});

test('dsrMarkdown: the live ratios, the reply path and the program cost table', () => {
  const dsr = dsrSummary({ rounds, path: direct, ingress: { [ENCAP]: 1000 }, backend: { [DECAP]: 1000, [REV]: 900 } });
  const md = dsrMarkdown({ services: 1000, dsr } as NodePortResult, {
    nsPerRun: { ingressSnat: 900, ingressDsr: 750, backendDsrRx: 950, backendLocal: 700 }, ratios: { ingressDsrOverSnat: 0.833, backendDsrRxOverLocal: 1.357 }, runs: 15, calls: 2000,
  }).join('\n');
  assert.match(md, /^\| dsr\/tc \| 0\.50x \| 0\.80x \| 0\.80x \|$/m);
  assert.match(md, /^\| dsr\/iptables \| 1\.50x \| 0\.50x \| 1\.00x \|$/m);
  assert.match(md, /Replies around the ingress node: \*\*yes\*\*/);
  assert.match(md, /^\| ingress \| DSR .* \| 750\.0 \| 0\.83x \|$/m);
  assert.match(md, /^\| backend \| DSR received .* \| 950\.0 \| 1\.36x \|$/m);
  assert.deepEqual(dsrMarkdown(undefined, undefined), []);
});
