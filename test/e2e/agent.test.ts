// The agent end to end: the real `sluice agent` process, the built-in API
// server speaking list/watch, backends in a network namespace, real clients
// in a child cgroup. Services and EndpointSlices change; traffic follows.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { startBackends } from '../helpers/backends';
import { AgentProcess } from '../helpers/agentProcess';
import { mallocArenaHeaps } from '../helpers/procMaps';
import { AGENT_ENV, AGENT_NODE_FLAGS } from '../../src/agent/nodeFlags';
import { BpfMap } from '../../src/bpf/map';
import { maglevKeyOf, readMaglevTable } from '../../src/datapath/maglev';

const NODE = 'node-a';
const BACKENDS = ['198.18.10.2', '198.18.10.3', '198.18.10.4', '198.18.10.5'];

let sb: Sandbox;
let api: ApiServerHandle;
let agent: AgentProcess;
let tmp: string;
let kubeconfig: string;

function agentArgs(): string[] {
  return [
    '--kubeconfig', kubeconfig, '--node-name', NODE, '--cgroup-path', sb.cgroup, '--bpffs', sb.bpffs,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0',
    '--sync-period', '5', '--drift-repair-period', '5', '--max-endpoints-per-service', '8', '--log-level', 'debug',
  ];
}

async function startAgent(): Promise<AgentProcess> {
  const a = new AgentProcess(agentArgs());
  await a.waitForLog(/informers synced/);
  return a;
}

function addresses(line: Record<string, unknown>) {
  return { healthz: String(line.healthz), metrics: String(line.metrics) };
}

function createService(name: string, spec: Record<string, unknown>, namespace = 'default') {
  return api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace }, spec }) as {
    spec: { clusterIP: string };
  };
}

function slice(service: string, name: string, ips: string[], opts: { port?: number; portName?: string; protocol?: string; ready?: boolean } = {}) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name,
      namespace: 'default',
      labels: { 'kubernetes.io/service-name': service },
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': new Date().toISOString() },
    },
    addressType: 'IPv4',
    ports: [{ name: opts.portName ?? 'http', port: opts.port ?? 8080, protocol: opts.protocol ?? 'TCP' }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: opts.ready ?? true }, nodeName: NODE })),
  };
}

function programmed(): Array<{ frontend: string; backends: Array<{ address: string; port: number }> }> {
  return JSON.parse(sh(sluiceBin, ['services', '-o', 'json', '--bpffs', sb.bpffs]));
}

async function waitProgrammed(frontend: string, backends: string[] | undefined, timeoutMs = 10000): Promise<void> {
  const want = backends?.slice().sort().join(',');
  await waitFor(`${frontend} -> ${want ?? '(absent)'}`, () => {
    const f = programmed().find((s) => s.frontend === frontend);
    if (backends === undefined) return f === undefined;
    return f !== undefined && f.backends.map((b) => `${b.address}:${b.port}`).sort().join(',') === want;
  }, timeoutMs).catch((err: Error) => {
    const complaints = agent.lines.filter((l) => l.level >= 40).slice(-5).map((l) => JSON.stringify(l));
    throw new Error(`${err.message}; agent warnings/errors: ${complaints.join(' | ')}`);
  });
}

async function connect(vip: string, port: number, count: number) {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', vip, String(port), String(count)]);
  return (JSON.parse(out) as { results: Array<{ backend?: string; error?: string }> }).results;
}

before(async () => {
  sb = Sandbox.create();
  await startBackends(sb, BACKENDS);
  api = await startApiServer({ port: 0 });
  api.store.create('nodes', {
    apiVersion: 'v1', kind: 'Node',
    metadata: { name: NODE, labels: { 'topology.kubernetes.io/zone': 'zone-a' } },
    status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] },
  });
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-e2e-'));
  kubeconfig = path.join(tmp, 'kubeconfig');
  await api.writeKubeconfig(kubeconfig);
  agent = await startAgent();
});

