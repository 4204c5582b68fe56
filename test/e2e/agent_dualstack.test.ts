// Dual-stack through the agent (issue 14): the built-in API server allocates
// from an IPv4 and an IPv6 Service CIDR (as kube-apiserver with
// --service-cluster-ip-range=v4,v6), IPv4 and IPv6 EndpointSlices feed the
// agent, and real clients reach a PreferDualStack Service over IPv4, over
// IPv6, and over IPv4 through a dual-stack AF_INET6 socket.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';
import { AgentProcess } from '../helpers/agentProcess';

const NODE = 'node-a';
const BACKENDS4 = ['198.18.20.2', '198.18.20.3'];
const BACKENDS6 = ['fd00:20::2', 'fd00:20::3'];

let sb: Sandbox;
let api: ApiServerHandle;
let agent: AgentProcess;
let tmp: string;

type Svc = { spec: { clusterIP: string; clusterIPs: string[]; ipFamilies: string[]; ipFamilyPolicy: string } };

function createService(name: string, spec: Record<string, unknown>): Svc {
  return api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' }, spec }) as Svc;
}

function slice(service: string, name: string, family: 'IPv4' | 'IPv6', ips: string[]) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: 'default', labels: { 'kubernetes.io/service-name': service } },
    addressType: family,
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }, { name: 'dns', port: 8080, protocol: 'UDP' }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true }, nodeName: NODE })),
  };
}

function programmed(): Array<{ frontend: string; family: string; backends: Array<{ address: string; port: number }> }> {
  return JSON.parse(sh(sluiceBin, ['services', '-o', 'json', '--bpffs', sb.bpffs]));
}

const hp = (a: string, p: number) => (a.includes(':') ? `[${a}]:${p}` : `${a}:${p}`);

async function waitProgrammed(frontend: string, backends: string[] | undefined): Promise<void> {
  const want = backends?.map((b) => hp(b, 8080)).sort().join(',');
  await waitFor(`${frontend} -> ${want ?? '(absent)'}`, () => {
    const f = programmed().find((s) => s.frontend === frontend);
    if (backends === undefined) return f === undefined;
    return f !== undefined && f.backends.map((b) => hp(b.address, b.port)).sort().join(',') === want;
  }).catch((err: Error) => {
    const complaints = agent.lines.filter((l) => l.level >= 40).slice(-5).map((l) => JSON.stringify(l));
    throw new Error(`${err.message}; agent warnings/errors: ${complaints.join(' | ')}`);
  });
}

type Result = { backend?: string; peer?: string; error?: string };
async function client(mode: 'tcp' | 'udp', address: string, port: number, count: number): Promise<Result[]> {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), mode, address, String(port), String(count)]);
  return (JSON.parse(out) as { results: Result[] }).results;
}

before(async () => {
  sb = Sandbox.create('sluice-v6e2e');
  await sb.startBackends([...BACKENDS4, ...BACKENDS6], [8080]);
  api = await startApiServer({ port: 0, serviceCIDR: '10.96.0.0/16,fd00:10:96::/112' });
  api.store.create('nodes', {
    apiVersion: 'v1', kind: 'Node', metadata: { name: NODE },
    status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }, { type: 'InternalIP', address: 'fd00:18::1' }] },
  });
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-v6e2e-'));
  const kubeconfig = path.join(tmp, 'kubeconfig');
  await api.writeKubeconfig(kubeconfig);
  agent = new AgentProcess([
    '--kubeconfig', kubeconfig, '--node-name', NODE, '--cgroup-path', sb.cgroup, '--bpffs', sb.bpffs,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', '--log-level', 'debug',
  ]);
  await agent.waitForLog(/informers synced/);
});

after(async () => {
  await agent?.stop();
  await api?.close();
  sb?.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('a PreferDualStack Service is reached over IPv4, IPv6 and a dual-stack socket; slices of each family feed their own frontend', async () => {
  const svc = createService('web', {
    ipFamilyPolicy: 'PreferDualStack',
    ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }, { name: 'dns', port: 53, targetPort: 8080, protocol: 'UDP' }],
  });
  assert.deepEqual(svc.spec.ipFamilies, ['IPv4', 'IPv6']);
  const [vip4, vip6] = svc.spec.clusterIPs as [string, string];
  assert.match(vip6, /^fd00:10:96::/);
  api.store.create('endpointslices', slice('web', 'web-v4', 'IPv4', BACKENDS4));
  api.store.create('endpointslices', slice('web', 'web-v6', 'IPv6', BACKENDS6));
  await waitProgrammed(`${vip4}:80/tcp`, BACKENDS4);
  await waitProgrammed(`[${vip6}]:80/tcp`, BACKENDS6);
  await waitProgrammed(`[${vip6}]:53/udp`, BACKENDS6);

  const over4 = await client('tcp', vip4, 80, 20);
  assert.deepEqual(over4.filter((r) => r.error), []);
  assert.deepEqual([...new Set(over4.map((r) => r.backend))].sort(), BACKENDS4.map((b) => `${b}:8080`));
  const over6 = await client('tcp', vip6, 80, 20);
  assert.deepEqual(over6.filter((r) => r.error), []);
  assert.deepEqual([...new Set(over6.map((r) => r.backend))].sort(), BACKENDS6.map((b) => `${b}:8080`));
  assert.ok(over6.every((r) => r.peer === `${vip6}:80`));
  const mapped = await client('tcp', `::ffff:${vip4}`, 80, 10);
  assert.deepEqual(mapped.filter((r) => r.error), []);
  assert.ok(mapped.every((r) => BACKENDS4.map((b) => `${b}:8080`).includes(r.backend!) && r.peer === `::ffff:${vip4}:80`));
  const udp6 = await client('udp', vip6, 53, 5);
  assert.deepEqual(udp6.filter((r) => r.error), []);
  assert.ok(udp6.every((r) => r.peer === `${vip6}:53`), `UDP replies show the IPv6 VIP: ${udp6.map((r) => r.peer).join(',')}`);

  // The IPv6 slice changes: only the IPv6 frontend follows.
  api.store.update('endpointslices', slice('web', 'web-v6', 'IPv6', BACKENDS6.slice(0, 1)));
  await waitProgrammed(`[${vip6}]:80/tcp`, BACKENDS6.slice(0, 1));
  await waitProgrammed(`${vip4}:80/tcp`, BACKENDS4);
  const after6 = await client('tcp', vip6, 80, 10);
  assert.ok(after6.every((r) => r.backend === `${BACKENDS6[0]}:8080`), JSON.stringify(after6));

  api.store.delete('services', 'web', 'default');
  await waitProgrammed(`[${vip6}]:80/tcp`, undefined);
  await waitProgrammed(`${vip4}:80/tcp`, undefined);
});

