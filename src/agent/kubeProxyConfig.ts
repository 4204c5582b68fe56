// kube-proxy's config file (KubeProxyConfiguration, kubeproxy.config.k8s.io/
// v1alpha1, as kubeadm writes it into the kube-proxy ConfigMap) read as the
// agent's settings: every field that means something here is mapped, every
// other field is named with the reason it is ignored (logged at start and
// listed in docs/kube-proxy-migration.md). Field names and defaults follow
// k8s.io/kube-proxy/config/v1alpha1 v0.34.
import { parseDefaultLbAlgorithm } from '../translate/algorithm';
import type { AgentConfig } from './config';
import { parseDurationMs } from './duration';

export const KUBE_PROXY_API_VERSION = 'kubeproxy.config.k8s.io/v1alpha1';
export const KUBE_PROXY_KIND = 'KubeProxyConfiguration';

export interface IgnoredField {
  field: string;
  why: string;
}

export interface KubeProxyMapping {
  config: Partial<AgentConfig>;
  ignored: IgnoredField[];
}

const NO_MASQUERADE = 'Sluice translates ClusterIP traffic at the socket or the pod veth; it never masquerades it, so there is no mark and no local-traffic detection';
const KERNEL_CONNTRACK = "a kernel nf_conntrack sysctl; Sluice's TC path keeps its own conntrack map (size: maxEntries)";
const IPVS_ONLY = 'IPVS mode only';

/** Fields with no meaning here, and why. A field not listed here and not mapped is an error (kube-proxy decodes strictly too). */
const IGNORED: Record<string, string> = {
  featureGates: 'no kube-proxy feature gate changes what Sluice does',
  'clientConnection.acceptContentTypes': 'the agent speaks JSON to the API server',
  'clientConnection.contentType': 'the agent speaks JSON to the API server',
  'clientConnection.qps': 'client-node has no client-side rate limiter; the agent makes one list and three watches',
  'clientConnection.burst': 'client-node has no client-side rate limiter; the agent makes one list and three watches',
  'logging.format': 'the agent always logs JSON (pino)',
  'logging.flushFrequency': 'pino writes each line at once',
  'logging.options': 'the agent always logs JSON (pino)',
  'logging.vmodule': 'no per-file verbosity; use logLevel',
  bindAddressHardFail: 'failing to bind the healthz or metrics address is always fatal in Sluice',
  enableProfiling: 'no pprof endpoint (Node.js: use --inspect)',
  showHiddenMetricsForVersion: 'Sluice has no hidden (deprecated) metrics',
  'iptables.masqueradeBit': NO_MASQUERADE,
  'iptables.masqueradeAll': NO_MASQUERADE,
  'nftables.masqueradeBit': NO_MASQUERADE,
  'nftables.masqueradeAll': NO_MASQUERADE,
  'ipvs.masqueradeBit': NO_MASQUERADE,
  'ipvs.excludeCIDRs': IPVS_ONLY,
  'ipvs.strictARP': IPVS_ONLY,
  'ipvs.tcpTimeout': IPVS_ONLY,
  'ipvs.tcpFinTimeout': IPVS_ONLY,
  'ipvs.udpTimeout': IPVS_ONLY,
  detectLocalMode: NO_MASQUERADE,
  'detectLocal.bridgeInterface': NO_MASQUERADE,
  'detectLocal.interfaceNamePrefix': NO_MASQUERADE,
  'detectLocal.clusterCIDRs': NO_MASQUERADE,
  clusterCIDR: `${NO_MASQUERADE}; externalTrafficPolicy's short-circuit follows the path (socket or pod veth = inside the cluster, external device = outside), not a source CIDR`,
  'conntrack.maxPerCore': KERNEL_CONNTRACK,
  'conntrack.min': KERNEL_CONNTRACK,
  'conntrack.tcpBeLiberal': `${KERNEL_CONNTRACK}; it does not track TCP windows, so it never drops out-of-window packets`,
  'conntrack.tcpCloseWaitTimeout': "the kernel's CLOSE_WAIT timeout (kube-proxy's default 1h is for half-closed sockets); Sluice's TC conntrack has one timeout after FIN/RST (conntrackTcpCloseWaitSeconds, default 10 s)",
  oomScoreAdj: 'set by the DaemonSet (the container runtime), not by the agent',
  configSyncPeriod: 'informers never resync in Sluice; the full sync every syncPeriod repairs drift from the maps',
  portRange: 'unused by kube-proxy too (the userspace proxy is gone)',
  windowsRunAsService: 'Windows only',
  'winkernel.networkName': 'Windows only',
  'winkernel.sourceVip': 'Windows only',
  'winkernel.enableDSR': 'Windows only',
  'winkernel.rootHnsEndpointName': 'Windows only',
  'winkernel.forwardHealthCheckVip': 'Windows only',
};

