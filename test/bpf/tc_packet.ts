// Packet builder for the TC fixtures: Ethernet + IPv4 + TCP/UDP/ICMP with
// every checksum computed from scratch (RFC 1071). The data path updates
// checksums incrementally; comparing its output with a packet built here
// from the translated tuple checks the two methods against each other byte
// by byte.
import { ip4ToNumber } from '../../src/datapath/addr';

export const TC_ACT_OK = 0;
export const TC_ACT_SHOT = 2;
export const TC_ACT_REDIRECT = 7;

export const TCP_FIN = 0x01;
export const TCP_SYN = 0x02;
export const TCP_RST = 0x04;
export const TCP_PSH = 0x08;
export const TCP_ACK = 0x10;

const MAC_A = Buffer.from('02000000000a', 'hex');
const MAC_B = Buffer.from('02000000000b', 'hex');

export function csumFold(sum: number): number {
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum;
}

export function onesSum(buf: Buffer, start = 0): number {
  let sum = start;
  for (let i = 0; i + 1 < buf.length; i += 2) sum += buf.readUInt16BE(i);
  if (buf.length % 2) sum += (buf[buf.length - 1] ?? 0) << 8;
  return csumFold(sum);
}

export const checksum = (buf: Buffer, start = 0): number => ~onesSum(buf, start) & 0xffff;

export interface L4Spec {
  proto: 'tcp' | 'udp';
  src: string;
  dst: string;
  sport: number;
  dport: number;
  tcpFlags?: number;
  seq?: number;
  payload?: Buffer;
  /** UDP: send with checksum 0 ("no checksum", legal in IPv4). */
  udpNoChecksum?: boolean;
  ttl?: number;
  id?: number;
}

function ipHeader(src: string, dst: string, protocol: number, payloadLength: number, ttl = 64, id = 0x1234): Buffer {
  const ip = Buffer.alloc(20);
  ip.writeUInt8(0x45, 0);
  ip.writeUInt16BE(20 + payloadLength, 2);
  ip.writeUInt16BE(id, 4);
  ip.writeUInt16BE(0x4000, 6); // DF
  ip.writeUInt8(ttl, 8);
  ip.writeUInt8(protocol, 9);
  ip.writeUInt32BE(ip4ToNumber(src), 12);
  ip.writeUInt32BE(ip4ToNumber(dst), 16);
  ip.writeUInt16BE(checksum(ip), 10);
  return ip;
}

function pseudoSum(src: string, dst: string, protocol: number, length: number): number {
  const p = Buffer.alloc(12);
  p.writeUInt32BE(ip4ToNumber(src), 0);
  p.writeUInt32BE(ip4ToNumber(dst), 4);
  p.writeUInt8(protocol, 9);
  p.writeUInt16BE(length, 10);
  return onesSum(p);
}

/** The L4 segment (TCP or UDP header + payload) with its checksum (`pseudo`: the pseudo-header's sum; IPv6: tc_packet6.ts). */
export function l4Segment(s: L4Spec, pseudo: (src: string, dst: string, protocol: number, length: number) => number = pseudoSum): Buffer {
  const payload = s.payload ?? Buffer.alloc(0);
  if (s.proto === 'udp') {
    const seg = Buffer.concat([Buffer.alloc(8), payload]);
    seg.writeUInt16BE(s.sport, 0);
    seg.writeUInt16BE(s.dport, 2);
    seg.writeUInt16BE(seg.length, 4);
    if (!s.udpNoChecksum) {
      const c = checksum(seg, pseudo(s.src, s.dst, 17, seg.length));
      seg.writeUInt16BE(c === 0 ? 0xffff : c, 6); // RFC 768: a computed 0 is sent as all ones
    }
    return seg;
  }
  const seg = Buffer.concat([Buffer.alloc(20), payload]);
  seg.writeUInt16BE(s.sport, 0);
  seg.writeUInt16BE(s.dport, 2);
  seg.writeUInt32BE(s.seq ?? 1000, 4);
  seg.writeUInt32BE((s.tcpFlags ?? TCP_SYN) & TCP_ACK ? 2000 : 0, 8);
  seg.writeUInt8(5 << 4, 12);
  seg.writeUInt8(s.tcpFlags ?? TCP_SYN, 13);
  seg.writeUInt16BE(64240, 14);
  seg.writeUInt16BE(checksum(seg, pseudo(s.src, s.dst, 6, seg.length)), 16);
  return seg;
}

/** The IPv4 packet (no Ethernet header). */
export function ipPacket(s: L4Spec): Buffer {
  const seg = l4Segment(s);
  return Buffer.concat([ipHeader(s.src, s.dst, s.proto === 'tcp' ? 6 : 17, seg.length, s.ttl, s.id), seg]);
}

export function ethernet(ipPkt: Buffer): Buffer {
  const eth = Buffer.alloc(14);
  MAC_B.copy(eth, 0);
  MAC_A.copy(eth, 6);
  eth.writeUInt16BE(0x0800, 12);
  return Buffer.concat([eth, ipPkt]);
}

/** A full frame for BPF_PROG_TEST_RUN on a TC program. */
export function frame(s: L4Spec): Buffer {
  return ethernet(ipPacket(s));
}

/** An IPv4 packet with `optionWords` 4-byte words of options (NOPs, an EOL last), all checksums recomputed. */
export function withOptions(s: L4Spec, optionWords: number): Buffer {
  const plain = ipPacket(s);
  const opts = Buffer.alloc(optionWords * 4, 1);
  opts[opts.length - 1] = 0;
  const ip = Buffer.concat([plain.subarray(0, 20), opts, plain.subarray(20)]);
  ip.writeUInt8(0x40 | (5 + optionWords), 0);
  ip.writeUInt16BE(ip.length, 2);
  ip.writeUInt16BE(0, 10);
  ip.writeUInt16BE(checksum(ip.subarray(0, 20 + opts.length)), 10);
  return ethernet(ip);
}

