// Crash loop (issue 13.7): the agent is SIGKILLed every 2 s while Services
// change. The kernel keeps serving the last programmed state from the pinned
// maps (no failed connection to a Service that never changed), and once an
// agent is allowed to run, the maps equal what the API says.
//
// `make test` runs a short form (15 s); CRASH_LOOP_S=60 is the minute.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ApiServerHandle } from '../../src/k8s/apiserver';
import { type Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { startAgentLab, type AgentLab } from '../helpers/agentLab';
import { AgentProcess } from '../helpers/agentProcess';

const NODE = 'node-a';
const BACKENDS = ['198.18.14.2', '198.18.14.3', '198.18.14.4', '198.18.14.5'];
const CRASH_LOOP_S = Number(process.env.CRASH_LOOP_S ?? 15);
const KILL_EVERY_MS = 2000;
const STEADY = ['steady-a', 'steady-b'];
const CHURN = ['churn-0', 'churn-1', 'churn-2', 'churn-3', 'churn-4', 'churn-5'];

let lab: AgentLab;
let sb: Sandbox;
let api: ApiServerHandle;
let agent: AgentProcess | undefined;

function agentArgs(): string[] {
  return [
    '--kubeconfig', lab.kubeconfig, '--node-name', NODE, '--cgroup-path', sb.cgroup, '--bpffs', sb.bpffs,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', '--sync-period', '5',
  ];
}

function slice(service: string, ips: string[]) {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: `${service}-1`, namespace: 'default', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true }, nodeName: NODE })),
  };
}

function createService(name: string): string {
  const svc = api.store.create('services', {
    apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' },
    spec: { ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] },
  }) as { spec: { clusterIP: string } };
  return svc.spec.clusterIP;
}

/** What the maps must hold for the API's current objects: frontend -> sorted backends. */
function expectedFromApi(): Map<string, string> {
  const want = new Map<string, string>();
  const slices = api.store.list('endpointslices').items as unknown as Array<ReturnType<typeof slice>>;
  for (const s of api.store.list('services').items as unknown as Array<{ metadata: { name: string }; spec: { clusterIP: string } }>) {
    const sl = slices.find((x) => x.metadata.labels['kubernetes.io/service-name'] === s.metadata.name);
    const backends = (sl?.endpoints ?? []).map((e) => `${e.addresses[0]}:8080`).sort().join(',');
    want.set(`${s.spec.clusterIP}:80/tcp`, backends);
  }
  return want;
}

function programmed(): Map<string, string> {
  const rows = JSON.parse(sh(sluiceBin, ['services', '-o', 'json', '--bpffs', sb.bpffs])) as Array<{ frontend: string; backends: Array<{ address: string; port: number }> }>;
  return new Map(rows.map((r) => [r.frontend, r.backends.map((b) => `${b.address}:${b.port}`).sort().join(',')]));
}

function diff(want: Map<string, string>, have: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [f, b] of want) if (have.get(f) !== b) out.push(`${f}: want [${b}] have [${have.get(f) ?? 'absent'}]`);
  for (const f of have.keys()) if (!want.has(f)) out.push(`${f}: not in the API but programmed`);
  return out;
}

before(async () => {
  lab = await startAgentLab('sluice-crash', BACKENDS, NODE);
  ({ sb, api } = lab);
});

after(async () => {
  await agent?.stop('SIGKILL');
  await lab?.close();
});

test(`SIGKILL every ${KILL_EVERY_MS / 1000} s for ${CRASH_LOOP_S} s while Services change: unchanged Services lose no connection, the final maps equal the API`, async () => {
  const steadyVips = STEADY.map((name, i) => {
    const vip = createService(name);
    api.store.create('endpointslices', slice(name, BACKENDS.slice(i, i + 2)));
    return vip;
  });
  for (const name of CHURN) {
    createService(name);
    api.store.create('endpointslices', slice(name, [BACKENDS[0]!]));
  }
  agent = new AgentProcess(agentArgs());
  await agent.waitForLog(/informers synced/);
  await waitFor('first sync', () => diff(expectedFromApi(), programmed()).length === 0, 15000);

  const loopMs = CRASH_LOOP_S * 1000 + 2000;
  const loops = steadyVips.map((vip) => sb.runInCgroup(['node', labScript('lbClient'), 'loop', vip, '80', String(loopMs)], loopMs + 30000));

  // Services change all along: endpoints move, Services go and come back.
  const end = Date.now() + CRASH_LOOP_S * 1000;
  let changes = 0;
  let kills = 0;
  let repairs = 0; // restarts that found entries a killed agent left half-written
  let rng = 12345;
  const random = (n: number) => ((rng = (rng * 1103515245 + 12345) & 0x7fffffff) % n);
  const mutate = setInterval(() => {
    if (Date.now() >= end) return;
    const name = CHURN[random(CHURN.length)]!;
    const exists = api.store.list('services').items.some((s) => (s as { metadata: { name: string } }).metadata.name === name);
    if (!exists) {
      createService(name);
      api.store.create('endpointslices', slice(name, [BACKENDS[random(BACKENDS.length)]!]));
    } else if (random(4) === 0) {
      api.store.delete('endpointslices', `${name}-1`, 'default');
      api.store.delete('services', name, 'default');
    } else {
      const ips = BACKENDS.filter(() => random(2) === 0);
      api.store.update('endpointslices', slice(name, ips));
    }
    changes++;
  }, 100);
  try {
    while (Date.now() < end) {
      await new Promise((r) => setTimeout(r, KILL_EVERY_MS));
      await agent.stop('SIGKILL');
      kills++;
      if (agent.find(/left half-written/)) repairs++;
      agent = new AgentProcess(agentArgs()); // at once: the next one is killed wherever it is
    }
  } finally {
    clearInterval(mutate);
  }

  const results = (await Promise.all(loops)).map((out) => JSON.parse(out) as { ok: number; errors: Record<string, number> });
  results.forEach((r, i) => {
    assert.deepEqual(r.errors, {}, `connections to unchanged Service ${STEADY[i]} failed during the crash loop`);
    assert.ok(r.ok > CRASH_LOOP_S * 5, `${STEADY[i]}: only ${r.ok} connections in ${CRASH_LOOP_S} s`);
  });

  // The last agent is left alone: it adopts whatever the kills left and converges.
  await agent.waitForLog(/informers synced/, 30000);
  const want = expectedFromApi();
  await waitFor('maps equal the API', () => diff(want, programmed()).length === 0, 20000).catch(() => {
    throw new Error(`after ${kills} kills and ${changes} changes the maps differ from the API:\n${diff(want, programmed()).join('\n')}`);
  });
  assert.ok(kills >= Math.floor(CRASH_LOOP_S / (KILL_EVERY_MS / 1000)) - 1, `${kills} kills`);
  process.stdout.write(`# crash loop: ${kills} SIGKILLs (${repairs} restarts cleaned half-written entries), ${changes} Service changes, ${results.reduce((n, r) => n + r.ok, 0)} connections to unchanged Services, 0 failed\n`);
});
