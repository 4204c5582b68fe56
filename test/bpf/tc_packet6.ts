// Packet builder for the IPv6 TC fixtures: Ethernet + IPv6 (+ extension
// headers) + TCP/UDP/ICMPv6, every checksum computed from scratch over the
// IPv6 pseudo-header (RFC 8200 section 8.1). The data path updates checksums
// incrementally; the fixtures compare its output with these byte by byte.
import { ip6ToBytes } from '../../src/datapath/addr';
import { checksum, ethernet, l4Segment, onesSum } from './tc_packet';

const MAC_A = Buffer.from('02000000000a', 'hex'); // the sender's, as in tc_packet.ts

export interface L4Spec6 {
  proto: 'tcp' | 'udp';
  src: string;
  dst: string;
  sport: number;
  dport: number;
  tcpFlags?: number;
  payload?: Buffer;
  hopLimit?: number;
  /** Extension headers between the IPv6 header and TCP/UDP (exthdr()). */
  ext?: Array<{ type: number; body: Buffer }>;
}

function pseudoSum6(src: string, dst: string, next: number, length: number): number {
  const p = Buffer.alloc(40);
  ip6ToBytes(src).copy(p, 0);
  ip6ToBytes(dst).copy(p, 16);
  p.writeUInt32BE(length, 32);
  p.writeUInt32BE(next, 36);
  return onesSum(p);
}

/** An extension header of `type` (hop-by-hop 0, routing 43, dest opts 60): `body` padded to 8n-2 bytes. */
export function exthdr(type: number, body: Buffer): { type: number; body: Buffer } {
  const len = Math.ceil((body.length + 2) / 8) * 8;
  return { type, body: Buffer.concat([body, Buffer.alloc(len - 2 - body.length)]) };
}

/** tc_packet.ts's segment with the checksum over the IPv6 pseudo-header. */
export const l4Segment6 = (s: L4Spec6): Buffer => l4Segment(s, pseudoSum6);

function ip6Header(src: string, dst: string, next: number, payloadLength: number, hopLimit = 64): Buffer {
  const ip = Buffer.alloc(40);
  ip.writeUInt32BE(0x60000000, 0);
  ip.writeUInt16BE(payloadLength, 4);
  ip.writeUInt8(next, 6);
  ip.writeUInt8(hopLimit, 7);
  ip6ToBytes(src).copy(ip, 8);
  ip6ToBytes(dst).copy(ip, 24);
  return ip;
}

/** The IPv6 packet (no Ethernet header). */
export function ip6Packet(s: L4Spec6): Buffer {
  const seg = l4Segment6(s);
  const l4 = s.proto === 'tcp' ? 6 : 17;
  const ext = s.ext ?? [];
  const chain = ext.map((h, i) => {
    const hdr = Buffer.concat([Buffer.alloc(2), h.body]);
    hdr.writeUInt8(i + 1 < ext.length ? ext[i + 1]!.type : l4, 0);
    hdr.writeUInt8(hdr.length / 8 - 1, 1);
    return hdr;
  });
  const body = Buffer.concat([...chain, seg]);
  return Buffer.concat([ip6Header(s.src, s.dst, ext[0]?.type ?? l4, body.length, s.hopLimit), body]);
}

/** tc_packet.ts's frame, with the IPv6 EtherType. */
export function ethernet6(ipPkt: Buffer): Buffer {
  const out = ethernet(ipPkt);
  out.writeUInt16BE(0x86dd, 12);
  return out;
}

export function frame6(s: L4Spec6): Buffer {
  return ethernet6(ip6Packet(s));
}

/** An ICMPv6 message (type, code, 4 bytes `rest`, body) from src to dst, checksum over the pseudo-header. */
export function icmp6(src: string, dst: string, type: number, code: number, rest: Buffer, body: Buffer, hopLimit = 64): Buffer {
  const msg = Buffer.concat([Buffer.from([type, code, 0, 0]), rest, body]);
  msg.writeUInt16BE(checksum(msg, pseudoSum6(src, dst, 58, msg.length)), 2);
  return Buffer.concat([ip6Header(src, dst, 58, msg.length, hopLimit), msg]);
}

/** ICMPv6 Packet Too Big (type 2) quoting `quoted` (an IPv6 packet, cut to `quoteBytes`). */
export function packetTooBig(src: string, dst: string, mtu: number, quoted: Buffer, quoteBytes = 1232): Buffer {
  const rest = Buffer.alloc(4);
  rest.writeUInt32BE(mtu, 0);
  return ethernet6(icmp6(src, dst, 2, 0, rest, quoted.subarray(0, Math.min(quoteBytes, quoted.length))));
}

/** The quoted packet as the translation leaves it: addresses and ports replaced, its L4 checksum kept. */
export function rewriteQuoted6(quoted: Buffer, to: { src: string; dst: string; sport: number; dport: number }): Buffer {
  const q = Buffer.from(quoted);
  ip6ToBytes(to.src).copy(q, 8);
  ip6ToBytes(to.dst).copy(q, 24);
  q.writeUInt16BE(to.sport, 40);
  q.writeUInt16BE(to.dport, 42);
  return q;
}

/** A Neighbor Solicitation for `target` from `src` to its solicited-node multicast address. */
export function neighborSolicitation(src: string, target: string): Buffer {
  const t = ip6ToBytes(target);
  const dst = `ff02::1:ff${t[13]!.toString(16).padStart(2, '0')}:${t.readUInt16BE(14).toString(16)}`;
  const body = Buffer.concat([t, Buffer.from([1, 1]), MAC_A]); // target, source link-layer address option
  return ethernet6(icmp6(src, dst, 135, 0, Buffer.alloc(4), body, 255));
}

/**
 * An IPv6 packet without extension headers (ip6Packet) cut into fragments of
 * `chunk` bytes of its payload (a multiple of 8; the last one shorter), each
 * with a Fragment header (RFC 8200 section 4.5) of identification `id`, as
 * Ethernet frames. The first fragment keeps the L4 header and the checksum of
 * the whole datagram.
 */
export function fragment6(ipPkt: Buffer, chunk: number, id: number): Buffer[] {
  const header = ipPkt.subarray(0, 40);
  const payload = ipPkt.subarray(40);
  const out: Buffer[] = [];
  for (let off = 0; off < payload.length; off += chunk) {
    const data = payload.subarray(off, off + chunk);
    const frag = Buffer.alloc(8);
    frag.writeUInt8(header[6]!, 0); // the datagram's next header
    frag.writeUInt16BE(off | (off + chunk < payload.length ? 1 : 0), 2);
    frag.writeUInt32BE(id, 4);
    const h = Buffer.from(header);
    h.writeUInt16BE(8 + data.length, 4);
    h.writeUInt8(44, 6);
    out.push(ethernet6(Buffer.concat([h, frag, data])));
  }
  return out;
}

/** DSR for IPv6 (bpf/lib/dsr6.h): the IPv6 packet `inner` in an outer IPv6
 * header (ip6ip6, RFC 2473: next header 41) whose first 4 bytes (version,
 * traffic class, flow label) are the inner one's, in an Ethernet frame. */
export function ip6ip6(outerSrc: string, outerDst: string, inner: Buffer): Buffer {
  const outer = ip6Header(outerSrc, outerDst, 41, inner.length);
  inner.copy(outer, 0, 0, 4);
  return ethernet6(Buffer.concat([outer, inner]));
}
