// `make demo`: Sluice's main job on an embedded default. The built-in
// Kubernetes API, the real agent, backends in a network namespace, real
// clients in a child cgroup, real traffic through the BPF data path, and what
// to look at. Everything it creates is removed on exit or Ctrl-C.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import pino from 'pino';
import { startApiServer, type ApiServerHandle } from '../k8s/apiserver';
import { startAgent, type AgentHandle } from '../agent/agent';
import { defaultConfig } from '../agent/config';
import { Sandbox, waitFor, labScript, sluiceBin } from '../lab/sandbox';
import { uninstall } from '../datapath/sockLb';
import { openSockLbMaps } from '../datapath/maps';
import { ip4ToNumber } from '../datapath/addr';
import { LB_PROTO_TCP } from '../abi/generated';

const NODE = 'demo-node';
const BACKENDS = ['198.18.10.11', '198.18.10.12', '198.18.10.13'];

export interface DemoOptions {
  /** Seconds to keep running after the tour; undefined: until Ctrl-C on a terminal, 0 otherwise. */
  duration?: number;
  out?: (s: string) => void;
}

type Results = Array<{ backend?: string; peer?: string; error?: string; ms: number }>;

export async function runDemo(opts: DemoOptions = {}): Promise<void> {
  const say = opts.out ?? ((s: string) => process.stdout.write(s + '\n'));
  const bold = process.stdout.isTTY ? (s: string) => `\x1b[1m${s}\x1b[0m` : (s: string) => s;
  const step = (n: number, title: string) => say(`\n${bold(`[${n}] ${title}`)}`);
  preflight();

  let sb: Sandbox | undefined;
  let api: ApiServerHandle | undefined;
  let agent: AgentHandle | undefined;
  let tmp: string | undefined;
  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    step(1, 'A lab: a network namespace with backend "pods", a child cgroup for clients, a bpffs directory');
    sb = Sandbox.create('sluice-demo');
    for (const b of BACKENDS) sb.ip(['addr', 'add', `${b}/32`, 'dev', 'lo']);
    const servers = sb.spawnInNetns(['node', labScript('backendServer'), ...BACKENDS.flatMap((b) => [`${b}:8080`, `${b}:5353`])]);
    let ready = false;
    servers.stdout!.on('data', (d) => { if (String(d).includes('ready')) ready = true; });
    await waitFor('backend servers', () => ready);
    say(`  netns ${sb.netns}: backends ${BACKENDS.join(', ')} serve TCP :8080 and UDP :5353`);
    say(`  cgroup ${sb.cgroup} (clients run here; the socket hooks attach here, never to the root cgroup)`);
    say(`  bpffs  ${sb.bpffs}`);

    step(2, 'The built-in Kubernetes API server and the Sluice agent');
    api = await startApiServer({ port: 0 });
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-demo-'));
    const kubeconfig = path.join(tmp, 'kubeconfig');
    await api.writeKubeconfig(kubeconfig);
    api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: NODE }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } });
    agent = await startAgent(
      { ...defaultConfig(), kubeconfig, nodeName: NODE, cgroupPath: sb.cgroup, bpffs: sb.bpffs, healthzBindAddress: '127.0.0.1:0', metricsBindAddress: '127.0.0.1:0', logLevel: 'warn' },
      pino({ level: 'warn' }),
    );
    await agent.synced;
    say(`  API server ${api.url} (kubeconfig ${kubeconfig})`);
    say(`  agent: /healthz on ${agent.healthAddress}, /metrics on ${agent.metricsAddress}`);

    step(3, 'Three Services, as kubectl would create them');
    const web = createService(api, 'web', [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }]);
    const dns = createService(api, 'dns', [{ name: 'dns', port: 53, targetPort: 5353, protocol: 'UDP' }]);
    const empty = createService(api, 'empty', [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }]);
    api.store.create('endpointslices', endpointSlice('web', 'http', 8080, 'TCP', BACKENDS));
    api.store.create('endpointslices', endpointSlice('dns', 'dns', 5353, 'UDP', BACKENDS.slice(0, 2)));
    say(`  web   ClusterIP ${web}:80/tcp  -> ${BACKENDS.length} endpoints`);
    say(`  dns   ClusterIP ${dns}:53/udp  -> 2 endpoints`);
    say(`  empty ClusterIP ${empty}:80/tcp -> no endpoints`);
    await waitFor('web programmed', () => programmedBackends(sb!, `${web}:80/tcp`) === BACKENDS.length);
    await waitFor('dns programmed', () => programmedBackends(sb!, `${dns}:53/udp`) === 2);

    step(4, `Traffic: 90 TCP connections to ${web}:80 from the client cgroup`);
    const tcp = await client(sb, 'tcp', web, 80, 90);
    say(histogram(tcp));
    say(`  getpeername() in the client shows ${tcp[0]?.peer} (the Service, not the pod)`);
    const udp = await client(sb, 'udp', dns, 53, 20);
    say(`  20 UDP queries to ${dns}:53: replies came from ${[...new Set(udp.map((r) => r.peer))].join(', ')} (recvmsg shows the Service)`);
    say(histogram(udp));
    const refused = await client(sb, 'tcp', empty, 80, 1);
    say(`  ${empty}:80 has no endpoints: connect() -> ${refused[0]?.error} in ${refused[0]?.ms.toFixed(2)} ms (kube-proxy rejects too; nothing hangs)`);

    step(5, `A live endpoint change: ${BACKENDS[2]} becomes not ready`);
    const maps = openSockLbMaps(sb.bpffs);
    try {
      const master = { address: ip4ToNumber(web), port: 80, proto: LB_PROTO_TCP, scope: 0 };
      const t0 = process.hrtime.bigint();
      api.store.update('endpointslices', endpointSlice('web', 'http', 8080, 'TCP', BACKENDS.slice(0, 2)));
      // Poll the map itself (not the CLI): this is API write -> watch event -> map.
      await waitFor('change programmed', () => maps.services.get(master)?.count === 2, 10000, 1);
      say(`  the map shows 2 backends ${(Number(process.hrtime.bigint() - t0) / 1e6).toFixed(1)} ms after the API write (watch event, translate, diff, apply)`);
    } finally {
      maps.close();
    }
    say(histogram(await client(sb, 'tcp', web, 80, 60)));

    step(6, 'What the maps hold, without asking the agent');
    say(`$ sluice services --bpffs ${sb.bpffs}`);
    say(indent(cli(['services', '--bpffs', sb.bpffs])));
    say(`$ bpftool map dump pinned ${sb.bpffs}/sluice_svc4   (first entries)`);
    say(indent(execFileSync('bpftool', ['map', 'dump', 'pinned', path.join(sb.bpffs, 'sluice_svc4')], { encoding: 'utf8' }).split('\n').slice(0, 24).join('\n')));

    step(7, 'Try it yourself while the demo runs');
    say(`  ./bin/sluice services --bpffs ${sb.bpffs} -o json`);
    say(`  ./bin/sluice status --bpffs ${sb.bpffs}`);
    say(`  bpftool map dump pinned ${sb.bpffs}/sluice_be4`);
    say(`  curl -s http://${agent.metricsAddress}/metrics | grep -E 'kubeproxy_|sluice_'`);
    say(`  curl -s http://${agent.healthAddress}/healthz`);
    say(`  KUBECONFIG=${kubeconfig} kubectl get svc,endpointslices   (if you have kubectl)`);
    say(`  sh -c 'echo $$ > ${sb.cgroup}/cgroup.procs; exec nsenter --net=/run/netns/${sb.netns} node ${labScript('lbClient')} tcp ${web} 80 10'`);

    const duration = opts.duration ?? (process.stdin.isTTY ? Infinity : 0);
    if (duration > 0) {
      say(duration === Infinity ? '\nRunning; press Ctrl-C to stop and clean up.' : `\nRunning for ${duration} s, then cleaning up.`);
      const end = Date.now() + duration * 1000;
      while (!interrupted && Date.now() < end) await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    say('\nCleaning up: agent, API server, programs, maps, namespace, cgroup.');
    await agent?.stop().catch(() => undefined);
    if (sb) {
      try { uninstall(sb.bpffs); } catch { /* removed below */ }
      sb.close();
    }
    await api?.close().catch(() => undefined);
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  }
}

