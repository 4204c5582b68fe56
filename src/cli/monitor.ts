// `sluice monitor`: data-path events (drops with their reason, refusals, new
// flows) read from the SLUICE_MAP_EVENTS ring buffer while it runs.
//
// The programs emit only while SLUICE_MAP_EVENTS_ON names a listener
// (bpf/lib/events.h). The monitor writes its pid there, re-asserts it on
// every tick (two monitors: when one exits, the other takes over within a
// tick), and clears it on exit if it is still its own; a monitor killed
// with SIGKILL leaves its pid, which the next monitor replaces and clears.
//
// Records carry both families (lb_event.family; 16-byte addresses, IPv4 in
// the first 4 bytes). A record of another size was written by programs of
// another Sluice version (the ring is not in any BTF the ABI check reads):
// skipped and counted on stderr, never misread.
import * as fs from 'node:fs';
import * as abi from '../abi/generated';
import { BpfMap, RingBuffer } from '../bpf';
import { cString } from '../bpf/libbpf';
import { bytesToIp6, hostPort, protoName } from '../datapath/addr';
import { COUNTERS, counterName } from '../datapath/counters';
import { mapPinPath } from '../datapath/maps';
import { TypedMap, u32Codec } from '../datapath/typedMap';
import { formatServiceName, readServiceNames, serviceNameOf, type ServiceName } from '../datapath/serviceNames';
import { UsageError, type ParsedArgs } from './args';
import { parseServiceFilter, type ServiceFilter } from './servicesCommand';
import { processAlive } from './inspect';

export type EventType = 'drop' | 'refused' | 'new_flow';
const TYPES: Record<number, EventType> = { [abi.LB_EVENT_DROP]: 'drop', [abi.LB_EVENT_REFUSED]: 'refused', [abi.LB_EVENT_NEW_FLOW]: 'new_flow' };

export interface EventView {
  time: string;
  family: 'ipv4' | 'ipv6';
  type: EventType | string;
  /** counter labels "path/reason/direction" of the event (the same counter was bumped) */
  reason: string;
  path: string;
  proto: string;
  source?: string;
  frontend: string;
  backend?: string;
  service?: string;
  revNatId: number;
  ifindex?: number;
  pid?: number;
  comm?: string;
  netnsCookie?: string;
}

/** An lb_event address (16 bytes) as text, by the record's family. */
function eventAddress(bytes: Buffer, family: number): string {
  return family === abi.LB_EVENT_FAMILY_IPV6 ? bytesToIp6(bytes) : `${bytes[0]}.${bytes[1]}.${bytes[2]}.${bytes[3]}`;
}

const isZero = (b: Buffer) => b.every((x) => x === 0);

/** "host:port" or "[v6]:port" -> [host, port]. */
function splitEnd(end: string): [string, number] {
  const at = end.lastIndexOf(':');
  return [end.slice(0, at).replace(/^\[(.*)\]$/, '$1'), Number(end.slice(at + 1))];
}

/** Kernel monotonic ns -> wall clock, from the offset measured now. */
export function eventView(e: abi.LbEvent, names: (revNatId: number, proto: 'tcp' | 'udp') => ServiceName | undefined, monoNowNs: bigint, wallNowMs: number): EventView {
  const labels = COUNTERS.get(e.reason);
  const proto = protoName(e.proto);
  const name = proto === 'tcp' || proto === 'udp' ? names(e.rev_nat_id, proto) : undefined;
  const view: EventView = {
    time: new Date(wallNowMs - Number((monoNowNs - e.timestamp_ns) / 1_000_000n)).toISOString(),
    family: e.family === abi.LB_EVENT_FAMILY_IPV6 ? 'ipv6' : 'ipv4',
    type: TYPES[e.type] ?? `type-${e.type}`,
    reason: labels ? counterName(labels) : `counter-${e.reason}`,
    path: labels?.path ?? '?',
    proto,
    frontend: hostPort(eventAddress(e.daddr, e.family), e.dport),
    revNatId: e.rev_nat_id,
  };
  if (!isZero(e.saddr)) view.source = hostPort(eventAddress(e.saddr, e.family), e.sport);
  if (!isZero(e.backend_address)) view.backend = hostPort(eventAddress(e.backend_address, e.family), e.backend_port);
  if (name) view.service = formatServiceName(name);
  if (e.ifindex) view.ifindex = e.ifindex;
  if (e.pid) view.pid = e.pid;
  const comm = cString(e.comm);
  if (comm) view.comm = comm;
  if (e.netns_cookie) view.netnsCookie = e.netns_cookie.toString();
  return view;
}

