// The sync loop: fold pending changes, translate the changed Services, diff
// them against what was programmed, apply. One sync at a time; changes that
// arrive during a sync are coalesced into the next one, which starts as soon
// as the current one ends (no fixed delay: latency does not grow with bursts).
// A periodic full sync re-reads the maps and repairs drift.
import type { Logger } from 'pino';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { translateService, nodeContextFromNode } from '../translate';
import type { HealthCheckService, NodeContext, TranslateOptions, TranslateProblem } from '../model/frontend';
import { LbProgrammer, frontendId, type FrontendSpec, type ProgrammedBackend } from '../datapath/programmer';
import type { SockLbMaps } from '../datapath/maps';
import type { ClusterState } from './store';
import type { AgentMetrics } from './metrics';
import type { ProxyHealth } from './health';
import { toFrontendSpec, ZoneIds } from './toSpecs';

const RETRY_DELAY_MS = 1000;

/**
 * The first full sync parses and translates every object at once; the
 * garbage it leaves is most of the agent's heap. One full collection right
 * after it lets V8 give those pages back instead of keeping the peak as the
 * agent's steady RSS. (gc is reachable without --expose-gc this way.)
 */
function releaseStartupGarbage(): void {
  try {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as (() => void) | undefined;
    gc?.();
  } catch {
    // Not fatal: the heap shrinks on its own, later.
  }
}

export interface SyncerOptions {
  nodeName: string;
  /** Backends were deleted from the maps (the TC path forgets their flows). */
  onBackendsDeleted?: (ids: number[]) => void;
  /**
   * Backends no frontend uses any more (address, port, protocol), with the
   * time of the oldest change this sync folded in (EndpointSlice trigger time,
   * else the sync start): stale-socket termination.
   */
  onBackendsGone?: (backends: ProgrammedBackend[], since: number) => void;
  /** After every sync: what it did and what is programmed now. */
  onSyncDone?: (report: SyncReport, programmed: { services: number; frontends: number; backends: number }) => void;
  /** healthCheckNodePort services and their local endpoint counts changed. */
  onHealthChecks?: (checks: HealthCheckService[]) => void;
  /** Before every sync: the node's addresses (for the socket hooks' ExternalIP and bind rules). */
  onNodeAddresses?: (addresses: string[]) => void;
  translate: TranslateOptions;
  minSyncPeriodMs: number;
  syncPeriodMs: number;
}

export interface SyncReport {
  kind: 'partial' | 'full';
  services: number;
  written: number;
  deleted: number;
  failures: number;
  durationMs: number;
}

export class Syncer {
  private programmer: LbProgrammer;
  /** serviceKey -> the frontends it last asked for. */
  /** serviceKey -> ids of the frontends it last asked for (the specs themselves are not kept). */
  private readonly desired = new Map<string, string[]>();
  /** frontend id -> owning serviceKey: one frontend, one Service. */
  private readonly owners = new Map<string, string>();
  private readonly owned = new Map<string, Set<string>>();
  /** serviceKey -> its healthCheckNodePort and local endpoints (externalTrafficPolicy: Local). */
  private readonly healthChecks = new Map<string, HealthCheckService>();
  private healthChecksChanged = false;
  /** serviceKey -> problems last reported, so a problem is logged once per change. */
  private readonly reported = new Map<string, string>();
  private readonly zones = new ZoneIds();
  private running = false;
  private again = false;
  private timer: NodeJS.Timeout | NodeJS.Immediate | undefined;
  private fullTimer: NodeJS.Timeout | undefined;
  private lastSyncEnd = 0;
  private ready = false;
  private stopped = false;
  readonly reports: SyncReport[] = [];

  constructor(
    private readonly state: ClusterState,
    private readonly maps: SockLbMaps,
    private readonly opts: SyncerOptions,
    private readonly metrics: AgentMetrics,
    private readonly health: ProxyHealth,
    private readonly log: Logger,
  ) {
    // A restart cleans what a crash left before anything else is written.
    const { programmer, repaired } = LbProgrammer.adoptAndRepair(maps);
    this.programmer = programmer;
    if (Object.values(repaired).some((n) => n > 0)) log.info({ ...repaired }, 'removed entries a previous agent left half-written');
  }

  /** Informers have listed everything: syncs may run (and prune) from now on. */
  start(): void {
    this.ready = true;
    this.full();
    releaseStartupGarbage();
    this.fullTimer = setInterval(() => this.full(), this.opts.syncPeriodMs);
    this.fullTimer.unref();
  }

