// Agent settings: defaults, then the --config YAML file (a ConfigMap in a
// cluster, like kube-proxy's KubeProxyConfiguration), then flags.
import { isIP } from 'node:net';
import * as fs from 'node:fs';
import * as os from 'node:os';
import YAML from 'yaml';
import { DEFAULT_BPFFS } from '../datapath/maps';
import { MAP_POLICIES } from '../datapath/migrate';
import { DEFAULT_MAX_ENDPOINTS_PER_SERVICE } from '../model/frontend';
import { parseSocketLbMode, type SocketLbMode } from '../datapath/sockConfig';
import { parseDurationFlagMs } from './duration';
import { fromKubeProxyConfiguration, isKubeProxyConfiguration, type IgnoredField } from './kubeProxyConfig';
import { parseDefaultLbAlgorithm } from '../translate/algorithm';
import { DEFAULT_MAGLEV_TABLE_SIZE, checkMaglevTableSize } from '../datapath/maglevTable';
import type { LbAlgorithm } from '../model/frontend';
import { parseXdpMode, type XdpModeSetting } from '../datapath/xdp/xdp';
import { parseNodePortMode, type NodePortMode } from '../datapath/tc/config';
import type { Ipv6Maps } from './mapSizing';

export interface AgentConfig {
  kubeconfig?: string; // absent: in-cluster config
  /** The API server's real address for kube-proxy-free clusters (host:port). */
  k8sApiServer?: string;
  nodeName: string;
  cgroupPath: string; // where the socket hooks attach
  bpffs: string;
  healthzBindAddress: string;
  metricsBindAddress: string;
  logLevel: string;
  nodePortAddresses: string[];
  maxEndpointsPerService: number;
  /** Periodic sync: refreshes health and retries what is pending (kube-proxy's syncPeriod). */
  syncPeriodSeconds: number;
  /** Shortest interval between two syncs; bursts within it are coalesced (kube-proxy's minSyncPeriod). */
  minSyncPeriodMs: number;
  /**
   * Map capacities, by map name. A change on a running node migrates the
   * pinned map to the new size, entries carried (docs/upgrade.md).
   */
  maxEntries: Record<string, number>;
  /**
   * External devices for NodePort/ExternalIP/LoadBalancer traffic from
   * outside the node (TC). Empty: socket LB only. "auto": the default
   * route's device. Tests and the demo name veths in their own namespaces.
   */
  devices: string[];
  /** Source address for flows SNATed to remote backends; default: the first device's IPv4 address. */
  snatAddress?: string;
  /**
   * XDP in front of TC on the external devices (issue 17; docs/xdp.md):
   * native (driver), generic (after skb allocation, any device), auto
   * (native where the driver supports it, else generic) or off (default).
   */
  xdpMode: XdpModeSetting;
  /**
   * How NodePort/ExternalIP/LoadBalancer flows to backends on other nodes
   * leave (issue 17 item 2; docs/dsr.md): snat (default), dsr (IPIP, IPv6: ip6ip6, to the
   * backend, which answers the client directly), hybrid (DSR for TCP, SNAT for UDP).
   */
  nodePortMode: NodePortMode;
  /** Conntrack timeouts of the TC path, seconds (kube-proxy's conntrack settings). */
  conntrackTcpEstablishedSeconds: number;
  /** TCP flows until the handshake completes (SYN-stage), seconds. */
  conntrackTcpSynSeconds: number;
  conntrackTcpCloseWaitSeconds: number;
  conntrackUdpSeconds: number;
  /** Where healthCheckNodePort servers listen (kube-proxy: the nodePortAddresses; default all, both families). */
  healthCheckAddresses: string[];
  /**
   * Pin the pod-veth programs for the Sluice CNI plugin (per-packet ClusterIP
   * for pods that bypass the socket LB). Off by default: it creates the
   * conntrack map (36 MiB preallocated) that a socket-LB-only node never uses.
   */
  podVethPrograms: boolean;
  // ---- socket path (issue 10) ----
  /** Which sockets the socket LB translates: all, hostNamespaceOnly or podNamespacesOnly. */
  socketLB: SocketLbMode;
  /** The network namespace whose sockets are the host's (a path like /run/netns/NAME); default: the agent's own. */
  hostNetns?: string;
  // ---- stale sockets (issue 13.1; src/datapath/sockTerm.ts) ----
  /** Destroy connected UDP sockets the socket LB sent to a backend that was deleted (kernel >= 6.5). */
  destroyStaleSockets: boolean;
  /** Also destroy TCP connections to deleted backends. Off, like kube-proxy, which leaves them to time out. */
  destroyStaleTcpSockets: boolean;
  /** Pod network namespaces walked besides the agent's own: files, or directories of them (needs CAP_SYS_ADMIN). */
  staleSocketNetns: string[];
  // ---- end of stale sockets ----
  // --- h-watch: drift repair (issue 12) ---
  /**
   * How often a full sync runs (seconds; 0 = never): every Service
   * translated again, then the maps compared with what the agent programmed
   * and repaired. Separate from syncPeriod (partial syncs): kube-proxy's full
   * sync is hourly. The comparison runs in chunks and yields.
   */
  driftRepairPeriodSeconds: number;
  // --- end h-watch ---
  // ---- kube-proxy parity (issue 11) ----
  /** The node's primary IP when the Node object has none yet (kube-proxy's bindAddress). */
  nodeIP?: string;
  /**
   * NodePorts on 127.0.0.1 as kube-proxy's iptables mode serves them (its
   * default; iptables.localhostNodePorts false or nftables mode: never).
   * Only when nodePortAddresses is unset or covers 127.0.0.0/8.
   */
  localhostNodePorts: boolean;
  // ---- h-alg: load-balancing algorithm (issue 15) ----
  /**
   * Algorithm of Services without a valid sluice.io/lb-algorithm annotation:
   * random (kube-proxy's), round-robin or source-hash; IPVS names rr and sh
   * are accepted (a KubeProxyConfiguration's ipvs.scheduler maps here).
   */
  lbAlgorithm: LbAlgorithm;
  // ---- end h-alg ----
  /** h-maglev: Maglev table size M (a prime; docs/algorithms.md). */
  maglevTableSize: number;
  /**
   * Capacity of the IPv6 tables (src/agent/mapSizing.ts): auto (small unless
   * this node's Node object has an IPv6 pod CIDR or address), small or full.
   */
  ipv6Maps: Ipv6Maps;
}

