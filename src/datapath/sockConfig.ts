// What the socket hooks need to know about the node besides Services: which
// sockets to translate (socketLB mode and the host network namespace's
// cookie, SLUICE_MAP_SOCK_CFG) and the node's own addresses
// (SLUICE_MAP_NODEIP4: ExternalIPs are translated at the socket only when
// they are one of them; a bind to 0.0.0.0 is checked against NodePorts on
// each). See docs/maps.md, "Socket path".
import * as abi from '../abi/generated';
import type { Codec } from '../abi/types';
import type { BpfMap } from '../bpf/map';
import { bytesToIp6, canonicalIp6, ip4ToNumber, ip6ToBytes, isIp6, numberToIp4 } from './addr';
import { TypedMap, u32Codec, u8Codec } from './typedMap';

export const SOCKET_LB_MODES = {
  all: abi.LB_SOCK_LB_ALL,
  hostNamespaceOnly: abi.LB_SOCK_LB_HOST_NS_ONLY,
  podNamespacesOnly: abi.LB_SOCK_LB_POD_NS_ONLY,
} as const;
export type SocketLbMode = keyof typeof SOCKET_LB_MODES;

/** A socketLB value from a flag or the config file, or an error naming where it came from. */
export function parseSocketLbMode(value: unknown, where: string): SocketLbMode {
  if (typeof value === 'string' && Object.hasOwn(SOCKET_LB_MODES, value)) return value as SocketLbMode;
  throw new Error(`${where}: ${JSON.stringify(value)} is not a socket LB mode (${Object.keys(SOCKET_LB_MODES).join(', ')})`);
}

export interface SocketLbScope {
  mode: SocketLbMode;
  /** SO_NETNS_COOKIE of the namespace whose sockets are the host's. */
  hostNetnsCookie: bigint;
}

export function sockConfigMap(map: BpfMap): TypedMap<number, abi.LbSockConfig> {
  return new TypedMap(map, u32Codec, abi.lb_sock_configCodec);
}

export function writeSocketLbScope(map: TypedMap<number, abi.LbSockConfig>, scope: SocketLbScope): void {
  map.set(0, { host_netns_cookie: scope.hostNetnsCookie, mode: SOCKET_LB_MODES[scope.mode] });
}

export function readSocketLbScope(map: TypedMap<number, abi.LbSockConfig>): SocketLbScope | undefined {
  const c = map.get(0);
  if (!c || c.host_netns_cookie === 0n) return undefined;
  const mode = (Object.keys(SOCKET_LB_MODES) as SocketLbMode[]).find((m) => SOCKET_LB_MODES[m] === c.mode);
  return mode ? { mode, hostNetnsCookie: c.host_netns_cookie } : undefined;
}

/** IPv4 in network order, as the kernel hands it (__be32 keys). */
const be32Codec: Codec<number> = {
  size: 4,
  encode(value, buf = Buffer.alloc(4), off = 0) {
    buf.writeUInt32BE(value >>> 0, off);
    return buf;
  },
  decode: (buf, off = 0) => buf.readUInt32BE(off),
};

export function nodeIpMap(map: BpfMap): TypedMap<number, number> {
  return new TypedMap(map, be32Codec, u8Codec);
}

/** Make the IPv6 node-address map (SLUICE_MAP_NODEIP6) hold exactly these IPv6 addresses (IPv4 ones are skipped). */
export function syncNodeAddresses6(map: TypedMap<abi.Lb6NodeIp, number>, addresses: string[]): { added: string[]; removed: string[] } {
  const wanted = new Set(addresses.filter(isIp6).map(canonicalIp6));
  const present = new Set([...map.entries()].map(([k]) => bytesToIp6(k.address)));
  const added = [...wanted].filter((a) => !present.has(a));
  const removed = [...present].filter((a) => !wanted.has(a));
  for (const a of added) map.set({ address: ip6ToBytes(a) }, 1);
  for (const a of removed) map.delete({ address: ip6ToBytes(a) });
  return { added, removed };
}

/** Make the node-address map hold exactly these IPv4 addresses (others, e.g. IPv6, are skipped). */
export function syncNodeAddresses(map: TypedMap<number, number>, addresses: string[]): { added: string[]; removed: string[] } {
  const wanted = new Set(addresses.filter((a) => /^\d+\.\d+\.\d+\.\d+$/.test(a)).map(ip4ToNumber));
  const present = new Set([...map.entries()].map(([k]) => k));
  const added = [...wanted].filter((a) => !present.has(a));
  const removed = [...present].filter((a) => !wanted.has(a));
  for (const a of added) map.set(a, 1);
  for (const a of removed) map.delete(a);
  return { added: added.map(numberToIp4), removed: removed.map(numberToIp4) };
}
