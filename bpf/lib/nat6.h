/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nat6.h: IPv6 packet parsing and address/port rewriting for the TC
 * programs (the twin of nat.h).
 *
 * IPv6 has no header checksum; the TCP, UDP and ICMPv6 checksums cover the
 * IPv6 pseudo-header (RFC 8200 section 8.1). A changed 16-byte address is
 * folded into one bpf_csum_diff() and given to bpf_l4_csum_replace() with
 * BPF_F_PSEUDO_HDR, so the kernel's checksum state is honoured as in nat.h.
 *
 * Extension headers (RFC 8200 section 4): hop-by-hop, destination options,
 * routing and Fragment headers are walked, at most LB_IP6_MAX_EXTHDRS of
 * them, to the upper-layer header (a first fragment is parsed like a whole
 * packet; an atomic fragment, RFC 6946, is one). Not parsed further:
 *  - a later fragment (offset > 0): no L4 header; LB6_PARSE_FRAG with its
 *    addresses and protocol (and *frag's identification) for frag6.h, which
 *    finds its ports or passes it untouched;
 *  - a second Fragment header (LB6_PARSE_FRAG, not a later fragment);
 * Passed untouched, never guessed at:
 *  - a routing header with segments left (the destination is not the final
 *    one) or more headers than the walk reads (LB_CNT_TC6_EXTHDR_PASSED);
 *  - AH, ESP, No Next Header and anything else that is not TCP, UDP or
 *    ICMPv6.
 */
#ifndef SLUICE_BPF_NAT6_H
#define SLUICE_BPF_NAT6_H

#include "nat.h"
#include "lb6.h"

#define LB_ETH_P_IPV6          0x86DD
#define LB_IPPROTO_ICMPV6      58
#define LB_IPPROTO_IPV6        41 /* ip6ip6 (RFC 2473): DSR, dsr6.h */
#define LB_NEXTHDR_HOP         0
#define LB_NEXTHDR_ROUTING     43
#define LB_NEXTHDR_FRAGMENT    44
#define LB_NEXTHDR_DEST        60
#define LB_IP6_MAX_EXTHDRS     4
#define LB_IP6_HLEN            40
#define LB_ICMP6_DEST_UNREACH  1
#define LB_ICMP6_PKT_TOOBIG    2
#define LB_ICMP6_TIME_EXCEED   3
#define LB_ICMP6_PARAMPROB     4

#define LB_IP6_OFF_HOPLIMIT    (LB_ETH_HLEN + 7)
#define LB_IP6_OFF_SADDR       (LB_ETH_HLEN + 8)
#define LB_IP6_OFF_DADDR       (LB_ETH_HLEN + 24)

struct lb6_tuple {
	__u8   saddr[16];
	__u8   daddr[16];
	__be16 sport;
	__be16 dport;
	__u8   proto;
	__u8   tcp_flags;
	__u8   pad[2];
} __attribute__((aligned(4)));

struct lb6_packet {
	struct lb6_tuple tuple;
	__u32 l4_off;  /* offset of the TCP/UDP/ICMPv6 header (after extension headers); a later fragment: its data */
	__u8  icmp_type;
	__u8  frag;    /* LB_FRAG_NONE, LB_FRAG_FIRST (offset 0, M set) or LB_FRAG_LATER (frag6.h) */
	__u8  pad[2];  /* (48 bytes: the fragment id stays in frag6.h's frame, off the deep chains) */
};

/* Parse results other than 0. */
#define LB6_PARSE_PASS   -1 /* not ours: passes untouched */
#define LB6_PARSE_FRAG   -2 /* a later fragment (pkt->frag LB_FRAG_LATER) or a second Fragment header */
#define LB6_PARSE_EXTHDR -3 /* routing header with segments left, or too many headers */

static __always_inline bool lb6_is_zero(const __u8 *a)
{
	const __u32 *x = (const __u32 *)a;

	return (x[0] | x[1] | x[2] | x[3]) == 0;
}

/* What the walk found in a Fragment header (RFC 8200 section 4.5). */
struct lb6_frag_info {
	__u8   kind; /* LB_FRAG_NONE (none, or atomic), LB_FRAG_FIRST, LB_FRAG_LATER */
	__u8   seen; /* a Fragment header was walked */
	__u8   pad[2];
	__be32 id;
};

/*
 * Walk the extension headers starting at *off with next header *nexthdr.
 * On 0, *off is the upper-layer header and *nexthdr its protocol (a first
 * or atomic fragment's Fragment header walked through, noted in *frag).
 * LB6_PARSE_FRAG: a later fragment (*frag LB_FRAG_LATER, *nexthdr the
 * Fragment header's next header, *off its data) or a second Fragment header.
 */
static __always_inline int
lb6_walk_exthdrs(struct __sk_buff *skb, __u32 *off, __u8 *nexthdr, struct lb6_frag_info *frag)
{
	int i;

	frag->kind = LB_FRAG_NONE;
	frag->seen = 0;
	frag->id = 0;
#pragma unroll
	for (i = 0; i < LB_IP6_MAX_EXTHDRS; i++) {
		/* next header, length in 8-byte units - 1 (routing: type, segments
		 * left; fragment: reserved, offset and M in bytes 2-3, id 4-7) */
		__u8 hdr[8];

		if (*nexthdr != LB_NEXTHDR_HOP && *nexthdr != LB_NEXTHDR_DEST &&
		    *nexthdr != LB_NEXTHDR_ROUTING && *nexthdr != LB_NEXTHDR_FRAGMENT)
			return 0;
		if (bpf_skb_load_bytes(skb, *off, hdr, sizeof(hdr)) < 0)
			return LB6_PARSE_PASS;
		if (*nexthdr == LB_NEXTHDR_FRAGMENT) {
			if (frag->seen)
				return LB6_PARSE_FRAG; /* a second one: never guessed at */
			frag->seen = 1;
			__builtin_memcpy(&frag->id, hdr + 4, 4);
			*nexthdr = hdr[0];
			*off += 8;
			if ((hdr[2] << 8 | hdr[3]) & 0xfff8) {
				frag->kind = LB_FRAG_LATER;
				return LB6_PARSE_FRAG;
			}
			frag->kind = (hdr[3] & 1) ? LB_FRAG_FIRST : LB_FRAG_NONE;
			continue;
		}
		if (*nexthdr == LB_NEXTHDR_ROUTING && hdr[3] != 0)
			return LB6_PARSE_EXTHDR;
		*nexthdr = hdr[0];
		*off += ((__u32)hdr[1] + 1) * 8;
	}
	if (*nexthdr == LB_NEXTHDR_HOP || *nexthdr == LB_NEXTHDR_DEST || *nexthdr == LB_NEXTHDR_ROUTING ||
	    *nexthdr == LB_NEXTHDR_FRAGMENT)
		return LB6_PARSE_EXTHDR;
	return 0;
}

/*
 * Parse Ethernet + IPv6 (+ extension headers) + the first bytes of
 * TCP/UDP/ICMPv6. 0: a packet we may translate; < 0: it passes untouched
 * (LB6_PARSE_EXTHDR is counted here). LB6_PARSE_FRAG with pkt->frag
 * LB_FRAG_LATER: a later fragment, its addresses and protocol filled in
 * (frag6.h looks its ports up under *frag's id); other LB6_PARSE_FRAGs are
 * counted by the caller.
 */
static __always_inline int lb6_parse(struct __sk_buff *skb, struct lb6_packet *pkt, struct lb6_frag_info *frag)
{
	struct ipv6hdr ip;
	__u32 off = LB_ETH_HLEN + LB_IP6_HLEN;
	__u8 nexthdr;
	int rc;

	if (skb->protocol != bpf_htons(LB_ETH_P_IPV6))
		return LB6_PARSE_PASS;
	if (bpf_skb_load_bytes(skb, LB_ETH_HLEN, &ip, sizeof(ip)) < 0)
		return LB6_PARSE_PASS;
	if (ip.version != 6)
		return LB6_PARSE_PASS;
	nexthdr = ip.nexthdr;
	rc = lb6_walk_exthdrs(skb, &off, &nexthdr, frag);
	if (rc == LB6_PARSE_EXTHDR)
		lb_count(LB_CNT_TC6_EXTHDR_PASSED);
	if (rc < 0 && rc != LB6_PARSE_FRAG)
		return rc;
	__builtin_memcpy(pkt->tuple.saddr, &ip.saddr, 16);
	__builtin_memcpy(pkt->tuple.daddr, &ip.daddr, 16);
	pkt->tuple.proto = nexthdr;
	pkt->tuple.tcp_flags = 0;
	pkt->tuple.sport = 0;
	pkt->tuple.dport = 0;
	pkt->l4_off = off;
	pkt->icmp_type = 0;
	pkt->frag = frag->kind;
	if (rc < 0)
		return rc;
	if (nexthdr == LB_PROTO_TCP || nexthdr == LB_PROTO_UDP) {
		__be16 ports[2];

		if (bpf_skb_load_bytes(skb, off, ports, sizeof(ports)) < 0)
			return LB6_PARSE_PASS;
		pkt->tuple.sport = ports[0];
		pkt->tuple.dport = ports[1];
		if (nexthdr == LB_PROTO_TCP &&
		    bpf_skb_load_bytes(skb, off + 13, &pkt->tuple.tcp_flags, 1) < 0)
			return LB6_PARSE_PASS;
		return 0;
	}
	if (nexthdr == LB_IPPROTO_ICMPV6) {
		if (bpf_skb_load_bytes(skb, off, &pkt->icmp_type, 1) < 0)
			return LB6_PARSE_PASS;
		return 0;
	}
	return LB6_PARSE_PASS;
}

/* ICMPv6 errors are types 1-4 (RFC 4443); Neighbor Discovery, echo, MLD and
 * the rest are informational (>= 128) and pass untouched. */
static __always_inline bool lb6_icmp_is_error(__u8 type)
{
	return type >= LB_ICMP6_DEST_UNREACH && type <= LB_ICMP6_PARAMPROB;
}

static __always_inline __u32 lb6_l4_csum_off(__u8 proto, __u32 l4_off)
{
	if (proto == LB_PROTO_TCP)
		return l4_off + 16;
	if (proto == LB_PROTO_UDP)
		return l4_off + 6;
	return l4_off + 2; /* ICMPv6 */
}

/* Replace the 16-byte address at field_off; csum_off >= 0 also fixes the
 * checksum there (pseudo: the address is in its pseudo-header, else in its
 * payload, as for an address quoted in an ICMPv6 error). */
static __always_inline int
lb6_set_addr(struct __sk_buff *skb, __u32 field_off, const __u8 *from, const __u8 *to, int csum_off,
	     __u64 flags)
{
	__u32 f[4], t[4];
	__s64 diff;

	if (lb6_addr_equal(from, to))
		return 0;
	__builtin_memcpy(f, from, 16);
	__builtin_memcpy(t, to, 16);
	if (csum_off >= 0) {
		diff = bpf_csum_diff(f, 16, t, 16, 0);
		if (diff < 0 || bpf_l4_csum_replace(skb, csum_off, 0, (__u32)diff, flags) < 0)
			return -1;
	}
	return bpf_skb_store_bytes(skb, field_off, t, 16, 0);
}

/*
 * Rewrite a TCP/UDP packet (its L4 header at l4_off) from tuple `from` to
 * `to`: addresses, ports and the L4 checksum. A later fragment (frag
 * LB_FRAG_LATER) has no L4 header: addresses only, the first fragment's
 * checksum already covers the new pseudo-header (as nat.h for IPv4).
 * Returns 0 or -1 (the caller drops). A subprogram: its frame is not on its
 * callers' stacks.
 */
static __noinline int
lb6_rewrite_tuple(struct __sk_buff *skb, const struct lb6_tuple *from, const struct lb6_tuple *to, __u32 l4_off,
		  __u8 frag)
{
	int csum_off = lb6_l4_csum_off(from->proto, l4_off);
	__u64 l4_flags = from->proto == LB_PROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;

	if (frag == LB_FRAG_LATER) {
		if (lb6_set_addr(skb, LB_IP6_OFF_SADDR, from->saddr, to->saddr, -1, 0) < 0)
			return -1;
		return lb6_set_addr(skb, LB_IP6_OFF_DADDR, from->daddr, to->daddr, -1, 0);
	}

	if (lb6_set_addr(skb, LB_IP6_OFF_SADDR, from->saddr, to->saddr, csum_off,
			 l4_flags | BPF_F_PSEUDO_HDR) < 0)
		return -1;
	if (lb6_set_addr(skb, LB_IP6_OFF_DADDR, from->daddr, to->daddr, csum_off,
			 l4_flags | BPF_F_PSEUDO_HDR) < 0)
		return -1;
	if (lb4_set_port(skb, csum_off, l4_off, from->sport, to->sport, l4_flags) < 0)
		return -1;
	return lb4_set_port(skb, csum_off, l4_off + 2, from->dport, to->dport, l4_flags);
}

static __always_inline int
lb6_rewrite(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb6_tuple *to)
{
	return lb6_rewrite_tuple(skb, &pkt->tuple, to, pkt->l4_off, pkt->frag);
}

/* The packet an ICMPv6 error quotes: its IPv6 header 8 bytes into the
 * message, then its extension headers and at least its ports. */
struct lb6_icmp_quote {
	struct lb6_tuple tuple;
	__u32 ip_off;
	__u32 l4_off;
};

static __noinline int
lb6_parse_icmp_quote(struct __sk_buff *skb, const struct lb6_packet *pkt, struct lb6_icmp_quote *q)
{
	struct lb6_frag_info frag;
	struct ipv6hdr ip;
	__be16 ports[2];
	__u8 nexthdr;
	__u32 off;

	q->ip_off = pkt->l4_off + 8;
	if (bpf_skb_load_bytes(skb, q->ip_off, &ip, sizeof(ip)) < 0 || ip.version != 6)
		return -1;
	nexthdr = ip.nexthdr;
	off = q->ip_off + LB_IP6_HLEN;
	/* A quoted first fragment carries its ports; a later one does not (-1). */
	if (lb6_walk_exthdrs(skb, &off, &nexthdr, &frag) < 0)
		return -1;
	if (nexthdr != LB_PROTO_TCP && nexthdr != LB_PROTO_UDP)
		return -1;
	if (bpf_skb_load_bytes(skb, off, ports, sizeof(ports)) < 0)
		return -1;
	q->l4_off = off;
	__builtin_memcpy(q->tuple.saddr, &ip.saddr, 16);
	__builtin_memcpy(q->tuple.daddr, &ip.daddr, 16);
	q->tuple.sport = ports[0];
	q->tuple.dport = ports[1];
	q->tuple.proto = nexthdr;
	q->tuple.tcp_flags = 0;
	return 0;
}

/*
 * Rewrite an ICMPv6 error: the outer addresses to outer_to's (in the ICMPv6 checksum's
 * pseudo-header) and the quoted packet's addresses and ports (in its
 * payload). The quoted TCP/UDP checksum is left as is, as nat.h does for
 * IPv4 (a receiver does not check it).
 */
static __noinline int
lb6_rewrite_icmp_error(struct __sk_buff *skb, const struct lb6_packet *pkt,
		       const struct lb6_icmp_quote *q, const struct lb6_tuple *outer_to,
		       const struct lb6_tuple *quote_to)
{
	int icmp_csum = pkt->l4_off + 2;

	if (lb6_set_addr(skb, LB_IP6_OFF_SADDR, pkt->tuple.saddr, outer_to->saddr, icmp_csum,
			 BPF_F_PSEUDO_HDR) < 0)
		return -1;
	if (lb6_set_addr(skb, LB_IP6_OFF_DADDR, pkt->tuple.daddr, outer_to->daddr, icmp_csum,
			 BPF_F_PSEUDO_HDR) < 0)
		return -1;
	if (lb6_set_addr(skb, q->ip_off + 8, q->tuple.saddr, quote_to->saddr, icmp_csum, 0) < 0)
		return -1;
	if (lb6_set_addr(skb, q->ip_off + 24, q->tuple.daddr, quote_to->daddr, icmp_csum, 0) < 0)
		return -1;
	if (lb4_set_port(skb, icmp_csum, q->l4_off, q->tuple.sport, quote_to->sport, 0) < 0)
		return -1;
	return lb4_set_port(skb, icmp_csum, q->l4_off + 2, q->tuple.dport, quote_to->dport, 0);
}

#endif /* SLUICE_BPF_NAT6_H */