export interface EventFilter extends ServiceFilter {
  types?: Set<string>;
}

/** --type, plus the filters of `sluice services` (--service, --address, --port[/proto]). */
export function parseEventFilter(flags: Map<string, string>): EventFilter {
  const f: EventFilter = parseServiceFilter(flags);
  const type = flags.get('type');
  if (type !== undefined) {
    const types = type.split(',').map((t) => t.trim().replace('-', '_'));
    for (const t of types) if (!Object.values(TYPES).includes(t as EventType)) throw new UsageError(`--type ${JSON.stringify(t)}: use drop, refused or new-flow (comma-separated)`);
    f.types = new Set(types);
  }
  return f;
}

/** --address and --port match the client, the frontend or the backend. */
export function eventMatches(v: EventView, f: EventFilter): boolean {
  if (f.types && !f.types.has(v.type)) return false;
  if (f.proto !== undefined && v.proto !== f.proto) return false;
  if (f.service !== undefined && (!v.service || (v.service !== f.service && !v.service.startsWith(`${f.service}:`)))) return false;
  const ends = [v.source, v.frontend, v.backend].filter((x): x is string => !!x);
  if (f.address !== undefined && !ends.some((e) => splitEnd(e)[0] === f.address)) return false;
  if (f.port !== undefined && !ends.some((e) => splitEnd(e)[1] === f.port)) return false;
  return true;
}

export function formatEvent(v: EventView): string {
  const who = v.source ?? (v.comm || v.pid ? `${v.comm ?? '?'}[${v.pid ?? '?'}]${v.netnsCookie ? ` netns ${v.netnsCookie}` : ''}` : '?');
  return `${v.time} ${v.type.toUpperCase().padEnd(8)} ${v.reason.padEnd(40)} ${who} -> ${v.frontend}/${v.proto}` +
    `${v.backend ? ` => ${v.backend}` : ''}${v.service ? ` (${v.service})` : ''}${v.ifindex ? ` if ${v.ifindex}` : ''}\n`;
}

/** The listener flag: set while a monitor runs (see the top of this file). */
class ListenerFlag {
  private readonly map: TypedMap<number, abi.LbEventsCtl>;
  constructor(bpffs: string, opened: BpfMap[]) {
    const m = BpfMap.fromPinned(mapPinPath(bpffs, abi.SLUICE_MAP_EVENTS_ON));
    opened.push(m);
    this.map = new TypedMap(m, u32Codec, abi.lb_events_ctlCodec);
  }
  claim(): void {
    const cur = this.map.get(0)?.listener_pid ?? 0;
    if (cur !== process.pid && (cur === 0 || !processAlive(cur))) this.map.set(0, { listener_pid: process.pid });
  }
  release(): void {
    if (this.map.get(0)?.listener_pid === process.pid) this.map.set(0, { listener_pid: 0 });
  }
}

const TICK_MS = 100;