/**
 * An ICMP error (type 3 by default) from `src` to `dst` quoting `quoted`
 * (an IPv4 packet; the first 28+ bytes are kept, as routers do at least).
 */
export function icmpError(src: string, dst: string, quoted: Buffer, type = 3, code = 3, quoteBytes = 48): Buffer {
  const icmp = Buffer.concat([Buffer.alloc(8), quoted.subarray(0, Math.min(quoteBytes, quoted.length))]);
  icmp.writeUInt8(type, 0);
  icmp.writeUInt8(code, 1);
  icmp.writeUInt16BE(checksum(icmp), 2);
  return ethernet(Buffer.concat([ipHeader(src, dst, 1, icmp.length, 64, 0x4321), icmp]));
}

/**
 * The quoted packet as a translating NAT leaves it: addresses and ports
 * replaced, the IPv4 checksum recomputed, the quoted L4 checksum kept (it is
 * not recomputed by netfilter either for a truncated quote).
 */
export function rewriteQuoted(quoted: Buffer, to: { src: string; dst: string; sport: number; dport: number }): Buffer {
  const q = Buffer.from(quoted);
  q.writeUInt32BE(ip4ToNumber(to.src), 12);
  q.writeUInt32BE(ip4ToNumber(to.dst), 16);
  q.writeUInt16BE(0, 10);
  q.writeUInt16BE(checksum(q.subarray(0, 20)), 10);
  q.writeUInt16BE(to.sport, 20);
  q.writeUInt16BE(to.dport, 22);
  return q;
}

/** Hex dump with a marker under differing bytes, for assertion messages. */
export function diffHex(actual: Buffer, expected: Buffer): string {
  const out: string[] = [];
  const n = Math.max(actual.length, expected.length);
  for (let off = 0; off < n; off += 16) {
    const a = actual.subarray(off, off + 16).toString('hex').replace(/(..)/g, '$1 ');
    const e = expected.subarray(off, off + 16).toString('hex').replace(/(..)/g, '$1 ');
    if (a !== e) out.push(`${off.toString(16).padStart(4, '0')}  got  ${a}\n      want ${e}`);
  }
  return out.join('\n') || '(identical)';
}

/**
 * Split an IPv4 packet (from ipPacket) into Ethernet frames of fragments:
 * the first carries `firstPayload` bytes after the IPv4 header (a multiple of
 * 8), the second the rest. DF is cleared and MF/offset set as a sender would;
 * each header checksum is recomputed.
 */
export function fragment(ipPkt: Buffer, firstPayload: number): [Buffer, Buffer] {
  const header = ipPkt.subarray(0, 20);
  const payload = ipPkt.subarray(20);
  const part = (data: Buffer, offset: number, more: boolean) => {
    const h = Buffer.from(header);
    h.writeUInt16BE(20 + data.length, 2);
    h.writeUInt16BE((more ? 0x2000 : 0) | (offset / 8), 6);
    h.writeUInt16BE(0, 10);
    h.writeUInt16BE(checksum(h), 10);
    return ethernet(Buffer.concat([h, data]));
  };
  return [part(payload.subarray(0, firstPayload), 0, true), part(payload.subarray(firstPayload), firstPayload, false)];
}

/**
 * An ICMP error as the data path builds one in place of the packet it answers:
 * IPv4 (TOS `tos`, id 0, TTL 64) + type, code, the 4 bytes `rest` (unused, or
 * unused + next-hop MTU) and the first 28 bytes of `quoted`, in a frame whose
 * MAC addresses are those of frame() swapped (sent back where it came from).
 */
export function icmpReply(from: string, to: string, type: number, code: number, rest: Buffer, quoted: Buffer, tos = 0): Buffer {
  const icmp = Buffer.concat([Buffer.from([type, code, 0, 0]), rest, quoted.subarray(0, 28)]);
  icmp.writeUInt16BE(checksum(icmp), 2);
  const ip = Buffer.alloc(20);
  ip.writeUInt8(0x45, 0);
  ip.writeUInt8(tos, 1);
  ip.writeUInt16BE(20 + icmp.length, 2);
  ip.writeUInt8(64, 8);
  ip.writeUInt8(1, 9);
  ip.writeUInt32BE(ip4ToNumber(from), 12);
  ip.writeUInt32BE(ip4ToNumber(to), 16);
  ip.writeUInt16BE(checksum(ip), 10);
  const out = ethernet(Buffer.concat([ip, icmp]));
  MAC_A.copy(out, 0);
  MAC_B.copy(out, 6);
  return out;
}

/** An IPIP frame (DSR, docs/dsr.md): outer header (DF, TTL 64, id 0, the inner TOS) + `inner`, an IPv4 packet. */
export function ipip(outerSrc: string, outerDst: string, inner: Buffer): Buffer {
  const outer = Buffer.alloc(20);
  outer.writeUInt8(0x45, 0);
  outer.writeUInt8(inner.readUInt8(1), 1);
  outer.writeUInt16BE(20 + inner.length, 2);
  outer.writeUInt16BE(0x4000, 6);
  outer.writeUInt8(64, 8);
  outer.writeUInt8(4, 9);
  outer.writeUInt32BE(ip4ToNumber(outerSrc), 12);
  outer.writeUInt32BE(ip4ToNumber(outerDst), 16);
  outer.writeUInt16BE(checksum(outer), 10);
  return ethernet(Buffer.concat([outer, inner]));
}
