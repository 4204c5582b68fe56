// Drives src/lab/holdClient.ts (a client that keeps its TCP connections
// open) inside a sandbox's cgroup and netns, for the least-connection tests.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as readline from 'node:readline';
import { labScript, type Sandbox } from './sandbox';

export class Holder {
  private readonly child: ChildProcess;
  private readonly lines: string[] = [];
  private waiting: ((l: string) => void) | undefined;
  /** Open connections: id -> backend address:port. */
  readonly held = new Map<number, string>();

  constructor(sb: Sandbox, private readonly vip: string, private readonly backends: string[]) {
    // Joins the cgroup, then enters the netns (as Sandbox.spawnInCgroup), with a stdin to command it.
    const script = `echo $$ > ${sb.cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${sb.netns} -- "$@"`;
    this.child = spawn('sh', ['-c', script, 'sh', 'node', labScript('holdClient'), vip], { stdio: ['pipe', 'pipe', 'inherit'] });
    readline.createInterface({ input: this.child.stdout! }).on('line', (l) => {
      if (this.waiting) {
        const w = this.waiting;
        this.waiting = undefined;
        w(l);
      } else this.lines.push(l);
    });
  }

  private command(line: string): Promise<Record<string, unknown>> {
    this.child.stdin!.write(`${line}\n`);
    const next = this.lines.shift();
    if (next) return Promise.resolve(JSON.parse(next));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`holdClient: no answer to ${line}`)), 30000);
      this.waiting = (l) => {
        clearTimeout(timer);
        resolve(JSON.parse(l));
      };
    });
  }

  /** Open n connections to vip:port one after another and keep them. */
  async open(port: number, n: number): Promise<void> {
    const r = (await this.command(`open ${port} ${n}`)) as { opened: Array<{ id: number; backend?: string; error?: string }> };
    assert.deepEqual(r.opened.filter((o) => o.error), [], `connections to ${this.vip}:${port} failed`);
    for (const o of r.opened) this.held.set(o.id, o.backend!);
  }

  async close(ids: number[]): Promise<void> {
    await this.command(`close ${ids.join(',')}`);
    for (const id of ids) this.held.delete(id);
  }

  async closeAll(): Promise<void> {
    await this.close([...this.held.keys()]);
  }

  /** Each open connection's peer as getpeername() shows it (asked once per socket: node caches it). */
  async peers(): Promise<Map<number, string>> {
    const r = (await this.command('peers')) as { peers: Record<string, string> };
    return new Map(Object.entries(r.peers).map(([id, p]) => [Number(id), p]));
  }

  /** Active connections per backend (address:port), as this client holds them. */
  perBackend(port: number): Map<string, number> {
    const h = new Map<string, number>(this.backends.map((b) => [`${b}:${port}`, 0]));
    for (const b of this.held.values()) h.set(b, (h.get(b) ?? 0) + 1);
    return h;
  }

  kill(): void {
    this.child.kill('SIGKILL');
  }
}
