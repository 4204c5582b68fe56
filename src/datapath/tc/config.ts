// The TC path's configuration (one entry of the sluice_tc_cfg array): the
// node address remote-backend flows are SNATed to, the SNAT port range and the
// conntrack timeouts. Zero fields mean "the data path's default".
import * as abi from '../../abi/generated';
import { ip4ToNumber, ip6ToBytes } from '../addr';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { BpfMap } from '../../bpf/map';
import { TypedMap, u32Codec } from '../typedMap';

export interface TcConfig {
  /** Node address used as source for flows to backends on other nodes; undefined: such flows are dropped. */
  snatAddress?: string;
  /** SNAT source ports, inclusive. Default 61000-65535 (outside Linux's default ephemeral range). */
  snatPortMin?: number;
  snatPortMax?: number;
  /** Conntrack timeouts in seconds (kube-proxy: conntrack.tcpEstablishedTimeout, tcpCloseWaitTimeout, udpTimeout). */
  tcpEstablishedTimeout?: number;
  /** Until the TCP handshake completes (a reply, then the client again); Cilium's 60 s. */
  tcpSynTimeout?: number;
  tcpClosingTimeout?: number;
  udpTimeout?: number;
}

export const TC_DEFAULTS = {
  snatPortMin: abi.LB_TC_DEFAULT_SNAT_PORT_MIN,
  snatPortMax: abi.LB_TC_DEFAULT_SNAT_PORT_MAX,
  tcpEstablishedTimeout: abi.LB_TC_DEFAULT_TCP_ESTABLISHED_S,
  tcpSynTimeout: abi.LB_TC_DEFAULT_TCP_SYN_S,
  tcpClosingTimeout: abi.LB_TC_DEFAULT_TCP_CLOSING_S,
  udpTimeout: abi.LB_TC_DEFAULT_UDP_S,
} as const;

export function encodeTcConfig(cfg: TcConfig): abi.Lb4TcConfig {
  const min = cfg.snatPortMin ?? TC_DEFAULTS.snatPortMin;
  const max = cfg.snatPortMax ?? TC_DEFAULTS.snatPortMax;
  if (!Number.isInteger(min) || !Number.isInteger(max) || min < 1 || max > 65535 || min > max) {
    throw new Error(`TC config: SNAT port range ${min}-${max} is not a range inside 1-65535`);
  }
  for (const [name, value] of Object.entries({ tcpEstablishedTimeout: cfg.tcpEstablishedTimeout, tcpSynTimeout: cfg.tcpSynTimeout, tcpClosingTimeout: cfg.tcpClosingTimeout, udpTimeout: cfg.udpTimeout })) {
    if (value !== undefined && (!Number.isInteger(value) || value < 1 || value > 0xffffffff)) {
      throw new Error(`TC config: ${name} ${value} must be a whole number of seconds >= 1`);
    }
  }
  return {
    snat_address: cfg.snatAddress ? ip4ToNumber(cfg.snatAddress) : 0,
    snat_port_min: min,
    snat_port_max: max,
    tcp_established_timeout: cfg.tcpEstablishedTimeout ?? TC_DEFAULTS.tcpEstablishedTimeout,
    tcp_closing_timeout: cfg.tcpClosingTimeout ?? TC_DEFAULTS.tcpClosingTimeout,
    udp_timeout: cfg.udpTimeout ?? TC_DEFAULTS.udpTimeout,
    tcp_syn_timeout: cfg.tcpSynTimeout ?? TC_DEFAULTS.tcpSynTimeout,
  };
}

export function writeTcConfig(map: TypedMap<number, abi.Lb4TcConfig>, cfg: TcConfig): void {
  map.set(0, encodeTcConfig(cfg));
}

/**
 * The node's IPv6 SNAT address (sluice_tc_cfg6; issue 14): IPv6 flows to
 * backends on other nodes take it as source. Undefined: such flows are
 * dropped (counted as snat_failed). Ports and timeouts come from sluice_tc_cfg.
 */
export function writeTcConfig6(map: TypedMap<number, abi.Lb6TcConfig>, snatAddress?: string): void {
  map.set(0, { snat_address: snatAddress ? ip6ToBytes(snatAddress) : Buffer.alloc(16) });
}

/** --nodeport-mode (issue 17 item 2, docs/dsr.md): how flows to backends on other nodes leave. */
export type NodePortMode = 'snat' | 'dsr' | 'hybrid';
export const NODEPORT_MODES: readonly NodePortMode[] = ['snat', 'dsr', 'hybrid'];

const MODE_CODES: Record<NodePortMode, number> = {
  snat: abi.LB_NODEPORT_MODE_SNAT,
  dsr: abi.LB_NODEPORT_MODE_DSR,
  hybrid: abi.LB_NODEPORT_MODE_HYBRID,
};

export function parseNodePortMode(value: string, what = 'nodeport mode'): NodePortMode {
  if (!(NODEPORT_MODES as readonly string[]).includes(value)) {
    throw new Error(`${what}: ${JSON.stringify(value)} is not one of ${NODEPORT_MODES.join(', ')}`);
  }
  return value as NodePortMode;
}

/** Write the mode into sluice_dsr_cfg (the data path reads it per new flow). */
export function writeNodePortMode(map: TypedMap<number, abi.LbDsrConfig>, mode: NodePortMode): void {
  map.set(0, { mode: MODE_CODES[mode] });
}

/** The mode the data path runs (sluice status). */
export function readNodePortMode(map: TypedMap<number, abi.LbDsrConfig>): NodePortMode {
  const code = map.get(0)?.mode ?? abi.LB_NODEPORT_MODE_SNAT;
  return (Object.keys(MODE_CODES) as NodePortMode[]).find((m) => MODE_CODES[m] === code) ?? 'snat';
}

/** The mode pinned under `bpffs` (sluice status); undefined: no TC program has been loaded there. */
export function pinnedNodePortMode(bpffs: string): NodePortMode | undefined {
  const pin = path.join(bpffs, abi.SLUICE_MAP_DSR_CFG);
  if (!fs.existsSync(pin)) return undefined;
  const map = BpfMap.fromPinned(pin);
  try {
    return readNodePortMode(new TypedMap(map, u32Codec, abi.lb_dsr_configCodec));
  } finally {
    map.close();
  }
}
