// Least privilege, proven (issue 13.6). docs/deploy.md gives the agent
// container CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON; the e2e tier runs every
// agent with exactly those (test/helpers/agentProcess.ts). This file checks
// the agent really holds no more, shows what breaks without each one, and
// that no credential from the kubeconfig reaches a log line at any level.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import YAML from 'yaml';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { type Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { startAgentLab, type AgentLab } from '../helpers/agentLab';
import { AgentProcess, AGENT_CAPS } from '../helpers/agentProcess';

const NODE = 'node-a';
const BACKEND = '198.18.15.2';
// Capability numbers (linux/capability.h) for reading /proc/<pid>/status.
const CAP_BIT: Record<string, number> = { net_admin: 12, sys_admin: 21, perfmon: 38, bpf: 39 };

let lab: AgentLab;
let sb: Sandbox;
let api: ApiServerHandle;
const SECRET_TOKEN = `sluice-secret-${randomBytes(12).toString('hex')}`;

function args(bpffs: string, extra: string[] = []): string[] {
  return [
    '--kubeconfig', lab.kubeconfig, '--node-name', NODE, '--cgroup-path', sb.cgroup, '--bpffs', bpffs,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', ...extra,
  ];
}

function capEff(pid: number): bigint {
  const line = fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('CapEff:'))!;
  return BigInt(`0x${line.split(/\s+/)[1]}`);
}

const capMask = (caps: readonly string[]) => caps.reduce((m, c) => m | (1n << BigInt(CAP_BIT[c]!)), 0n);

/** A bpffs directory of its own per agent run, removed in after(). */
const bpffsDirs: string[] = [];
function freshBpffs(): string {
  const dir = `${sb.bpffs}-${bpffsDirs.length}`;
  bpffsDirs.push(dir);
  return dir;
}

before(async () => {
  lab = await startAgentLab('sluice-lp', [BACKEND], NODE);
  ({ sb, api } = lab);
  const svc = api.store.create('services', {
    apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' },
    spec: { clusterIP: '10.96.15.1', ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] },
  }) as { spec: { clusterIP: string } };
  assert.equal(svc.spec.clusterIP, '10.96.15.1');
  api.store.create('endpointslices', {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: 'web-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: [{ addresses: [BACKEND], conditions: { ready: true }, nodeName: NODE }],
  });
  // The built-in API ignores credentials; the kubeconfig carries a bearer
  // token anyway, so the test can look for it in everything the agent prints.
  const doc = YAML.parse(api.kubeconfig()) as { users: Array<{ user: Record<string, unknown> }> };
  doc.users[0]!.user.token = SECRET_TOKEN;
  fs.writeFileSync(lab.kubeconfig, YAML.stringify(doc), { mode: 0o600 });
});

after(async () => {
  await lab?.close();
  for (const dir of bpffsDirs) fs.rmSync(dir, { recursive: true, force: true });
});

