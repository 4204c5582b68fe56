// `sluice cleanup-kube-proxy` against real kube-proxy rules, in a network
// namespace this test creates (never the machine's own): the iptables rules
// and nftables tables that upstream kube-proxy v1.34 wrote in the cluster tier
// (test/cluster/fixtures), plus legacy-backend rules and rules that are not
// kube-proxy's and must stay.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

const repo = path.resolve(__dirname, '..', '..', '..');
const fixtures = path.join(repo, 'test', 'cluster', 'fixtures');
const netns = `slcleanup-${randomBytes(4).toString('hex')}`;

function skipReason(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces, iptables)';
  for (const tool of ['ip', 'nsenter', 'iptables-nft-restore', 'nft']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) return `${tool} is not installed`;
  }
  for (const f of ['iptables-save.txt', 'nft-ruleset.json']) {
    if (!fs.existsSync(path.join(fixtures, f))) return `no cluster-tier fixture ${f}`;
  }
  return undefined;
}
const skip = skipReason();

/** Run argv inside the test's namespace; throws with stderr on failure unless allowed. */
function inNs(argv: string[], opts: { input?: string; allowFail?: boolean } = {}) {
  const r = spawnSync('nsenter', [`--net=/run/netns/${netns}`, ...argv], { input: opts.input, encoding: 'utf8', timeout: 60_000 });
  if (!opts.allowFail && r.status !== 0) throw new Error(`${argv.join(' ')} in ${netns}: exit ${r.status}: ${r.stderr}`);
  return r;
}
const sluice = (...args: string[]) => inNs([process.execPath, path.join(repo, 'bin', 'sluice'), ...args], { allowFail: true });
const rulesOf = (save: string) => inNs([save]).stdout.split('\n').filter((l) => l && !l.startsWith('#')).join('\n');

/** kube-proxy's nftables tables from the fixture, as an `nft -j -f` input that adds them. */
function kubeProxyNftTables(): string {
  const all = (JSON.parse(fs.readFileSync(path.join(fixtures, 'nft-ruleset.json'), 'utf8')) as { nftables: Array<Record<string, Record<string, unknown>>> }).nftables;
  const order = ['table', 'chain', 'set', 'map', 'element', 'rule'];
  const adds = all.flatMap((item) => {
    const [kind, body] = Object.entries(item)[0]!;
    const table = kind === 'table' ? body.name : body.table;
    if (table !== 'kube-proxy' || !order.includes(kind)) return [];
    const { handle: _handle, ...rest } = body;
    return [{ kind, add: { [kind]: rest } }];
  });
  adds.sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind)); // chains before the rules that jump to them
  return JSON.stringify({ nftables: adds.map((a) => ({ add: a.add })) });
}

