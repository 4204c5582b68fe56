// EndpointSlices → endpoints per (family, port name, protocol), with the
// semantics of kube-proxy's EndpointSliceCache (pkg/proxy/endpointslicecache.go,
// endpointInfoByServicePort + addEndpoints) and EndpointsChangeTracker
// (pkg/proxy/endpointschangetracker.go, addressType filter).

import type { V1EndpointSlice } from '@kubernetes/client-node';
import type { IPFamily, L4Proto, TranslateProblem } from '../model/frontend';
import { HEX_BYTE, ipSortKey, parseIP } from './ip';
import { objectKey, shouldSkipEndpointSlice } from './skip';

export interface EndpointInfo {
  /** Canonical IP text. */
  address: string;
  /** Sorts numerically under plain string comparison (see ipSortKey). */
  sortKey: string;
  port: number;
  proto: L4Proto;
  local: boolean;
  /** conditions.ready, nil = true. */
  ready: boolean;
  /** conditions.serving, nil = true. */
  serving: boolean;
  /** conditions.terminating, nil = false. */
  terminating: boolean;
  zone?: string;
  nodeName?: string;
  /** hints.forZones names; undefined when there are none. */
  zoneHints?: Set<string>;
  /** hints.forNodes names; undefined when there are none. */
  nodeHints?: Set<string>;
}

/** Key of one service port's endpoint set, as kube-proxy's ServicePortName (+ family). */
export function servicePortKey(family: IPFamily, portName: string, proto: L4Proto): string {
  return `${family}|${proto}|${portName}`;
}

/** servicePortKey → (ip:port → endpoint). */
export type EndpointsByServicePort = Map<string, Map<string, EndpointInfo>>;

/**
 * Collect the endpoints of one Service from its EndpointSlices.
 *
 * - Only slices whose addressType is a family we program are read (one
 *   EndpointsChangeTracker per family in kube-proxy).
 * - A slice port is matched to the Service port by *name* and protocol, and
 *   gives the target port number for the endpoints of that slice only: that is
 *   how a named targetPort resolves to different numbers for different pods.
 * - Only the first address of an endpoint counts (kube-proxy ignores the rest).
 * - An ip:port seen in two slices is kept once; a non-terminating copy replaces
 *   a terminating one (addEndpoints: `!exists || !terminating`). kube-proxy
 *   walks slices in Go map order; we walk them by name so the result is stable.
 */
export function collectEndpoints(
  slices: readonly V1EndpointSlice[],
  nodeName: string,
  families: ReadonlySet<IPFamily>,
  problems: TranslateProblem[],
): EndpointsByServicePort {
  const out: EndpointsByServicePort = new Map();
  const ordered = slices.length < 2 ? slices : [...slices].sort(bySliceName);
  for (const slice of ordered) {
    if (shouldSkipEndpointSlice(slice)) continue;
    const family = slice.addressType as IPFamily;
    if (!families.has(family)) continue;
    const object = `EndpointSlice ${objectKey(slice)}`;

    const endpoints = parseSliceEndpoints(slice, family, nodeName, object, problems);
    for (const port of slice.ports ?? []) {
      // The API server defaults name to "" and protocol to TCP; objects written
      // by hand and handed to us without defaulting get the same treatment.
      const name = port.name ?? '';
      const proto = port.protocol ?? 'TCP';
      if (port.port === undefined || port.port === null) continue; // "all ports": kube-proxy skips it too
      if (!Number.isInteger(port.port) || port.port < 1 || port.port > 65535) {
        problems.push({ object, reason: 'invalid_port', message: `${object}: port "${name}" has invalid number ${port.port}; port ignored` });
        continue;
      }
      if (proto !== 'TCP' && proto !== 'UDP') continue; // SCTP and unknown: no Service port of ours can match
      const key = servicePortKey(family, name, proto);
      let set = out.get(key);
      if (!set) out.set(key, (set = new Map()));
      for (const ep of endpoints) {
        // Spelled out (not a spread) so every EndpointInfo has one hidden class.
        const info: EndpointInfo = {
          address: ep.address,
          sortKey: ep.sortKey,
          port: port.port,
          proto,
          local: ep.local,
          ready: ep.ready,
          serving: ep.serving,
          terminating: ep.terminating,
          zone: ep.zone,
          nodeName: ep.nodeName,
          zoneHints: ep.zoneHints,
          nodeHints: ep.nodeHints,
        };
        const id = `${info.address}|${info.port}`;
        if (!set.has(id) || !info.terminating) set.set(id, info);
      }
    }
  }
  return out;
}