test('with exactly CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON the agent holds nothing more and every feature works', async () => {
  const bpffs = freshBpffs();
  const agent = new AgentProcess(args(bpffs, ['--pod-veth-programs', 'true']));
  try {
    await agent.waitForLog(/informers synced/);
    assert.equal(capEff(agent.pid!), capMask(AGENT_CAPS), 'effective capabilities are exactly the documented ones');
    assert.ok(agent.find(/stale-socket termination ready/), 'the socket iterators load');
    assert.ok(agent.find(/pod-veth programs pinned/), 'the pod-veth (TC) programs load');
    await waitFor('programmed', () => sh(sluiceBin, ['services', '--bpffs', bpffs]).includes(`${BACKEND}:8080`), 10000);
    const out = JSON.parse(await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', '10.96.15.1', '80', '3'])) as { results: Array<{ backend?: string }> };
    assert.deepEqual(out.results.map((r) => r.backend), Array(3).fill(`${BACKEND}:8080`));
    assert.deepEqual(agent.lines.filter((l) => l.level >= 40).map((l) => l.msg), [], 'no warning or error');
  } finally {
    await agent.stop();
  }
});

test('what fails without each capability', async (t) => {
  const without = (cap: string) => AGENT_CAPS.filter((c) => c !== cap);

  /** The agent must exit by itself (not hang), non-zero, saying which call failed and why. */
  const expectExit = async (cap: string, pattern: RegExp) => {
    const agent = new AgentProcess(args(freshBpffs()), { caps: without(cap) });
    const code = await Promise.race([agent.exit(), new Promise((r) => setTimeout(() => r('still running'), 20000))]);
    await agent.stop('SIGKILL');
    assert.ok(code !== 0 && code !== 'still running', `exit: ${String(code)}`);
    assert.match(agent.stderr, pattern);
  };

  await t.test('without CAP_BPF: nothing loads; the agent exits with the failing call and EPERM', () =>
    expectExit('bpf', /^sluice agent: bpf_object__load\(.*sock_lb\.bpf\.o\): EPERM/m));

  await t.test('without CAP_NET_ADMIN: the socket-LB programs (cgroup sock_addr) do not load; the agent exits', () =>
    expectExit('net_admin', /^sluice agent: bpf_object__load\(.*sock_lb\.bpf\.o\): EPERM/m));

  // The socket LB's per-socket state (socket-local storage, indexed by pair)
  // needs the verifier's privileged pointer rules since the sk_storage
  // rewrite: without PERFMON nothing loads, and the agent says so at once.
  await t.test('without CAP_PERFMON: the socket-LB programs are refused by the verifier; the agent exits with one line', () =>
    expectExit('perfmon', /^sluice agent: bpf_object__load\(.*sock_lb\.bpf\.o\): E[A-Z]+ .*rejected by the verifier/m));

  await t.test('without CAP_SYS_ADMIN (the documented set): stale sockets in Pod namespaces are not reached, said once per namespace', async () => {
    const bpffs = freshBpffs();
    // TCP on: the Service here is TCP, and its backend's removal must start a pass.
    const agent = new AgentProcess(args(bpffs, ['--stale-socket-netns', `/run/netns/${sb.netns}`, '--destroy-stale-tcp-sockets', 'true']));
    try {
      await agent.waitForLog(/informers synced/);
      await waitFor('programmed', () => sh(sluiceBin, ['services', '--bpffs', bpffs]).includes(`${BACKEND}:8080`), 10000);
      // A backend goes: the termination pass runs, and cannot enter the Pod namespace.
      api.store.update('endpointslices', {
        apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
        metadata: { name: 'web-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } },
        addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [],
      });
      const line = await agent.waitForLog(/stale sockets in .* not checked/);
      assert.match(line.msg, new RegExp(`/run/netns/${sb.netns} not checked: setns\\(.*\\): EPERM`));
      assert.equal(line.reason, 'sock_destroy_netns');
    } finally {
      await agent.stop();
    }
  });
});

test('no credential from the kubeconfig reaches a log line, at trace level, through a sync and an API outage', async () => {
  const agent = new AgentProcess(args(freshBpffs(), ['--log-level', 'trace']));
  const port = api.port;
  try {
    await agent.waitForLog(/informers synced/);
    // Errors carry request options: make the watch fail and retry a few times.
    await api.close();
    await agent.waitForLog(/watch of .* failed/, 20000);
    await new Promise((r) => setTimeout(r, 1500));
  } finally {
    await agent.stop();
    api = lab.api = await startApiServer({ port });
  }
  const everything = agent.lines.map((l) => JSON.stringify(l)).join('\n') + agent.stderr;
  assert.ok(agent.lines.length > 10, `trace output: ${agent.lines.length} lines`);
  assert.ok(!everything.includes(SECRET_TOKEN), 'the bearer token appears in the agent\'s output');
  assert.ok(!everything.includes(Buffer.from(SECRET_TOKEN).toString('base64')), 'the bearer token appears base64-encoded');
  assert.ok(!/authorization/i.test(everything), 'an Authorization header appears in the agent\'s output');
});
