// Sluice's side of the conformance check: `sluice services -o json` (read
// from a node's pinned maps) turned into the oracle's BackendSets shape, so
// compareBackendSets can put it next to what kube-proxy programmed.
//
// The scope mapping (docs/cluster-tier.md, "Scopes against kube-proxy's paths"):
//
//   Sluice frontend                     kube-proxy path it must equal
//   ----------------------------------  ---------------------------------------------
//   ClusterIP (scope external)          KUBE-SVC-* / KUBE-SVL-* (iTP Local), nft service-*/local-*
//   NodePort/ExternalIP/LB, no twin     KUBE-EXT-* -> KUBE-SVC-*   (eTP Cluster: one path for all)
//   ... eTP Local, scope "external"     KUBE-EXT-* unconditional jump -> KUBE-SVL-* (traffic from outside)
//   ... eTP Local, scope "internal"     KUBE-EXT-* "-s <cluster CIDR>" / "--src-type LOCAL"
//                                       short-circuit -> KUBE-SVC-* (pods and the node itself)
//
// So the *external* view takes every external-scope frontend, and the
// *internal* view takes the internal-scope twin where there is one and the
// (only) external-scope frontend otherwise.
import { emptySetMarker, frontendKey, type BackendSets, type FrontendKind } from './kubeProxyOracle';

/** One element of `sluice services -o json` (src/cli/inspect.ts ServiceView). */
export interface SluiceServiceView {
  frontend: string;
  address: string;
  port: number;
  protocol: string;
  scope: 'external' | 'internal' | string;
  flags: string[];
  affinityTimeoutSeconds?: number;
  backends: Array<{ address: string; port: number; flags: string[] }>;
  /** loadBalancerSourceRanges, when the frontend has some. */
  sourceRanges?: string[];
}

export type TrafficPath = 'external' | 'internal';

/** The frontend kind a Sluice frontend's flags name (exactly one kind flag per frontend). */
export function kindOfFlags(flags: string[]): FrontendKind {
  if (flags.includes('LoadBalancer')) return 'loadBalancerIP';
  if (flags.includes('ExternalIP')) return 'externalIP';
  if (flags.includes('NodePort')) return 'nodePort';
  if (flags.includes('ClusterIP')) return 'clusterIP';
  throw new Error(`sluice frontend with flags [${flags.join(',')}]: no frontend kind among them`);
}

function backendKey(b: { address: string; port: number }): string {
  return b.address.includes(':') ? `[${b.address}]:${b.port}` : `${b.address}:${b.port}`;
}

/** Sluice's frontends as the oracle's BackendSets, for one traffic path (see the mapping above). */
export function sluiceBackendSets(view: readonly SluiceServiceView[], path: TrafficPath = 'external', nodeAddresses: readonly string[] = []): BackendSets {
  const sets: BackendSets = { clusterIP: {}, externalIP: {}, loadBalancerIP: {}, nodePort: {} };
  const hasInternalTwin = new Set(view.filter((v) => v.scope === 'internal').map((v) => `${v.address}|${v.port}|${v.protocol}`));
  for (const v of view) {
    const twinned = hasInternalTwin.has(`${v.address}|${v.port}|${v.protocol}`);
    const wanted = path === 'external' ? v.scope === 'external' : v.scope === 'internal' || (v.scope === 'external' && !twinned);
    if (!wanted) continue;
    const kind = kindOfFlags(v.flags);
    const backends = [...new Set(v.backends.map(backendKey))].sort();
    // IPv4 NodePorts are one wildcard entry (0.0.0.0): it stands for every IPv4 NodePort address of the node, as kube-proxy's rules are read.
    const wildcard = kind === 'nodePort' && v.address === '0.0.0.0' && nodeAddresses.some((a) => !a.includes(':'));
    const addresses = wildcard ? nodeAddresses.filter((a) => !a.includes(':')) : [v.address];
    // The REJECT/DROP column (see emptySetMarker): LB_SVC_FLAG_DROP_NO_BACKEND says which.
    for (const address of addresses) {
      sets[kind][frontendKey(address, v.port, v.protocol)] = backends.length > 0 ? backends : emptySetMarker(v.flags.includes('drop-no-backend') ? 'drop' : 'reject');
    }
  }
  return sets;
}

/** Parse the CLI's JSON output, with an error that names the node when it is not what we expect. */
export function parseSluiceServices(json: string, where: string): SluiceServiceView[] {
  let doc: unknown;
  try {
    doc = JSON.parse(json);
  } catch (err) {
    throw new Error(`sluice services -o json on ${where}: not JSON (${(err as Error).message}): ${json.slice(0, 200)}`);
  }
  if (!Array.isArray(doc)) throw new Error(`sluice services -o json on ${where}: expected an array, got ${typeof doc}`);
  return doc as SluiceServiceView[];
}

/** Keep only the frontends `keep` accepts (e.g. those of one scenario's Services). */
export function filterSets(sets: BackendSets, keep: (kind: FrontendKind, frontend: string) => boolean): BackendSets {
  const out: BackendSets = { clusterIP: {}, externalIP: {}, loadBalancerIP: {}, nodePort: {} };
  for (const kind of Object.keys(sets) as FrontendKind[]) {
    for (const [frontend, backends] of Object.entries(sets[kind])) if (keep(kind, frontend)) out[kind][frontend] = backends;
  }
  return out;
}

/** Sluice's side of the source-ranges column: external-scope LoadBalancer frontends -> their sorted CIDRs. */
export function sluiceSourceRanges(view: readonly SluiceServiceView[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const v of view) {
    if (v.scope !== 'external' || kindOfFlags(v.flags) !== 'loadBalancerIP') continue;
    // The flag without a CIDR would let nothing through (the LPM finds no match): not the same as no ranges.
    const ranges = [...(v.sourceRanges ?? [])].sort();
    out[frontendKey(v.address, v.port, v.protocol)] = v.flags.includes('sourceRanges') && ranges.length === 0 ? ['(flag set, no CIDR: deny all)'] : ranges;
  }
  return out;
}