test('SingleStack IPv6 gets only an IPv6 frontend; an IPv6 slice of a single-stack IPv4 Service is not programmed', async () => {
  const only6 = createService('only6', { ipFamilies: ['IPv6'], ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] });
  assert.equal(only6.spec.ipFamilyPolicy, 'SingleStack');
  const only4 = createService('only4', { ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] });
  assert.deepEqual(only4.spec.ipFamilies, ['IPv4'], 'SingleStack by default: the primary family');
  api.store.create('endpointslices', slice('only6', 'only6-v6', 'IPv6', BACKENDS6));
  api.store.create('endpointslices', slice('only4', 'only4-v4', 'IPv4', BACKENDS4));
  api.store.create('endpointslices', slice('only4', 'only4-v6', 'IPv6', BACKENDS6));
  await waitProgrammed(`[${only6.spec.clusterIP}]:80/tcp`, BACKENDS6);
  await waitProgrammed(`${only4.spec.clusterIP}:80/tcp`, BACKENDS4);
  const mine = programmed().filter((s) => s.backends.some((b) => BACKENDS6.includes(b.address) || BACKENDS4.includes(b.address)));
  assert.deepEqual(mine.map((s) => s.frontend).sort(), [`${only4.spec.clusterIP}:80/tcp`, `[${only6.spec.clusterIP}]:80/tcp`].sort());
  const r = await client('tcp', only6.spec.clusterIP, 80, 6);
  assert.deepEqual(r.filter((x) => x.error), []);
});

test('IPv6 loadBalancerSourceRanges on the socket path: a client outside the ranges cannot reach the IPv6 LB IP through connect6; inside can; the ClusterIP is not filtered', async () => {
  const LB_IP = 'fd00:28::10';
  const INSIDE = 'fd00:26::5';
  const OUTSIDE = 'fd00:27::5';
  for (const a of [INSIDE, OUTSIDE]) sb.ip(['addr', 'add', `${a}/128`, 'dev', 'lo', 'nodad']);
  const svc = createService('lb6-ranges', {
    type: 'LoadBalancer', ipFamilies: ['IPv6'], loadBalancerSourceRanges: ['fd00:26::/64'],
    ports: [{ name: 'dns', port: 53, targetPort: 8080, protocol: 'UDP' }],
  });
  api.store.updateStatus('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'lb6-ranges', namespace: 'default' },
    status: { loadBalancer: { ingress: [{ ip: LB_IP }] } } });
  api.store.create('endpointslices', slice('lb6-ranges', 'lb6-ranges-v6', 'IPv6', BACKENDS6));
  await waitProgrammed(`[${LB_IP}]:53/udp`, BACKENDS6);
  await waitProgrammed(`[${svc.spec.clusterIP}]:53/udp`, BACKENDS6);
  // A UDP6 socket bound to source, connected: what getpeername() shows, or the errno code.
  const from = async (source: string, address: string) => (await sb.runInCgroup(['node', '-e',
    `const s=require('dgram').createSocket({type:'udp6',ipv6Only:true});const done=r=>{console.log(r);process.exit(0)};s.on('error',e=>done(e.code));` +
    `s.bind(0,'${source}',()=>s.connect(53,'${address}',e=>{if(e)return done(e.code);const r=s.remoteAddress();done(r.address+'/'+r.port)}))`])).trim();
  assert.deepEqual({
    inside: await from(INSIDE, LB_IP),
    outside: await from(OUTSIDE, LB_IP),
    clusterIpOutside: await from(OUTSIDE, svc.spec.clusterIP),
  }, {
    inside: `${LB_IP}/53`,
    outside: 'EHOSTUNREACH',
    clusterIpOutside: `${svc.spec.clusterIP}/53`,
  });
  api.store.delete('services', 'lb6-ranges', 'default');
  await waitProgrammed(`[${LB_IP}]:53/udp`, undefined);
});
