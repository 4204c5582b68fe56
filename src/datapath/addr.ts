// IPv4 addresses and "address:port/proto" frontends as the maps store them.
import { isIPv4 } from 'node:net';
import { LB_PROTO_TCP, LB_PROTO_UDP } from '../abi/generated';

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

/** Parse "10.96.0.10:80/tcp" (protocol defaults to tcp). */
export function parseEndpoint(text: string, defaultProto: ProtoName = 'tcp'): Endpoint {
  const m = /^(\d+\.\d+\.\d+\.\d+):(\d+)(?:\/(\w+))?$/.exec(text.trim());
  if (!m) throw new Error(`cannot parse ${JSON.stringify(text)}: expected ADDRESS:PORT[/tcp|udp]`);
  const address = m[1]!;
  ip4ToNumber(address);
  const proto = (m[3] ?? defaultProto).toLowerCase();
  protoNumber(proto);
  return { address, port: checkPort(Number(m[2]), text), proto: proto as ProtoName };
}

export function formatEndpoint(e: { address: string; port: number; proto: string }): string {
  return `${e.address}:${e.port}/${e.proto}`;
}
