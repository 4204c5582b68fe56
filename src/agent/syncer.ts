// The sync loop: fold pending changes, translate the changed Services, diff
// them against what was programmed, apply. One sync at a time; changes that
// arrive during a sync are coalesced into the next one, which starts as soon
// as the current one ends (no fixed delay: latency does not grow with bursts).
//
// The programmer's state is authoritative once adopted at start: no sync
// re-reads the maps. A full sync (the first one, and after a failed sync)
// translates every Service, yielding every few milliseconds so /healthz and
// the health-check servers keep answering, then writes in one batched pass.
// Drift repair (src/datapath/drift.ts) compares the maps with that state
// every driftRepairPeriod, in chunks.
import type { Logger } from 'pino';
import type { V1Node } from '@kubernetes/client-node';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import koffi from 'koffi';
import { translateService, nodeContextFromNode, compareServiceAge } from '../translate';
import type { Frontend, HealthCheckService, NodeContext, TranslateOptions, TranslateProblem } from '../model/frontend';
import { LbProgrammer, frontendId, type FrontendSpec, type ProgrammedBackend } from '../datapath/programmer';
import { repairDrift } from '../datapath/drift';
import * as abi from '../abi/generated';
import type { SockLbMaps } from '../datapath/maps';
import type { PodFrontendSet } from '../datapath/pod/frontendSet';
import type { ClusterState } from './store';
import type { AgentMetrics } from './metrics';
import type { ProxyHealth } from './health';
import { nodePortWildcard, toFrontendSpec, ZoneIds } from './toSpecs';

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
    // Compacting: the default heuristics evacuate few pages, and the start-up
    // garbage leaves old space fragmented (10k x 10: heap total 106 -> 90 MiB
    // with this, used 56 MiB either way).
    v8.setFlagsFromString('--compact-on-every-full-gc');
    try {
      gc?.();
    } finally {
      v8.setFlagsFromString('--no-compact-on-every-full-gc');
    }
  } catch {
    // Not fatal: the heap shrinks on its own, later.
  }
  try {
    // The list pages and batch buffers were malloc'd outside the V8 heap;
    // glibc keeps freed arena memory mapped unless asked to give it back.
    mallocTrim ??= koffi.load('libc.so.6').func('int malloc_trim(size_t pad)') as (pad: number) => number;
    mallocTrim(0);
  } catch {
    // Not glibc: nothing to trim.
  }
}

let mallocTrim: ((pad: number) => number) | undefined;

export interface SyncerOptions {
  nodeName: string;
  /** Pinned maps known to be empty (created by this start's install): adoption skips reading them. */
  emptyMaps?: ReadonlySet<string>;
  /** The node's own addresses now (interfaces of the agent's netns); NodePorts listen on these. */
  localAddresses?: () => string[];
  /** Backends were deleted from the maps (the TC path forgets their flows). */
  onBackendsDeleted?: (ids: number[]) => void;
  /**
   * Backends no frontend uses any more (address, port, protocol), with the
   * time of the oldest change this sync folded in (EndpointSlice trigger time,
   * else the sync start): stale-socket termination.
   */
  onBackendsGone?: (backends: ProgrammedBackend[], since: number) => void;
  /**
   * The externally reachable backends (both families; each list only when it
   * changed), handed over in a pass before it writes the frontends that use
   * them: the agent attaches TC to their devices and writes a node-to-node
   * device's SNAT address, which must be in place before a NodePort flow can
   * reach such a backend (else it is SNATed to the external address).
   */
  onExternalBackends?: (backends: { local?: string[]; remote?: string[] }) => void;
  /** After every sync: what it did and what is programmed now. */
  onSyncDone?: (report: SyncReport, programmed: { services: number; frontends: number; backends: number }) => void;
  /** healthCheckNodePort services and their local endpoint counts changed. */
  onHealthChecks?: (checks: HealthCheckService[]) => void;
  /** Before every sync: the node's addresses (for the socket hooks' ExternalIP and bind rules). */
  onNodeAddresses?: (addresses: string[]) => void;
  translate: TranslateOptions;
  minSyncPeriodMs: number;
  syncPeriodMs: number;
  /** How often the maps are compared with what was programmed (0 = never). */
  driftRepairPeriodMs?: number;
  /** The pod path's frontend-address bitmap (issue 12): address bits set before their frontends are written, cleared after. */
  podFrontends?: PodFrontendSet;
}

