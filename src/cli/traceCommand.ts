// `sluice trace SRC DST:PORT/PROTO`: the pure trace (./trace.ts) over the
// pinned maps, printed as text or JSON. Reads only; sends nothing.
import * as fs from 'node:fs';
import { isIPv4, isIPv6 } from 'node:net';
import * as abi from '../abi/generated';
import { UsageError, type ParsedArgs } from './args';
import { withMaps } from './inspect';
import { trace, trace6, type TraceMaps, type TraceMaps6, type TracePath, type TraceResult } from './trace';
import { canonicalIp6, checkPort, hostPort, isIp6, parseEndpoint } from '../datapath/addr';
import { mapPinPath, type SockLbMaps, type SockLbMaps6 } from '../datapath/maps';
import { BpfMap } from '../bpf/map';
import { TypedMap, u32Codec } from '../datapath/typedMap';
import { readServiceNames, serviceNameOf } from '../datapath/serviceNames';
import { readMaglevTable } from '../datapath/maglev';

const PATHS: Record<string, TracePath> = { socket: 'socket', 'north-south': 'north_south', north_south: 'north_south', pod: 'pod' };

/** "198.18.0.9", "198.18.0.9:40000", "fd00::9" or "[fd00::9]:40000". */
export function parseClient(text: string): { address: string; port?: number } {
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(text) ?? (isIPv6(text) ? [text, text] : null);
  if (v6 && isIPv6(v6[1]!)) {
    const address = canonicalIp6(v6[1]!);
    return v6[2] === undefined ? { address } : { address, port: checkPort(Number(v6[2]), `source ${text}`) };
  }
  const m = /^([^:]+)(?::(\d+))?$/.exec(text);
  if (!m || !isIPv4(m[1]!)) throw new UsageError(`source ${JSON.stringify(text)}: expected an IPv4 ADDRESS or ADDRESS:PORT, or an IPv6 ADDRESS or [ADDRESS]:PORT`);
  return m[2] === undefined ? { address: m[1]! } : { address: m[1]!, port: checkPort(Number(m[2]), `source ${text}`) };
}

function openPinnedIf(bpffs: string, opened: BpfMap[], name: string): BpfMap | undefined {
  const pin = mapPinPath(bpffs, name);
  if (!fs.existsSync(pin)) return undefined;
  const m = BpfMap.fromPinned(pin);
  opened.push(m);
  return m;
}

/** Round-robin cursors and least-connection counts: one map each for both families. */
function algorithmState(bpffs: string, opened: BpfMap[]): Pick<TraceMaps, 'rrCursor' | 'lcCount'> {
  const rrMap = openPinnedIf(bpffs, opened, abi.SLUICE_MAP_RR4);
  const lcMap = openPinnedIf(bpffs, opened, abi.SLUICE_MAP_LC_COUNT4);
  const arrayU32 = (map: BpfMap | undefined, i: number, signed: boolean): number | undefined => {
    if (!map || i < 0 || i >= map.maxEntries) return undefined;
    const v = map.lookup(u32Codec.encode(i));
    return v ? (signed ? v.readInt32LE(0) : v.readUInt32LE(0)) : undefined;
  };
  return {
    rrCursor: (revNatId) => arrayU32(rrMap, revNatId, false),
    lcCount: (backendId) => arrayU32(lcMap, backendId, true),
  };
}

/** TraceMaps6 over the pinned IPv6 maps; conntrack and the SNAT address only when the TC programs pinned them. */
function pinnedTraceMaps6(bpffs: string, maps: SockLbMaps, v6: SockLbMaps6, opened: BpfMap[]): TraceMaps6 {
  const ctMap = openPinnedIf(bpffs, opened, abi.SLUICE_MAP_CT6);
  const cfgMap = openPinnedIf(bpffs, opened, abi.SLUICE_MAP_TC_CONFIG6);
  const ct = ctMap && new TypedMap(ctMap, abi.lb6_ct_keyCodec, abi.lb6_ct_entryCodec);
  const cfg = cfgMap && new TypedMap(cfgMap, u32Codec, abi.lb6_tc_configCodec);
  const names = maps.serviceNames ? readServiceNames(maps.serviceNames) : new Map();
  return {
    service: (k) => v6.services.get(k),
    rangeEntry: (i) => (i < v6.ranges.map.maxEntries ? v6.ranges.get(i) : undefined),
    backend: (id) => v6.backends.get(id),
    serviceName: (revNatId, proto) => serviceNameOf(names, revNatId, proto),
    sourceAllowed: v6.sourceRanges && ((revNatId, client) => v6.sourceRanges!.get({ prefixlen: 32 + 128, rev_nat_id: revNatId, address: client }) !== undefined),
    conntrack: ct && {
      get: (k) => ct.get(k),
      flowsOf: (client, frontend, port, proto) => ct.readAll().filter(([k, e]) =>
        k.dir === abi.LB_CT_DIR_ORIGINAL && client.equals(e.client_address) && frontend.equals(e.frontend_address) && e.frontend_port === port && e.proto === proto).map(([, e]) => e),
    },
    snatAddress: () => cfg?.get(0)?.snat_address,
    maglevTable: (f) => (maps.maglev ? readMaglevTable(maps.maglev, f) : undefined),
    ...algorithmState(bpffs, opened),
    nowNs: () => process.hrtime.bigint(),
  };
}