/** Fields mapped below (so a present field is neither ignored nor unknown). */
const MAPPED = new Set([
  'ipvs.scheduler',
  'apiVersion', 'kind', 'hostnameOverride', 'bindAddress', 'healthzBindAddress', 'metricsBindAddress', 'mode',
  'nodePortAddresses', 'clientConnection.kubeconfig', 'logging.verbosity',
  'iptables.syncPeriod', 'iptables.minSyncPeriod', 'iptables.localhostNodePorts',
  'nftables.syncPeriod', 'nftables.minSyncPeriod', 'ipvs.syncPeriod', 'ipvs.minSyncPeriod',
  'conntrack.tcpEstablishedTimeout', 'conntrack.udpTimeout', 'conntrack.udpStreamTimeout',
  // v1alpha2 moved these to the top level; accepted too.
  'syncPeriod', 'minSyncPeriod',
]);

/** Sections whose children are listed one by one above. */
const SECTIONS = new Set(['clientConnection', 'logging', 'iptables', 'nftables', 'ipvs', 'winkernel', 'detectLocal', 'conntrack']);

export function isKubeProxyConfiguration(doc: Record<string, unknown>): boolean {
  return doc.kind === KUBE_PROXY_KIND;
}

type Doc = Record<string, unknown>;

function fieldsOf(doc: Doc): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries(doc)) {
    if (SECTIONS.has(k) && v && typeof v === 'object' && !Array.isArray(v)) out.push(...Object.keys(v as Doc).map((c) => `${k}.${c}`));
    else out.push(k);
  }
  return out;
}

function get(doc: Doc, field: string): unknown {
  return field.split('.').reduce<unknown>((o, k) => (o && typeof o === 'object' ? (o as Doc)[k] : undefined), doc);
}

/** Worth reporting as ignored: kubeadm writes every field, most at their zero value. */
function isNonZero(v: unknown): boolean {
  if (!isSet(v) || v === false || v === 0 || v === '0s' || v === '0') return false;
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === 'object') return Object.values(v as Doc).some(isNonZero);
  return true;
}

function isSet(v: unknown): boolean {
  return v !== undefined && v !== null && v !== '';
}

/** A metav1.Duration field: a Go duration string (kube-proxy rejects bare numbers, so do we). */
function duration(doc: Doc, field: string, where: string): number | undefined {
  const v = get(doc, field);
  if (!isSet(v)) return undefined;
  if (typeof v !== 'string') throw new Error(`${where}: ${field}: ${JSON.stringify(v)} is not a duration string (e.g. "30s")`);
  return parseDurationMs(v, `${where}: ${field}`);
}

const seconds = (ms: number) => Math.ceil(ms / 1000);

