// The Sluice CNI plugin (build/sluice-cni) chained after Debian's real
// bridge + host-local + loopback plugins, run by the chain runner of the
// cluster tier (test/cluster/cni.ts) in namespaces this test creates: ADD
// attaches the pod-veth programs (pinned tcx links on the host veth) and a
// pod's ClusterIP traffic is translated; CHECK verifies; DEL cleans up and is
// idempotent; VERSION answers; bad input gets the spec's error object.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as abi from '../../src/abi/generated';
import { BpfLink } from '../../src/bpf';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { TcHarness } from '../bpf/tc_harness';
import { cniAdd, cniDel, podIPv4, podNetworkConfList, type CniInvocation, type CniResult, type NetConfList, type PluginConf } from '../cluster/cni';
import { CLIENT_SCRIPT, SERVER_SCRIPT } from './tc_topology';

const PLUGIN = path.resolve(__dirname, '../../../build/sluice-cni');
const SYSTEM_CNI = '/usr/lib/cni';
const VIP = '10.96.0.20';

const suffix = randomBytes(3).toString('hex');
const nodeNs = `slcni-${suffix}-n`;
const podNs = { client: `slcni-${suffix}-c`, server: `slcni-${suffix}-s` };
const workDir = fs.mkdtempSync(path.join(os.tmpdir(), `slcni-${suffix}-`));
const binDir = path.join(workDir, 'bin');
const children: ChildProcess[] = [];
let h: TcHarness;
let list: NetConfList;
const results: Partial<Record<keyof typeof podNs, CniResult>> = {};

const inv = (pod: keyof typeof podNs): CniInvocation => ({
  // A dot in the id (allowed by the spec, refused in bpffs names) for the server pod.
  containerId: pod === 'server' ? `sluice-test.${suffix}-${pod}` : `sluice-test-${suffix}-${pod}`,
  netnsPath: `/run/netns/${podNs[pod]}`,
  ifName: 'eth0',
  hostNetns: nodeNs,
  cniPath: `${binDir}:${SYSTEM_CNI}`,
});

const sluiceConf = (extra: Record<string, unknown> = {}): PluginConf => ({ ...extra, type: 'sluice', bpffs: h.pinDir });

/** Run the plugin alone in the node's namespace, as a runtime would. */
function plugin(command: string, stdin: string, pod: keyof typeof podNs = 'client'): { status: number | null; stdout: string } {
  const i = inv(pod);
  const r = spawnSync('nsenter', [`--net=/run/netns/${nodeNs}`, PLUGIN], {
    input: stdin,
    encoding: 'utf8',
    timeout: 10000,
    env: { PATH: process.env.PATH, CNI_COMMAND: command, CNI_CONTAINERID: i.containerId, CNI_NETNS: i.netnsPath, CNI_IFNAME: i.ifName, CNI_PATH: i.cniPath },
  });
  return { status: r.status, stdout: r.stdout.trim() };
}

function pluginConf(extra: Record<string, unknown> = {}, prevResult?: CniResult): string {
  return JSON.stringify({ cniVersion: list.cniVersion, name: list.name, ...sluiceConf(extra), ...(prevResult ? { prevResult } : {}) });
}

function hostVeth(result: CniResult): { name: string; ifindex: number } {
  for (const i of result.interfaces ?? []) {
    if (i.sandbox) continue;
    const [link] = JSON.parse(execFileSync('ip', ['-n', nodeNs, '-j', '-d', 'link', 'show', 'dev', i.name], { encoding: 'utf8' })) as Array<{ ifindex: number; linkinfo?: { info_kind?: string } }>;
    if (link?.linkinfo?.info_kind === 'veth') return { name: i.name, ifindex: link.ifindex };
  }
  throw new Error(`no host veth in ${JSON.stringify(result.interfaces)}`);
}

const linkPin = (pod: keyof typeof podNs, dir: string): string =>
  path.join(h.pinDir, 'links', `pod-${inv(pod).containerId.replace(/\./g, '_')}-eth0-${dir}`);

