// Cluster and Local endpoint sets, exactly as kube-proxy's CategorizeEndpoints
// (pkg/proxy/topology.go) computes them, including topologyModeFromHints and
// the serving+terminating fallback. Node hints (PreferSameNode) are always
// honoured: that is the behaviour once the PreferSameTrafficDistribution
// feature gate is GA.

import type { EndpointInfo } from './endpoints';

export interface ServicePortPolicy {
  internalPolicyLocal: boolean;
  externalPolicyLocal: boolean;
  /** nodePort, external IPs or LB VIPs exist (BaseServicePortInfo.ExternallyAccessible). */
  externallyAccessible: boolean;
}

export interface EndpointSets {
  /** Usable endpoints for Cluster traffic policy (topology applied); undefined when never used. */
  cluster?: EndpointInfo[];
  /** Usable local endpoints for Local traffic policy; undefined when never used. */
  local?: EndpointInfo[];
  /** The cluster set came from the serving+terminating fallback. */
  clusterTerminating: boolean;
  /** The local set came from the serving+terminating fallback. */
  localTerminating: boolean;
  /** Usable endpoints exist anywhere in the cluster. */
  hasAnyEndpoints: boolean;
  topologyMode: TopologyMode;
}

export type TopologyMode = '' | 'PreferSameZone' | 'PreferSameNode';

/** UsesClusterEndpoints: Cluster ITP, or any external traffic at all (needed for the short-circuit). */
export function usesClusterEndpoints(p: ServicePortPolicy): boolean {
  return !p.internalPolicyLocal || p.externallyAccessible;
}

/** UsesLocalEndpoints. */
export function usesLocalEndpoints(p: ServicePortPolicy): boolean {
  return p.internalPolicyLocal || (p.externalPolicyLocal && p.externallyAccessible);
}

export function categorizeEndpoints(
  endpoints: readonly EndpointInfo[],
  policy: ServicePortPolicy,
  nodeName: string,
  zone: string,
): EndpointSets {
  const sets: EndpointSets = { clusterTerminating: false, localTerminating: false, hasAnyEndpoints: false, topologyMode: '' };
  if (endpoints.length === 0) return sets;

  if (usesClusterEndpoints(policy)) {
    const mode = topologyModeFromHints(endpoints, nodeName, zone);
    sets.topologyMode = mode;
    let cluster = endpoints.filter((ep) => ep.ready && availableForTopology(ep, mode, nodeName, zone));
    // No ready endpoint anywhere (topology was already dropped if none matched
    // this node): fall back to serving+terminating ones, ignoring topology.
    if (cluster.length === 0) {
      cluster = endpoints.filter((ep) => ep.serving && ep.terminating);
      sets.clusterTerminating = cluster.length > 0;
    }
    sets.cluster = cluster;
    if (cluster.length > 0) sets.hasAnyEndpoints = true;
  }

  if (!usesLocalEndpoints(policy)) return sets;

  let hasLocalReady = false;
  let hasLocalServingTerminating = false;
  for (const ep of endpoints) {
    if (ep.ready) {
      sets.hasAnyEndpoints = true;
      if (ep.local) hasLocalReady = true;
    } else if (ep.serving && ep.terminating) {
      sets.hasAnyEndpoints = true;
      if (ep.local) hasLocalServingTerminating = true;
    }
  }
  if (hasLocalReady) {
    sets.local = endpoints.filter((ep) => ep.local && ep.ready);
  } else if (hasLocalServingTerminating) {
    sets.local = endpoints.filter((ep) => ep.local && ep.serving && ep.terminating);
    sets.localTerminating = true;
  } else {
    sets.local = [];
  }
  return sets;
}

/**
 * topologyModeFromHints: PreferSameNode when every ready endpoint has a node
 * hint and one is for this node; else PreferSameZone when every ready endpoint
 * has a zone hint and one is for this node's zone; else '' (use all).
 */
export function topologyModeFromHints(endpoints: readonly EndpointInfo[], nodeName: string, zone: string): TopologyMode {
  let hasReady = false;
  let hasForNode = false;
  let allHaveNodeHints = true;
  let hasForZone = false;
  let allHaveZoneHints = true;
  for (const ep of endpoints) {
    if (!ep.ready) continue;
    hasReady = true;
    if (!ep.nodeHints) allHaveNodeHints = false;
    else if (ep.nodeHints.has(nodeName)) hasForNode = true;
    if (!ep.zoneHints) allHaveZoneHints = false;
    else if (ep.zoneHints.has(zone)) hasForZone = true;
  }
  if (!hasReady) return '';
  if (allHaveNodeHints && hasForNode) return 'PreferSameNode';
  if (allHaveZoneHints && hasForZone) return 'PreferSameZone';
  return '';
}

function availableForTopology(ep: EndpointInfo, mode: TopologyMode, nodeName: string, zone: string): boolean {
  switch (mode) {
    case '':
      return true;
    case 'PreferSameNode':
      return ep.nodeHints?.has(nodeName) ?? false;
    case 'PreferSameZone':
      return ep.zoneHints?.has(zone) ?? false;
  }
}