after(async () => {
  await agent?.stop();
  await api?.close();
  sb?.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('the agent runs with its memory settings: node flags and at most two malloc arenas', () => {
  const starting = agent.find(/^starting$/)!;
  const memory = starting.memory as { nodeFlags: string[]; mallocArenaMax: unknown };
  for (const f of AGENT_NODE_FLAGS) assert.ok(memory.nodeFlags.includes(f), `starting line: node flags ${memory.nodeFlags.join(' ')} lack ${f}`);
  assert.equal(memory.mallocArenaMax, AGENT_ENV['MALLOC_ARENA_MAX']);
  // The limit in force, read from the process: at most one arena besides the main one.
  const heaps = mallocArenaHeaps(agent.pid);
  assert.ok(heaps <= Number(AGENT_ENV['MALLOC_ARENA_MAX']) - 1, `the agent has ${heaps} thread arenas`);
});

test('Services and EndpointSlices become frontends; traffic follows creates, updates and deletes', async () => {
  const svc = createService('web', { ports: [{ name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' }], selector: { app: 'web' } });
  const vip = svc.spec.clusterIP;
  api.store.create('endpointslices', slice('web', 'web-1', BACKENDS.slice(0, 3)));
  await waitProgrammed(`${vip}:80/tcp`, BACKENDS.slice(0, 3).map((b) => `${b}:8080`));
  // The agent records the Service that owns the frontend, for `sluice services`.
  assert.deepEqual((programmed().find((s) => s.frontend === `${vip}:80/tcp`) as { service?: unknown }).service, { namespace: 'default', name: 'web', portName: 'http' });
  const first = await connect(vip, 80, 60);
  assert.deepEqual(first.filter((r) => r.error), []);
  assert.equal(new Set(first.map((r) => r.backend)).size, 3, 'all three backends answer');

  // One endpoint goes away (not ready): it must receive no new connection.
  api.store.update('endpointslices', {
    ...slice('web', 'web-1', BACKENDS.slice(0, 2)),
    endpoints: [
      ...BACKENDS.slice(0, 2).map((ip) => ({ addresses: [ip], conditions: { ready: true }, nodeName: NODE })),
      { addresses: [BACKENDS[2]], conditions: { ready: false, serving: false, terminating: true }, nodeName: NODE },
    ],
  });
  await waitProgrammed(`${vip}:80/tcp`, BACKENDS.slice(0, 2).map((b) => `${b}:8080`));
  const second = await connect(vip, 80, 40);
  assert.ok(second.every((r) => r.backend && r.backend !== `${BACKENDS[2]}:8080`), JSON.stringify(second.slice(0, 3)));

  api.store.delete('services', 'web', 'default');
  await waitProgrammed(`${vip}:80/tcp`, undefined);
  const third = await connect(vip, 80, 1);
  assert.ok(third[0]?.error, 'a deleted Service is not translated');
});

test('bad objects are rejected with a log line naming object and reason and a metric; other Services keep working', async () => {
  const good = createService('good', { ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  api.store.create('endpointslices', slice('good', 'good-1', [BACKENDS[0]!]));
  createService('bad-port', { clusterIP: '10.96.7.1', ports: [{ name: 'http', port: 70000, protocol: 'TCP' }] });
  createService('bad-proto', { clusterIP: '10.96.7.2', ports: [{ name: 'x', port: 80, protocol: 'FOO' }] });
  createService('bad-ips', { clusterIP: '10.96.7.3', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  api.store.create('endpointslices', slice('bad-ips', 'bad-ips-1', ['not-an-ip', '999.1.1.1']));
  createService('too-many', { clusterIP: '10.96.7.4', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  api.store.create('endpointslices', slice('too-many', 'too-many-1', Array.from({ length: 9 }, (_, i) => `198.18.10.${20 + i}`)));

  await waitProgrammed(`${good.spec.clusterIP}:80/tcp`, [`${BACKENDS[0]}:8080`]);
  for (const [object, reason] of [
    ['Service default/bad-port', 'invalid_port'],
    ['Service default/bad-proto', 'invalid_protocol'],
    ['EndpointSlice default/bad-ips-1', 'invalid_ip'],
    ['Service default/too-many', 'too_many_endpoints'],
  ] as const) {
    const line = await agent.waitForLog(new RegExp(`${object}.*`));
    assert.equal(line.reason, reason, `${object}: ${line.msg}`);
  }
  const tooMany = programmed().find((s) => s.frontend === '10.96.7.4:80/tcp');
  assert.equal(tooMany?.backends.length, 8, 'a frontend over the per-frontend guard keeps the first 8 backends (kube-proxy has no cap)');
  const metrics = await (await fetch(`http://${addresses(agent.find(/serving \/healthz/)!).metrics}/metrics`)).text();
  for (const reason of ['invalid_port', 'invalid_protocol', 'invalid_ip', 'too_many_endpoints']) {
    assert.match(metrics, new RegExp(`sluice_errors_total\\{reason="${reason}"\\} [1-9]`));
  }
  const results = await connect(good.spec.clusterIP, 80, 10);
  assert.ok(results.every((r) => r.backend === `${BACKENDS[0]}:8080`), 'the good Service keeps working');
});

test('healthz, livez and metrics speak kube-proxy', async () => {
  const { healthz, metrics } = addresses(agent.find(/serving \/healthz/)!);
  for (const [p, keys] of [['/healthz', ['currentTime', 'lastUpdated', 'nodeEligible']], ['/livez', ['currentTime', 'lastUpdated']]] as const) {
    const res = await fetch(`http://${healthz}${p}`);
    assert.equal(res.status, 200);
    const body = (await res.json()) as Record<string, unknown>;
    assert.deepEqual(Object.keys(body).sort(), keys, `${p}: kube-proxy's body`);
  }
  const text = await (await fetch(`http://${metrics}/metrics`)).text();
  for (const name of ['kubeproxy_sync_proxy_rules_duration_seconds_count', 'kubeproxy_sync_proxy_rules_last_timestamp_seconds',
    'kubeproxy_network_programming_duration_seconds_count', 'sluice_frontends_programmed', 'sluice_map_entries{map="sluice_svc4"}']) {
    assert.ok(text.includes(name), `metrics lack ${name}`);
  }
  assert.match(text, /kubeproxy_network_programming_duration_seconds_count\{ip_family="IPv4"\} [1-9]/);
  // Data-path counters carry {reason, direction, path} (src/datapath/counters.ts).
  assert.match(text, /sluice_datapath_events_total\{reason="translated",direction="original",path="socket"\} [1-9]/);
});

test('sluice status shows the last sync from the pinned maps', () => {
  const status = JSON.parse(sh(sluiceBin, ['status', '-o', 'json', '--bpffs', sb.bpffs])) as {
    agent?: { lastSync: string; lastSyncAgoSeconds: number; agentRunning: boolean; frontends: number; syncs: number };
    attachments: Array<{ hook: string; attached: boolean; cgroupPath?: string }>;
  };
  assert.ok(status.agent, 'the agent wrote its status');
  assert.ok(status.agent.lastSyncAgoSeconds <= 10, `last sync ${status.agent.lastSyncAgoSeconds} s ago (full resync every 5 s)`);
  assert.equal(status.agent.agentRunning, true);
  assert.ok(status.agent.frontends >= 1 && status.agent.syncs >= 1);
  assert.ok(status.attachments.every((a) => a.attached && a.cgroupPath === sb.cgroup), JSON.stringify(status.attachments));
  const text = sh(sluiceBin, ['status', '--bpffs', sb.bpffs]);
  assert.match(text, /last sync: \d{4}-\d\d-\d\dT.* s ago, agent pid \d+ running/);
});

test('NodePort, ExternalIP and ClientIP affinity work from the node through the socket hooks; another node\'s ExternalIP is not captured', async () => {
  const svc = createService('np', {
    type: 'NodePort',
    // 198.18.0.1 is the Node's InternalIP; 198.19.100.7 belongs to no node (CVE-2020-8554).
    externalIPs: ['198.18.0.1', '198.19.100.7'],
    sessionAffinity: 'ClientIP',
    ports: [{ name: 'http', port: 80, nodePort: 30080, protocol: 'TCP' }],
  });
  api.store.create('endpointslices', slice('np', 'np-1', BACKENDS.slice(0, 3)));
  const want = BACKENDS.slice(0, 3).map((b) => `${b}:8080`);
  // One IPv4 NodePort entry at the wildcard address, whatever the node's addresses (bpf/lib/nodeport.h).
  await waitProgrammed('0.0.0.0:30080/tcp', want);
  assert.deepEqual(programmed().filter((s) => s.frontend.endsWith(':30080/tcp')).map((s) => s.frontend), ['0.0.0.0:30080/tcp']);
  await waitProgrammed('198.18.0.1:80/tcp', want);
  await waitProgrammed('198.19.100.7:80/tcp', want); // programmed for the TC path
  for (const [address, port] of [['198.18.0.1', 30080], ['198.18.0.1', 80], [svc.spec.clusterIP, 80]] as const) {
    const results = await connect(address, port, 15);
    assert.deepEqual(results.filter((r) => r.error), [], `${address}:${port}`);
    // sessionAffinity ClientIP: one client (one network namespace) sticks to one backend.
    assert.equal(new Set(results.map((r) => r.backend)).size, 1, `${address}:${port} affinity: ${results.map((r) => r.backend).join(',')}`);
  }
  // Not a node address: the socket passes it untouched (no route in the test namespace).
  const [foreign] = await connect('198.19.100.7', 80, 1);
  assert.ok(foreign?.error, `an ExternalIP of no node was captured: ${JSON.stringify(foreign)}`);
});

test('a full resync repairs drift: an entry deleted behind the agent comes back', async () => {
  const svc = createService('drift', { ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  api.store.create('endpointslices', slice('drift', 'drift-1', [BACKENDS[1]!]));
  const frontend = `${svc.spec.clusterIP}:80/tcp`;
  await waitProgrammed(frontend, [`${BACKENDS[1]}:8080`]);
  // The CLI removes it behind the agent's back (--force: the agent owns these maps; reading the map right after
  // would race with the 5 s resync, which may already have repaired it).
  assert.match(sh(sluiceBin, ['service', 'delete', '--frontend', frontend, '--bpffs', sb.bpffs, '--force']), new RegExp(`^deleted ${frontend}`));
  await waitProgrammed(frontend, [`${BACKENDS[1]}:8080`], 15000); // --drift-repair-period 5
});

test('drift repair covers the Maglev tables: an outer entry deleted with bpftool comes back, counted as maglev_drift', async () => {
  const svc = createService('mgdrift', { ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  const s = api.store.get('services', 'mgdrift', 'default') as { metadata: { annotations?: Record<string, string> } };
  s.metadata.annotations = { 'sluice.io/lb-algorithm': 'maglev' };
  api.store.update('services', s);
  api.store.create('endpointslices', slice('mgdrift', 'mgdrift-1', BACKENDS));
  const frontend = `${svc.spec.clusterIP}:80/tcp`;
  await waitFor('maglev programmed', () => (programmed().find((x) => x.frontend === frontend) as { algorithm?: string } | undefined)?.algorithm === 'maglev');
  const revNatId = (programmed().find((x) => x.frontend === frontend) as unknown as { revNatId: number }).revNatId;
  const key = maglevKeyOf({ revNatId, scope: 'external' });
  const outerPin = path.join(sb.bpffs, 'sluice_maglev4');
  // A removed table is an entry naming the shared empty table (src/datapath/maglev.ts): "has a table" is a non-empty one.
  const hasEntry = () => {
    const outer = BpfMap.fromPinned(outerPin);
    try {
      return readMaglevTable(outer, { revNatId, proto: 'tcp', scope: 'external' }) !== undefined;
    } finally {
      outer.close();
    }
  };
  assert.ok(hasEntry(), 'the frontend has a table');
  execFileSync('bpftool', ['map', 'delete', 'pinned', outerPin, 'key', 'hex', ...[...key].map((b) => b.toString(16).padStart(2, '0'))]);
  await waitFor('the outer entry is back (--drift-repair-period 5)', hasEntry, 15000);
  const metrics = await (await fetch(`http://${addresses(agent.find(/serving \/healthz/)!).metrics}/metrics`)).text();
  assert.match(metrics, /sluice_errors_total\{reason="maglev_drift"\} [1-9]/);
  // Gone again, with its table (later tests count the tables).
  api.store.delete('services', 'mgdrift', 'default');
  await waitProgrammed(frontend, undefined);
  await waitFor('the table is gone', () => !hasEntry());
});

test('a dropped watch resumes from its resourceVersion: the agent does not list again, and misses nothing', async () => {
  // Count LIST requests at the server (paginated or not).
  const store = api.store as unknown as Record<string, (...a: unknown[]) => unknown>;
  let lists = 0;
  const restore: Array<() => void> = [];
  for (const m of ['listShared', 'listPage']) {
    const orig = store[m]!;
    store[m] = function (this: unknown, ...a: unknown[]) {
      lists++;
      return orig.apply(this, a);
    };
    restore.push(() => { store[m] = orig; });
  }
  try {
    api.closeAllWatches('drop');
    const svc = createService('resumed', { ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
    api.store.create('endpointslices', slice('resumed', 'resumed-1', [BACKENDS[2]!]));
    await waitProgrammed(`${svc.spec.clusterIP}:80/tcp`, [`${BACKENDS[2]}:8080`], 20000);
    assert.equal(lists, 0, `the agent listed ${lists} time(s) after its watches dropped`);
  } finally {
    for (const r of restore) r();
  }
});

test('a Node update re-translates Services only when what the agent derives from the Node changed', async () => {
  const before = agent.lines.length;
  createService('node-ctx', { ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  await waitFor('a sync of node-ctx', () => agent.lines.slice(before).some((l) => l.msg === 'sync done' && Number(l['services']) >= 1));
  /**
   * The pass that took the Node update `change` makes (its report says
   * nodeChanged), not whichever pass ends first: the 5 s periodic pass (no
   * Service) or one an interface address started may end in between.
   */
  const syncAfter = async (change: () => void) => {
    const from = agent.lines.length;
    change();
    const handled = (l: { msg?: unknown; nodeChanged?: unknown }) => l.msg === 'sync done' && l.nodeChanged === true;
    await waitFor('the pass that handled the Node update', () => agent.lines.slice(from).some(handled));
    return agent.lines.slice(from).find(handled)!;
  };
  const node = () => api.store.get('nodes', NODE) as { metadata: { labels: Record<string, string> } };
  // The drift repair's full pass (every 5 s here) translates every Service
  // anyway: a Node update it takes says nothing, so the label changes again
  // (a deterministic regression fails every attempt).
  let unrelated: Record<string, unknown> = {};
  for (let attempt = 0; attempt < 3; attempt++) {
    unrelated = await syncAfter(() => {
      const n = node();
      n.metadata.labels['example.com/unrelated'] = `${Date.now()}-${attempt}`;
      api.store.update('nodes', n);
    });
    if (unrelated['kind'] !== 'full' && unrelated['everyService'] !== true) break;
  }
  assert.equal(unrelated['everyService'], false, `an unrelated label re-translated every Service: ${JSON.stringify(unrelated)}`);
  assert.equal(unrelated['services'], 0, `an unrelated label re-translated ${String(unrelated['services'])} Services`);
  const zone = await syncAfter(() => {
    const n = node();
    n.metadata.labels['topology.kubernetes.io/zone'] = 'zone-b';
    api.store.update('nodes', n);
  });
  assert.equal(zone['everyService'], true, `a zone change re-translates every Service: ${JSON.stringify(zone)}`);
  assert.ok(Number(zone['services']) >= 1, 'a zone change re-translates every Service');
  const n = node();
  n.metadata.labels['topology.kubernetes.io/zone'] = 'zone-a';
  api.store.update('nodes', n);
});

test('the sluice.io/lb-algorithm annotation changes the algorithm live without failing a connection; a refused value keeps the default', async () => {
  const algo = createService('algo', { ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  const vip = algo.spec.clusterIP;
  const frontend = `${vip}:80/tcp`;
  const algorithmOf = () => (programmed().find((s) => s.frontend === frontend) as { algorithm?: string } | undefined)?.algorithm;
  const annotate = (value: string) => {
    const s = api.store.get('services', 'algo', 'default') as { metadata: { annotations?: Record<string, string> } };
    s.metadata.annotations = { 'sluice.io/lb-algorithm': value };
    api.store.update('services', s);
  };
  api.store.create('endpointslices', slice('algo', 'algo-1', BACKENDS));
  await waitProgrammed(frontend, BACKENDS.map((b) => `${b}:8080`));
  assert.equal(algorithmOf(), 'random', 'no annotation: the agent default');

  annotate('rr');
  await waitFor('round-robin programmed', () => algorithmOf() === 'round-robin');
  // Measured alone: round-robin's turn is per frontend, shared by every client.
  const counts = new Map<string, number>();
  for (const r of await connect(vip, 80, 40)) counts.set(r.backend ?? r.error ?? '?', (counts.get(r.backend ?? r.error ?? '?') ?? 0) + 1);
  for (const b of BACKENDS) assert.ok(Math.abs((counts.get(`${b}:8080`) ?? 0) - 10) <= 1, `round-robin: ${JSON.stringify([...counts])}`);

  // From here a client connects in a loop while the algorithm changes three times.
  const loop = sb.runInCgroup(['node', labScript('lbClient'), 'loop', vip, '80', '5000']);
  await new Promise((r) => setTimeout(r, 500));

  annotate('sh');
  await waitFor('source-hash programmed', () => algorithmOf() === 'source-hash');
  assert.equal(new Set((await connect(vip, 80, 20)).map((r) => r.backend ?? r.error)).size, 1, 'source-hash: one client, one backend');

  annotate('maglev'); // h-maglev: accepted now, switched live like the others
  await waitFor('maglev programmed', () => algorithmOf() === 'maglev');
  assert.ok(new Set((await connect(vip, 80, 40)).map((r) => r.backend ?? r.error)).size >= 2, 'maglev on the socket path: new sockets spread');

  annotate('wrr');
  const line = await agent.waitForLog(/Service default\/algo: annotation sluice.io\/lb-algorithm: "wrr" refused/);
  assert.equal(line.reason, 'unknown_lb_algorithm');
  await waitFor('the default again', () => algorithmOf() === 'random');
  const metrics = await (await fetch(`http://${addresses(agent.find(/serving \/healthz/)!).metrics}/metrics`)).text();
  assert.match(metrics, /sluice_errors_total\{reason="unknown_lb_algorithm"\} [1-9]/);
  assert.match(metrics, /sluice_maglev_table_build_seconds_count [1-9]/, 'the maglev table build was observed'); // h-maglev
  assert.match(metrics, /sluice_maglev_tables 0\n/, 'the table went with the switch away from maglev');

  const { ok, errors } = JSON.parse(await loop) as { ok: number; errors: Record<string, number> };
  assert.deepEqual(errors, {}, `connections failed while the algorithm changed: ${JSON.stringify(errors)}`);
  assert.ok(ok > 20, `only ${ok} connections in 5 s`);
});

test('restarting the agent while a client connects in a loop fails no connection', async () => {
  const svc = createService('steady', { ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  api.store.create('endpointslices', slice('steady', 'steady-1', BACKENDS.slice(0, 2)));
  await waitProgrammed(`${svc.spec.clusterIP}:80/tcp`, BACKENDS.slice(0, 2).map((b) => `${b}:8080`));
  const loop = sb.runInCgroup(['node', labScript('lbClient'), 'loop', svc.spec.clusterIP, '80', '6000']);
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(await agent.stop(), 0, 'SIGTERM ends the agent cleanly');
  await new Promise((r) => setTimeout(r, 1000)); // no agent at all for a second
  agent = await startAgent();
  assert.ok(agent.find(/adopted the frontends/), 'the new agent adopts the pinned maps');
  const { ok, errors } = JSON.parse(await loop) as { ok: number; errors: Record<string, number> };
  assert.deepEqual(errors, {}, `connections failed during the restart: ${JSON.stringify(errors)}`);
  assert.ok(ok > 20, `only ${ok} connections in 6 s`);
});

test('with the API server gone traffic keeps flowing; the agent resyncs when it returns', async () => {
  const svc = createService('survivor', { clusterIP: '10.96.9.9', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] });
  api.store.create('endpointslices', slice('survivor', 'survivor-1', [BACKENDS[0]!]));
  await waitProgrammed('10.96.9.9:80/tcp', [`${BACKENDS[0]}:8080`]);
  const port = api.port;
  const objects = {
    services: api.store.list('services').items,
    endpointslices: api.store.list('endpointslices').items,
    nodes: api.store.list('nodes').items,
  };
  await api.close();
  await agent.waitForLog(/watch of .* failed/);
  const during = await connect(svc.spec.clusterIP, 80, 10);
  assert.ok(during.every((r) => r.backend === `${BACKENDS[0]}:8080`), 'served from the maps while the API is away');

  // The API returns (same address, a fresh store) with one change: the agent relists and follows.
  api = await startApiServer({ port });
  for (const n of objects.nodes) api.store.create('nodes', strip(n));
  for (const s of objects.services) api.store.create('services', strip(s));
  for (const e of objects.endpointslices) {
    const copy = strip(e) as ReturnType<typeof slice>;
    api.store.create('endpointslices', copy.metadata.name === 'survivor-1' ? slice('survivor', 'survivor-1', [BACKENDS[3]!]) : copy);
  }
  await waitProgrammed('10.96.9.9:80/tcp', [`${BACKENDS[3]}:8080`], 20000);
  const afterReturn = await connect(svc.spec.clusterIP, 80, 10);
  assert.ok(afterReturn.every((r) => r.backend === `${BACKENDS[3]}:8080`));
});

/** An object as a client would create it again: no server-set metadata. */
function strip(obj: unknown): { metadata: { name: string } } & Record<string, unknown> {
  const copy = JSON.parse(JSON.stringify(obj)) as { metadata: Record<string, unknown> } & Record<string, unknown>;
  for (const k of ['resourceVersion', 'uid', 'creationTimestamp', 'generation', 'managedFields']) delete copy.metadata[k];
  return copy as { metadata: { name: string } } & Record<string, unknown>;
}
