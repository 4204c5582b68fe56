// IP address parsing into bigints, for CIDR membership and allocation.

import { isIPv4, isIPv6 } from 'node:net';

export type IpFamily = 'IPv4' | 'IPv6';

export interface ParsedIp {
  family: IpFamily;
  value: bigint;
}

function parseV4(text: string): bigint {
  return text.split('.').reduce((acc, octet) => (acc << 8n) | BigInt(Number(octet)), 0n);
}

function parseV6(text: string): bigint {
  let head = text;
  let tailV4: bigint | undefined;
  const lastColon = text.lastIndexOf(':');
  if (text.includes('.')) {
    tailV4 = parseV4(text.slice(lastColon + 1));
    head = text.slice(0, lastColon + 1) + '0:0';
  }
  const [left = '', right] = head.split('::');
  const leftGroups = left === '' ? [] : left.split(':');
  const rightGroups = right === undefined || right === '' ? [] : right.split(':');
  const missing = 8 - leftGroups.length - rightGroups.length;
  const groups = [...leftGroups, ...Array<string>(right === undefined ? 0 : missing).fill('0'), ...rightGroups];
  let value = groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
  if (tailV4 !== undefined) value = (value & ~0xffffffffn) | tailV4;
  return value;
}

/** Parses an IPv4 or IPv6 address; undefined when it is not one. */
export function parseIp(text: string): ParsedIp | undefined {
  if (isIPv4(text)) return { family: 'IPv4', value: parseV4(text) };
  if (isIPv6(text) && !text.includes('%')) return { family: 'IPv6', value: parseV6(text) };
  return undefined;
}

export function formatIp(ip: ParsedIp): string {
  if (ip.family === 'IPv4') {
    return [24n, 16n, 8n, 0n].map((shift) => ((ip.value >> shift) & 0xffn).toString()).join('.');
  }
  const groups: string[] = [];
  for (let shift = 112n; shift >= 0n; shift -= 16n) groups.push(((ip.value >> shift) & 0xffffn).toString(16));
  // Compress the longest run of zero groups (RFC 5952), as Go's net.IP.String does.
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (bestStart < 0) return groups.join(':');
  return `${groups.slice(0, bestStart).join(':')}::${groups.slice(bestStart + bestLen).join(':')}`;
}

export interface Cidr {
  family: IpFamily;
  base: bigint;
  prefixLength: number;
  /** Number of addresses in the block. */
  size: bigint;
  text: string;
}

export function parseCidr(text: string): Cidr {
  const [address = '', prefixText] = text.trim().split('/');
  const ip = parseIp(address);
  const bits = ip?.family === 'IPv6' ? 128 : 32;
  const prefixLength = Number(prefixText);
  if (!ip || prefixText === undefined || !Number.isInteger(prefixLength) || prefixLength < 0 || prefixLength > bits) {
    throw new Error(`service CIDR "${text}": not an IPv4 or IPv6 CIDR`);
  }
  const size = 1n << BigInt(bits - prefixLength);
  return { family: ip.family, base: ip.value & ~(size - 1n), prefixLength, size, text: text.trim() };
}

export function cidrContains(cidr: Cidr, ip: ParsedIp): boolean {
  return ip.family === cidr.family && ip.value >= cidr.base && ip.value < cidr.base + cidr.size;
}