/** Where the first sync's time went (logged once, read by the bench). */
export interface FirstSyncTiming {
  listMs: number;
  decodeMs: number;
  translateMs: number;
  writeMs: number;
}

/** A full sync yields to the event loop after this much translation work... */
const FULL_SYNC_SLICE_MS = 10;
/** ...and between write batches of this many frontends (one batched map update each). */
const FULL_SYNC_WRITE_BATCH = 2048;

interface ApplyOutcome {
  written: number;
  deleted: number;
  count: number;
  failedServices: Set<string>;
}

const emptyOutcome = (): ApplyOutcome => ({ written: 0, deleted: 0, count: 0, failedServices: new Set() });

const EXTERNAL_FLAGS = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXTERNAL_IP | abi.LB_SVC_FLAG_LOADBALANCER;

export interface SyncReport {
  kind: 'partial' | 'full';
  services: number;
  written: number;
  deleted: number;
  failures: number;
  durationMs: number;
  /**
   * When the pass's map writes returned, process.hrtime (CLOCK_MONOTONIC,
   * ns: one clock for every process on the machine), so a bench can time
   * an API write -> map entry without its own poll's wake-up in the figure.
   */
  mapsWrittenAtNs?: number;
  /**
   * When the oldest change this pass folded in was recorded by the watch's
   * store (same clock; absent when no change was pending, e.g. a periodic
   * pass): mapsWrittenAtNs minus this is the agent's own share of a change.
   */
  changedAtNs?: number;
  /** The pass took a Node update (whatever it changed): a test waits for the pass that handled one. */
  nodeChanged: boolean;
  /** The pass re-translated every Service (a full pass, or the derived node context changed). */
  everyService: boolean;
}