function preflight(): void {
  if (process.getuid?.() !== 0) throw new Error('the demo needs root (BPF programs, cgroups, network namespaces): run `sudo make demo`');
}

function createService(api: ApiServerHandle, name: string, ports: Array<Record<string, unknown>>): string {
  const svc = api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' }, spec: { selector: { app: name }, ports } }) as { spec: { clusterIP: string } };
  return svc.spec.clusterIP;
}

function endpointSlice(service: string, portName: string, port: number, protocol: string, ips: string[]) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: `${service}-abcde`, namespace: 'default', labels: { 'kubernetes.io/service-name': service }, annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': new Date().toISOString() } },
    addressType: 'IPv4',
    ports: [{ name: portName, port, protocol }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true }, nodeName: NODE })),
  };
}

function cli(args: string[]): string {
  return execFileSync(sluiceBin, args, { encoding: 'utf8' });
}

function programmedBackends(sb: Sandbox, frontend: string): number {
  const services = JSON.parse(cli(['services', '-o', 'json', '--bpffs', sb.bpffs])) as Array<{ frontend: string; backends: unknown[] }>;
  return services.find((s) => s.frontend === frontend)?.backends.length ?? -1;
}

async function client(sb: Sandbox, mode: 'tcp' | 'udp', address: string, port: number, count: number): Promise<Results> {
  const out = await sb.runInCgroup(['node', labScript('lbClient'), mode, address, String(port), String(count)]);
  return (JSON.parse(out) as { results: Results }).results;
}

function histogram(results: Results): string {
  const counts = new Map<string, number>();
  for (const r of results) counts.set(r.backend ?? r.error ?? '?', (counts.get(r.backend ?? r.error ?? '?') ?? 0) + 1);
  const max = Math.max(...counts.values());
  return [...counts.entries()]
    .sort()
    .map(([k, n]) => `  ${k.padEnd(18)} ${'#'.repeat(Math.round((30 * n) / max)).padEnd(30)} ${n}`)
    .join('\n');
}

const indent = (s: string) => s.trimEnd().split('\n').map((l) => `  ${l}`).join('\n');
