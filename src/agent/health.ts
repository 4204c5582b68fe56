// /healthz and /livez like kube-proxy's proxier health server: healthy while
// changes get programmed in time. Unhealthy when a change has waited longer
// than the health timeout (2 x sync period, as kube-proxy) without a sync.
import * as http from 'node:http';

export class ProxyHealth {
  private lastUpdated = 0; // ms, last successful sync
  private oldestPending = 0; // ms, oldest change not yet synced; 0 = none

  constructor(private readonly healthTimeoutMs: number, private readonly now = () => Date.now()) {}

  queued(): void {
    if (this.oldestPending === 0) this.oldestPending = this.now();
  }

  updated(): void {
    this.lastUpdated = this.now();
    this.oldestPending = 0;
  }

  /**
   * As kube-proxy: healthy unless a change has been pending for longer than
   * the timeout. Before the first sync nothing is pending yet, so a fresh
   * agent is healthy until changes start waiting too long.
   */
  healthy(): boolean {
    if (this.oldestPending === 0) return true;
    return this.now() - this.oldestPending < this.healthTimeoutMs;
  }

  /** kube-proxy's JSON body. */
  body(): { lastUpdated: string; currentTime: string; nodeEligible: boolean } {
    return {
      lastUpdated: new Date(this.lastUpdated || 0).toISOString(),
      currentTime: new Date(this.now()).toISOString(),
      nodeEligible: true,
    };
  }
}

export function startHealthServer(health: ProxyHealth, host: string, port: number): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/healthz' && path !== '/livez') {
      res.writeHead(404).end();
      return;
    }
    const ok = health.healthy();
    res.writeHead(ok ? 200 : 503, { 'Content-Type': 'application/json', 'X-Content-Type-Options': 'nosniff' });
    res.end(JSON.stringify(health.body()));
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}
