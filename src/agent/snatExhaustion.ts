// SNAT port exhaustion, reported by the agent (issue 13 item 5). The data
// path counts every flow it drops because all ports of the SNAT range toward
// its backend:port are held by live flows (snat_ports_exhausted, north-south
// and pod-veth hairpin rows). A SYN flood at a full range could log once per
// packet; the agent instead reads the two rows every interval and logs one
// warning per interval in which they grew, with the count.
import type { Logger } from 'pino';
import * as abi from '../abi/generated';
import type { BpfMap } from '../bpf/map';
import { readCounter } from '../datapath/maps';

export const SNAT_EXHAUSTED_LOG_INTERVAL_MS = 10_000;

/** Remembers the last totals; `check` returns the flows dropped since the previous call (0: nothing to say). */
export class SnatExhaustionReporter {
  private last: bigint;

  constructor(private readonly read: () => bigint, private readonly log: Logger, private readonly range: string) {
    this.last = read();
  }

  check(): bigint {
    const now = this.read();
    const dropped = now - this.last;
    this.last = now;
    if (dropped > 0n) {
      this.log.warn({ dropped: Number(dropped), range: this.range, reason: 'snat_ports_exhausted' },
        `SNAT ports exhausted: ${dropped} new flow(s) dropped in the last interval, every port of ${this.range} toward their backend:port in use (sluice_datapath_events_total{reason="snat_ports_exhausted"})`);
    }
    return dropped;
  }
}

/** Both exhaustion rows (north-south and pod veths) summed over CPUs. */
export function readSnatExhausted(counters: BpfMap): bigint {
  return readCounter(counters, abi.LB_CNT_TC_SNAT_EXHAUSTED) + readCounter(counters, abi.LB_CNT_POD_SNAT_EXHAUSTED);
}

export function startSnatExhaustionLog(counters: BpfMap, range: string, log: Logger, intervalMs = SNAT_EXHAUSTED_LOG_INTERVAL_MS): () => void {
  const reporter = new SnatExhaustionReporter(() => readSnatExhausted(counters), log, range);
  const timer = setInterval(() => reporter.check(), intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
