// Agent settings: defaults, then the --config YAML file (a ConfigMap in a
// cluster, like kube-proxy's KubeProxyConfiguration), then flags.
import * as fs from 'node:fs';
import * as os from 'node:os';
import YAML from 'yaml';
import { DEFAULT_BPFFS } from '../datapath/maps';
import { DEFAULT_MAX_ENDPOINTS_PER_SERVICE } from '../model/frontend';
import { parseSocketLbMode, type SocketLbMode } from '../datapath/sockConfig';
import { parseDefaultLbAlgorithm } from '../translate/algorithm';
import type { LbAlgorithm } from '../model/frontend';

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
  /** Map capacities, by map name (applied when the maps are first created). */
  maxEntries: Record<string, number>;
  /**
   * External devices for NodePort/ExternalIP/LoadBalancer traffic from
   * outside the node (TC). Empty: socket LB only. "auto": the default
   * route's device. Tests and the demo name veths in their own namespaces.
   */
  devices: string[];
  /** Source address for flows SNATed to remote backends; default: the first device's IPv4 address. */
  snatAddress?: string;
  /** Conntrack timeouts of the TC path, seconds (kube-proxy's conntrack settings). */
  conntrackTcpEstablishedSeconds: number;
  /** TCP flows until the handshake completes (SYN-stage), seconds. */
  conntrackTcpSynSeconds: number;
  conntrackTcpCloseWaitSeconds: number;
  conntrackUdpSeconds: number;
  /** Where healthCheckNodePort servers listen (kube-proxy: the nodePortAddresses; default all). */
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
   * How often the maps are compared with what the agent programmed and
   * repaired (seconds; 0 = never). Separate from syncPeriod: kube-proxy's
   * full sync is hourly. The comparison runs in chunks and yields.
   */
  driftRepairPeriodSeconds: number;
  // --- end h-watch ---
  // ---- h-alg: load-balancing algorithm (issue 15) ----
  /**
   * Algorithm of Services without a valid sluice.io/lb-algorithm annotation:
   * random (kube-proxy's), round-robin or source-hash; IPVS names rr and sh
   * are accepted (a KubeProxyConfiguration's ipvs.scheduler maps here).
   */
  lbAlgorithm: LbAlgorithm;
  // ---- end h-alg ----
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
    conntrackTcpEstablishedSeconds: 86400,
    conntrackTcpSynSeconds: 60, // a SYN flood's entries are reclaimable after a minute (Cilium: 60 s)
    conntrackTcpCloseWaitSeconds: 10, // FIN or RST seen: the SNAT port is free again soon (the kernel: 10 s for CLOSE)
    conntrackUdpSeconds: 30,
    healthCheckAddresses: ['0.0.0.0'],
    podVethPrograms: false,
    socketLB: 'all',
    destroyStaleSockets: true,
    destroyStaleTcpSockets: false,
    staleSocketNetns: ['/run/netns'],
    driftRepairPeriodSeconds: 3600, // h-watch
    lbAlgorithm: 'random', // h-alg
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
  'sync-period': { field: 'syncPeriodSeconds', parse: positiveInt('sync-period') },
  'min-sync-period-ms': { field: 'minSyncPeriodMs', parse: nonNegativeInt('min-sync-period-ms') },
  'drift-repair-period': { field: 'driftRepairPeriodSeconds', parse: nonNegativeInt('drift-repair-period') }, // h-watch
  devices: { field: 'devices', parse: (v) => v.split(',').filter(Boolean) },
  'snat-address': { field: 'snatAddress', parse: String },
  'conntrack-tcp-established': { field: 'conntrackTcpEstablishedSeconds', parse: positiveInt('conntrack-tcp-established') },
  'conntrack-tcp-syn': { field: 'conntrackTcpSynSeconds', parse: positiveInt('conntrack-tcp-syn') },
  'conntrack-tcp-close-wait': { field: 'conntrackTcpCloseWaitSeconds', parse: positiveInt('conntrack-tcp-close-wait') },
  'conntrack-udp': { field: 'conntrackUdpSeconds', parse: positiveInt('conntrack-udp') },
  'healthcheck-addresses': { field: 'healthCheckAddresses', parse: (v) => v.split(',').filter(Boolean) },
  'pod-veth-programs': { field: 'podVethPrograms', parse: (v) => v === 'true' },
  'socket-lb': { field: 'socketLB', parse: (v) => parseSocketLbMode(v, '--socket-lb') },
  'host-netns': { field: 'hostNetns', parse: String },
  'destroy-stale-sockets': { field: 'destroyStaleSockets', parse: (v) => v === 'true' },
  'destroy-stale-tcp-sockets': { field: 'destroyStaleTcpSockets', parse: (v) => v === 'true' },
  'stale-socket-netns': { field: 'staleSocketNetns', parse: (v) => v.split(',').filter(Boolean) },
  'lb-algorithm': { field: 'lbAlgorithm', parse: (v) => parseDefaultLbAlgorithm(v, '--lb-algorithm') }, // h-alg
};

export const AGENT_FLAGS = [...Object.keys(FLAGS), 'config'];

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
  let doc: unknown;
  try {
    doc = YAML.parse(fs.readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`config file ${path}: ${(err as Error).message}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new Error(`config file ${path}: expected a mapping of settings`);
  const known = new Set<string>(Object.keys(defaultConfig()).concat(['kubeconfig', 'k8sApiServer', 'snatAddress', 'hostNetns']));
  for (const key of Object.keys(doc)) {
    if (!known.has(key)) throw new Error(`config file ${path}: unknown setting ${JSON.stringify(key)}`);
  }
  return doc as Partial<AgentConfig>;
}

export function resolveConfig(flags: Map<string, string>): AgentConfig {
  const config: AgentConfig = defaultConfig();
  const file = flags.get('config');
  if (file) {
    Object.assign(config, loadConfigFile(file));
    config.socketLB = parseSocketLbMode(config.socketLB, `config file ${file}: socketLB`);
    config.lbAlgorithm = parseDefaultLbAlgorithm(String(config.lbAlgorithm), `config file ${file}: lbAlgorithm`); // h-alg
  }
  for (const [flag, value] of flags) {
    const spec = FLAGS[flag];
    if (spec) (config as unknown as Record<string, unknown>)[spec.field] = spec.parse(value);
  }
  return config;
}

export function parseHostPort(text: string, what: string): { host: string; port: number } {
  const i = text.lastIndexOf(':');
  const port = Number(text.slice(i + 1));
  if (i < 0 || !Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`${what}: expected HOST:PORT, got ${JSON.stringify(text)}`);
  return { host: text.slice(0, i).replace(/^\[|\]$/g, ''), port };
}