export function defaultConfig(): AgentConfig {
  return {
    nodeName: process.env.NODE_NAME ?? os.hostname(),
    cgroupPath: '/sys/fs/cgroup',
    bpffs: DEFAULT_BPFFS,
    healthzBindAddress: '0.0.0.0:10256',
    metricsBindAddress: '127.0.0.1:10249',
    logLevel: 'info',
    nodePortAddresses: [],
    maxEndpointsPerService: DEFAULT_MAX_ENDPOINTS_PER_SERVICE,
    syncPeriodSeconds: 30,
    minSyncPeriodMs: 0,
    maxEntries: {},
    devices: [],
    xdpMode: 'off',
    nodePortMode: 'snat',
    conntrackTcpEstablishedSeconds: 86400,
    conntrackTcpSynSeconds: 60, // a SYN flood's entries are reclaimable after a minute (Cilium: 60 s)
    conntrackTcpCloseWaitSeconds: 10, // FIN or RST seen: the SNAT port is free again soon (the kernel: 10 s for CLOSE)
    conntrackUdpSeconds: 30,
    healthCheckAddresses: ['0.0.0.0', '::'], // both families, IPv6 with IPV6_V6ONLY (src/datapath/tc/healthcheck.ts)
    podVethPrograms: false,
    socketLB: 'all',
    destroyStaleSockets: true,
    destroyStaleTcpSockets: false,
    staleSocketNetns: ['/run/netns'],
    driftRepairPeriodSeconds: 3600, // h-watch
    localhostNodePorts: true,
    lbAlgorithm: 'random', // h-alg
    maglevTableSize: DEFAULT_MAGLEV_TABLE_SIZE, // h-maglev
    ipv6Maps: 'auto',
  };
}