before(async () => {
  fs.mkdirSync(binDir);
  fs.symlinkSync(PLUGIN, path.join(binDir, 'sluice'));
  for (const n of [nodeNs, ...Object.values(podNs)]) {
    execFileSync('ip', ['netns', 'add', n]);
    execFileSync('ip', ['-n', n, 'link', 'set', 'lo', 'up']);
  }
  execFileSync('ip', ['netns', 'exec', nodeNs, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  execFileSync('ip', ['netns', 'exec', nodeNs, 'sysctl', '-qw', 'net.ipv4.conf.all.send_redirects=0']);
  h = TcHarness.create('sluice-cnie2e');
  writeTcConfig(h.tc.config, {});
  list = podNetworkConfList({
    name: `slcni-${suffix}`, bridge: `slbr${suffix}`, podCidr: '198.18.96.0/24', ipamDataDir: path.join(workDir, 'ipam'),
    serviceCidr: '10.96.0.0/12', clusterCidr: '198.18.96.0/20', nodeCidr: '198.18.0.0/24',
    extraPlugins: [sluiceConf({ mode: 'per-packet' })],
  });
});

after(async () => {
  for (const c of children) if (c.exitCode === null && c.pid) c.kill('SIGKILL');
  for (const pod of Object.keys(podNs) as Array<keyof typeof podNs>) {
    if (results[pod]) await cniDel(list, inv(pod), results[pod]).catch(() => undefined);
  }
  for (const n of [...Object.values(podNs), nodeNs]) spawnSync('ip', ['netns', 'del', n]);
  h?.close();
  fs.rmSync(workDir, { recursive: true, force: true });
});

describe('sluice CNI plugin chained after bridge', () => {
  test('VERSION lists 0.3.1, 0.4.0 and 1.0.0', () => {
    const r = plugin('VERSION', JSON.stringify({ cniVersion: '1.0.0' }));
    assert.equal(r.status, 0);
    const v = JSON.parse(r.stdout) as { supportedVersions: string[] };
    for (const want of ['0.3.1', '0.4.0', '1.0.0']) assert.ok(v.supportedVersions.includes(want), r.stdout);
  });

  test('ADD attaches pinned tcx links to the host veth; prevResult passes through', async () => {
    assert.ok(!fs.existsSync(path.join(h.pinDir, 'progs')), 'no programs pinned before the first ADD');
    results.client = await cniAdd(list, inv('client'));
    results.server = await cniAdd(list, inv('server'));
    assert.ok(results.client.ips?.length, 'the bridge result (with its IP) is what the chain returns');
    for (const pod of ['client', 'server'] as const) {
      const veth = hostVeth(results[pod]!);
      for (const dir of ['ingress', 'egress']) {
        const link = BpfLink.fromPinned(linkPin(pod, dir));
        try {
          const info = link.info();
          assert.equal(info.type, 11, 'a tcx link');
          assert.equal(info.ifindex, veth.ifindex, `on ${veth.name}`);
          assert.equal(info.attachType, dir === 'ingress' ? 46 : 47);
          assert.equal(spawnSync('bpftool', ['link', 'show', 'id', String(info.id)]).status, 0, 'bpftool lists the link');
        } finally {
          link.close();
        }
      }
    }
    // The first ADD loaded the plugin's embedded object and pinned its programs next to the maps.
    for (const name of [abi.SLUICE_PROG_POD_INGRESS, abi.SLUICE_PROG_POD_EGRESS]) {
      assert.ok(fs.existsSync(path.join(h.pinDir, 'progs', name)), `${name} pinned`);
    }
  });

  test('a pod reaches a ClusterIP through the attached program (TCP and UDP)', async () => {
    const clientIp = podIPv4(results.client!);
    const serverIp = podIPv4(results.server!);
    const server = spawn('ip', ['netns', 'exec', podNs.server, process.execPath, '-e', SERVER_SCRIPT, '--', 'srv', '8080'], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(server);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('server did not start within 5s')), 5000);
      server.stdout!.once('data', () => { clearTimeout(timer); resolve(); });
    });
    for (const proto of ['tcp', 'udp'] as const) {
      h.upsertFrontend({ address: VIP, port: 80, proto, flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 7, backends: [{ id: 1, address: serverIp, port: 8080, local: true }] });
      const r = spawnSync('ip', ['netns', 'exec', podNs.client, process.execPath, '-e', CLIENT_SCRIPT, '--', proto, VIP, '80'], { encoding: 'utf8', timeout: 5000 });
      assert.match(r.stdout.trim(), new RegExp(`^srv ${clientIp.replace(/\./g, '\\.')}:\\d+$`), `${proto} via ${VIP}`);
    }
  });

  test('CHECK passes on an attached pod and fails once its links are gone', () => {
    const conf = pluginConf({}, results.client);
    assert.deepEqual(plugin('CHECK', conf), { status: 0, stdout: '' });
    assert.deepEqual(plugin('DEL', conf), { status: 0, stdout: '' });
    const r = plugin('CHECK', conf);
    assert.equal(r.status, 1);
    const err = JSON.parse(r.stdout) as { code: number; msg: string };
    assert.equal(err.code, 101);
    assert.match(err.msg, /not attached/);
    // ADD again (a runtime retrying) restores the attachment.
    const again = plugin('ADD', conf);
    assert.equal(again.status, 0, `ADD again: ${again.stdout}`);
    assert.deepEqual(JSON.parse(again.stdout), results.client);
    assert.deepEqual(plugin('CHECK', conf), { status: 0, stdout: '' });
  });

  test('mode "socket" passes prevResult through byte for byte and attaches nothing', () => {
    const prev = JSON.stringify(results.server);
    const conf = `{"cniVersion":"1.0.0","name":"x","type":"sluice","mode":"socket","bpffs":${JSON.stringify(h.pinDir)},"prevResult":${prev}}`;
    const r = plugin('ADD', conf, 'server');
    assert.equal(r.status, 0);
    assert.equal(r.stdout, prev);
  });

  test('bad input: spec error objects on stdout with exit status 1', () => {
    const cases: Array<[string, string, number, RegExp]> = [
      ['malformed JSON', '{"cniVersion": "1.0.0", "name": ', 6, /decode/],
      ['not an object', '[1,2]', 6, /decode/],
      ['unsupported version', '{"cniVersion":"0.1.0","name":"x","type":"sluice"}', 1, /version/],
      ['unknown mode', pluginConf({ mode: 'turbo' }, results.client), 7, /configuration/],
      ['no prevResult', pluginConf(), 7, /chained/],
    ];
    for (const [what, stdin, code, msg] of cases) {
      const r = plugin('ADD', stdin);
      assert.equal(r.status, 1, what);
      const err = JSON.parse(r.stdout) as { cniVersion: string; code: number; msg: string; details?: string };
      assert.equal(err.code, code, `${what}: ${r.stdout}`);
      assert.match(err.msg, msg, what);
      assert.equal(typeof err.cniVersion, 'string');
    }
  });

  test('DEL removes the links, and a second DEL succeeds too', async () => {
    const ids = ['ingress', 'egress'].map((dir) => {
      const link = BpfLink.fromPinned(linkPin('client', dir));
      try {
        return link.info().id;
      } finally {
        link.close();
      }
    });
    await cniDel(list, inv('client'), results.client);
    delete results.client;
    for (const dir of ['ingress', 'egress']) assert.ok(!fs.existsSync(linkPin('client', dir)), `${dir} pin removed`);
    for (const id of ids) assert.notEqual(spawnSync('bpftool', ['link', 'show', 'id', String(id)]).status, 0, `link ${id} is gone`);
    assert.deepEqual(plugin('DEL', pluginConf()), { status: 0, stdout: '' });
  });
});
