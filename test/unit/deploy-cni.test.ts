// deploy/cni/install-cni.sh: chaining into an existing CNI configuration is
// idempotent, survives the primary CNI rewriting its file, and removal gives
// the original configuration back. Runs the real script on temporary dirs.
import { test, describe, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

const repo = path.resolve(__dirname, '..', '..', '..');
const script = path.join(repo, 'deploy', 'cni', 'install-cni.sh');

const FLANNEL = { cniVersion: '0.3.1', name: 'cbr0', plugins: [{ type: 'flannel', delegate: { hairpinMode: true } }, { type: 'portmap', capabilities: { portMappings: true } }] };
const SINGLE = { cniVersion: '0.4.0', name: 'k8s-pod-network', type: 'bridge', bridge: 'cni0', ipam: { type: 'host-local', subnet: '198.19.0.0/24' } };

let dir = '';
let netDir = '';
let binDir = '';
let plugin = '';

function run(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(script, args, {
    encoding: 'utf8', timeout: 20_000,
    env: { ...process.env, CNI_NET_DIR: netDir, CNI_BIN_DIR: binDir, SLUICE_CNI_BIN: plugin },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}
const readJson = (name: string) => JSON.parse(fs.readFileSync(path.join(netDir, name), 'utf8'));
const write = (name: string, v: unknown) => fs.writeFileSync(path.join(netDir, name), JSON.stringify(v));

describe('install-cni.sh', () => {
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-cni-'));
    netDir = path.join(dir, 'net.d');
    binDir = path.join(dir, 'bin');
    plugin = path.join(dir, 'sluice-cni');
    fs.mkdirSync(netDir);
    fs.writeFileSync(plugin, '#!/bin/sh\necho plugin\n', { mode: 0o755 });
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('appends {"type":"sluice"} to the first conflist, once', () => {
    write('10-flannel.conflist', FLANNEL);
    write('99-other.conflist', { ...FLANNEL, name: 'other' });
    const first = run('install');
    assert.equal(first.status, 0, first.stderr);
    assert.deepEqual(readJson('10-flannel.conflist'), { ...FLANNEL, plugins: [...FLANNEL.plugins, { type: 'sluice' }] });
    assert.deepEqual(readJson('99-other.conflist'), { ...FLANNEL, name: 'other' }, 'only the primary config changes');
    assert.equal(fs.readFileSync(path.join(binDir, 'sluice'), 'utf8'), '#!/bin/sh\necho plugin\n');
    assert.ok(fs.statSync(path.join(binDir, 'sluice')).mode & 0o111, 'executable');
    const mtime = fs.statSync(path.join(netDir, '10-flannel.conflist')).mtimeMs;
    const again = run('install');
    assert.equal(again.status, 0, again.stderr);
    assert.match(again.stdout, /already chained/);
    assert.equal(fs.statSync(path.join(netDir, '10-flannel.conflist')).mtimeMs, mtime, 'not rewritten');
    assert.deepEqual(fs.readdirSync(netDir).sort(), ['10-flannel.conflist', '99-other.conflist'], 'no temporary files left');
  });

  test('after the primary CNI rewrites its file, install chains again; uninstall restores it', () => {
    write('10-flannel.conflist', FLANNEL);
    assert.equal(run('install').status, 0);
    write('10-flannel.conflist', FLANNEL); // flannel restarted and wrote its own config
    assert.equal(run('install').status, 0);
    assert.deepEqual(readJson('10-flannel.conflist').plugins.map((p: { type: string }) => p.type), ['flannel', 'portmap', 'sluice']);
    const un = run('uninstall');
    assert.equal(un.status, 0, un.stderr);
    assert.deepEqual(readJson('10-flannel.conflist'), FLANNEL);
    assert.ok(fs.existsSync(path.join(binDir, 'sluice')), 'binary kept for the DEL of existing pods');
    assert.equal(run('uninstall', '--purge').status, 0);
    assert.ok(!fs.existsSync(path.join(binDir, 'sluice')));
    assert.match(run('uninstall').stdout, /nothing to remove/);
  });

  test('a single-plugin .conf becomes a conflist; uninstall puts the .conf back', () => {
    write('10-bridge.conf', SINGLE);
    const r = run('install');
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(fs.readdirSync(netDir).sort(), ['10-bridge.conf.sluice-orig', '10-bridge.conflist']);
    const { cniVersion, name, ...bridge } = SINGLE;
    assert.deepEqual(readJson('10-bridge.conflist'), { cniVersion, name, plugins: [bridge, { type: 'sluice' }] });
    assert.equal(run('install').status, 0);
    assert.equal(run('uninstall').status, 0);
    assert.deepEqual(fs.readdirSync(netDir), ['10-bridge.conf']);
    assert.deepEqual(readJson('10-bridge.conf'), SINGLE);
  });

  test('a custom plugin entry replaces the old one in place', () => {
    write('10-flannel.conflist', FLANNEL);
    assert.equal(run('install').status, 0);
    const r = spawnSync(script, ['install'], { encoding: 'utf8', env: { ...process.env, CNI_NET_DIR: netDir, CNI_BIN_DIR: binDir, SLUICE_CNI_BIN: plugin, SLUICE_CNI_PLUGIN_CONF: '{"type":"sluice","bpffs":"/sys/fs/bpf/sluice"}' } });
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(readJson('10-flannel.conflist').plugins.at(-1), { type: 'sluice', bpffs: '/sys/fs/bpf/sluice' });
    assert.equal(readJson('10-flannel.conflist').plugins.length, 3);
  });

  test('fails clearly without a primary CNI configuration or plugin binary', () => {
    const none = run('install');
    assert.notEqual(none.status, 0);
    assert.match(none.stderr, /no CNI network configuration .* install the primary CNI first/);
    write('10-flannel.conflist', FLANNEL);
    fs.rmSync(plugin);
    const nobin = run('install');
    assert.notEqual(nobin.status, 0);
    assert.match(nobin.stderr + nobin.stdout, /plugin binary .* missing/);
    assert.deepEqual(readJson('10-flannel.conflist'), FLANNEL, 'config untouched when the binary is missing');
  });

  test('watch mode chains when enabled, unchains when disabled, exits on SIGTERM', async () => {
    write('10-flannel.conflist', FLANNEL);
    const { spawn } = await import('node:child_process');
    const start = (chaining: string) => spawn(script, ['watch'], {
      env: { ...process.env, CNI_NET_DIR: netDir, CNI_BIN_DIR: binDir, SLUICE_CNI_BIN: plugin, SLUICE_CNI_CHAINING: chaining, SLUICE_CNI_RECHECK_SECONDS: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const until = async (what: string, cond: () => boolean) => {
      const deadline = Date.now() + 10_000;
      while (!cond()) {
        assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    const types = () => (readJson('10-flannel.conflist').plugins as Array<{ type: string }>).map((p) => p.type).join(',');
    const stop = (child: ReturnType<typeof start>) => new Promise<number | null>((resolve) => {
      child.once('exit', (code) => resolve(code));
      child.kill('SIGTERM');
    });
    const on = start('true');
    try {
      await until('sluice chained', () => types() === 'flannel,portmap,sluice');
      write('10-flannel.conflist', FLANNEL);
      await until('sluice chained again after a rewrite', () => types() === 'flannel,portmap,sluice');
    } finally {
      assert.equal(await stop(on), 0);
    }
    assert.equal(types(), 'flannel,portmap,sluice', 'SIGTERM leaves the chain as it is');
    const off = start('false');
    try {
      await until('sluice unchained', () => types() === 'flannel,portmap');
    } finally {
      assert.equal(await stop(off), 0);
    }
  });
});
