// IPv4 addresses and "address:port/proto" frontends as the maps store them.
import { isIPv4 } from 'node:net';
import { LB_PROTO_TCP, LB_PROTO_UDP } from '../abi/generated';
import { formatIPv6, parseIP } from '../translate/ip';

export type ProtoName = 'tcp' | 'udp';

/** "10.96.0.10" -> 0x0a60000a (host number; the codec writes it big endian). */
export function ip4ToNumber(address: string): number {
  // Called per backend per sync (100k+ at start-up): a scan without the
  // allocations of split(); anything unusual takes the strict path.
  let acc = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i < address.length; i++) {
    const c = address.charCodeAt(i);
    if (c === 46 /* . */ && digits > 0 && dots < 3) {
      acc = acc * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
    } else if (c >= 48 && c <= 57 && digits < 3 && !(digits === 1 && octet === 0)) {
      octet = octet * 10 + (c - 48);
      digits++;
      if (octet > 255) break;
    } else {
      dots = -1;
      break;
    }
  }
  if (dots === 3 && digits > 0 && octet <= 255) return acc * 256 + octet;
  if (!isIPv4(address)) throw new Error(`not an IPv4 address: ${JSON.stringify(address)}`);
  return address.split('.').reduce((acc2, part) => ((acc2 << 8) | Number(part)) >>> 0, 0);
}

export function numberToIp4(value: number): string {
  return [24, 16, 8, 0].map((shift) => (value >>> shift) & 0xff).join('.');
}

export function protoNumber(proto: string): number {
  switch (proto.toLowerCase()) {
    case 'tcp': return LB_PROTO_TCP;
    case 'udp': return LB_PROTO_UDP;
  }
  throw new Error(`unsupported protocol ${JSON.stringify(proto)} (tcp or udp)`);
}

export function protoName(proto: number): ProtoName | string {
  if (proto === LB_PROTO_TCP) return 'tcp';
  if (proto === LB_PROTO_UDP) return 'udp';
  return `proto-${proto}`;
}

export function checkPort(port: number, what: string): number {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new Error(`${what}: port ${port} is outside 1-65535`);
  }
  return port;
}

export interface Endpoint {
  address: string;
  port: number;
  proto: ProtoName;
}

/** Parse "10.96.0.10:80/tcp" or "[fd00::10]:80/tcp" (protocol defaults to tcp). */
export function parseEndpoint(text: string, defaultProto: ProtoName = 'tcp'): Endpoint {
  const m = /^(\d+\.\d+\.\d+\.\d+|\[[0-9A-Fa-f:.]+\]):(\d+)(?:\/(\w+))?$/.exec(text.trim());
  if (!m) throw new Error(`cannot parse ${JSON.stringify(text)}: expected ADDRESS:PORT[/tcp|udp] or [IPV6]:PORT[/tcp|udp]`);
  let address = m[1]!;
  if (address.startsWith('[')) address = canonicalIp6(address.slice(1, -1));
  else ip4ToNumber(address);
  const proto = (m[3] ?? defaultProto).toLowerCase();
  protoNumber(proto);
  return { address, port: checkPort(Number(m[2]), text), proto: proto as ProtoName };
}

export function formatEndpoint(e: { address: string; port: number; proto: string }): string {
  return `${hostPort(e.address, e.port)}/${e.proto}`;
}

/** "10.0.0.1:80", or "[fd00::1]:80" for IPv6. */
export function hostPort(address: string, port: number): string {
  return isIp6(address) ? `[${address}]:${port}` : `${address}:${port}`;
}

// ---- IPv6 (issue 14): 16-byte addresses of the lb6_* maps ----

/** IPv6 text (any spelling; canonical form is what the maps and ids use). */
export function isIp6(address: string): boolean {
  return address.includes(':');
}

/** RFC 5952 text of an IPv6 address; an error for anything else (IPv4-mapped is IPv4: use the IPv4 maps). */
export function canonicalIp6(text: string): string {
  const ip = parseIP(text, false);
  if (!ip || ip.family !== 'IPv6') throw new Error(`not an IPv6 address: ${JSON.stringify(text)}`);
  return ip.text;
}

/** "fd00::10" -> its 16 bytes in network order (the maps' __u8 address[16]). */
export function ip6ToBytes(address: string): Buffer {
  const ip = parseIP(address, false);
  if (!ip || ip.family !== 'IPv6') throw new Error(`not an IPv6 address: ${JSON.stringify(address)}`);
  return Buffer.from(ip.bytes);
}

export function bytesToIp6(bytes: Uint8Array): string {
  return formatIPv6(bytes);
}