/** TraceMaps over the pinned maps; conntrack and TC config only when the TC programs pinned them. */
function pinnedTraceMaps(bpffs: string, maps: SockLbMaps, opened: BpfMap[]): TraceMaps {
  const openIf = (name: string) => openPinnedIf(bpffs, opened, name);
  const ctMap = openIf(abi.SLUICE_MAP_CT4);
  const cfgMap = openIf(abi.SLUICE_MAP_TC_CONFIG);
  const ct = ctMap && new TypedMap(ctMap, abi.lb4_ct_keyCodec, abi.lb4_ct_entryCodec);
  const cfg = cfgMap && new TypedMap(cfgMap, u32Codec, abi.lb4_tc_configCodec);
  const names = maps.serviceNames ? readServiceNames(maps.serviceNames) : new Map();
  return {
    service: (k) => maps.services.get(k),
    rangeEntry: (i) => (i < maps.ranges.map.maxEntries ? maps.ranges.get(i) : undefined),
    backend: (id) => maps.backends.get(id),
    sourceAllowed: (revNatId, client) => maps.sourceRanges?.get({ prefixlen: 64, rev_nat_id: revNatId, address: client }) !== undefined,
    affinity: (k) => maps.affinity.get(k),
    conntrack: ct && {
      get: (k) => ct.get(k),
      flowsOf: (client, frontend, port, proto) => ct.readAll().filter(([k, e]) =>
        k.dir === abi.LB_CT_DIR_ORIGINAL && e.client_address === client && e.frontend_address === frontend && e.frontend_port === port && e.proto === proto),
    },
    tcConfig: () => cfg?.get(0),
    isNodePortAddress: (address) => maps.nodeIps.get(address) !== undefined,
    serviceName: (revNatId, proto) => serviceNameOf(names, revNatId, proto),
    maglevTable: (f) => (maps.maglev ? readMaglevTable(maps.maglev, f) : undefined),
    ...algorithmState(bpffs, opened),
    nowNs: () => process.hrtime.bigint(), // CLOCK_MONOTONIC, as bpf_ktime_get_ns()
  };
}