/** Flag name -> config field, and how to read its value. */
const FLAGS: Record<string, { field: keyof AgentConfig; parse: (v: string) => unknown }> = {
  kubeconfig: { field: 'kubeconfig', parse: String },
  'k8s-api-server': { field: 'k8sApiServer', parse: String },
  'node-name': { field: 'nodeName', parse: String },
  'cgroup-path': { field: 'cgroupPath', parse: String },
  bpffs: { field: 'bpffs', parse: String },
  'healthz-bind-address': { field: 'healthzBindAddress', parse: String },
  'metrics-bind-address': { field: 'metricsBindAddress', parse: String },
  'log-level': { field: 'logLevel', parse: String },
  'nodeport-addresses': { field: 'nodePortAddresses', parse: (v) => v.split(',').filter(Boolean) },
  'max-endpoints-per-service': { field: 'maxEndpointsPerService', parse: positiveInt('max-endpoints-per-service') },
  'sync-period': { field: 'syncPeriodSeconds', parse: (v) => durationFlag('sync-period', v, 1000) / 1000 },
  'min-sync-period-ms': { field: 'minSyncPeriodMs', parse: nonNegativeInt('min-sync-period-ms') },
  'drift-repair-period': { field: 'driftRepairPeriodSeconds', parse: nonNegativeInt('drift-repair-period') }, // h-watch
  devices: { field: 'devices', parse: (v) => v.split(',').filter(Boolean) },
  'snat-address': { field: 'snatAddress', parse: String },
  'xdp-mode': { field: 'xdpMode', parse: (v) => parseXdpMode(v, '--xdp-mode') },
  'nodeport-mode': { field: 'nodePortMode', parse: (v) => parseNodePortMode(v, '--nodeport-mode') },
  'conntrack-tcp-established': { field: 'conntrackTcpEstablishedSeconds', parse: (v) => durationSeconds('conntrack-tcp-established', v) },
  'conntrack-tcp-close-wait': { field: 'conntrackTcpCloseWaitSeconds', parse: (v) => durationSeconds('conntrack-tcp-close-wait', v) },
  'conntrack-udp': { field: 'conntrackUdpSeconds', parse: (v) => durationSeconds('conntrack-udp', v) },
  'healthcheck-addresses': { field: 'healthCheckAddresses', parse: (v) => v.split(',').filter(Boolean) },
  'pod-veth-programs': { field: 'podVethPrograms', parse: (v) => v === 'true' },
  'conntrack-tcp-syn': { field: 'conntrackTcpSynSeconds', parse: (v) => durationSeconds('conntrack-tcp-syn', v) },
  'socket-lb': { field: 'socketLB', parse: (v) => parseSocketLbMode(v, '--socket-lb') },
  'host-netns': { field: 'hostNetns', parse: String },
  'destroy-stale-sockets': { field: 'destroyStaleSockets', parse: (v) => v === 'true' },
  'destroy-stale-tcp-sockets': { field: 'destroyStaleTcpSockets', parse: (v) => v === 'true' },
  'stale-socket-netns': { field: 'staleSocketNetns', parse: (v) => v.split(',').filter(Boolean) },
  // ---- kube-proxy's own flag names (issue 11); durations in Go syntax ----
  'hostname-override': { field: 'nodeName', parse: (v) => v.trim().toLowerCase() },
  'bind-address': { field: 'nodeIP', parse: (v) => (v === '0.0.0.0' || v === '::' ? undefined : v) },
  'min-sync-period': { field: 'minSyncPeriodMs', parse: (v) => durationFlag('min-sync-period', v, 1000) },
  'iptables-localhost-nodeports': { field: 'localhostNodePorts', parse: (v) => v === 'true' },
  'conntrack-tcp-timeout-established': { field: 'conntrackTcpEstablishedSeconds', parse: (v) => durationSeconds('conntrack-tcp-timeout-established', v) },
  'conntrack-udp-timeout': { field: 'conntrackUdpSeconds', parse: (v) => durationSeconds('conntrack-udp-timeout', v) },
  'conntrack-udp-timeout-stream': { field: 'conntrackUdpSeconds', parse: (v) => durationSeconds('conntrack-udp-timeout-stream', v) },
  'iptables-sync-period': { field: 'syncPeriodSeconds', parse: (v) => durationFlag('iptables-sync-period', v, 1000) / 1000 },
  'iptables-min-sync-period': { field: 'minSyncPeriodMs', parse: (v) => durationFlag('iptables-min-sync-period', v, 1000) },
  master: { field: 'k8sApiServer', parse: String },
  'lb-algorithm': { field: 'lbAlgorithm', parse: (v) => parseDefaultLbAlgorithm(v, '--lb-algorithm') }, // h-alg
  'maglev-table-size': { field: 'maglevTableSize', parse: (v) => checkMaglevTableSize(Number(v), '--maglev-table-size') }, // h-maglev
  'ipv6-maps': { field: 'ipv6Maps', parse: (v) => parseIpv6Maps(v, '--ipv6-maps') },
};

