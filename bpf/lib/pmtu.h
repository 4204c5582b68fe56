/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pmtu.h: path MTU discovery through the north-south TC path.
 *
 * A packet the TC path forwards itself (SNATed flows: bpf_redirect after a
 * FIB lookup) can be too big for the next hop, e.g. a 1 500-byte segment from
 * a client when the link towards the backend's node has a 1 280-byte MTU.
 * The kernel's own "fragmentation needed" would never reach the client: the
 * translated packet's source is a node address, so the stack would send the
 * error to itself. Like a router, the TC path answers instead: it restores
 * the packet as it arrived, turns it into ICMP type 3 code 4 carrying the
 * next hop's MTU and quoting the packet's IPv4 header and first 8 bytes
 * (RFC 792, RFC 1191), and sends it back out of the device the packet came
 * in on, from the address the sender talked to. The sender's PMTU discovery
 * does the rest. A too-big packet without DF cannot be fragmented here: it is
 * dropped and counted (LB_CNT_TC_TOO_BIG_DROP).
 *
 * The ICMP checksum is computed in full. The skb's checksum-offload state of
 * the original packet is not reset (no helper does that): on a veth from a
 * local socket (CHECKSUM_PARTIAL) the receiver treats the error as verified,
 * which is what it is.
 */
#ifndef SLUICE_BPF_PMTU_H
#define SLUICE_BPF_PMTU_H

#include "maps.h"
#include "nat.h"
#include "csum.h" /* lb_csum_fold */
#include "rewrite4.h" /* lb4_rewrite */

#define LB_IP_DF               0x4000
#define LB_ICMP_FRAG_NEEDED    4
#define LB_ICMP_QUOTE_L4_BYTES 8
#define LB_IPTOS_PREC_INTERNETCONTROL 0xc0

/* An ICMP "fragmentation needed" message after its IPv4 header. */
struct lb4_icmp_frag_needed {
	__u8   type;
	__u8   code;
	__u16  checksum;
	__be16 unused;
	__be16 mtu;                                   /* next-hop MTU (RFC 1191) */
	__u8   quote[20 + LB_ICMP_QUOTE_L4_BYTES];    /* the offending IPv4 header + 8 bytes */
};

/*
 * `arrived` is the packet as it came in, already rewritten to `to` when the
 * FIB said the next hop takes at most `mtu` bytes. Returns the verdict.
 */
static __always_inline int
lb4_pmtu_too_big(struct __sk_buff *skb, const struct lb4_packet *arrived, const struct lb4_tuple *to,
		 __u16 mtu)
{
	struct lb4_icmp_frag_needed icmp = {};
	struct lb4_packet xlated;
	struct iphdr ip = {};
	__u8 eth[LB_ETH_HLEN], mac[6];
	__u32 len = LB_ETH_HLEN + sizeof(ip) + sizeof(icmp);

	if (!arrived || arrived->frag == LB_FRAG_LATER)
		goto drop;
	/* Back to the packet as the sender sent it: that is what it must see quoted. */
	xlated = *arrived;
	xlated.tuple = *to;
	if (lb4_rewrite(skb, &xlated, &arrived->tuple) < 0)
		return TC_ACT_SHOT;
	if (bpf_skb_load_bytes(skb, 0, eth, sizeof(eth)) < 0 ||
	    bpf_skb_load_bytes(skb, LB_ETH_HLEN, icmp.quote, sizeof(icmp.quote)) < 0)
		goto drop;
	/* Only a plain 20-byte header quotes whole in 28 bytes; options are rare. */
	if (icmp.quote[0] != 0x45 || !(icmp.quote[6] & (LB_IP_DF >> 8)))
		goto drop;

	icmp.type = LB_ICMP_DEST_UNREACH;
	icmp.code = LB_ICMP_FRAG_NEEDED;
	icmp.mtu = bpf_htons(mtu);
	icmp.checksum = lb_csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)&icmp, sizeof(icmp), 0));

	ip.version = 4;
	ip.ihl = 5;
	ip.tos = LB_IPTOS_PREC_INTERNETCONTROL;
	ip.tot_len = bpf_htons(sizeof(ip) + sizeof(icmp));
	ip.ttl = 64;
	ip.protocol = LB_IPPROTO_ICMP;
	ip.saddr = arrived->tuple.daddr;
	ip.daddr = arrived->tuple.saddr;
	ip.check = lb_csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)&ip, sizeof(ip), 0));

	/* Back to the neighbour it came from: swap the MAC addresses. */
	__builtin_memcpy(mac, eth, 6);
	__builtin_memcpy(eth, eth + 6, 6);
	__builtin_memcpy(eth + 6, mac, 6);

	if (bpf_skb_change_tail(skb, len, 0) < 0 ||
	    bpf_skb_store_bytes(skb, 0, eth, sizeof(eth), BPF_F_INVALIDATE_HASH) < 0 ||
	    bpf_skb_store_bytes(skb, LB_ETH_HLEN, &ip, sizeof(ip), 0) < 0 ||
	    bpf_skb_store_bytes(skb, LB_ETH_HLEN + sizeof(ip), &icmp, sizeof(icmp), 0) < 0)
		goto drop;
	lb_count(LB_CNT_TC_FRAG_NEEDED_SENT);
	return bpf_redirect(skb->ingress_ifindex, 0);
drop:
	lb_count(LB_CNT_TC_TOO_BIG_DROP);
	return TC_ACT_SHOT;
}

#endif /* SLUICE_BPF_PMTU_H */