export function renderTrace(r: TraceResult): string {
  const lines: string[] = [`packet:    ${r.packet} (path ${r.path})`];
  const f = r.frontend;
  if (f) {
    lines.push(`frontend:  ${f.frontend} scope ${f.scope}; Service ${f.service ?? '-'}; ${f.flags.join(',') || 'no flags'}; rev-NAT ${f.revNatId}; ${f.algorithm}${f.affinityTimeoutSeconds ? `; affinity ${f.affinityTimeoutSeconds}s` : ''}`);
    lines.push(`backends:  ${f.backends.map((b) => b.missing ? `slot ${b.slot}: missing` : `#${b.id} ${hostPort(b.address!, b.port!)}${b.flags.length ? ` (${b.flags.join(',')})` : ''}${b.snat ? ' snat' : ''}`).join(', ') || '(none)'}`);
  }
  if (r.sourceRange?.applies) lines.push(`ranges:    loadBalancerSourceRanges ${r.sourceRange.allowed ? 'allow' : 'do not allow'} this source${r.sourceRange.enforced ? '' : ' (not enforced on this path)'}`);
  if (r.affinity) {
    const a = r.affinity;
    lines.push(`affinity:  ${a.key}: ${a.backendId !== undefined ? `backend #${a.backendId} ${a.backend ?? '?'}, used ${a.lastUsedSecondsAgo}s ago` : ''}${a.note ? `${a.backendId !== undefined ? '; ' : ''}${a.note}` : ''}`);
  }
  if (r.pick) {
    const p = r.pick;
    const shares = (p.shares ? `; table shares ${Object.entries(p.shares).map(([id, x]) => `${id} ${(x * 100).toFixed(1)}%`).join(', ')}` : '') +
      (p.cursor !== undefined ? `; cursor ${p.cursor}` : '') +
      (p.active ? `; active ${Object.entries(p.active).map(([id, n]) => `${id} ${n}`).join(', ')}` : '');
    lines.push(`pick:      ${p.algorithm} by ${p.hashedBy}: ${p.backend ? `backend #${p.backendId} ${p.backend}${p.slot !== undefined ? ` (slot ${p.slot})` : ` (entry ${p.entry})`}` : p.note ?? '-'}${shares}`);
  }
  for (const c of r.conntrack ?? []) {
    lines.push(`conntrack: ${c.direction} ${c.client} -> ${c.frontend} => ${c.backend} (#${c.backendId}${c.backendAlive ? '' : ', gone'})${c.nat ? ` via ${c.nat}` : ''}; ${c.state}; ${c.flags.join(',') || '-'}; expires in ${c.expiresInSeconds}s; ${c.packets} packets`);
  }
  lines.push(`verdict:   ${r.verdict.action.toUpperCase()}: ${r.verdict.reason}${r.verdict.counter ? ` [${r.verdict.counter}]` : ''}`);
  return lines.join('\n') + '\n';
}

export const traceCommand = {
  summary: 'trace SRC[:PORT] DST:PORT[/PROTO] [--path socket|north-south|pod]: what the data path would do, from the maps',
  values: ['bpffs', 'output', 'path', 'netns-cookie'],
  run(a: ParsedArgs, bpffs: string): number {
    const [src, dst, extra] = a.positional;
    if (!src || !dst || extra !== undefined) throw new UsageError('usage: sluice trace SRC[:PORT] DST:PORT[/tcp|udp] [--path socket|north-south|pod] [--netns-cookie N] [-o json]');
    const client = parseClient(src);
    let destination;
    try {
      destination = parseEndpoint(dst);
    } catch (err) {
      throw new UsageError(`destination: ${(err as Error).message}`);
    }
    const path = PATHS[a.flags.get('path') ?? 'socket'];
    if (!path) throw new UsageError(`--path ${a.flags.get('path')}: use socket, north-south or pod`);
    const cookie = a.flags.get('netns-cookie');
    if (cookie !== undefined && !/^\d+$/.test(cookie)) throw new UsageError(`--netns-cookie ${JSON.stringify(cookie)}: expected a number`);
    const output = a.flags.get('output') ?? 'table';
    if (output !== 'json' && output !== 'table') throw new UsageError(`-o ${output}: use json or table`);
    if (isIp6(client.address) !== isIp6(destination.address)) {
      throw new UsageError(`source ${src} and destination ${dst}: give both of the same family (a dual-stack socket's ::ffff:a.b.c.d is traced as IPv4)`);
    }
    if (isIp6(destination.address)) {
      const result6 = withMaps(bpffs, (maps) => {
        if (!maps.v6) throw new UsageError(`the maps under ${bpffs} have no IPv6 tables (pinned by an IPv4-only Sluice)`);
        const opened: BpfMap[] = [];
        try {
          return trace6({ path, client: client.address, clientPort: client.port, ...destination }, pinnedTraceMaps6(bpffs, maps, maps.v6, opened));
        } finally {
          for (const m of opened) m.close();
        }
      });
      process.stdout.write(output === 'json' ? JSON.stringify(result6, null, 2) + '\n' : renderTrace(result6));
      return 0;
    }
    const result = withMaps(bpffs, (maps) => {
      const opened: BpfMap[] = [];
      try {
        return trace({
          path, client: client.address, clientPort: client.port, ...destination,
          netnsCookie: cookie === undefined ? undefined : BigInt(cookie),
        }, pinnedTraceMaps(bpffs, maps, opened));
      } finally {
        for (const m of opened) m.close();
      }
    });
    process.stdout.write(output === 'json' ? JSON.stringify(result, null, 2) + '\n' : renderTrace(result));
    return 0;
  },
};
