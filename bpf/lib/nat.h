/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nat.h: IPv4 packet parsing and address/port rewriting for the TC programs
 * (a flow's own packets: rewrite4.h; ICMP errors: lb4_rewrite_icmp_error).
 *
 * Checksums are updated incrementally with the kernel's own helpers
 * (bpf_l3_csum_replace / bpf_l4_csum_replace): they know the skb's checksum
 * state, so a packet whose L4 checksum is still CHECKSUM_PARTIAL (a veth from
 * a local socket) gets only its pseudo-header part fixed, and a complete one
 * gets the full incremental update (RFC 1624). UDP with a zero checksum stays
 * zero (BPF_F_MARK_MANGLED_0), and a UDP sum that becomes 0 is sent as 0xffff.
 */
#ifndef SLUICE_BPF_NAT_H
#define SLUICE_BPF_NAT_H

#include "common.h"

#define LB_ETH_HLEN       14
#define LB_ETH_P_IP       0x0800
#define LB_IP_MF          0x2000
#define LB_IP_OFFSET      0x1fff
#define LB_IPPROTO_ICMP   1
#define LB_ICMP_DEST_UNREACH 3
#define LB_ICMP_TIME_EXCEEDED 11
#define LB_ICMP_PARAMETERPROB 12
#define LB_TCP_FLAG_FIN   0x01
#define LB_TCP_FLAG_SYN   0x02
#define LB_TCP_FLAG_RST   0x04
#define LB_TCP_FLAG_ACK   0x10

#define LB_IP_OFF_CHECK   (LB_ETH_HLEN + 10)
#define LB_IP_OFF_SADDR   (LB_ETH_HLEN + 12)
#define LB_IP_OFF_DADDR   (LB_ETH_HLEN + 16)

#ifndef TC_ACT_OK
#define TC_ACT_OK       0
#define TC_ACT_SHOT     2
#define TC_ACT_REDIRECT 7
#endif

/* The 5-tuple of a packet (or of the packet an ICMP error quotes), in
 * network order as on the wire. */
struct lb4_tuple {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8   proto;
	__u8   tcp_flags; /* TCP only: the flags byte */
	__u8   pad[2];
};

/* What lb4_parse found: the tuple plus where things are. */
struct lb4_packet {
	struct lb4_tuple tuple;
	__u32 l4_off;   /* offset of the TCP/UDP/ICMP header from the start of the frame */
	__u8  icmp_type;
	/* issue 10 item 8 (frag.h): */
	__u8  frag;     /* LB_FRAG_NONE, LB_FRAG_FIRST (MF set, offset 0) or LB_FRAG_LATER (ports from the fragment map) */
	__be16 ip_id;   /* IPv4 identification (the fragment map's key) */
};

#define LB_FRAG_NONE  0
#define LB_FRAG_FIRST 1
#define LB_FRAG_LATER 2

static __always_inline __u32 lb4_l4_csum_off(__u8 proto, __u32 l4_off)
{
	return proto == LB_PROTO_TCP ? l4_off + 16 : l4_off + 6;
}

/*
 * Parse Ethernet + IPv4 + the first bytes of TCP/UDP/ICMP. Returns 0 for a
 * packet we may translate, -1 for anything else (not IPv4, a fragment other
 * than the first, truncated, another protocol): such packets pass untouched.
 * Fragments are not reassembled: a first fragment carries the ports; the TC
 * path remembers them for the later ones (frag.h, lb4_tc_parse).
 */
static __always_inline int lb4_parse(struct __sk_buff *skb, struct lb4_packet *pkt)
{
	struct iphdr ip;
	__u32 ihl;

	if (skb->protocol != bpf_htons(LB_ETH_P_IP))
		return -1;
	if (bpf_skb_load_bytes(skb, LB_ETH_HLEN, &ip, sizeof(ip)) < 0)
		return -1;
	if (ip.version != 4 || ip.ihl < 5)
		return -1;
	if (ip.frag_off & bpf_htons(LB_IP_OFFSET))
		return -1;
	ihl = ip.ihl * 4;
	pkt->frag = (ip.frag_off & bpf_htons(LB_IP_MF)) ? LB_FRAG_FIRST : LB_FRAG_NONE;
	pkt->ip_id = ip.id;
	pkt->l4_off = LB_ETH_HLEN + ihl;
	pkt->tuple.saddr = ip.saddr;
	pkt->tuple.daddr = ip.daddr;
	pkt->tuple.proto = ip.protocol;
	pkt->tuple.tcp_flags = 0;
	pkt->icmp_type = 0;
	if (ip.protocol == LB_PROTO_TCP || ip.protocol == LB_PROTO_UDP) {
		__be16 ports[2];

		if (bpf_skb_load_bytes(skb, pkt->l4_off, ports, sizeof(ports)) < 0)
			return -1;
		pkt->tuple.sport = ports[0];
		pkt->tuple.dport = ports[1];
		if (ip.protocol == LB_PROTO_TCP &&
		    bpf_skb_load_bytes(skb, pkt->l4_off + 13, &pkt->tuple.tcp_flags, 1) < 0)
			return -1;
		return 0;
	}
	if (ip.protocol == LB_IPPROTO_ICMP) {
		pkt->tuple.sport = 0;
		pkt->tuple.dport = 0;
		if (bpf_skb_load_bytes(skb, pkt->l4_off, &pkt->icmp_type, 1) < 0)
			return -1;
		return 0;
	}
	return -1;
}

static __always_inline bool lb4_icmp_is_error(__u8 type)
{
	return type == LB_ICMP_DEST_UNREACH || type == LB_ICMP_TIME_EXCEEDED ||
	       type == LB_ICMP_PARAMETERPROB;
}

/* Replace a 4-byte address at ip_field_off (an IPv4 header's saddr/daddr at
 * offset ip_off) and fix that header's checksum; csum_l4_off >= 0 also fixes
 * a TCP/UDP checksum that covers the address through the pseudo-header. */
static __always_inline int
lb4_set_addr(struct __sk_buff *skb, __u32 check_off, __u32 field_off, __be32 from, __be32 to,
	     int csum_l4_off, __u64 l4_flags)
{
	if (from == to)
		return 0;
	if (csum_l4_off >= 0 &&
	    bpf_l4_csum_replace(skb, csum_l4_off, from, to, l4_flags | BPF_F_PSEUDO_HDR | 4) < 0)
		return -1;
	if (bpf_l3_csum_replace(skb, check_off, from, to, 4) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, field_off, &to, 4, 0);
}

/* Replace a 2-byte port at field_off and fix the checksum at csum_off (the
 * packet's own TCP/UDP checksum, or the ICMP checksum for a quoted header). */
static __always_inline int
lb4_set_port(struct __sk_buff *skb, __u32 csum_off, __u32 field_off, __be16 from, __be16 to,
	     __u64 l4_flags)
{
	if (from == to)
		return 0;
	if (bpf_l4_csum_replace(skb, csum_off, from, to, l4_flags | 2) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, field_off, &to, 2, 0);
}

/*
 * The packet an ICMP error quotes: its IPv4 header starts 8 bytes into the
 * ICMP message and at least 8 bytes of its L4 header follow (RFC 792), which
 * hold both ports for TCP and UDP.
 */
struct lb4_icmp_quote {
	struct lb4_tuple tuple; /* the quoted packet as it was sent */
	__u32 ip_off;           /* its IPv4 header */
	__u32 l4_off;           /* its TCP/UDP header */
};

static __always_inline int
lb4_parse_icmp_quote(struct __sk_buff *skb, const struct lb4_packet *pkt, struct lb4_icmp_quote *q)
{
	struct iphdr ip;
	__be16 ports[2];

	q->ip_off = pkt->l4_off + 8;
	if (bpf_skb_load_bytes(skb, q->ip_off, &ip, sizeof(ip)) < 0)
		return -1;
	if (ip.version != 4 || ip.ihl < 5)
		return -1;
	if (ip.protocol != LB_PROTO_TCP && ip.protocol != LB_PROTO_UDP)
		return -1;
	q->l4_off = q->ip_off + ip.ihl * 4;
	if (bpf_skb_load_bytes(skb, q->l4_off, ports, sizeof(ports)) < 0)
		return -1;
	q->tuple.saddr = ip.saddr;
	q->tuple.daddr = ip.daddr;
	q->tuple.sport = ports[0];
	q->tuple.dport = ports[1];
	q->tuple.proto = ip.protocol;
	q->tuple.tcp_flags = 0;
	return 0;
}

/*
 * Rewrite an ICMP error: the outer addresses to outer_to_saddr/daddr and the
 * quoted packet to quote_to. ICMP has no pseudo-header, so outer addresses
 * touch only the outer IPv4 checksum. The quoted IPv4 header gets its own
 * checksum fixed, which leaves its one's-complement sum, and so the ICMP
 * checksum, unchanged; the quoted ports do change the ICMP checksum. The
 * quoted TCP/UDP checksum is left as is (it often is not even quoted; no
 * receiver checks it, as with netfilter's ICMP NAT for a truncated quote).
 */
static __always_inline int
lb4_rewrite_icmp_error(struct __sk_buff *skb, const struct lb4_packet *pkt,
		       const struct lb4_icmp_quote *q, __be32 outer_to_saddr,
		       __be32 outer_to_daddr, const struct lb4_tuple *quote_to)
{
	__u32 icmp_csum = pkt->l4_off + 2;
	__u32 q_check = q->ip_off + 10;

	if (lb4_set_addr(skb, LB_IP_OFF_CHECK, LB_IP_OFF_SADDR, pkt->tuple.saddr, outer_to_saddr,
			 -1, 0) < 0)
		return -1;
	if (lb4_set_addr(skb, LB_IP_OFF_CHECK, LB_IP_OFF_DADDR, pkt->tuple.daddr, outer_to_daddr,
			 -1, 0) < 0)
		return -1;
	if (lb4_set_addr(skb, q_check, q->ip_off + 12, q->tuple.saddr, quote_to->saddr, -1, 0) < 0)
		return -1;
	if (lb4_set_addr(skb, q_check, q->ip_off + 16, q->tuple.daddr, quote_to->daddr, -1, 0) < 0)
		return -1;
	if (lb4_set_port(skb, icmp_csum, q->l4_off, q->tuple.sport, quote_to->sport, 0) < 0)
		return -1;
	return lb4_set_port(skb, icmp_csum, q->l4_off + 2, q->tuple.dport, quote_to->dport, 0);
}

#endif /* SLUICE_BPF_NAT_H */
