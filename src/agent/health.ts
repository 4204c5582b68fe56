// /healthz and /livez like kube-proxy's proxy health server
// (pkg/proxy/healthcheck/proxy_health.go). Both are 503 when a change has
// waited longer than the health timeout (2 x sync period) without a sync.
// /healthz is also 503 when this Node is going away (being deleted, or
// tainted ToBeDeletedByClusterAutoscaler): cloud load balancers probe it to
// drain the node first. /livez ignores the Node: it says whether the agent
// itself works (the kubelet's probes use it).
import * as http from 'node:http';
import type { V1Node } from '@kubernetes/client-node';

/** The Cluster Autoscaler's taint on a node it is about to delete. */
export const TO_BE_DELETED_TAINT = 'ToBeDeletedByClusterAutoscaler';

/** Status counters, by HTTP code (kube-proxy's proxy_healthz_total / proxy_livez_total). */
export interface HealthCounters {
  healthz(code: number): void;
  livez(code: number): void;
}

export class ProxyHealth {
  private lastUpdated = 0; // ms, last successful sync
  private oldestPending = 0; // ms, oldest change not yet synced; 0 = none
  /** As kube-proxy: eligible while starting, until a Node event says otherwise. */
  private nodeEligible = true;

  constructor(private readonly healthTimeoutMs: number, private readonly now = () => Date.now()) {}

  queued(): void {
    if (this.oldestPending === 0) this.oldestPending = this.now();
  }

  updated(): void {
    this.lastUpdated = this.now();
    this.oldestPending = 0;
  }

  /** kube-proxy's SyncNode: not eligible when deleted or tainted for deletion. A missing Node changes nothing. */
  syncNode(node: V1Node | undefined): void {
    if (!node) return;
    this.nodeEligible = !node.metadata?.deletionTimestamp && !(node.spec?.taints ?? []).some((t) => t.key === TO_BE_DELETED_TAINT);
  }

  get eligible(): boolean {
    return this.nodeEligible;
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

  /** /healthz: the proxy is healthy and the Node is not going away. */
  healthzOk(): boolean {
    return this.healthy() && this.nodeEligible;
  }

  /** kube-proxy's JSON body; lastUpdated is "now" while healthy, as upstream keeps for compatibility. */
  body(path: '/healthz' | '/livez', ok: boolean): Record<string, unknown> {
    const now = this.now();
    const body: Record<string, unknown> = {
      lastUpdated: new Date(ok ? now : this.lastUpdated || 0).toISOString(),
      currentTime: new Date(now).toISOString(),
    };
    if (path === '/healthz') body.nodeEligible = this.nodeEligible;
    return body;
  }
}

export function startHealthServer(health: ProxyHealth, host: string, port: number, counters?: HealthCounters): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/healthz' && path !== '/livez') {
      res.writeHead(404).end();
      return;
    }
    const ok = path === '/healthz' ? health.healthzOk() : health.healthy();
    const code = ok ? 200 : 503;
    if (path === '/healthz') counters?.healthz(code);
    else counters?.livez(code);
    res.writeHead(code, { 'Content-Type': 'application/json', 'X-Content-Type-Options': 'nosniff' });
    res.end(JSON.stringify(health.body(path, ok)));
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}
