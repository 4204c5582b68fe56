// Prometheus metrics. Where a metric means what kube-proxy's does, it has
// kube-proxy's full name (subsystem "kubeproxy"), so existing dashboards and
// alerts keep working after the switch; Sluice's own carry "sluice_".
import * as http from 'node:http';
import { Registry, Histogram, Gauge, Counter, collectDefaultMetrics } from 'prom-client';

export class AgentMetrics {
  readonly registry = new Registry();

  readonly syncDuration = new Histogram({
    name: 'kubeproxy_sync_proxy_rules_duration_seconds',
    help: 'SyncProxyRules latency in seconds: one pass of translate, diff and apply',
    buckets: Array.from({ length: 15 }, (_, i) => 0.0001 * 2 ** i),
    registers: [this.registry],
  });

  readonly syncLastTimestamp = new Gauge({
    name: 'kubeproxy_sync_proxy_rules_last_timestamp_seconds',
    help: 'The last time the maps were successfully synced',
    registers: [this.registry],
  });

  readonly syncLastQueuedTimestamp = new Gauge({
    name: 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds',
    help: 'The last time a sync was queued (a change arrived)',
    registers: [this.registry],
  });

  readonly networkProgrammingDuration = new Histogram({
    name: 'kubeproxy_network_programming_duration_seconds',
    help: 'In-cluster network programming latency: from the endpoints change (EndpointSlice last-change-trigger-time) to the maps',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300],
    registers: [this.registry],
  });

  readonly servicesProgrammed = new Gauge({ name: 'sluice_services_programmed', help: 'Services with at least one frontend in the maps', registers: [this.registry] });
  readonly frontendsProgrammed = new Gauge({ name: 'sluice_frontends_programmed', help: 'Frontends (address, port, protocol, scope) in the maps', registers: [this.registry] });
  readonly backendsProgrammed = new Gauge({ name: 'sluice_backends_programmed', help: 'Backends in the maps', registers: [this.registry] });
  readonly mapEntries = new Gauge({ name: 'sluice_map_entries', help: 'Entries in each pinned map', labelNames: ['map'], registers: [this.registry] });
  readonly mapMaxEntries = new Gauge({ name: 'sluice_map_max_entries', help: 'Capacity of each pinned map', labelNames: ['map'], registers: [this.registry] });
  readonly errors = new Counter({
    name: 'sluice_errors_total',
    help: 'Objects or operations rejected, by reason (invalid_port, invalid_ip, unsupported_protocol, too_many_endpoints, map_full, apply_failed, watch_failed, ...)',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly syncs = new Counter({ name: 'sluice_syncs_total', help: 'Sync passes, by kind (partial, full) and result', labelNames: ['kind', 'result'], registers: [this.registry] });
  // Data-path counters (src/datapath/counters.ts names each index of the counters map).
  readonly datapath = new Counter({
    name: 'sluice_datapath_events_total',
    help: 'Data-path events read from the counters map, by reason, direction (original: toward the backend; reply: back to the client) and path (socket, north_south, pod)',
    labelNames: ['reason', 'direction', 'path'],
    registers: [this.registry],
  });

  // ---- stale sockets (issue 13.1) ----
  readonly staleSocketsDestroyed = new Counter({
    name: 'sluice_stale_sockets_destroyed_total',
    help: 'Sockets destroyed because the backend the socket LB had connected them to was deleted, by protocol',
    labelNames: ['proto'],
    registers: [this.registry],
  });
  readonly staleSocketTermination = new Histogram({
    name: 'sluice_stale_socket_termination_seconds',
    help: 'From the EndpointSlice change (its last-change-trigger-time, else the sync start) to the end of the pass that destroyed its stale sockets',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
    registers: [this.registry],
  });
  // ---- end of stale sockets ----

  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }
}

export function startMetricsServer(metrics: AgentMetrics, host: string, port: number, onScrape?: () => void): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    onScrape?.();
    metrics.registry.metrics().then(
      (body) => res.writeHead(200, { 'Content-Type': metrics.registry.contentType }).end(body),
      (err) => res.writeHead(500).end(String(err)),
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}
