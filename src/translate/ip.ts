// IP address and CIDR parsing with the semantics of Go's net / k8s.io/utils/net,
// which is what kube-proxy uses: the text we put in frontends and backends is
// the canonical form Go's IP.String() prints, so two spellings of one address
// ("10.0.0.01", "fd00:0::1") become one map entry.

import type { IPFamily } from '../model/frontend';

export interface ParsedIP {
  family: IPFamily;
  /** 4 bytes for IPv4, 16 for IPv6. */
  bytes: Uint8Array;
  /** Canonical text: dotted quad, or RFC 5952 for IPv6. */
  text: string;
}

export interface ParsedCIDR {
  family: IPFamily;
  /** Network address (host bits cleared). */
  bytes: Uint8Array;
  prefix: number;
  /** Canonical "network/prefix", as Go's IPNet.String() prints it. */
  text: string;
}

/**
 * Parse an IPv4 or IPv6 address. `sloppy` accepts IPv4 octets with leading
 * zeros as decimal, like netutils.ParseIPSloppy (kube-proxy uses it for
 * endpoint and service addresses the API server let through before 1.22).
 * IPv4-mapped IPv6 ("::ffff:1.2.3.4") is IPv4, as in Go (To4() != nil).
 */
export function parseIP(text: string, sloppy = true): ParsedIP | undefined {
  // An absent field (a Node address without `address`, a null in a list) is no address, not a crash.
  if (typeof text !== 'string') return undefined;
  if (text.includes('.') && !text.includes(':')) {
    const bytes = parseIPv4(text, sloppy);
    return bytes && { family: 'IPv4', bytes, text: formatIPv4(bytes) };
  }
  if (text.includes(':')) {
    const bytes = parseIPv6(text, sloppy);
    if (!bytes) return undefined;
    if (isV4Mapped(bytes)) {
      const v4 = bytes.slice(12);
      return { family: 'IPv4', bytes: v4, text: formatIPv4(v4) };
    }
    return { family: 'IPv6', bytes, text: formatIPv6(bytes) };
  }
  return undefined;
}

/** Parse "address/prefix"; host bits are cleared, as Go's net.ParseCIDR does for the network. */
export function parseCIDR(text: string, sloppy = false): ParsedCIDR | undefined {
  if (typeof text !== 'string') return undefined;
  const slash = text.indexOf('/');
  if (slash < 0) return undefined;
  const prefixText = text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(prefixText)) return undefined;
  const prefix = Number(prefixText);
  const addrText = text.slice(0, slash);
  // Go parses the address part by its spelling: an IPv4-mapped IPv6 spelling
  // with a /96+ prefix is IPv6 syntax; keep it simple and use the spelled family.
  let family: IPFamily;
  let bytes: Uint8Array | undefined;
  if (addrText.includes(':')) {
    family = 'IPv6';
    bytes = parseIPv6(addrText, sloppy);
  } else {
    family = 'IPv4';
    bytes = parseIPv4(addrText, sloppy);
  }
  if (!bytes) return undefined;
  const bits = bytes.length * 8;
  if (prefix > bits) return undefined;
  const net = maskBytes(bytes, prefix);
  if (family === 'IPv6' && isV4Mapped(net) && prefix >= 96) {
    // Go prints such a network in IPv4 form with the IPv4 prefix length.
    const v4 = net.slice(12);
    return { family: 'IPv4', bytes: v4, prefix: prefix - 96, text: `${formatIPv4(v4)}/${prefix - 96}` };
  }
  const netText = family === 'IPv4' ? formatIPv4(net) : formatIPv6(net);
  return { family, bytes: net, prefix, text: `${netText}/${prefix}` };
}

export function cidrContains(cidr: ParsedCIDR, ip: ParsedIP): boolean {
  if (cidr.family !== ip.family) return false;
  const masked = maskBytes(ip.bytes, cidr.prefix);
  return compareBytes(masked, cidr.bytes) === 0;
}

export function isZeroCIDR(cidr: ParsedCIDR): boolean {
  return cidr.prefix === 0;
}

/** Order: IPv4 before IPv6, then numerically. */
export function compareIP(a: ParsedIP, b: ParsedIP): number {
  if (a.bytes.length !== b.bytes.length) return a.bytes.length - b.bytes.length;
  return compareBytes(a.bytes, b.bytes);
}

/** Two hex digits per byte value, made once: sort keys are built per endpoint and frontend on every pass. */
export const HEX_BYTE: readonly string[] = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

/** Sort key for canonical address text: compares like compareIP when used with plain string comparison. */
export function ipSortKey(ip: ParsedIP): string {
  let key = ip.family === 'IPv4' ? '4' : '6';
  for (const b of ip.bytes) key += HEX_BYTE[b]!;
  return key;
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < a.length && i < b.length; i++) {
    const d = (a[i] as number) - (b[i] as number);
    if (d !== 0) return d;
  }
  return a.length - b.length;
}