export const monitorCommand = {
  summary: 'stream data-path events (drops, refusals, new flows) until interrupted (--type, --service, --address, --port; --count N, --duration S; -o json)',
  values: ['bpffs', 'output', 'type', 'service', 'address', 'port', 'count', 'duration'],
  run(a: ParsedArgs, bpffs: string): Promise<number> {
    const filter = parseEventFilter(a.flags);
    const output = a.flags.get('output') ?? 'table';
    if (output !== 'json' && output !== 'table') throw new UsageError(`-o ${output}: use json or table`);
    const count = a.flags.has('count') ? Number(a.flags.get('count')) : Infinity;
    if (!(count > 0) || (count !== Infinity && !Number.isInteger(count))) throw new UsageError(`--count ${a.flags.get('count')}: a positive whole number`);
    const duration = a.flags.has('duration') ? Number(a.flags.get('duration')) : Infinity;
    if (!(duration > 0)) throw new UsageError(`--duration ${a.flags.get('duration')}: positive seconds`);
    const ringPin = mapPinPath(bpffs, abi.SLUICE_MAP_EVENTS);
    if (!fs.existsSync(ringPin)) throw new Error(`no pinned ring buffer ${ringPin}: Sluice is not installed under ${bpffs}, or its programs are older than this CLI (an older Sluice writes IPv4-only records to sluice_events, or has no events)`);

    const opened: BpfMap[] = [];
    const ring = BpfMap.fromPinned(ringPin);
    opened.push(ring);
    const flag = new ListenerFlag(bpffs, opened);
    const namesPin = mapPinPath(bpffs, abi.SLUICE_MAP_SVC_NAMES);
    let names = new Map<string, ServiceName>();
    const namesMap = fs.existsSync(namesPin) ? new TypedMap(BpfMap.fromPinned(namesPin), abi.lb_svc_name_keyCodec, abi.lb_svc_nameCodec) : undefined;
    if (namesMap) opened.push(namesMap.map);
    const nameOf = (revNatId: number, proto: 'tcp' | 'udp') => {
      // Services come and go while we run: re-read the (small) map on a miss.
      if (namesMap && revNatId && !serviceNameOf(names, revNatId, proto)) names = readServiceNames(namesMap);
      return serviceNameOf(names, revNatId, proto);
    };
    let seen = 0;
    let foreign = 0;
    let finish: (code: number) => void;
    const rb = new RingBuffer(ring, (record) => {
      if (seen >= count) return;
      if (record.length !== abi.LB_EVENT_SIZE) {
        // Programs of another Sluice version (see the top of this file).
        if (foreign++ === 0) process.stderr.write(`sluice monitor: skipping records of ${record.length} bytes (this sluice reads ${abi.LB_EVENT_SIZE}-byte lb_event records): the programs and the CLI are of different Sluice versions\n`);
        return;
      }
      const view = eventView(abi.decodeLbEvent(record), nameOf, process.hrtime.bigint(), Date.now());
      if (!eventMatches(view, filter)) return;
      seen++;
      process.stdout.write(output === 'json' ? JSON.stringify(view) + '\n' : formatEvent(view));
    });
    return new Promise<number>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      let deadline: NodeJS.Timeout | undefined;
      const onSignal = () => finish(0);
      finish = (code) => {
        finish = () => {};
        clearInterval(timer);
        clearTimeout(deadline);
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
        try {
          flag.release();
        } finally {
          rb.close();
          for (const m of opened) m.close();
        }
        resolve(code);
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      try {
        flag.claim();
        if (output !== 'json') process.stderr.write(`listening on ${ringPin} (Ctrl-C to stop)\n`);
        timer = setInterval(() => {
          try {
            flag.claim();
            rb.consume();
            // Not from inside the record callback: consume() must return before the ring is freed.
            if (seen >= count) finish(0);
          } catch (err) {
            process.stderr.write(`sluice monitor: ${(err as Error).message}\n`);
            finish(1);
          }
        }, TICK_MS);
        if (duration !== Infinity) deadline = setTimeout(() => { rb.consume(); finish(0); }, duration * 1000);
      } catch (err) {
        finish(1);
        throw err;
      }
    });
  },
};
