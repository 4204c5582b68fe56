// The agent's side of stale-socket termination (src/datapath/sockTerm.ts):
// load the iterators once, then after every sync that deleted backends end
// the sockets still connected to them, count them and time the pass from the
// EndpointSlice change.
import type { Logger } from 'pino';
import type { AgentConfig } from './config';
import type { AgentMetrics } from './metrics';
import type { ProgrammedBackend } from '../datapath/programmer';
import { kernelSupportsSockDestroy, StaleSocketTerminator, type RemovedBackend } from '../datapath/sockTerm';

export interface StaleSockets {
  /** Backends no frontend uses any more; `since` is when the change that removed them was made (ms). */
  backendsGone(backends: ProgrammedBackend[], since: number): void;
  stop(): void;
}

export function startStaleSockets(config: AgentConfig, metrics: AgentMetrics, log: Logger): StaleSockets | undefined {
  if (!config.destroyStaleSockets) {
    log.info('stale-socket termination is off (destroyStaleSockets: false): connected sockets keep a deleted backend until the application reconnects');
    return undefined;
  }
  let terminator: StaleSocketTerminator;
  try {
    terminator = StaleSocketTerminator.load({ bpffs: config.bpffs, tcp: config.destroyStaleTcpSockets, netns: config.staleSocketNetns });
  } catch (err) {
    const kernel = kernelSupportsSockDestroy();
    metrics.errors.inc({ reason: 'sock_destroy_unsupported' });
    log.warn(
      { reason: 'sock_destroy_unsupported', error: (err as Error).message.split('\n')[0] },
      `stale-socket termination unavailable: ${kernel.reason ?? (err as Error).message.split('\n')[0]}; connected UDP sockets keep a deleted backend until the application reconnects`,
    );
    return undefined;
  }
  log.info({ protocols: terminator.protocols, netns: config.staleSocketNetns }, 'stale-socket termination ready');

  let pending: RemovedBackend[] = [];
  let pendingSince = Infinity;
  let scheduled = false;
  const reportedNetnsErrors = new Set<string>();

  let stopped = false;

  const pass = () => {
    scheduled = false;
    if (stopped) return;
    const backends = pending;
    const since = pendingSince;
    pending = [];
    pendingSince = Infinity;
    const start = process.hrtime.bigint();
    let report;
    try {
      report = terminator.terminate(backends);
    } catch (err) {
      metrics.errors.inc({ reason: 'sock_destroy_failed' });
      log.error({ reason: 'sock_destroy_failed', err }, 'stale-socket termination pass failed');
      return;
    }
    if (report.namespaces === 0 && report.namespaceErrors.length === 0) return; // no protocol of ours
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    metrics.staleSocketTermination.observe(Math.max(0, Date.now() - since) / 1000);
    for (const s of report.destroyed) metrics.staleSocketsDestroyed.inc({ proto: s.backend.split('/')[1] ?? 'unknown' });
    for (const s of report.failed) {
      metrics.errors.inc({ reason: 'sock_destroy_failed' });
      log.warn({ reason: 'sock_destroy_failed', backend: s.backend, netns: s.netns, result: s.result }, `socket ${s.cookie} to deleted backend ${s.backend} in ${s.netns}: bpf_sock_destroy() returned ${s.result}`);
    }
    for (const e of report.namespaceErrors) {
      const key = `${e.netns}\0${e.error}`;
      if (reportedNetnsErrors.has(key)) continue;
      reportedNetnsErrors.add(key);
      metrics.errors.inc({ reason: 'sock_destroy_netns' });
      // Without CAP_SYS_ADMIN every Pod namespace fails alike: say it once, stop trying.
      const notPermitted = /^setns\(.*\): EPERM/.test(e.error);
      if (notPermitted) terminator.skipPodNamespaces();
      log.warn(
        { reason: 'sock_destroy_netns', netns: e.netns },
        `stale sockets in ${e.netns} not checked: ${e.error}` +
          (notPermitted ? '; entering Pod namespaces needs CAP_SYS_ADMIN: only the node\'s own namespace is checked from now on' : ''),
      );
    }
    const level = report.destroyed.length > 0 ? 'info' : 'debug';
    log[level](
      { destroyed: report.destroyed.length, failed: report.failed.length, namespaces: report.namespaces, backends: backends.length, passMs: Math.round(ms * 10) / 10 },
      'stale sockets destroyed',
    );
  };

  return {
    backendsGone(backends, since) {
      for (const b of backends) pending.push({ address: b.address, port: b.port, proto: b.proto });
      pendingSince = Math.min(pendingSince, since);
      // After the sync that deleted them returns: the maps no longer offer
      // these backends, so a reconnect lands on a live one.
      if (!scheduled) {
        scheduled = true;
        setImmediate(pass);
      }
    },
    stop() {
      stopped = true;
      terminator.close();
    },
  };
}