  stop(): void {
    this.stopped = true;
    const t = this.timer;
    if (t && 'refresh' in t) clearTimeout(t);
    else if (t) clearImmediate(t);
    clearInterval(this.fullTimer);
  }

  /** A change arrived: schedule a sync (coalesced). */
  trigger(): void {
    this.health.queued();
    this.metrics.syncLastQueuedTimestamp.set(Date.now() / 1000);
    if (!this.ready || this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.timer) return;
    const wait = Math.max(0, this.lastSyncEnd + this.opts.minSyncPeriodMs - Date.now());
    // setTimeout(0) waits >= 1 ms (Node clamps it): a third of the whole
    // event -> map latency. setImmediate runs right after the pending I/O,
    // which still coalesces the events already read in this turn.
    const sync = () => {
      this.timer = undefined;
      this.run('partial');
    };
    this.timer = wait === 0 ? setImmediate(sync) : setTimeout(sync, wait);
  }

  private fullPending = false;
  full(): void {
    this.fullPending = true;
    if (this.running) {
      this.again = true;
      return;
    }
    this.run('full');
  }

  private run(kind: 'partial' | 'full'): void {
    if (this.stopped) return;
    this.running = true;
    try {
      this.syncOnce(this.fullPending ? 'full' : kind);
    } finally {
      this.running = false;
      this.lastSyncEnd = Date.now();
    }
    if (this.again) {
      this.again = false;
      this.trigger();
    }
  }

  private node(): NodeContext {
    return nodeContextFromNode(this.state.node, this.opts.nodeName, this.opts.translate);
  }

  /** One pass. Never throws: failures are logged, counted and retried. */
  syncOnce(kind: 'partial' | 'full'): SyncReport {
    const start = process.hrtime.bigint();
    const startedAt = Date.now();
    const { keys, all, triggerTimes } = this.state.takeDirty();
    const full = kind === 'full';
    this.fullPending = false;
    const node = this.node();
    this.opts.onNodeAddresses?.(node.addresses);
    const report: SyncReport = { kind, services: 0, written: 0, deleted: 0, failures: 0, durationMs: 0 };
    try {
      if (full) this.programmer = LbProgrammer.adopt(this.maps); // re-read: repairs drift
      const serviceKeys = full || all ? new Set([...this.state.services.keys(), ...this.desired.keys(), ...keys]) : keys;
      const upserts: FrontendSpec[] = [];
      const removals: string[] = [];
      for (const key of serviceKeys) {
        report.services++;
        const before = this.desired.get(key) ?? [];
        const after = this.translate(key, node);
        const afterIds = new Set(after.map(frontendId));
        for (const id of before) if (!afterIds.has(id)) removals.push(id);
        upserts.push(...after);
        if (after.length > 0) this.desired.set(key, [...afterIds]);
        else this.desired.delete(key);
      }
      const failures = this.apply(upserts, removals, full);
      const gone = this.programmer.takeDeletedBackends();
      if (gone.length > 0) {
        let since = startedAt;
        for (const t of triggerTimes.values()) since = Math.min(since, t);
        this.opts.onBackendsGone?.(gone, since);
      }
      report.written = failures.written;
      report.deleted = failures.deleted;
      report.failures = failures.count;
      const now = Date.now();
      for (const [key, t] of triggerTimes) {
        if (!failures.failedServices.has(key)) this.metrics.networkProgrammingDuration.observe(Math.max(0, now - t) / 1000);
      }
      // Failed Services are tried again later; what did succeed stays programmed.
      if (failures.count > 0) this.retryLater(failures.failedServices);
      if (this.healthChecksChanged) {
        this.healthChecksChanged = false;
        this.opts.onHealthChecks?.([...this.healthChecks.values()]);
      }
      this.health.updated();
      this.metrics.syncLastTimestamp.set(now / 1000);
      this.metrics.syncs.inc({ kind, result: failures.count > 0 ? 'partial_failure' : 'ok' });
    } catch (err) {
      report.failures++;
      this.metrics.syncs.inc({ kind, result: 'error' });
      this.metrics.errors.inc({ reason: 'sync_failed' });
      this.log.error({ err }, 'sync failed; will retry');
      this.fullPending = true;
      this.retryLater(keys);
    }
    report.durationMs = Number(process.hrtime.bigint() - start) / 1e6;
    this.metrics.syncDuration.observe(report.durationMs / 1000);
    this.updateGauges();
    this.opts.onSyncDone?.(report, {
      services: this.desired.size,
      frontends: this.programmer.programmedFrontends().length,
      backends: this.programmer.programmedBackends().length,
    });
    this.reports.push(report);
    if (this.reports.length > 100) this.reports.shift();
    this.log.debug(report, 'sync done');
    return report;
  }

