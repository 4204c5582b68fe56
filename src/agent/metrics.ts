// Prometheus metrics. Where a metric means what kube-proxy's does, it has
// kube-proxy 1.34's full name, type, labels and buckets (subsystem
// "kubeproxy", pkg/proxy/metrics), so existing dashboards and alerts keep
// working after the switch; Sluice's own carry "sluice_".
import * as http from 'node:http';
import { Registry, Histogram, Gauge, Counter, collectDefaultMetrics } from 'prom-client';

/** prometheus ExponentialBuckets(start, factor, count). */
function exponentialBuckets(start: number, factor: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => start * factor ** i);
}

function linearBuckets(start: number, width: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => start + width * i);
}

/** kube-proxy's sync latency buckets: 1 ms .. 16 s. */
export const SYNC_BUCKETS = exponentialBuckets(0.001, 2, 15);
/** kube-proxy's network programming buckets (component-base MergeBuckets starts with a 0 bucket). */
export const NETWORK_PROGRAMMING_BUCKETS = [
  0,
  ...linearBuckets(0.25, 0.25, 2),
  ...linearBuckets(1, 1, 59),
  ...linearBuckets(60, 5, 12),
  ...linearBuckets(120, 30, 7),
];

/**
 * prom-client's default Node.js metrics, minus the ones promtool rejects:
 * nodejs_active_{handles,requests,resources}_total are gauges with a
 * counter's _total suffix. process_* (CPU, memory, start time, fds) stay,
 * as kube-proxy's Go client exports them.
 */
function registerDefaultMetrics(into: Registry): void {
  const scratch = new Registry();
  collectDefaultMetrics({ register: scratch });
  for (const metric of scratch.getMetricsAsArray() as unknown as Array<Parameters<Registry['registerMetric']>[0] & { name: string }>) {
    if (/^nodejs_active_.*_total$/.test(metric.name)) continue;
    into.registerMetric(metric);
  }
}

export class AgentMetrics {
  readonly registry = new Registry();

  // ---- kube-proxy's metrics (pkg/proxy/metrics, v1.34) ----
  readonly syncDuration = new Histogram({
    name: 'kubeproxy_sync_proxy_rules_duration_seconds',
    help: 'SyncProxyRules latency in seconds',
    labelNames: ['ip_family'],
    buckets: SYNC_BUCKETS,
    registers: [this.registry],
  });

  readonly syncFullDuration = new Histogram({
    name: 'kubeproxy_sync_full_proxy_rules_duration_seconds',
    help: 'SyncProxyRules latency in seconds for full resyncs',
    labelNames: ['ip_family'],
    buckets: SYNC_BUCKETS,
    registers: [this.registry],
  });

  readonly syncPartialDuration = new Histogram({
    name: 'kubeproxy_sync_partial_proxy_rules_duration_seconds',
    help: 'SyncProxyRules latency in seconds for partial resyncs',
    labelNames: ['ip_family'],
    buckets: SYNC_BUCKETS,
    registers: [this.registry],
  });

  readonly syncLastTimestamp = new Gauge({
    name: 'kubeproxy_sync_proxy_rules_last_timestamp_seconds',
    help: 'The last time proxy rules were successfully synced',
    labelNames: ['ip_family'],
    registers: [this.registry],
  });

  readonly syncLastQueuedTimestamp = new Gauge({
    name: 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds',
    help: 'The last time a sync of proxy rules was queued',
    labelNames: ['ip_family'],
    registers: [this.registry],
  });

  readonly networkProgrammingDuration = new Histogram({
    name: 'kubeproxy_network_programming_duration_seconds',
    help: 'In Cluster Network Programming Latency in seconds',
    labelNames: ['ip_family'],
    buckets: NETWORK_PROGRAMMING_BUCKETS,
    registers: [this.registry],
  });

  readonly endpointChangesPending = new Gauge({
    name: 'kubeproxy_sync_proxy_rules_endpoint_changes_pending',
    help: 'Pending proxy rules Endpoint changes',
    registers: [this.registry],
  });

  readonly endpointChangesTotal = new Counter({
    name: 'kubeproxy_sync_proxy_rules_endpoint_changes_total',
    help: 'Cumulative proxy rules Endpoint changes',
    registers: [this.registry],
  });

  readonly serviceChangesPending = new Gauge({
    name: 'kubeproxy_sync_proxy_rules_service_changes_pending',
    help: 'Pending proxy rules Service changes',
    registers: [this.registry],
  });

  readonly serviceChangesTotal = new Counter({
    name: 'kubeproxy_sync_proxy_rules_service_changes_total',
    help: 'Cumulative proxy rules Service changes',
    registers: [this.registry],
  });

  readonly healthzTotal = new Counter({
    name: 'kubeproxy_proxy_healthz_total',
    help: 'Cumulative proxy healthz HTTP status',
    labelNames: ['code'],
    registers: [this.registry],
  });

  readonly livezTotal = new Counter({
    name: 'kubeproxy_proxy_livez_total',
    help: 'Cumulative proxy livez HTTP status',
    labelNames: ['code'],
    registers: [this.registry],
  });

  readonly noLocalEndpoints = new Gauge({
    name: 'kubeproxy_sync_proxy_rules_no_local_endpoints_total',
    help: 'Number of services with a Local traffic policy and no endpoints',
    labelNames: ['traffic_policy', 'ip_family'],
    registers: [this.registry],
  });

  // ---- Sluice's own ----
  readonly servicesProgrammed = new Gauge({ name: 'sluice_services_programmed', help: 'Services with at least one frontend in the maps', registers: [this.registry] });
  readonly frontendsProgrammed = new Gauge({ name: 'sluice_frontends_programmed', help: 'Frontends (address, port, protocol, scope) in the maps', registers: [this.registry] });
  readonly backendsProgrammed = new Gauge({ name: 'sluice_backends_programmed', help: 'Backends in the maps', registers: [this.registry] });
  // h-maglev: Maglev table builds and their kernel memory.
  readonly maglevBuildDuration = new Histogram({
    name: 'sluice_maglev_table_build_seconds',
    help: 'Time to build and write one Maglev lookup table (permutation fill and the inner array write)',
    buckets: exponentialBuckets(0.00005, 2, 14),
    registers: [this.registry],
  });
  readonly maglevTables = new Gauge({ name: 'sluice_maglev_tables', help: 'Distinct Maglev tables in the data path (frontends with the same backends share one)', registers: [this.registry] });
  readonly maglevTableBytes = new Gauge({ name: 'sluice_maglev_table_bytes', help: 'Kernel memory of the Maglev tables (memlock of each inner array and of the outer map)', registers: [this.registry] });
  readonly mapEntries = new Gauge({ name: 'sluice_map_entries', help: 'Entries in each pinned map', labelNames: ['map'], registers: [this.registry] });
  readonly mapMaxEntries = new Gauge({ name: 'sluice_map_max_entries', help: 'Capacity of each pinned map', labelNames: ['map'], registers: [this.registry] });
  readonly idsInUse = new Gauge({ name: 'sluice_ids_in_use', help: 'Backend and rev-NAT ids the agent holds (leak check: 0 when no Service is left)', labelNames: ['kind'], registers: [this.registry] });
  readonly errors = new Counter({
    name: 'sluice_errors_total',
    help: 'Objects or operations rejected, by reason (invalid_port, invalid_ip, unsupported_protocol, too_many_endpoints, frontend_conflict, map_full, apply_failed, watch_failed, unhandled_rejection, ...)',
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
    registerDefaultMetrics(this.registry);
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
