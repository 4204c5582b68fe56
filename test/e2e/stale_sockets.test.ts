// Stale sockets (issue 13.1): a resolver-like client keeps one connected UDP
// socket to a ClusterIP. When the backend it was translated to leaves the
// EndpointSlice, the agent destroys that socket (BPF socket iterator +
// bpf_sock_destroy), the client sees one error, reconnects, and every later
// reply comes from a live backend, although the removed backend's process
// still runs and would keep answering.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ApiServerHandle } from '../../src/k8s/apiserver';
import { type Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { startAgentLab, type AgentLab } from '../helpers/agentLab';
import { AgentProcess, AGENT_CAPS } from '../helpers/agentProcess';

const NODE = 'node-a';
const BACKENDS = ['198.18.12.2', '198.18.12.3'];

let lab: AgentLab;
let sb: Sandbox;
let api: ApiServerHandle;
let agent: AgentProcess;

function udpSlice(ips: string[]) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: 'dns-1',
      namespace: 'default',
      labels: { 'kubernetes.io/service-name': 'dns' },
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': new Date().toISOString() },
    },
    addressType: 'IPv4',
    ports: [{ name: 'dns', port: 8080, protocol: 'UDP' }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true }, nodeName: NODE })),
  };
}

function programmed(): Array<{ frontend: string; backends: Array<{ address: string; port: number }> }> {
  return JSON.parse(sh(sluiceBin, ['services', '-o', 'json', '--bpffs', sb.bpffs]));
}

async function waitProgrammed(frontend: string, backends: string[]): Promise<void> {
  const want = backends.map((b) => `${b}:8080`).sort().join(',');
  await waitFor(`${frontend} -> ${want}`, () => {
    const f = programmed().find((s) => s.frontend === frontend);
    return f !== undefined && f.backends.map((b) => `${b.address}:${b.port}`).sort().join(',') === want;
  }, 15000);
}

before(async () => {
  lab = await startAgentLab('sluice-stale', BACKENDS, NODE);
  ({ sb, api } = lab);
  agent = new AgentProcess([
    '--kubeconfig', lab.kubeconfig, '--node-name', NODE, '--cgroup-path', sb.cgroup, '--bpffs', sb.bpffs,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', '--log-level', 'debug',
    // The client "pod" lives in the test's namespace; nothing else is walked.
    '--stale-socket-netns', `/run/netns/${sb.netns}`,
    // Entering a Pod's namespace (setns) needs CAP_SYS_ADMIN: the documented
    // addition for stale-socket termination in Pods (docs/deploy.md).
  ], { caps: [...AGENT_CAPS, 'sys_admin'] });
  await agent.waitForLog(/informers synced/);
});

after(async () => {
  await agent?.stop();
  await lab?.close();
});

interface ClientEvent { t?: number; backend?: string; error?: string; connected?: string; done?: boolean }

test('a connected UDP client is cut loose from a removed backend once and then only reaches live backends', async () => {
  const svc = api.store.create('services', {
    apiVersion: 'v1', kind: 'Service', metadata: { name: 'dns', namespace: 'default' },
    spec: { ports: [{ name: 'dns', port: 53, targetPort: 8080, protocol: 'UDP' }] },
  }) as { spec: { clusterIP: string } };
  const vip = svc.spec.clusterIP;
  api.store.create('endpointslices', udpSlice(BACKENDS));
  await waitProgrammed(`${vip}:53/udp`, BACKENDS);

  const events: ClientEvent[] = [];
  const client = sb.spawnInCgroup(['node', labScript('lbClient'), 'udpconn', vip, '53', '5000']);
  let out = '';
  client.stdout!.on('data', (d) => {
    out += d;
    let i;
    while ((i = out.indexOf('\n')) >= 0) {
      events.push(JSON.parse(out.slice(0, i)) as ClientEvent);
      out = out.slice(i + 1);
    }
  });
  const exited = new Promise<void>((r) => client.on('exit', () => r()));
  await waitFor('first replies', () => events.filter((e) => e.backend).length >= 5, 5000);
  const stale = events.find((e) => e.backend)!.backend!.split(':')[0]!;
  const live = BACKENDS.find((b) => b !== stale)!;

  // The client's backend leaves the EndpointSlice; its server keeps running.
  const removedAt = Date.now();
  api.store.update('endpointslices', udpSlice([live]));
  await waitProgrammed(`${vip}:53/udp`, [live]);
  await exited;

  const after = events.filter((e) => (e.t ?? 0) >= removedAt);
  const errors = after.filter((e) => e.error);
  const firstError = after.findIndex((e) => e.error);
  assert.equal(errors.length, 1, `exactly one error after the removal, got ${JSON.stringify(errors)}; replies after it: ${after.filter((e) => e.backend).slice(-3).map((e) => e.backend).join(',')}`);
  assert.match(errors[0]!.error!, /ECONNABORTED|EDESTADDRREQ/);
  const later = after.slice(firstError + 1).filter((e) => e.backend);
  assert.ok(later.length >= 10, `the client went on querying (${later.length} replies after reconnecting)`);
  assert.ok(later.every((e) => e.backend === `${live}:8080`), `replies after reconnecting: ${[...new Set(later.map((e) => e.backend))].join(',')}`);
  const destroyedAfterMs = (errors[0]!.t ?? 0) - removedAt;

  const line = await agent.waitForLog(/stale sockets destroyed/);
  assert.equal(line.destroyed, 1, JSON.stringify(line));
  const metricsAddress = String(agent.find(/serving \/healthz/)!.metrics);
  const metrics = await (await fetch(`http://${metricsAddress}/metrics`)).text();
  assert.match(metrics, /sluice_stale_sockets_destroyed_total\{proto="udp"\} 1\b/);
  assert.match(metrics, /sluice_stale_socket_termination_seconds_count 1\b/);
  // For the report: EndpointSlice change -> the client saw its socket end.
  const agentSeconds = Number(/sluice_stale_socket_termination_seconds_sum (\S+)/.exec(metrics)?.[1]);
  // Baseline in the same run: the agent's programming latency for the same change (last sample of the histogram sum).
  const programming = /kubeproxy_network_programming_duration_seconds_sum (\S+)/.exec(metrics)?.[1];
  const programmingCount = /kubeproxy_network_programming_duration_seconds_count (\S+)/.exec(metrics)?.[1];
  process.stdout.write(
    `# EndpointSlice change -> socket destroyed: client saw it after ${destroyedAfterMs} ms; agent measured ${Math.round(agentSeconds * 1000)} ms ` +
      `(pass ${line.passMs} ms); network programming: ${programmingCount} samples, sum ${Math.round(Number(programming) * 1000)} ms\n`,
  );
});

test('sluice status says stale-socket termination is on, and for which protocols', () => {
  const status = JSON.parse(sh(sluiceBin, ['status', '-o', 'json', '--bpffs', sb.bpffs])) as { staleSockets?: { enabled: boolean; protocols: string[] } };
  assert.deepEqual(status.staleSockets && { enabled: status.staleSockets.enabled, protocols: status.staleSockets.protocols }, { enabled: true, protocols: ['udp'] });
  assert.match(sh(sluiceBin, ['status', '--bpffs', sb.bpffs]), /stale sockets: destroyed on backend removal \(udp\)/);
});
