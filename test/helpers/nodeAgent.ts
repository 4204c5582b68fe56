// The real `sluice agent` inside a "node" network namespace, watching the
// built-in API server through a unix-socket forwarder (so the node namespace
// needs no route anywhere), with its own child cgroup and bpffs directory.
// Everything it creates is removed by stop().
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { bpffsRoot, cgroup2Root, sluiceBin, waitFor } from './sandbox';

const FORWARDER = path.join(__dirname, '..', 'cluster', 'forwarder.js');

export class NodeAgent {
  log = '';
  readonly bpffs: string;
  private readonly children: ChildProcess[] = [];
  private readonly cgroup: string;

  private constructor(readonly api: ApiServerHandle, private readonly tmp: string) {
    const suffix = path.basename(tmp);
    this.cgroup = path.join(cgroup2Root(), suffix);
    this.bpffs = path.join(bpffsRoot(), suffix);
  }

  /**
   * Start the API server, the forwarders and the agent in `netnsPath` with `args` (plus the sandbox flags).
   * `serviceCIDR`: the API server's (e.g. "v4,v6" for IPv6 Services); its default otherwise.
   */
  static async start(netnsPath: string, nodeName: string, args: string[], opts: { serviceCIDR?: string } = {}): Promise<NodeAgent> {
    const api = await startApiServer({ port: 0, ...(opts.serviceCIDR ? { serviceCIDR: opts.serviceCIDR } : {}) });
    const a = new NodeAgent(api, fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-node-')));
    try {
      const kubeconfig = path.join(a.tmp, 'kubeconfig');
      await api.writeKubeconfig(kubeconfig);
      const sock = path.join(a.tmp, 'api.sock');
      a.children.push(spawn(process.execPath, [FORWARDER, 'unix-to-tcp', sock, `127.0.0.1:${api.port}`], { stdio: 'ignore' }));
      await waitFor('forwarder socket', () => fs.existsSync(sock));
      a.children.push(spawn('nsenter', [`--net=${netnsPath}`, process.execPath, FORWARDER, 'tcp-to-unix', '127.0.0.1:6443', sock], { stdio: 'ignore' }));
      fs.mkdirSync(a.cgroup);
      const agent = spawn('nsenter', [`--net=${netnsPath}`, sluiceBin, 'agent',
        '--kubeconfig', kubeconfig, '--k8s-api-server', '127.0.0.1:6443', '--node-name', nodeName,
        '--cgroup-path', a.cgroup, '--bpffs', a.bpffs,
        '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      a.children.push(agent);
      agent.stdout!.on('data', (d) => (a.log += d));
      agent.stderr!.on('data', (d) => (a.log += d));
      await waitFor('agent synced', () => a.log.includes('informers synced') || agent.exitCode !== null, 20000);
      if (agent.exitCode !== null) throw new Error(`agent exited ${agent.exitCode}: ${a.log}`);
      return a;
    } catch (err) {
      await a.stop();
      throw err;
    }
  }

  async stop(): Promise<void> {
    // Until every child has exited, at most 300 ms (then SIGKILL): the agent
    // and the forwarders usually go within milliseconds, and a fixed 300 ms
    // per stop() added up over the e2e files that start one or more agents.
    const running = this.children.filter((c) => c.exitCode === null && c.signalCode === null);
    const exited = Promise.all(running.map((c) => new Promise((r) => c.once('exit', r))));
    for (const c of running) c.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([exited, new Promise((r) => { timer = setTimeout(r, 300); })]);
    clearTimeout(timer);
    for (const c of running) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await this.api.close();
    fs.rmSync(this.bpffs, { recursive: true, force: true });
    if (fs.existsSync(this.cgroup)) fs.rmdirSync(this.cgroup);
    fs.rmSync(this.tmp, { recursive: true, force: true });
  }
}
