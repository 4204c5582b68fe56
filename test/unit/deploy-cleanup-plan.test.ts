// `sluice cleanup-kube-proxy`: the iptables plan computed from a ruleset that
// real kube-proxy (v1.34, iptables mode) wrote in the cluster tier
// (test/cluster/fixtures/iptables-save.txt), and from hand-made edge cases.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { isKubeProxyChain, parseIptablesSave, planIptablesCleanup, targetOfRule } from '../../src/cleanup/iptablesPlan';

const repo = path.resolve(__dirname, '..', '..', '..');
const fixture = path.join(repo, 'test', 'cluster', 'fixtures', 'iptables-save.txt');

describe('kube-proxy iptables cleanup plan', () => {
  test('real kube-proxy rules: every KUBE-* chain but kubelet\'s goes, with the jumps into them', { skip: !fs.existsSync(fixture) && 'no cluster-tier fixture' }, () => {
    const saved = fs.readFileSync(fixture, 'utf8');
    const plans = planIptablesCleanup(saved);
    const tables = parseIptablesSave(saved);
    for (const t of tables) {
      const plan = plans.find((p) => p.table === t.name);
      const kube = t.chains.filter((c) => c.startsWith('KUBE-'));
      const kept = kube.filter((c) => !plan?.chains.includes(c));
      assert.deepEqual(kept, kept.filter((c) => ['KUBE-FIREWALL', 'KUBE-KUBELET-CANARY', 'KUBE-MARK-DROP'].includes(c)), `${t.name}: only kubelet's chains stay`);
      // Every rule left behind jumps nowhere we delete.
      const doomed = new Set(plan?.chains ?? []);
      const jumps = new Set(plan?.jumpRules ?? []);
      for (const r of t.rules) {
        const chain = r.split(' ')[1]!;
        if (doomed.has(chain) || jumps.has(r)) continue;
        assert.ok(!doomed.has(targetOfRule(r) ?? ''), `${t.name}: rule left pointing at a deleted chain: ${r}`);
      }
    }
    const nat = plans.find((p) => p.table === 'nat')!;
    assert.ok(nat.chains.includes('KUBE-SERVICES') && nat.chains.some((c) => c.startsWith('KUBE-SEP-')));
    assert.ok(nat.jumpRules.some((r) => r.startsWith('-A PREROUTING') && r.endsWith('-j KUBE-SERVICES')));
  });

  test('restore input: flush lines, then rule deletions, then chain deletions, in one commit', () => {
    const saved = [
      '*nat',
      ':PREROUTING ACCEPT [0:0]',
      ':POSTROUTING ACCEPT [0:0]',
      ':DOCKER - [0:0]',
      ':KUBE-SERVICES - [0:0]',
      ':KUBE-SVC-ABC - [0:0]',
      ':KUBE-SEP-XYZ - [0:0]',
      ':KUBE-POSTROUTING - [0:0]',
      '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
      '-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER',
      '-A PREROUTING -m comment --comment "an old kube-proxy comment" -j KUBE-SERVICES',
      '-A POSTROUTING -g KUBE-POSTROUTING',
      '-A KUBE-SERVICES -d 10.96.0.10/32 -j KUBE-SVC-ABC',
      '-A KUBE-SVC-ABC -j KUBE-SEP-XYZ',
      'COMMIT',
      '*filter',
      ':INPUT ACCEPT [0:0]',
      ':KUBE-FIREWALL - [0:0]',
      '-A INPUT -j KUBE-FIREWALL',
      'COMMIT',
    ].join('\n');
    const plans = planIptablesCleanup(saved);
    assert.equal(plans.length, 1, 'filter holds only kubelet\'s chain: untouched');
    assert.equal(plans[0]!.restoreInput, [
      '*nat',
      ':KUBE-SERVICES - [0:0]',
      ':KUBE-SVC-ABC - [0:0]',
      ':KUBE-SEP-XYZ - [0:0]',
      ':KUBE-POSTROUTING - [0:0]',
      '-D PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
      '-D PREROUTING -m comment --comment "an old kube-proxy comment" -j KUBE-SERVICES',
      '-D POSTROUTING -g KUBE-POSTROUTING',
      '-X KUBE-SERVICES',
      '-X KUBE-SVC-ABC',
      '-X KUBE-SEP-XYZ',
      '-X KUBE-POSTROUTING',
      'COMMIT',
      '',
    ].join('\n'));
  });

  test('nothing of kube-proxy\'s: no plan', () => {
    assert.deepEqual(planIptablesCleanup('*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\nCOMMIT\n'), []);
    assert.deepEqual(planIptablesCleanup(''), []);
  });

  test('chain names: per-service prefixes only in nat, fixed names per table', () => {
    assert.ok(isKubeProxyChain('nat', 'KUBE-SVL-Q3T5Z'));
    assert.ok(isKubeProxyChain('nat', 'KUBE-FW-Q3T5Z'));
    assert.ok(!isKubeProxyChain('filter', 'KUBE-SVC-Q3T5Z'));
    assert.ok(isKubeProxyChain('filter', 'KUBE-IPVS-FILTER'), 'ipvs mode');
    assert.ok(!isKubeProxyChain('filter', 'KUBE-FIREWALL'), "kubelet's");
    assert.ok(!isKubeProxyChain('nat', 'KUBE-MARK-DROP'), "kubelet's");
    assert.ok(isKubeProxyChain('mangle', 'KUBE-PROXY-CANARY'));
  });
});
