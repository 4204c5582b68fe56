// From the translate step's model (src/model) to what the apply step writes
// (src/datapath FrontendSpec): map flags, byte-level protocol names, zone ids.
import * as abi from '../abi/generated';
import type { Frontend } from '../model/frontend';
import type { FrontendSpec } from '../datapath/programmer';
import type { ServiceName } from '../datapath/serviceNames';

const KIND_FLAG: Record<Frontend['kind'], number> = {
  ClusterIP: abi.LB_SVC_FLAG_CLUSTER_IP,
  NodePort: abi.LB_SVC_FLAG_NODEPORT,
  ExternalIP: abi.LB_SVC_FLAG_EXTERNAL_IP,
  LoadBalancer: abi.LB_SVC_FLAG_LOADBALANCER,
};

/** Zone names get small stable ids for the backend map's zone field. */
export class ZoneIds {
  private readonly ids = new Map<string, number>();
  id(zone: string | undefined): number {
    if (!zone) return 0;
    let id = this.ids.get(zone);
    if (id === undefined) this.ids.set(zone, (id = this.ids.size + 1));
    return id;
  }
}

export function frontendFlags(f: Frontend): number {
  let flags = KIND_FLAG[f.kind];
  if (f.externalLocal) flags |= abi.LB_SVC_FLAG_EXT_LOCAL;
  if (f.internalLocal) flags |= abi.LB_SVC_FLAG_INT_LOCAL;
  if (f.twoScopes) flags |= abi.LB_SVC_FLAG_TWO_SCOPES;
  if (f.affinityTimeoutSeconds > 0) flags |= abi.LB_SVC_FLAG_AFFINITY;
  if (f.sourceRanges.length > 0) flags |= abi.LB_SVC_FLAG_SOURCE_RANGE;
  if (f.backends.length === 0 && f.noBackendVerdict === 'drop') flags |= abi.LB_SVC_FLAG_DROP_NO_BACKEND;
  return flags;
}

/** The master entry's algorithm (LB_ALG_*) for the model's name. */
export const ALGORITHM_CODE: Record<Frontend['algorithm'], number> = {
  random: abi.LB_ALG_RANDOM,
  'round-robin': abi.LB_ALG_ROUND_ROBIN,
  'source-hash': abi.LB_ALG_SOURCE_HASH,
  'least-connection': abi.LB_ALG_LEAST_CONN,
  maglev: abi.LB_ALG_MAGLEV, // h-maglev
};

/** "namespace/name" and the port name, for the names map the CLI reads. */
function serviceNameOf(f: Frontend): ServiceName {
  const slash = f.service.indexOf('/');
  return { namespace: f.service.slice(0, slash), name: f.service.slice(slash + 1), portName: f.portName };
}

/** The address of every IPv4 NodePort frontend in the maps (bpf/lib/nodeport.h). */
export const NODEPORT_WILDCARD4 = '0.0.0.0';

/**
 * An IPv4 NodePort is written once per port and protocol, at the wildcard
 * address, not once per node address (translate lists one per address, as
 * kube-proxy's rules do): the data path looks the wildcard up for any
 * address in sluice_nodeip4, which holds exactly the addresses NodePorts
 * listen on. IPv6 NodePorts stay per address.
 */
export function nodePortWildcard(spec: FrontendSpec): FrontendSpec {
  if (!(spec.flags & abi.LB_SVC_FLAG_NODEPORT) || spec.address.includes(':')) return spec;
  return { ...spec, address: NODEPORT_WILDCARD4 };
}

/** Either family: IPv6 frontends go to the lb6_* maps (the programmer picks by address). */
export function toFrontendSpec(f: Frontend, zones: ZoneIds): FrontendSpec | undefined {
  const proto = f.proto === 'TCP' ? 'tcp' : 'udp';
  return {
    address: f.address,
    port: f.port,
    proto,
    scope: f.scope,
    flags: frontendFlags(f),
    affinityTimeout: f.affinityTimeoutSeconds,
    algorithm: ALGORITHM_CODE[f.algorithm],
    backends: f.backends.map((b) => ({
      address: b.address,
      port: b.port,
      proto,
      local: b.local,
      terminating: b.terminating,
      zone: zones.id(b.zone),
    })),
    sourceRanges: f.sourceRanges,
    owner: `Service ${f.service} port ${f.portName || f.port} (${f.kind})`,
    service: serviceNameOf(f),
  };
}