describe('sluice cleanup-kube-proxy in a network namespace', { skip }, () => {
  const legacy = spawnSync('sh', ['-c', 'command -v iptables-legacy']).status === 0;
  let before_: { nft: string; legacy: string; tables: string } | undefined;

  before(() => {
    const add = spawnSync('ip', ['netns', 'add', netns], { encoding: 'utf8' });
    assert.equal(add.status, 0, add.stderr);
    // The fixture's nfacct match needs an nfacct object this namespace lacks; the rule is kept otherwise.
    const saved = fs.readFileSync(path.join(fixtures, 'iptables-save.txt'), 'utf8').replace(/-m nfacct --nfacct-name\s+\S+\s+/g, '');
    inNs(['iptables-nft-restore'], { input: saved });
    // Not kube-proxy's: must survive.
    inNs(['iptables-nft', '-A', 'INPUT', '-s', '192.0.2.99/32', '-j', 'DROP']);
    inNs(['iptables-nft', '-t', 'nat', '-N', 'MY-NAT']);
    inNs(['iptables-nft', '-t', 'nat', '-A', 'POSTROUTING', '-s', '198.18.0.0/15', '-j', 'MY-NAT']);
    const tmp = path.join(os.tmpdir(), `${netns}-nft.json`);
    try {
      fs.writeFileSync(tmp, kubeProxyNftTables());
      inNs(['nft', '-j', '-f', tmp]);
    } finally {
      fs.rmSync(tmp, { force: true });
    }
    inNs(['nft', 'add', 'table', 'inet', 'keepme']);
    if (legacy) {
      inNs(['iptables-legacy', '-t', 'nat', '-N', 'KUBE-SERVICES']);
      inNs(['iptables-legacy', '-t', 'nat', '-N', 'KUBE-SVC-LEGACY']);
      inNs(['iptables-legacy', '-t', 'nat', '-A', 'KUBE-SERVICES', '-d', '10.96.0.10/32', '-j', 'KUBE-SVC-LEGACY']);
      inNs(['iptables-legacy', '-t', 'nat', '-A', 'OUTPUT', '-m', 'comment', '--comment', 'kubernetes service portals', '-j', 'KUBE-SERVICES']);
    }
    before_ = { nft: rulesOf('iptables-nft-save'), legacy: legacy ? rulesOf('iptables-legacy-save') : '', tables: inNs(['nft', 'list', 'tables']).stdout };
    assert.match(before_.nft, /KUBE-SEP-/, 'the fixture loaded');
    assert.match(before_.tables, /table ip kube-proxy/);
  });

  after(() => {
    spawnSync('ip', ['netns', 'del', netns]);
  });

  test('--dry-run prints the plan and changes nothing', () => {
    const r = sluice('cleanup-kube-proxy', '--dry-run');
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /would remove: iptables \(nft\) table nat: flush and delete \d+ kube-proxy chain/);
    assert.match(r.stdout, /would remove: nftables table ip kube-proxy/);
    assert.match(r.stdout, /would remove: nftables table ip6 kube-proxy/);
    assert.match(r.stdout, /-X KUBE-SERVICES/);
    if (legacy) assert.match(r.stdout, /would remove: iptables \(legacy\) table nat/);
    assert.equal(rulesOf('iptables-nft-save'), before_!.nft);
    if (legacy) assert.equal(rulesOf('iptables-legacy-save'), before_!.legacy);
    assert.equal(inNs(['nft', 'list', 'tables']).stdout, before_!.tables);
  });

  test("removes kube-proxy's chains and tables, keeps everything else", () => {
    const r = sluice('cleanup-kube-proxy', '-o', 'json');
    assert.equal(r.status, 0, r.stderr + r.stdout);
    const report = JSON.parse(r.stdout) as { dryRun: boolean; steps: Array<{ ok: boolean; what: string }>; errors: string[] };
    assert.equal(report.dryRun, false);
    assert.deepEqual(report.errors, []);
    assert.ok(report.steps.length >= 5 && report.steps.every((s) => s.ok), JSON.stringify(report.steps));

    const after_ = rulesOf('iptables-nft-save');
    const kube = after_.split('\n').filter((l) => /KUBE-/.test(l));
    assert.deepEqual(kube, [':KUBE-FIREWALL - [0:0]', '-A INPUT -j KUBE-FIREWALL', '-A OUTPUT -j KUBE-FIREWALL'], "only kubelet's chain is left");
    assert.match(after_, /-A INPUT -s 192\.0\.2\.99\/32 -j DROP/);
    assert.match(after_, /-A POSTROUTING -s 198\.18\.0\.0\/15 -j MY-NAT/);
    if (legacy) assert.doesNotMatch(rulesOf('iptables-legacy-save'), /KUBE-/);
    const tables = inNs(['nft', 'list', 'tables']).stdout;
    assert.doesNotMatch(tables, /kube-proxy/);
    assert.match(tables, /table inet keepme/);
  });

  test('a second run finds nothing to do', () => {
    const r = sluice('cleanup-kube-proxy');
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /no kube-proxy rules found: nothing to do/);
  });
});
