// The socket-LB maps, opened from their pins under the bpffs directory and
// typed with the generated codecs. Works without the agent (the CLI uses it).
import * as path from 'node:path';
import * as fs from 'node:fs';
import { BpfMap } from '../bpf/map';
import * as abi from '../abi/generated';
import { idTable, TypedMap, u32Codec, u8Codec } from './typedMap';
import { nodeIpMap, sockConfigMap } from './sockConfig';
import type { ServiceNameMap } from './serviceNames';

export const DEFAULT_BPFFS = '/sys/fs/bpf/sluice';

export interface SockLbMaps {
  /** IPv4 frontends: one master each, naming a range of `ranges` (native/sluice_abi.h). */
  services: TypedMap<abi.Lb4FrontendKey, abi.Lb4Service>;
  /** The IPv4 frontends' backend ranges: index -> backend id (ARRAY). */
  ranges: TypedMap<number, number>;
  /** Backends by id (ARRAY: an all-zero entry is none; see IdArrayMap). */
  backends: TypedMap<number, abi.Lb4Backend>;
  /** Rev-NAT entries by id (ARRAY, like backends). */
  revNat: TypedMap<number, abi.Lb4ReverseNat>;
  /** socketLB mode and the host netns cookie (see sockConfig.ts). */
  sockConfig: TypedMap<number, abi.LbSockConfig>;
  /** This node's IPv4 addresses, for the socket hooks (see sockConfig.ts). */
  nodeIps: TypedMap<number, number>;
  affinity: TypedMap<abi.Lb4AffinityKey, abi.LbAffinity>;
  /** loadBalancerSourceRanges (LPM, read by the TC path; every object pins it). */
  sourceRanges?: TypedMap<abi.Lb4SrcRangeKey, number>;
  counters: BpfMap;
  /** What the agent last did; absent in pins made by an older Sluice. */
  agent?: TypedMap<number, abi.SluiceAgentStatus>;
  /** Which Service owns each frontend (the CLI's view); absent in pins made by an older Sluice. */
  serviceNames?: ServiceNameMap;
  /** h-maglev: frontend (rev-NAT id, scope) -> Maglev table (ARRAY_OF_MAPS); absent in pins made by an older Sluice. */
  maglev?: BpfMap;
  /** h-maglev: M for tables built from now on (the agent sets it from its config). */
  maglevTableSize?: number;
  /** The IPv6 twins (issue 14); absent in pins made by an IPv4-only Sluice. */
  v6?: SockLbMaps6;
  close(): void;
}

/** IPv6 frontends, backends and rev-NAT entries (native/sluice_abi.h, lb6_*). */
export interface SockLbMaps6 {
  /** IPv6 frontends: one master each, naming a range of `ranges` (layout 2, as IPv4's). */
  services: TypedMap<abi.Lb6FrontendKey, abi.Lb4Service>;
  /** The IPv6 frontends' backend ranges: index -> backend id (ARRAY). */
  ranges: TypedMap<number, number>;
  /** Backends by id (ARRAY, as IPv4's; ids from the same pool). */
  backends: TypedMap<number, abi.Lb6Backend>;
  /** Rev-NAT entries by id (ARRAY). */
  revNat: TypedMap<number, abi.Lb6ReverseNat>;
  affinity: TypedMap<abi.Lb6AffinityKey, abi.LbAffinity>;
  /** This node's IPv6 addresses (ExternalIP rule, bind rule, an unbound host socket's source for source ranges). */
  nodeIps: TypedMap<abi.Lb6NodeIp, number>;
  /** loadBalancerSourceRanges of IPv6 frontends (the IPv6 TC path and connect6/sendmsg6 read them). */
  sourceRanges?: TypedMap<abi.Lb6SrcRangeKey, number>;
}

export function mapPinPath(bpffs: string, name: string): string {
  return path.join(bpffs, name);
}

