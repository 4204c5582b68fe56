// The sync loop: fold pending changes, translate the changed Services, diff
// them against what was programmed, apply. One sync at a time; changes that
// arrive during a sync are coalesced into the next one, which starts as soon
// as the current one ends (no fixed delay: latency does not grow with bursts).
// A periodic full sync re-reads the maps and repairs drift.
import type { Logger } from 'pino';
import type { V1Node } from '@kubernetes/client-node';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { translateService, nodeContextFromNode, compareServiceAge } from '../translate';
import type { Frontend, HealthCheckService, NodeContext, TranslateOptions, TranslateProblem } from '../model/frontend';
import { LbProgrammer, frontendId, type FrontendSpec } from '../datapath/programmer';
import type { SockLbMaps } from '../datapath/maps';
import type { ClusterState } from './store';
import type { AgentMetrics } from './metrics';
import type { ProxyHealth } from './health';
import { toFrontendSpec, ZoneIds } from './toSpecs';

const RETRY_DELAY_MS = 1000;
/** kube-proxy labels its sync metrics by IP family; the agent programs IPv4. */
const FAMILY = { ip_family: 'IPv4' } as const;

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
  /** The node's own addresses now (interfaces of the agent's netns); NodePorts listen on these. */
  localAddresses?: () => string[];
  /** Backends were deleted from the maps (the TC path forgets their flows). */
  onBackendsDeleted?: (ids: number[]) => void;
  /** After every sync: what it did and what is programmed now. */
  onSyncDone?: (report: SyncReport, programmed: { services: number; frontends: number; backends: number }) => void;
  /** healthCheckNodePort services and their local endpoint counts changed. */
  onHealthChecks?: (checks: HealthCheckService[]) => void;
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
  /** frontend id -> Services that lost it to its owner (re-translated when the owner lets go). */
  private readonly contenders = new Map<string, Set<string>>();
  /** serviceKey -> frontends with a Local policy and no usable endpoint (kube-proxy's no_local_endpoints). */
  private readonly noLocal = new Map<string, { internal: number; external: number }>();
  /** Trigger times before this are from before the agent ran (kube-proxy's trackerStartTime). */
  private readonly startedAtMs = Date.now();
  private lastNode: NodeContext | undefined;
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
    this.programmer = LbProgrammer.adopt(maps);
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
    this.metrics.syncLastQueuedTimestamp.set(FAMILY, Date.now() / 1000);
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
    const ctx = nodeContextFromNode(this.nodeWithAddresses(), this.opts.nodeName, this.opts.translate, this.opts.localAddresses?.() ?? []);
    this.lastNode = ctx;
    return ctx;
  }

  private lastAddressedNode: V1Node | undefined;

  /**
   * The Node as the watch has it, but with the last addresses it had while
   * it is gone or has none (re-registering after a delete): NodePorts stay
   * where they were instead of vanishing for that while.
   */
  private nodeWithAddresses(): V1Node | undefined {
    const current = this.state.node;
    if (current?.status?.addresses?.length) {
      this.lastAddressedNode = current;
      return current;
    }
    const last = this.lastAddressedNode;
    if (!last) return current;
    if (!current) return last;
    return { ...current, status: { ...current.status, addresses: last.status?.addresses ?? [] } };
  }

  /** The node's addresses moved (an interface came or went): every NodePort must be translated again. */
  private nodeAddressesChanged(before: NodeContext | undefined, now: NodeContext): boolean {
    return before !== undefined && before.addresses.join(',') !== now.addresses.join(',');
  }

  /** One pass. Never throws: failures are logged, counted and retried. */
  syncOnce(kind: 'partial' | 'full'): SyncReport {
    const start = process.hrtime.bigint();
    const { keys, all, triggerTimes } = this.state.takeDirty();
    const full = kind === 'full';
    this.fullPending = false;
    const before = this.lastNode;
    const node = this.node();
    const allServices = all || this.nodeAddressesChanged(before, node);
    const report: SyncReport = { kind, services: 0, written: 0, deleted: 0, failures: 0, durationMs: 0 };
    try {
      if (full) this.programmer = LbProgrammer.adopt(this.maps); // re-read: repairs drift
      const serviceKeys = full || allServices ? new Set([...this.state.services.keys(), ...this.desired.keys(), ...keys]) : keys;
      // By frontend id: a Service that wins a frontend later in this pass replaces the loser's spec.
      const upserts = new Map<string, FrontendSpec>();
      const removals: string[] = [];
      for (const key of serviceKeys) {
        report.services++;
        const before = this.desired.get(key) ?? [];
        const after = this.translate(key, node);
        const afterIds = new Set(after.map(frontendId));
        // A frontend this Service gave up stays when another Service owns it now.
        for (const id of before) if (!afterIds.has(id) && !this.ownedByOther(id, key)) removals.push(id);
        for (const spec of after) upserts.set(frontendId(spec), spec);
        if (after.length > 0) this.desired.set(key, [...afterIds]);
        else this.desired.delete(key);
      }
      const failures = this.apply([...upserts.values()], removals, full);
      report.written = failures.written;
      report.deleted = failures.deleted;
      report.failures = failures.count;
      const now = Date.now();
      this.observeProgramming(triggerTimes, failures.failedServices, now);
      // Failed Services are tried again later; what did succeed stays programmed.
      if (failures.count > 0) this.retryLater(failures.failedServices);
      if (this.healthChecksChanged) {
        this.healthChecksChanged = false;
        this.opts.onHealthChecks?.([...this.healthChecks.values()]);
      }
      // Healthy after any completed pass: a Service that does not fit the maps
      // is retried and reported, and must not make the kubelet restart an
      // agent that serves every other Service. "Last synced" (kube-proxy's
      // timestamp) only when everything was written.
      this.health.updated();
      if (failures.count === 0) this.metrics.syncLastTimestamp.set(FAMILY, now / 1000);
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
    this.observeSync(kind, report.durationMs / 1000);
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
      this.noLocal.delete(key);
      return [];
    }
    const t = translateService(svc, this.state.slicesOf(key), node, this.opts.translate);
    this.setHealthCheck(key, t.healthCheck);
    this.countNoLocalEndpoints(key, t.frontends);
    const problems = [...t.problems];
    const specs: FrontendSpec[] = [];
    for (const f of t.frontends) {
      const spec = toFrontendSpec(f, this.zones);
      if (!spec) continue;
      const id = frontendId(spec);
      const winner = this.conflictWinner(id, key);
      if (winner !== key) {
        problems.push({
          object: `Service ${key}`,
          reason: 'frontend_conflict',
          message: `frontend ${id} belongs to Service ${winner} (the older Service keeps a shared address:port/protocol); not programmed for this one`,
        });
        continue;
      }
      specs.push(spec);
    }
    const ids = new Set(specs.map(frontendId));
    this.releaseOwnership(key, ids);
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

  /** Give up the frontends `key` owned, but those in `keep` (it still asks for them). */
  private releaseOwnership(key: string, keep: ReadonlySet<string> = new Set()): void {
    for (const id of this.owned.get(key) ?? []) {
      if (keep.has(id) || this.owners.get(id) !== key) continue;
      this.owners.delete(id);
      this.wakeContenders(id, key);
    }
    this.owned.delete(key);
  }

  // ---- frontend conflicts: the same winner whatever the order of events ----

  /**
   * Who gets a frontend two Services claim: the older Service (creation
   * time), then the smaller namespace/name, as translateAll decides. The
   * same answer in a partial and a full sync, whichever came first. A
   * Service that takes a frontend over sends the loser back to the queue,
   * so the loser drops it from its own state and reports the conflict.
   */
  private conflictWinner(id: string, key: string): string {
    const owner = this.owners.get(id);
    if (owner === undefined || owner === key) return key;
    const ownerSvc = this.state.services.get(owner);
    const svc = this.state.services.get(key);
    if (!ownerSvc || !svc) return key;
    const [winner, loser] = compareServiceAge(svc, ownerSvc) < 0 ? [key, owner] : [owner, key];
    let waiting = this.contenders.get(id);
    if (!waiting) this.contenders.set(id, (waiting = new Set()));
    waiting.add(loser);
    waiting.delete(winner);
    if (winner === key) {
      this.owners.set(id, key);
      this.state.markDirty(owner);
    }
    return winner;
  }

  private ownedByOther(id: string, key: string): boolean {
    const owner = this.owners.get(id);
    return owner !== undefined && owner !== key;
  }

  /** The owner let go of a frontend: the Services that lost it try again. */
  private wakeContenders(id: string, formerOwner: string): void {
    const waiting = this.contenders.get(id);
    if (!waiting) return;
    this.contenders.delete(id);
    for (const key of waiting) if (key !== formerOwner && this.state.services.has(key)) this.state.markDirty(key);
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
    let internal = 0;
    let external = 0;
    for (const n of this.noLocal.values()) {
      internal += n.internal;
      external += n.external;
    }
    this.metrics.noLocalEndpoints.set({ traffic_policy: 'internal', ...FAMILY }, internal);
    this.metrics.noLocalEndpoints.set({ traffic_policy: 'external', ...FAMILY }, external);
    this.metrics.servicesProgrammed.set(this.desired.size);
    this.metrics.frontendsProgrammed.set(this.programmer.programmedFrontends().length);
    this.metrics.backendsProgrammed.set(this.programmer.programmedBackends().length);
  }

  programmed(): LbProgrammer {
    return this.programmer;
  }

  // ---- kube-proxy's sync metrics ----

  private observeSync(kind: 'partial' | 'full', seconds: number): void {
    this.metrics.syncDuration.observe(FAMILY, seconds);
    (kind === 'full' ? this.metrics.syncFullDuration : this.metrics.syncPartialDuration).observe(FAMILY, seconds);
  }

  /** From each endpoints change to the maps; changes older than the agent are not its latency (kube-proxy ignores them too). */
  private observeProgramming(triggerTimes: Map<string, number>, failed: Set<string>, now: number): void {
    for (const [key, t] of triggerTimes) {
      if (failed.has(key) || t < this.startedAtMs) continue;
      this.metrics.networkProgrammingDuration.observe(FAMILY, Math.max(0, now - t) / 1000);
    }
  }

  /**
   * kube-proxy's sync_proxy_rules_no_local_endpoints_total: Service ports
   * whose Local policy leaves no endpoint here while endpoints exist
   * elsewhere (the frontends that drop).
   */
  private countNoLocalEndpoints(key: string, frontends: Frontend[]): void {
    const internal = new Set<string>();
    const external = new Set<string>();
    for (const f of frontends) {
      if (f.backends.length > 0 || f.noBackendVerdict !== 'drop') continue;
      (f.kind === 'ClusterIP' ? internal : external).add(`${f.family}|${f.portName}|${f.proto}`);
    }
    if (internal.size + external.size > 0) this.noLocal.set(key, { internal: internal.size, external: external.size });
    else this.noLocal.delete(key);
  }
}