function parseIpv6Maps(v: string, what: string): Ipv6Maps {
  if (v === 'auto' || v === 'small' || v === 'full') return v;
  throw new Error(`invalid config: ${what} ${JSON.stringify(v)}: must be auto, small or full`);
}

/** A duration flag: Go syntax (30s, 1m, 500ms) or, as before, a bare number of `bareUnitMs`. */
function durationFlag(name: string, v: string, bareUnitMs: number): number {
  return parseDurationFlagMs(v, `--${name}`, bareUnitMs);
}

/** Whole seconds (rounded up) of a duration flag; bare numbers are seconds. */
function durationSeconds(name: string, v: string): number {
  return Math.ceil(durationFlag(name, v, 1000) / 1000);
}

export const AGENT_FLAGS = [...Object.keys(FLAGS), 'config'];

/**
 * Settings that would make the agent spin or never sync are startup errors
 * naming the setting (kube-proxy's validation: syncPeriod > 0,
 * minSyncPeriod >= 0), never a hot loop.
 */
export function validateConfig(c: AgentConfig): void {
  const bad = (what: string, v: unknown, rule: string) => {
    throw new Error(`invalid config: ${what} ${JSON.stringify(v)}: ${rule}`);
  };
  const finite = (v: unknown) => typeof v === 'number' && Number.isFinite(v);
  if (!finite(c.syncPeriodSeconds) || c.syncPeriodSeconds <= 0) bad('syncPeriod (--sync-period)', c.syncPeriodSeconds, 'must be greater than 0 (e.g. 30s)');
  if (!finite(c.minSyncPeriodMs) || c.minSyncPeriodMs < 0) bad('minSyncPeriod (--min-sync-period)', c.minSyncPeriodMs, 'must be 0 or more');
  for (const f of ['conntrackTcpEstablishedSeconds', 'conntrackTcpCloseWaitSeconds', 'conntrackUdpSeconds', 'maxEndpointsPerService'] as const) {
    if (!finite(c[f]) || c[f] <= 0) bad(f, c[f], 'must be greater than 0');
  }
  // ---- live map migration (issue 13.4): a capacity the maps cannot take is refused here, not at load ----
  if (typeof c.maxEntries !== 'object' || c.maxEntries === null || Array.isArray(c.maxEntries)) bad('maxEntries', c.maxEntries, 'must be a map of BPF map name to capacity');
  for (const [name, n] of Object.entries(c.maxEntries)) {
    if (!(name in MAP_POLICIES)) bad(`maxEntries.${name}`, n, `not a Sluice map (known: ${Object.keys(MAP_POLICIES).join(', ')})`);
    if (!Number.isInteger(n) || n < 1 || n > 0x7fffffff) bad(`maxEntries.${name}`, n, 'must be a whole number from 1 to 2147483647');
  }
  if (!c.nodeName) bad('nodeName (--hostname-override, --node-name, NODE_NAME)', c.nodeName, 'must not be empty');
  if (!Array.isArray(c.nodePortAddresses)) bad('nodePortAddresses', c.nodePortAddresses, 'must be a list');
  if (c.nodePortAddresses.includes('primary') && c.nodePortAddresses.length > 1) {
    bad('nodePortAddresses', c.nodePortAddresses, "'primary' cannot be combined with CIDRs (as in kube-proxy)");
  }
  if (c.snatAddress !== undefined) {
    try {
      snatAddresses(c.snatAddress);
    } catch (err) {
      bad('snatAddress (--snat-address)', c.snatAddress, (err as Error).message);
    }
  }
}

/**
 * --snat-address per family: "198.18.0.1", "fd00::1" or "198.18.0.1,fd00::1"
 * (at most one address of each family). A family left out is taken from the
 * first external device (src/agent/northSouth.ts).
 */