/** What a pass covered: SyncReport's nodeChanged and everyService (and when its oldest change arrived). */
type PassScope = Pick<SyncReport, 'nodeChanged' | 'everyService' | 'changedAtNs'>;

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
  /** serviceKey -> problems last reported, so a problem is logged once while it lasts. */
  private readonly reported = new Map<string, Set<string>>();
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
  private driftTimer: NodeJS.Timeout | undefined;
  /** The next full sync ends with a drift repair (the periodic full sync). */
  private repairAfterFull = false;
  private driftRunning = false;
  /** The derived node context last translated with; a Node update that leaves it equal re-translates nothing. */
  private nodeFingerprint = '';
  /** Backends behind frontends reachable from outside, on this node and on others (see setExternalBackends). */
  private readonly externalLocal = new AddressIndex();
  private readonly externalRemote = new AddressIndex();
  /**
   * Addresses of north-south frontends of both families (IPv4 NodePort
   * wildcard 0.0.0.0, IPv6 NodePort addresses, ExternalIPs, LoadBalancer
   * IPs), per Service: XDP's frontend-address sets,
   * handed over after each sync without walking every programmed frontend.
   */
  private readonly northSouth = new AddressIndex();
  private northSouthList: Array<{ address: string; flags: number }> = [];
  private firstSync: { list: { listMs: number; decodeMs: number } } | undefined;
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
    const { programmer, repaired } = LbProgrammer.adoptAndRepair(maps, opts.emptyMaps ? { emptyMaps: opts.emptyMaps } : {});
    // Removed IPv4 backends stay readable for 1 s (the range grace period): see LbProgrammer.setBackendGrace.
    programmer.setBackendGrace(1000);
    this.programmer = programmer;
    if (Object.values(repaired).some((n) => n > 0)) log.info({ ...repaired }, 'removed entries a previous agent left half-written');
  }

  /** Reflectors have listed everything: syncs may run (and prune) from now on. */
  start(list: { listMs: number; decodeMs: number } = { listMs: 0, decodeMs: 0 }): void {
    this.ready = true;
    this.firstSync = { list };
    this.full();
    // Periodic syncs refresh health and retry what is pending; they do not re-read the maps.
    this.fullTimer = setInterval(() => this.trigger(), this.opts.syncPeriodMs);
    this.fullTimer.unref();
    const drift = this.opts.driftRepairPeriodMs ?? 0;
    if (drift > 0) {
      // kube-proxy's hourly full sync: every Service translated again (the
      // same conflict winners, whatever order events came in), then the maps
      // compared with what the agent wrote, before any other pass runs.
      this.driftTimer = setInterval(() => {
        this.repairAfterFull = true;
        this.full();
      }, drift);
      this.driftTimer.unref();
    }
  }

  /** Compare the maps with the programmer's state and rewrite what differs. */
  async repairDrift(): Promise<void> {
    if (this.driftRunning || this.stopped) return;
    this.driftRunning = true;
    try {
      const r = await repairDrift(this.maps, () => this.programmer);
      const repaired = r.frontends + r.backends + r.revNats + r.extra + r.maglev;
      if (repaired > 0) {
        if (repaired > r.maglev) this.metrics.errors.inc({ reason: 'map_drift' }, repaired - r.maglev);
        if (r.maglev > 0) this.metrics.errors.inc({ reason: 'maglev_drift' }, r.maglev); // issue 15: Maglev tables and outer entries
        this.log.warn({ ...r }, 'drift repair: map entries changed behind the agent were rewritten');
      } else {
        this.log.debug({ ...r }, 'drift repair: maps match');
      }
    } catch (err) {
      this.metrics.errors.inc({ reason: 'drift_repair_failed' });
      this.log.error({ error: (err as Error).message }, 'drift repair failed; next period tries again');
    } finally {
      this.driftRunning = false;
    }
  }

  stop(): void {
    this.stopped = true;
    const t = this.timer;
    if (t && 'refresh' in t) clearTimeout(t);
    else if (t) clearImmediate(t);
    clearInterval(this.fullTimer);
    clearInterval(this.driftTimer);
    if (this.localCheck) clearImmediate(this.localCheck);
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
  /** Translate every Service at the next pass (start-up, and after a failed sync). */
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
    const done = () => {
      this.running = false;
      this.lastSyncEnd = Date.now();
      this.checkLocalAddresses();
      if (this.again) {
        this.again = false;
        this.trigger();
      }
    };
    if (this.fullPending || kind === 'full') {
      void this.syncFull().finally(done);
      return;
    }
    try {
      this.syncOnce();
    } finally {
      done();
    }
  }

  private node(full = false): NodeContext {
    const node = this.nodeWithAddresses();
    // A full pass reads the interfaces; a partial one uses the list the
    // check after the previous pass read (see checkLocalAddresses).
    if (full || this.local === undefined) this.local = this.readLocalAddresses();
    const local = this.local;
    // Derived again only when its inputs changed: every partial pass asks
    // (an interface address may have moved), and deriving it took a third
    // of a one-Service pass's CPU at 10k Services.
    const cache = this.nodeCache;
    if (cache && cache.node === node && sameList(cache.local, local)) return (this.lastNode = cache.ctx);
    const ctx = nodeContextFromNode(node, this.opts.nodeName, this.opts.translate, local);
    this.nodeCache = { node, local, ctx };
    this.lastNode = ctx;
    return ctx;
  }

  private nodeCache: { node: V1Node | undefined; local: string[]; ctx: NodeContext } | undefined;

  /** The node's interface addresses as last read. */
  private local: string[] | undefined;
  private localCheck: NodeJS.Immediate | undefined;

  private readLocalAddresses(): string[] {
    return this.opts.localAddresses?.() ?? [];
  }

  /**
   * Reading the interfaces (getifaddrs) was a quarter of the agent's part
   * of one EndpointSlice change at 10k Services (docs/bench.md, "one
   * change"): it runs after a pass has written the maps instead, and an
   * address that came or went starts the next pass at once.
   */
  private checkLocalAddresses(): void {
    if (this.localCheck || this.stopped || !this.opts.localAddresses) return;
    this.localCheck = setImmediate(() => {
      this.localCheck = undefined;
      if (this.stopped) return;
      const now = this.readLocalAddresses();
      if (this.local !== undefined && sameList(this.local, now)) return;
      if (this.local !== undefined) this.log.debug({ addresses: now.length }, 'interface addresses changed: a pass for the NodePorts on them');
      this.local = now;
      this.trigger();
    });
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

  /** Which Services a pass translates: the changed ones, or all when the derived node context changed. */
  private collect(full: boolean): { keys: Set<string>; triggerTimes: Map<string, number>; node: NodeContext; scope: PassScope } {
    const { keys, nodeChanged, triggerTimes, firstChangeAtNs } = this.state.takeDirty();
    const before = this.lastNode;
    const node = this.node(full);
    this.opts.onNodeAddresses?.(node.addresses);
    // An interface's address came or went (no Node event says so): every NodePort again.
    let all = full || this.nodeAddressesChanged(before, node);
    if (nodeChanged || full) {
      const fingerprint = JSON.stringify(node);
      if (fingerprint !== this.nodeFingerprint) all = true;
      this.nodeFingerprint = fingerprint;
    }
    const scope: PassScope = { nodeChanged, everyService: all, ...(firstChangeAtNs > 0n ? { changedAtNs: Number(firstChangeAtNs) } : {}) };
    return { keys: all ? new Set([...this.state.services.keys(), ...this.desired.keys(), ...keys]) : keys, triggerTimes, node, scope };
  }

  /** Translate one Service into the pass's upserts and removals. */
  private translateInto(key: string, node: NodeContext, upserts: FrontendSpec[], removals: string[]): void {
    const before = this.desired.get(key) ?? [];
    const after = this.translate(key, node);
    const afterIds = new Set(after.map(frontendId));
    // A frontend this Service gave up stays when another Service owns it now.
    for (const id of before) if (!afterIds.has(id) && !this.ownedByOther(id, key)) removals.push(id);
    for (const f of after) upserts.push(f);
    if (after.length > 0) this.desired.set(key, [...afterIds]);
    else this.desired.delete(key);
  }

  /** A partial pass: the changed Services. Never throws: failures are logged, counted and retried. */
  syncOnce(): SyncReport {
    const start = process.hrtime.bigint();
    const { keys, triggerTimes, node, scope } = this.collect(false);
    const upserts: FrontendSpec[] = [];
    const removals: string[] = [];
    return this.finish('partial', start, keys, triggerTimes, scope, () => {
      for (const key of keys) this.translateInto(key, node, upserts, removals);
      return this.apply(upserts, removals);
    });
  }

  /**
   * Every Service: translated and written in batches of about
   * FULL_SYNC_WRITE_BATCH frontends (one batched map update each) with a
   * yield between batches, so /healthz answers and only one batch of
   * desired state is in memory at a time (at 100k Services all of it at once
   * was the agent's peak); then the frontends no Service owns are removed.
   */
  private async syncFull(): Promise<SyncReport> {
    const start = process.hrtime.bigint();
    this.fullPending = false;
    const { keys, triggerTimes, node, scope } = this.collect(true);
    let upserts: FrontendSpec[] = [];
    const removals: string[] = [];
    let translateMs = 0;
    let writeMs = 0;
    const outcome = emptyOutcome();
    const write = () => {
      const t = performance.now();
      this.apply(upserts, [], outcome);
      upserts = [];
      writeMs += performance.now() - t;
    };
    try {
      let t = performance.now();
      for (const key of keys) {
        this.translateInto(key, node, upserts, removals);
        if (upserts.length >= FULL_SYNC_WRITE_BATCH || performance.now() - t > FULL_SYNC_SLICE_MS) {
          translateMs += performance.now() - t;
          if (upserts.length >= FULL_SYNC_WRITE_BATCH) write();
          await new Promise((r) => setImmediate(r));
          if (this.stopped) break;
          t = performance.now();
        }
      }
      translateMs += performance.now() - t;
      write();
      const t2 = performance.now();
      // What Services own now is exactly what may stay (partial syncs could not run in between).
      const stale = this.programmer.programmedFrontends().filter((f) => !this.owners.has(f.id)).map((f) => f.id);
      this.apply([], [...removals, ...stale], outcome);
      writeMs += performance.now() - t2;
    } catch (err) {
      return this.finish('full', start, keys, triggerTimes, scope, () => { throw err; });
    }
    const report = this.finish('full', start, keys, triggerTimes, scope, () => outcome);
    const first = this.firstSync;
    if (first) {
      this.firstSync = undefined;
      const timing: FirstSyncTiming = { listMs: Math.round(first.list.listMs), decodeMs: Math.round(first.list.decodeMs), translateMs: Math.round(translateMs), writeMs: Math.round(writeMs) };
      this.log.info({ ...timing, services: keys.size, frontends: report.written, failures: report.failures }, 'first sync: every Service programmed');
      releaseStartupGarbage();
    }
    if (this.repairAfterFull && !this.stopped) {
      this.repairAfterFull = false;
      await this.repairDrift();
    }
    return report;
  }

  /** Record a pass's outcome (work() applies it), metrics and the report. Never throws. */
  private finish(kind: 'partial' | 'full', start: bigint, keys: Set<string>, triggerTimes: Map<string, number>, scope: PassScope,
    work: () => ApplyOutcome): SyncReport {
    const report: SyncReport = { kind, services: keys.size, written: 0, deleted: 0, failures: 0, durationMs: 0, ...scope };
    try {
      const failures = work();
      report.mapsWrittenAtNs = Number(process.hrtime.bigint());
      // Backends really gone (not re-added by the same pass): end the sockets still on them.
      const gone = this.programmer.takeDeletedBackends();
      if (gone.length > 0) {
        let since = Date.now() - Number(process.hrtime.bigint() - start) / 1e6;
        for (const t of triggerTimes.values()) since = Math.min(since, t);
        this.opts.onBackendsGone?.(gone, since);
      }
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
      frontends: this.programmer.frontendCount(),
      backends: this.programmer.backendCount(),
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
      this.setExternalBackends(key, []);
      this.releaseOwnership(key);
      this.reported.delete(key);
      this.noLocal.delete(key);
      return [];
    }
    let t: ReturnType<typeof translateService>;
    try {
      t = translateService(svc, this.state.slicesOf(key), node, this.opts.translate);
    } catch (err) {
      // Never expected (the watch rejects objects of the wrong shape), but one
      // Service must not fail the pass of every other: it gets no frontends.
      this.setHealthCheck(key, undefined);
      this.setExternalBackends(key, []);
      this.releaseOwnership(key);
      this.noLocal.delete(key);
      this.reportProblems(key, [{ object: `Service ${key}`, reason: 'translate_failed', message: `Service ${key}: cannot be translated (${(err as Error).message}); no frontends` }]);
      return [];
    }
    this.setHealthCheck(key, t.healthCheck);
    this.countNoLocalEndpoints(key, t.frontends);
    const problems = [...t.problems];
    const specs: FrontendSpec[] = [];
    const seen = new Set<string>();
    for (const f of t.frontends) {
      const translated = toFrontendSpec(f, this.zones);
      if (!translated) continue;
      // One IPv4 NodePort frontend per port, whatever the node's addresses.
      const spec = nodePortWildcard(translated);
      const id = frontendId(spec);
      if (seen.has(id)) continue;
      seen.add(id);
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
    this.setExternalBackends(key, specs);
    const ids = new Set(specs.map(frontendId));
    this.releaseOwnership(key, ids);
    for (const id of ids) this.owners.set(id, key);
    if (ids.size > 0) this.owned.set(key, ids);
    this.reportProblems(key, problems);
    return specs;
  }

  /**
   * Backends of this Service's frontends reachable from outside (NodePort,
   * ExternalIP, LoadBalancer): local ones, whose SNATed replies enter on
   * their own device, and remote ones, whose replies may return on a
   * node-to-node device (multi-homed nodes); both need the TC program there.
   * Kept per Service, so a sync updates the index by what it translated
   * instead of walking every programmed frontend.
   */
  private setExternalBackends(key: string, specs: FrontendSpec[]): void {
    const local = new Set<string>();
    const remote = new Set<string>();
    const northSouth = new Set<string>();
    for (const f of specs) {
      if ((f.flags & EXTERNAL_FLAGS) !== 0) northSouth.add(f.address);
      if ((f.flags & EXTERNAL_FLAGS) === 0 || f.scope !== 'external') continue;
      // Both families' backends (issue 14): local ones' SNATed replies enter
      // on their own device; remote ones name node-to-node devices by the
      // routes of their family (per-device SNAT, egress.h and conntrack6.h).
      for (const b of f.backends) (b.local ? local : remote).add(b.address);
    }
    this.externalLocal.set(key, local);
    this.externalRemote.set(key, remote);
    this.northSouth.set(key, northSouth);
  }

  /** The north-south frontend addresses Services ask for (the same list object until it changes). */
  northSouthFrontends(): Array<{ address: string; flags: number }> {
    const changed = this.northSouth.take();
    if (changed) this.northSouthList = changed.map((address) => ({ address, flags: EXTERNAL_FLAGS }));
    return this.northSouthList;
  }

  /** The externally reachable backends, each list only when it changed since the last call. */
  takeExternalBackends(): { local?: string[]; remote?: string[] } {
    return { local: this.externalLocal.take(), remote: this.externalRemote.take() };
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

  /**
   * Log and count each problem of a Service once: when it appears, not again
   * while it stays (a second bad EndpointSlice of the same Service does not
   * repeat the first one's line).
   */
  private reportProblems(key: string, problems: TranslateProblem[]): void {
    const before = this.reported.get(key);
    const now = new Set(problems.map((p) => `${p.reason}:${p.message}`));
    if (now.size > 0) this.reported.set(key, now);
    else this.reported.delete(key);
    for (const p of problems) {
      if (before?.has(`${p.reason}:${p.message}`)) continue;
      this.metrics.errors.inc({ reason: p.reason });
      this.log.warn({ object: p.object, reason: p.reason }, `${p.object}: ${p.message}`);
    }
  }

  /** In a full sync `upserts` holds every Service's frontends (all were translated). */
  /** Removals, then upserts (one batched pass per call). */
  private apply(upserts: FrontendSpec[], removals: string[], outcome: ApplyOutcome = emptyOutcome()): ApplyOutcome {
    const deletedBackends: number[] = [];
    const pod = this.opts.podFrontends;
    const upsertIds = pod ? new Set(upserts.map(frontendId)) : undefined;
    pod?.add(upsertIds!);
    for (const id of removals) {
      const r = this.programmer.removeFrontend(id);
      outcome.deleted += r.frontends;
      deletedBackends.push(...r.deletedBackendIds);
    }
    this.handOverExternalBackends();
    const result = this.programmer.apply(lastPerFrontend(upserts), { prune: false });
    deletedBackends.push(...result.deletedBackendIds);
    pod?.removed(removals, upsertIds);
    if (deletedBackends.length > 0) this.opts.onBackendsDeleted?.(deletedBackends);
    // Conntrack and affinity entries of the freed ids are purged by now.
    this.programmer.recycleIds();
    for (const failure of result.failures) {
      const owner = this.owners.get(failure.frontend);
      if (owner) outcome.failedServices.add(owner);
      const reason = /E2BIG|full/i.test(failure.error.message) ? 'map_full' : 'apply_failed';
      this.metrics.errors.inc({ reason });
      this.log.error({ frontend: failure.frontend, owner: failure.owner, reason }, `${failure.owner ?? failure.frontend}: not programmed: ${failure.error.message}`);
    }
    if (result.serviceNamesError) {
      this.metrics.errors.inc({ reason: 'service_names_failed' });
      this.log.warn({ reason: 'service_names_failed' }, `${abi.SLUICE_MAP_SVC_NAMES}: Service names not written (the frontends are programmed; \`sluice services\` shows no Service for them): ${result.serviceNamesError.message}`);
    }
    outcome.written += result.frontendsWritten;
    outcome.deleted += result.frontendsDeleted;
    outcome.count += result.failures.length;
    return outcome;
  }

  /** Before the frontends are written: their backends' devices get TC (and SNAT addresses) first. */
  private handOverExternalBackends(): void {
    const hook = this.opts.onExternalBackends;
    if (!hook) return;
    const external = this.takeExternalBackends();
    if (!external.local && !external.remote) return;
    try {
      hook(external);
    } catch (err) {
      // The frontends are still written: without the device's TC their flows
      // are translated on the external devices, as before this hook existed.
      this.metrics.errors.inc({ reason: 'external_backends_failed' });
      this.log.error({ error: (err as Error).message }, `devices of external backends not prepared: ${(err as Error).message}`);
    }
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
    this.metrics.frontendsProgrammed.set(this.programmer.frontendCount());
    this.metrics.backendsProgrammed.set(this.programmer.backendCount());
    const maglev = this.programmer.maglevTables(); // h-maglev
    if (maglev) {
      for (const seconds of maglev.takeBuildSeconds()) this.metrics.maglevBuildDuration.observe(seconds);
      const st = maglev.stats();
      this.metrics.maglevTables.set(st.tables);
      this.metrics.maglevTableBytes.set(st.bytes);
    }
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

/** Addresses listed per key, with reference counts: which addresses any key lists, and whether that changed. */
class AddressIndex {
  private readonly byKey = new Map<string, string[]>();
  private readonly refs = new Map<string, number>();
  private changed = false;

  set(key: string, next: Set<string>): void {
    const before = this.byKey.get(key) ?? [];
    if (before.length === next.size && before.every((a) => next.has(a))) return;
    for (const a of before) {
      const n = (this.refs.get(a) ?? 1) - 1;
      if (n > 0) this.refs.set(a, n);
      else this.refs.delete(a);
    }
    for (const a of next) this.refs.set(a, (this.refs.get(a) ?? 0) + 1);
    if (next.size > 0) this.byKey.set(key, [...next]);
    else this.byKey.delete(key);
    this.changed = true;
  }

  /** Every listed address, when the set changed since the last call; else undefined. */
  take(): string[] | undefined {
    if (!this.changed) return undefined;
    this.changed = false;
    return [...this.refs.keys()];
  }
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/**
 * One spec per frontend, the last one of the pass: a Service that wins a
 * frontend (conflictWinner) later in a pass replaces the loser's spec.
 */
function lastPerFrontend(upserts: FrontendSpec[]): FrontendSpec[] {
  const byId = new Map<string, FrontendSpec>();
  for (const spec of upserts) byId.set(frontendId(spec), spec);
  return byId.size === upserts.length ? upserts : [...byId.values()];
}
