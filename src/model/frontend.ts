// The desired state of the data path, as the translate step computes it from
// Services, EndpointSlices and the local Node. Diff and apply code against
// these types; the translate step (src/translate/) is their only producer.

export type L4Proto = 'TCP' | 'UDP';
export type FrontendKind = 'ClusterIP' | 'NodePort' | 'ExternalIP' | 'LoadBalancer';
export type Scope = 'external' | 'internal';
export type IPFamily = 'IPv4' | 'IPv6';
/** Backend selection (src/translate/algorithm.ts; sessionAffinity ClientIP wins over it). */
export type LbAlgorithm = 'random' | 'round-robin' | 'source-hash' | 'least-connection' | 'maglev';

export interface Backend {
  /** Pod IP in canonical text form (dotted IPv4, RFC 5952 IPv6). */
  address: string;
  /** Resolved target port (per EndpointSlice, so named targetPorts may differ per pod). */
  port: number;
  proto: L4Proto;
  /** endpoint.nodeName === this node. */
  local: boolean;
  /** In the set only through the serving+terminating fallback (no ready endpoint was usable). */
  terminating: boolean;
  zone?: string;
  nodeName?: string;
}

export interface Frontend {
  /** "namespace/name". */
  service: string;
  /** ServicePort name ('' when unnamed). */
  portName: string;
  kind: FrontendKind;
  family: IPFamily;
  /** ClusterIP / node address / external IP / LB ingress IP, canonical text form. */
  address: string;
  /** Service port, or nodePort for NodePort frontends. */
  port: number;
  proto: L4Proto;
  /** 'external' unless this is the internal-scope twin of an externalTrafficPolicy: Local frontend. */
  scope: Scope;
  /** Deduplicated by address:port, sorted by (address, port) numerically. Empty: see noBackendVerdict. */
  backends: Backend[];
  /**
   * What an empty backend set does (kube-proxy's filter verdicts):
   * 'reject' when the Service has no usable endpoint anywhere, 'drop' when
   * endpoints exist but a Local traffic policy forbids every one of them
   * from here (internalTrafficPolicy Local with endpoints only on other
   * nodes; the external scope of externalTrafficPolicy Local without a local
   * endpoint). Meaningless while backends is not empty ('reject').
   */
  noBackendVerdict: 'reject' | 'drop';
  /** externalTrafficPolicy: Local applies to this frontend (external scope of NodePort/ExternalIP/LB). */
  externalLocal: boolean;
  /** internalTrafficPolicy: Local applies to this frontend (ClusterIP frontends only). */
  internalLocal: boolean;
  /** An internal-scope twin exists for this frontend (set on both of the pair). */
  twoScopes: boolean;
  /** sessionAffinity ClientIP timeout in seconds; 0 = no affinity. */
  affinityTimeoutSeconds: number;
  /** loadBalancerSourceRanges of this frontend's family (LoadBalancer frontends only), canonical CIDRs. */
  sourceRanges: string[];
  /** How a new connection or flow picks among the backends (annotation sluice.io/lb-algorithm, else the agent default). */
  algorithm: LbAlgorithm;
}

/** An externalTrafficPolicy: Local LoadBalancer Service with a healthCheckNodePort. */
export interface HealthCheckService {
  service: string;
  nodePort: number;
  /** Local *ready* endpoints, counted by unique IP (kube-proxy's LocalReadyEndpoints). */
  localEndpoints: number;
}

export interface TranslateProblem {
  /** "Service ns/name" or "EndpointSlice ns/name". */
  object: string;
  /** Metric label: 'invalid_port', 'invalid_ip', 'invalid_cluster_ip', 'invalid_protocol',
   *  'unsupported_protocol', 'invalid_source_range', 'invalid_affinity_timeout',
   *  'too_many_endpoints', 'frontend_conflict', 'unknown_lb_algorithm'. */
  reason: string;
  message: string;
}

export interface ServiceTranslation {
  service: string;
  frontends: Frontend[];
  healthCheck?: HealthCheckService;
  problems: TranslateProblem[];
  /** Set when the Service is not proxied at all (headless, ExternalName, ...); see shouldSkipService. */
  skipped?: string;
}

export interface NodeContext {
  name: string;
  /** topology.kubernetes.io/zone label of the node. */
  zone?: string;
  /** Node addresses that NodePorts listen on (canonical text form). */
  addresses: string[];
}

export interface TranslateOptions {
  /** CIDRs, kube-proxy's --nodeport-addresses; the keyword 'primary' selects the node's primary IPs. */
  nodePortAddresses?: string[];
  /** NodePorts on 127.0.0.1 (kube-proxy's iptables.localhostNodePorts); default off here. */
  localhostNodePorts?: boolean;
  /** The node's primary IP of its family, over the Node object's (kube-proxy's bindAddress). */
  nodeIP?: string;
  /**
   * A map-capacity guard per frontend, not a Service limit (kube-proxy has
   * none): a frontend with more backends keeps the first this many (in
   * address order) and gets a 'too_many_endpoints' problem. At most
   * MAX_BACKENDS_PER_FRONTEND, the master entry's u16 slot count.
   */
  maxEndpointsPerService: number;
  /** Families this node programs; default ['IPv4']. */
  ipFamilies?: IPFamily[];
  /** Algorithm of Services without a valid sluice.io/lb-algorithm annotation; default 'random'. */
  defaultLbAlgorithm?: LbAlgorithm;
}

/** lb4_service.count is a u16: slots 1..65535. */
export const MAX_BACKENDS_PER_FRONTEND = 65535;
export const DEFAULT_MAX_ENDPOINTS_PER_SERVICE = MAX_BACKENDS_PER_FRONTEND;
/** kube-apiserver's default for sessionAffinityConfig.clientIP.timeoutSeconds. */
export const DEFAULT_AFFINITY_TIMEOUT_SECONDS = 10800;