/** Plain code-unit order, not localeCompare: the result must not depend on the process locale. */
function bySliceName(a: V1EndpointSlice, b: V1EndpointSlice): number {
  const ka = objectKey(a);
  const kb = objectKey(b);
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

type PortlessEndpoint = Omit<EndpointInfo, 'port' | 'proto'>;

/** One packed IPv4 endpoint: its address as a number, its conditions (undefined = absent), node and zone names. */
export type PackedIPv4Visitor = (
  address: number,
  ready: boolean | undefined,
  serving: boolean | undefined,
  terminating: boolean | undefined,
  nodeName: string | undefined,
  zone: string | undefined,
) => void;

/**
 * A slice that keeps its IPv4 endpoints as integers (the agent's slim
 * records, src/agent/slim.ts: canonical addresses, one address each, no
 * hints). Read through this, the translation builds no endpoint objects and
 * parses no address text again: every full sync translates every Service,
 * and unpacking then parsing 100k endpoints (10k x 10) was a large part of it.
 */
export interface PackedIPv4Endpoints {
  forEachPackedIPv4(visit: PackedIPv4Visitor): void;
}

function isPackedIPv4(slice: V1EndpointSlice): slice is V1EndpointSlice & PackedIPv4Endpoints {
  return typeof (slice as Partial<PackedIPv4Endpoints>).forEachPackedIPv4 === 'function';
}

function ipv4Text(a: number): string {
  return `${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}`;
}

/** ipSortKey of the IPv4 address `a` (the family digit, then the four bytes in hex). */
function ipv4SortKey(a: number): string {
  return '4' + HEX_BYTE[a >>> 24]! + HEX_BYTE[(a >>> 16) & 255]! + HEX_BYTE[(a >>> 8) & 255]! + HEX_BYTE[a & 255]!;
}

/** parseSliceEndpoints for a packed IPv4 slice: the same endpoints, read from the integers. */
function packedSliceEndpoints(slice: PackedIPv4Endpoints, nodeName: string): PortlessEndpoint[] {
  const out: PortlessEndpoint[] = [];
  slice.forEachPackedIPv4((address, ready, serving, terminating, epNode, zone) => {
    // The same fields in the same order as parseSliceEndpoints' objects (one hidden class).
    out.push({
      address: ipv4Text(address),
      sortKey: ipv4SortKey(address),
      local: nodeName !== '' && epNode === nodeName,
      ready: ready ?? true,
      serving: serving ?? true,
      terminating: terminating ?? false,
      zone,
      nodeName: epNode,
      zoneHints: undefined,
      nodeHints: undefined,
    });
  });
  return out;
}

function parseSliceEndpoints(
  slice: V1EndpointSlice,
  family: IPFamily,
  nodeName: string,
  object: string,
  problems: TranslateProblem[],
): PortlessEndpoint[] {
  // Packed addresses are canonical IPv4 (valid); in a slice of another family the text path reports them.
  if (family === 'IPv4' && isPackedIPv4(slice)) return packedSliceEndpoints(slice, nodeName);
  const out: PortlessEndpoint[] = [];
  const invalid: string[] = [];
  for (const ep of slice.endpoints ?? []) {
    const first = ep.addresses?.[0];
    if (first === undefined) continue; // kube-proxy: "Ignoring invalid endpoint port with empty address"
    const ip = parseIP(first);
    if (!ip || ip.family !== family) {
      invalid.push(first);
      continue;
    }
    const c = ep.conditions ?? {};
    const zones = ep.hints?.forZones;
    const nodes = ep.hints?.forNodes;
    out.push({
      address: ip.text,
      sortKey: ipSortKey(ip),
      local: nodeName !== '' && ep.nodeName === nodeName,
      ready: c.ready ?? true,
      serving: c.serving ?? true,
      terminating: c.terminating ?? false,
      zone: ep.zone || undefined,
      nodeName: ep.nodeName || undefined,
      zoneHints: zones && zones.length > 0 ? new Set(zones.map((z) => z.name)) : undefined,
      nodeHints: nodes && nodes.length > 0 ? new Set(nodes.map((n) => n.name)) : undefined,
    });
  }
  if (invalid.length > 0) {
    // One problem per slice, not per endpoint: a broken controller can write a thousand.
    const shown = invalid.slice(0, 3).map((a) => JSON.stringify(a)).join(', ');
    const more = invalid.length > 3 ? ` and ${invalid.length - 3} more` : '';
    problems.push({
      object,
      reason: 'invalid_ip',
      message: `${object}: ${invalid.length} endpoint address(es) are not valid ${family} addresses (${shown}${more}); those endpoints ignored`,
    });
  }
  return out;
}