function maskBytes(bytes: Uint8Array, prefix: number): Uint8Array {
  const out = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) {
    const bitsHere = Math.max(0, Math.min(8, prefix - i * 8));
    const mask = bitsHere === 0 ? 0 : (0xff << (8 - bitsHere)) & 0xff;
    out[i] = (bytes[i] as number) & mask;
  }
  return out;
}

function isV4Mapped(bytes: Uint8Array): boolean {
  if (bytes.length !== 16) return false;
  for (let i = 0; i < 10; i++) if (bytes[i] !== 0) return false;
  return bytes[10] === 0xff && bytes[11] === 0xff;
}

/**
 * Four dot-separated groups of 1-3 ASCII digits, each <= 255 (a leading zero
 * only when sloppy). A scan, not split() and a regex per group: a full sync
 * parses every frontend address to sort it, and at 10k Services the split
 * and the regexes were ~20% of translating a Service.
 */
function parseIPv4(text: string, sloppy: boolean): Uint8Array | undefined {
  const out = new Uint8Array(4);
  let group = 0;
  let value = 0;
  let digits = 0;
  let leadingZero = false;
  // One step past the end, read as the dot that closes the last group.
  for (let i = 0; i <= text.length; i++) {
    const c = i < text.length ? text.charCodeAt(i) : 46; /* . */
    if (c === 46) {
      if (digits === 0 || group === 4 || value > 255 || (!sloppy && leadingZero && digits > 1)) return undefined;
      out[group++] = value;
      value = 0;
      digits = 0;
    } else if (c >= 48 && c <= 57) {
      if (digits === 3) return undefined;
      if (digits === 0) leadingZero = c === 48;
      value = value * 10 + (c - 48);
      digits++;
    } else {
      return undefined;
    }
  }
  return group === 4 ? out : undefined;
}

function parseIPv6(text: string, sloppy: boolean): Uint8Array | undefined {
  if (text.includes('%')) return undefined; // zones are not addresses a Service can carry
  const dbl = text.indexOf('::');
  if (dbl >= 0 && text.indexOf('::', dbl + 1) >= 0) return undefined;
  const head = dbl >= 0 ? text.slice(0, dbl) : text;
  const tail = dbl >= 0 ? text.slice(dbl + 2) : '';
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === '' ? [] : tail.split(':');
  const words: number[] = [];
  const tailWords: number[] = [];
  const all = dbl >= 0 ? [...headGroups, ...tailGroups] : headGroups;
  // An embedded IPv4 address may only be the last group.
  const parseGroups = (groups: string[], into: number[], isLast: boolean): boolean => {
    for (let i = 0; i < groups.length; i++) {
      const g = groups[i] as string;
      if (isLast && i === groups.length - 1 && g.includes('.')) {
        const v4 = parseIPv4(g, sloppy);
        if (!v4) return false;
        into.push(((v4[0] as number) << 8) | (v4[1] as number), ((v4[2] as number) << 8) | (v4[3] as number));
        continue;
      }
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return false;
      into.push(parseInt(g, 16));
    }
    return true;
  };
  if (all.length === 0 && dbl < 0) return undefined;
  if (dbl >= 0) {
    if (!parseGroups(headGroups, words, tailGroups.length === 0)) return undefined;
    if (!parseGroups(tailGroups, tailWords, true)) return undefined;
    const fill = 8 - words.length - tailWords.length;
    if (fill < 1) return undefined;
    for (let i = 0; i < fill; i++) words.push(0);
    words.push(...tailWords);
  } else {
    if (!parseGroups(headGroups, words, true)) return undefined;
    if (words.length !== 8) return undefined;
  }
  if (words.length !== 8) return undefined;
  const out = new Uint8Array(16);
  words.forEach((w, i) => {
    out[i * 2] = w >> 8;
    out[i * 2 + 1] = w & 0xff;
  });
  return out;
}

function formatIPv4(bytes: Uint8Array): string {
  return `${bytes[0]}.${bytes[1]}.${bytes[2]}.${bytes[3]}`;
}

/** RFC 5952: lowercase, no leading zeros, the first longest run of 2+ zero groups as "::". */
export function formatIPv6(bytes: Uint8Array): string {
  const words: number[] = [];
  for (let i = 0; i < 16; i += 2) words.push(((bytes[i] as number) << 8) | (bytes[i + 1] as number));
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = words.map((w) => w.toString(16));
  if (bestStart < 0) return hex.join(':');
  const left = hex.slice(0, bestStart).join(':');
  const right = hex.slice(bestStart + bestLen).join(':');
  return `${left}::${right}`;
}