export function fromKubeProxyConfiguration(doc: Doc, where: string): KubeProxyMapping {
  if (doc.apiVersion !== KUBE_PROXY_API_VERSION) {
    throw new Error(`${where}: ${KUBE_PROXY_KIND} apiVersion ${JSON.stringify(doc.apiVersion)} is not supported (use ${KUBE_PROXY_API_VERSION})`);
  }
  const ignored: IgnoredField[] = [];
  for (const field of fieldsOf(doc)) {
    if (MAPPED.has(field)) continue;
    const why = IGNORED[field];
    if (why === undefined) throw new Error(`${where}: unknown ${KUBE_PROXY_KIND} field ${JSON.stringify(field)}`);
    if (isNonZero(get(doc, field))) ignored.push({ field, why });
  }

  const config: Partial<AgentConfig> = {};
  const str = (field: string) => {
    const v = get(doc, field);
    if (!isSet(v)) return undefined;
    if (typeof v !== 'string') throw new Error(`${where}: ${field}: expected a string, got ${JSON.stringify(v)}`);
    return v;
  };
  const hostname = str('hostnameOverride');
  if (hostname) config.nodeName = hostname.trim().toLowerCase();
  const bind = str('bindAddress');
  if (bind && bind !== '0.0.0.0' && bind !== '::') config.nodeIP = bind;
  const healthz = get(doc, 'healthzBindAddress');
  if (typeof healthz === 'string') config.healthzBindAddress = healthz;
  const metrics = get(doc, 'metricsBindAddress');
  if (typeof metrics === 'string') config.metricsBindAddress = metrics;
  const kubeconfig = str('clientConnection.kubeconfig');
  if (kubeconfig) config.kubeconfig = kubeconfig;
  const verbosity = get(doc, 'logging.verbosity');
  if (typeof verbosity === 'number') config.logLevel = verbosity >= 4 ? 'debug' : 'info';

  // kube-proxy's default mode on Linux is iptables; the mode picks which
  // section's sync periods apply and whether localhost NodePorts exist.
  const mode = str('mode') ?? 'iptables';
  if (!['iptables', 'nftables', 'ipvs'].includes(mode)) throw new Error(`${where}: mode ${JSON.stringify(mode)}: expected iptables, nftables or ipvs`);
  const section = mode;
  // As kube-proxy's defaulting: a zero duration in the file means "unset"
  // (kubeadm writes 0s for the sections of other modes). A negative one
  // reaches validateConfig and stops the agent.
  const sync = duration(doc, 'syncPeriod', where) || duration(doc, `${section}.syncPeriod`, where);
  if (sync) config.syncPeriodSeconds = sync / 1000;
  const minSync = duration(doc, 'minSyncPeriod', where) || duration(doc, `${section}.minSyncPeriod`, where);
  if (minSync) config.minSyncPeriodMs = minSync;

  const npa = get(doc, 'nodePortAddresses');
  if (Array.isArray(npa)) config.nodePortAddresses = npa.map(String);
  else if (isSet(npa)) throw new Error(`${where}: nodePortAddresses: expected a list`);
  else if (mode === 'nftables') config.nodePortAddresses = ['primary']; // kube-proxy's nftables default

  // Localhost NodePorts: iptables mode only, on unless iptables.localhostNodePorts is false.
  const localhost = get(doc, 'iptables.localhostNodePorts');
  config.localhostNodePorts = mode === 'iptables' && localhost !== false;

  // IPVS mode's scheduler becomes the agent's default algorithm (docs/algorithms.md):
  // rr and sh map, the others are refused by name. kube-proxy's IPVS default
  // (empty) is rr. Other modes balance at random, as Sluice does by default.
  const scheduler = str('ipvs.scheduler');
  if (mode === 'ipvs' || scheduler) config.lbAlgorithm = parseDefaultLbAlgorithm(scheduler || 'rr', `${where}: ipvs.scheduler`);

  const established = duration(doc, 'conntrack.tcpEstablishedTimeout', where);
  if (established) config.conntrackTcpEstablishedSeconds = seconds(established);
  // One UDP timeout here: the longer of the two kube-proxy sets (streams are what a Service carries).
  const udp = Math.max(duration(doc, 'conntrack.udpTimeout', where) ?? 0, duration(doc, 'conntrack.udpStreamTimeout', where) ?? 0);
  if (udp > 0) config.conntrackUdpSeconds = seconds(udp);
  return { config, ignored };
}