/** Open every pinned map, or fail naming the one missing and what to run. */
export function openSockLbMaps(bpffs: string): SockLbMaps {
  const opened: BpfMap[] = [];
  const open = (name: string): BpfMap => {
    const pin = mapPinPath(bpffs, name);
    if (!fs.existsSync(pin)) {
      for (const m of opened) m.close();
      throw new Error(`no pinned map ${pin}: Sluice is not installed under ${bpffs} (run \`sluice attach --cgroup PATH --bpffs ${bpffs}\` or start the agent)`);
    }
    const m = BpfMap.fromPinned(pin);
    opened.push(m);
    return m;
  };
  try {
    const maps: SockLbMaps = {
      services: new TypedMap(open(abi.SLUICE_MAP_SERVICES4), abi.lb4_frontend_keyCodec, abi.lb4_serviceCodec),
      ranges: new TypedMap(open(abi.SLUICE_MAP_RANGES4), u32Codec, u32Codec),
      backends: idTable(open(abi.SLUICE_MAP_BACKENDS4), abi.lb4_backendCodec),
      revNat: idTable(open(abi.SLUICE_MAP_REVNAT4), abi.lb4_reverse_natCodec),
      sockConfig: sockConfigMap(open(abi.SLUICE_MAP_SOCK_CFG)),
      nodeIps: nodeIpMap(open(abi.SLUICE_MAP_NODEIP4)),
      affinity: new TypedMap(open(abi.SLUICE_MAP_AFFINITY4), abi.lb4_affinity_keyCodec, abi.lb_affinityCodec),
      sourceRanges: new TypedMap(open(abi.SLUICE_MAP_SRCRANGE4), abi.lb4_src_range_keyCodec, u8Codec),
      counters: open(abi.SLUICE_MAP_COUNTERS),
      agent: fs.existsSync(mapPinPath(bpffs, abi.SLUICE_MAP_AGENT))
        ? new TypedMap(open(abi.SLUICE_MAP_AGENT), u32Codec, abi.sluice_agent_statusCodec)
        : undefined,
      serviceNames: fs.existsSync(mapPinPath(bpffs, abi.SLUICE_MAP_SVC_NAMES))
        ? new TypedMap(open(abi.SLUICE_MAP_SVC_NAMES), abi.lb_svc_name_keyCodec, abi.lb_svc_nameCodec)
        : undefined,
      maglev: fs.existsSync(mapPinPath(bpffs, abi.SLUICE_MAP_MAGLEV4)) ? open(abi.SLUICE_MAP_MAGLEV4) : undefined,
      v6: fs.existsSync(mapPinPath(bpffs, abi.SLUICE_MAP_SERVICES6))
        ? {
          services: new TypedMap(openServices6(open), abi.lb6_frontend_keyCodec, abi.lb4_serviceCodec),
          ranges: new TypedMap(open(abi.SLUICE_MAP_RANGES6), u32Codec, u32Codec),
          backends: idTable(open(abi.SLUICE_MAP_BACKENDS6), abi.lb6_backendCodec),
          revNat: idTable(open(abi.SLUICE_MAP_REVNAT6), abi.lb6_reverse_natCodec),
          affinity: new TypedMap(open(abi.SLUICE_MAP_AFFINITY6), abi.lb6_affinity_keyCodec, abi.lb_affinityCodec),
          nodeIps: new TypedMap(open(abi.SLUICE_MAP_NODEIP6), abi.lb6_node_ipCodec, u8Codec),
          sourceRanges: fs.existsSync(mapPinPath(bpffs, abi.SLUICE_MAP_SRCRANGE6))
            ? new TypedMap(open(abi.SLUICE_MAP_SRCRANGE6), abi.lb6_src_range_keyCodec, u8Codec)
            : undefined,
        }
        : undefined,
      close: () => opened.forEach((m) => m.close()),
    };
    return maps;
  } catch (err) {
    for (const m of opened) m.close();
    throw err;
  }
}

/**
 * sluice_svc6 of layout 2 (key lb6_frontend_key, one master per frontend).
 * Pins of the slot layout (a 24-byte key with the slot) are migrated by the
 * agent's load (migrate.ts); until then nothing here can read them.
 */
function openServices6(open: (name: string) => BpfMap): BpfMap {
  const m = open(abi.SLUICE_MAP_SERVICES6);
  if (m.keySize !== abi.LB6_FRONTEND_KEY_SIZE) {
    throw new Error(`pinned map ${abi.SLUICE_MAP_SERVICES6} has ${m.keySize}-byte keys, the IPv6 slot layout of an older Sluice (this one reads ${abi.LB6_FRONTEND_KEY_SIZE}-byte keys, one master per frontend): start this version's agent once to migrate the pinned maps`);
  }
  return m;
}

/** Sum a per-CPU counter (LB_CNT_*). */
export function readCounter(counters: BpfMap, index: number): bigint {
  const key = u32Codec.encode(index);
  return (counters.lookupPerCpu(key) ?? []).reduce((sum, cpu) => sum + cpu.readBigUInt64LE(0), 0n);
}
