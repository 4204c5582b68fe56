// The CLI as a user meets it: the real entry point, one-line errors and exit codes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs, UsageError } from '../../src/cli/args';
import { parseEndpoint } from '../../src/datapath/addr';
import { resolveConfig, defaultConfig } from '../../src/agent/config';
import { IdAllocator } from '../../src/datapath/ids';
import { ProxyHealth } from '../../src/agent/health';

const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'sluice');
const run = (...args: string[]) => spawnSync(bin, args, { encoding: 'utf8' });

test('errors are one clear line and a non-zero exit', () => {
  const cases: Array<[string[], number, RegExp]> = [
    [['services', '--bpffs', '/nonexistent/sluice'], 1, /^sluice services: no pinned map \/nonexistent\/sluice\/sluice_svc4: Sluice is not installed/],
    [['service', 'upsert', '--frontend', '10.96.0.1:99999/tcp', '--bpffs', '/nonexistent'], 1, /port 99999 is outside 1-65535/],
    [['service', 'upsert', '--frontend', '10.96.0.1:80/sctp'], 1, /unsupported protocol "sctp"/],
    [['service', 'upsert', '--bpffs'], 2, /--bpffs needs a value/],
    [['services', '--bogus'], 2, /unknown flag --bogus/],
    [['nosuch'], 2, /unknown command "nosuch"/],
    [['agent', '--sync-period', 'soon'], 1, /--sync-period: "soon" is not a duration/],
  ];
  for (const [args, code, pattern] of cases) {
    const r = run(...args);
    assert.equal(r.status, code, `${args.join(' ')}: exit ${r.status}, stderr ${r.stderr}`);
    // The first line says it all; only an unknown command adds the usage.
    assert.match(r.stderr.split('\n')[0]!, pattern, args.join(' '));
    if (args[0] !== 'nosuch') assert.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`);
  }
});

test('help lists the commands', () => {
  const r = run('--help');
  assert.equal(r.status, 0);
  for (const c of ['services', 'backends', 'status', 'service', 'attach', 'detach', 'agent', 'apiserver', 'demo']) {
    assert.match(r.stdout + run('help').stdout, new RegExp(`\\b${c}\\b`));
  }
});

test('argument parsing', () => {
  const a = parseArgs(['upsert', '--frontend', '10.0.0.1:80', '--backends=1.2.3.4:80', '-o', 'json'], { values: ['frontend', 'backends', 'output'] });
  assert.deepEqual(a.positional, ['upsert']);
  assert.equal(a.flags.get('frontend'), '10.0.0.1:80');
  assert.equal(a.flags.get('backends'), '1.2.3.4:80');
  assert.equal(a.flags.get('output'), 'json');
  assert.throws(() => parseArgs(['--x'], { values: [] }), UsageError);
  assert.deepEqual(parseEndpoint('10.96.0.10:53/UDP'), { address: '10.96.0.10', port: 53, proto: 'udp' });
  assert.throws(() => parseEndpoint('10.96.0.300:53'), /not an IPv4 address/);
  assert.throws(() => parseEndpoint('10.96.0.3'), /expected ADDRESS:PORT/);
});

test('agent config: defaults, then the YAML file, then flags', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-config-'));
  try {
    const file = path.join(dir, 'config.yaml');
    fs.writeFileSync(file, 'nodeName: from-file\nsyncPeriodSeconds: 60\nnodePortAddresses: [198.18.0.0/15]\n');
    const c = resolveConfig(new Map([['config', file], ['sync-period', '7']]));
    assert.equal(c.nodeName, 'from-file');
    assert.equal(c.syncPeriodSeconds, 7, 'a flag wins over the file');
    assert.deepEqual(c.nodePortAddresses, ['198.18.0.0/15']);
    assert.equal(c.healthzBindAddress, defaultConfig().healthzBindAddress);
    assert.equal(c.healthzBindAddress, '0.0.0.0:10256');
    assert.equal(c.metricsBindAddress, '127.0.0.1:10249');
    fs.writeFileSync(file, 'nodName: typo\n');
    assert.throws(() => resolveConfig(new Map([['config', file]])), /unknown setting "nodName"/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('ids: 0 is never handed out, adopted ids are kept, freed ids rest in quarantine and come back oldest first', () => {
  const ids = new IdAllocator('backend');
  ids.reserve(3);
  ids.reserve(7);
  const got = [ids.allocate(), ids.allocate(), ids.allocate(), ids.allocate(), ids.allocate(), ids.allocate()];
  assert.deepEqual(got, [1, 2, 4, 5, 6, 8]);
  ids.release(4);
  ids.release(2);
  assert.equal(ids.allocate(), 9, 'released ids are quarantined until recycle()');
  ids.recycle();
  assert.deepEqual([ids.allocate(), ids.allocate(), ids.allocate()], [4, 2, 10], 'oldest freed first, then fresh ids');
  ids.unallocate(10);
  assert.equal(ids.allocate(), 10, 'an id that never reached a map is reusable at once');
  ids.reserve(1_000_000);
  assert.equal(ids.allocate(), 1_000_001, 'a huge gap below a stray adopted id is skipped, not queued');
  assert.equal(ids.size, 12);
  assert.throws(() => ids.reserve(0), /reserved as invalid/);
});

test('health: healthy until a change waits longer than the timeout, as kube-proxy', () => {
  let now = 1_000_000;
  const h = new ProxyHealth(60_000, () => now);
  assert.equal(h.healthy(), true, 'fresh: nothing pending');
  h.queued();
  now += 59_000;
  assert.equal(h.healthy(), true, 'pending, within the timeout');
  now += 2_000;
  assert.equal(h.healthy(), false, 'pending too long without a sync');
  h.updated();
  assert.equal(h.healthy(), true);
  assert.deepEqual(Object.keys(h.body('/healthz', true)).sort(), ['currentTime', 'lastUpdated', 'nodeEligible']);
});