  private translate(key: string, node: NodeContext): FrontendSpec[] {
    const svc = this.state.services.get(key);
    if (!svc) {
      this.setHealthCheck(key, undefined);
      this.releaseOwnership(key);
      this.reported.delete(key);
      return [];
    }
    const t = translateService(svc, this.state.slicesOf(key), node, this.opts.translate);
    this.setHealthCheck(key, t.healthCheck);
    const problems = [...t.problems];
    const specs: FrontendSpec[] = [];
    for (const f of t.frontends) {
      const spec = toFrontendSpec(f, this.zones);
      if (!spec) continue;
      const id = frontendId(spec);
      const owner = this.owners.get(id);
      if (owner !== undefined && owner !== key && this.state.services.has(owner)) {
        problems.push({ object: `Service ${key}`, reason: 'frontend_conflict', message: `frontend ${id} already belongs to Service ${owner}` });
        continue;
      }
      specs.push(spec);
    }
    this.releaseOwnership(key);
    const ids = new Set(specs.map(frontendId));
    for (const id of ids) this.owners.set(id, key);
    if (ids.size > 0) this.owned.set(key, ids);
    this.reportProblems(key, problems);
    return specs;
  }

  private setHealthCheck(key: string, check: HealthCheckService | undefined): void {
    const before = this.healthChecks.get(key);
    if (before?.nodePort === check?.nodePort && before?.localEndpoints === check?.localEndpoints) return;
    if (check) this.healthChecks.set(key, check);
    else this.healthChecks.delete(key);
    this.healthChecksChanged = true;
  }

  private releaseOwnership(key: string): void {
    for (const id of this.owned.get(key) ?? []) if (this.owners.get(id) === key) this.owners.delete(id);
    this.owned.delete(key);
  }

  /** Log and count each distinct set of problems of a Service once. */
  private reportProblems(key: string, problems: TranslateProblem[]): void {
    const fingerprint = problems.map((p) => `${p.reason}:${p.message}`).join('|');
    if (this.reported.get(key) === fingerprint) return;
    if (fingerprint) this.reported.set(key, fingerprint);
    else this.reported.delete(key);
    for (const p of problems) {
      this.metrics.errors.inc({ reason: p.reason });
      this.log.warn({ object: p.object, reason: p.reason }, `${p.object}: ${p.message}`);
    }
  }

  /** In a full sync `upserts` holds every Service's frontends (all were translated). */
  private apply(upserts: FrontendSpec[], removals: string[], full: boolean) {
    const failedServices = new Set<string>();
    let deleted = 0;
    const deletedBackends: number[] = [];
    for (const id of removals) {
      const r = this.programmer.removeFrontend(id);
      deleted += r.frontends;
      deletedBackends.push(...r.deletedBackendIds);
    }
    const result = this.programmer.apply(upserts, { prune: full });
    deletedBackends.push(...result.deletedBackendIds);
    if (deletedBackends.length > 0) this.opts.onBackendsDeleted?.(deletedBackends);
    // Conntrack and affinity entries of the freed ids are purged by now.
    this.programmer.recycleIds();
    for (const failure of result.failures) {
      const owner = this.owners.get(failure.frontend);
      if (owner) failedServices.add(owner);
      const reason = /E2BIG|full/i.test(failure.error.message) ? 'map_full' : 'apply_failed';
      this.metrics.errors.inc({ reason });
      this.log.error({ frontend: failure.frontend, owner: failure.owner, reason }, `${failure.owner ?? failure.frontend}: not programmed: ${failure.error.message}`);
    }
    return { written: result.frontendsWritten, deleted: deleted + result.frontendsDeleted, count: result.failures.length, failedServices };
  }

  private retryLater(keys: Iterable<string>): void {
    const list = [...keys];
    const t = setTimeout(() => {
      for (const key of list) this.state.markDirty(key);
    }, RETRY_DELAY_MS);
    t.unref();
  }

  private updateGauges(): void {
    this.metrics.servicesProgrammed.set(this.desired.size);
    this.metrics.frontendsProgrammed.set(this.programmer.programmedFrontends().length);
    this.metrics.backendsProgrammed.set(this.programmer.programmedBackends().length);
  }

  programmed(): LbProgrammer {
    return this.programmer;
  }
}