export function snatAddresses(text: string | undefined): { v4?: string; v6?: string } {
  const out: { v4?: string; v6?: string } = {};
  for (const part of (text ?? '').split(',').map((p) => p.trim()).filter(Boolean)) {
    const family = isIP(part);
    if (family === 0) throw new Error(`${JSON.stringify(part)} is not an IP address`);
    const key = family === 4 ? 'v4' : 'v6';
    if (out[key]) throw new Error(`two IPv${family} addresses (${out[key]}, ${part}): give at most one per family`);
    out[key] = part;
  }
  return out;
}

function positiveInt(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n <= 0) throw new Error(`--${name}: ${JSON.stringify(v)} is not a positive integer`);
    return n;
  };
}

function nonNegativeInt(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--${name}: ${JSON.stringify(v)} is not a non-negative integer`);
    return n;
  };
}

/** The YAML file uses the config field names (camelCase), like kube-proxy's. */
export function loadConfigFile(path: string): Partial<AgentConfig> {
  return readConfigFile(path).config;
}

/**
 * Either Sluice's own settings, or kube-proxy's KubeProxyConfiguration
 * (mapped; `ignored` names the fields that mean nothing here, and why).
 */
export function readConfigFile(path: string): { config: Partial<AgentConfig>; ignored: IgnoredField[] } {
  let doc: unknown;
  try {
    doc = YAML.parse(fs.readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`config file ${path}: ${(err as Error).message}`);
  }
  if (doc === null || doc === undefined) return { config: {}, ignored: [] };
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new Error(`config file ${path}: expected a mapping of settings`);
  if (isKubeProxyConfiguration(doc as Record<string, unknown>)) return fromKubeProxyConfiguration(doc as Record<string, unknown>, `config file ${path}`);
  const known = new Set<string>(Object.keys(defaultConfig()).concat(['kubeconfig', 'k8sApiServer', 'snatAddress', 'nodeIP', 'hostNetns']));
  for (const key of Object.keys(doc)) {
    if (!known.has(key)) throw new Error(`config file ${path}: unknown setting ${JSON.stringify(key)}`);
  }
  return { config: doc as Partial<AgentConfig>, ignored: [] };
}

export function resolveConfig(flags: Map<string, string>): AgentConfig {
  return resolveConfigWithNotes(flags).config;
}

/** Defaults, then the file, then flags; validated. `ignored`: config-file fields without meaning here. */
export function resolveConfigWithNotes(flags: Map<string, string>): { config: AgentConfig; ignored: IgnoredField[] } {
  const config: AgentConfig = defaultConfig();
  const file = flags.get('config');
  let ignored: IgnoredField[] = [];
  if (file) {
    const read = readConfigFile(file);
    Object.assign(config, read.config);
    ignored = read.ignored;
    config.socketLB = parseSocketLbMode(config.socketLB, `config file ${file}: socketLB`);
    config.lbAlgorithm = parseDefaultLbAlgorithm(String(config.lbAlgorithm), `config file ${file}: lbAlgorithm`); // h-alg
    config.maglevTableSize = checkMaglevTableSize(Number(config.maglevTableSize), `config file ${file}: maglevTableSize`); // h-maglev
    config.xdpMode = parseXdpMode(String(config.xdpMode), `config file ${file}: xdpMode`); // h-xdp
    config.nodePortMode = parseNodePortMode(String(config.nodePortMode), `config file ${file}: nodePortMode`); // h-dsr
    config.ipv6Maps = parseIpv6Maps(String(config.ipv6Maps), `config file ${file}: ipv6Maps`);
  }
  for (const [flag, value] of flags) {
    const spec = FLAGS[flag];
    if (spec) (config as unknown as Record<string, unknown>)[spec.field] = spec.parse(value);
  }
  validateConfig(config);
  return { config, ignored };
}

export function parseHostPort(text: string, what: string): { host: string; port: number } {
  const i = text.lastIndexOf(':');
  const port = Number(text.slice(i + 1));
  if (i < 0 || !Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`${what}: expected HOST:PORT, got ${JSON.stringify(text)}`);
  return { host: text.slice(0, i).replace(/^\[|\]$/g, ''), port };
}
