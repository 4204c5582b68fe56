/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reject.h: kube-proxy's REJECT at TC. A packet to a frontend without any
 * endpoint is turned, in place, into an ICMP port unreachable from the
 * frontend to the client (what iptables' REJECT and nftables' reject send,
 * TCP included), quoting the packet's IPv4 header and first 8 payload bytes
 * (RFC 792), with the MAC addresses swapped, and sent back out of the device
 * it came in on. Used by the pod-veth path (into the pod) and the
 * north-south path (back towards the client or its router). A packet with
 * IPv4 options or a GSO packet (never a first packet in practice) is
 * dropped instead. No rate limit (the kernel's icmp_ratelimit does not see
 * these): the reply is never larger than the packet it answers.
 */
#ifndef SLUICE_BPF_REJECT_H
#define SLUICE_BPF_REJECT_H

#include "nat.h"
#include "pmtu.h" /* lb_csum_fold */

#define LB_ICMP_PORT_UNREACH 3
#define LB_IP_HLEN           20
/* An ICMP error quotes the offending IPv4 header and the first 8 bytes after it. */
#define LB_ICMP_QUOTE_LEN    (LB_IP_HLEN + 8)

/* The reply: IPv4 + ICMP header + quote, built whole. */
struct lb4_icmp_unreach {
	struct iphdr ip;
	__u8   type;
	__u8   code;
	__sum16 checksum;
	__u32  unused;
	__u8   quote[LB_ICMP_QUOTE_LEN];
};

/* TC_ACT_SHOT when no reply could be built, else the redirect's verdict. */
static __always_inline int lb4_icmp_reject(struct __sk_buff *skb, const struct lb4_packet *pkt)
{
	struct lb4_icmp_unreach r = {};
	__u8 eth[LB_ETH_HLEN];
	__s64 sum;

	if (pkt->l4_off != LB_ETH_HLEN + LB_IP_HLEN || skb->gso_size)
		return TC_ACT_SHOT;
	if (bpf_skb_load_bytes(skb, 0, eth, sizeof(eth)) < 0 ||
	    bpf_skb_load_bytes(skb, LB_ETH_HLEN, r.quote, sizeof(r.quote)) < 0)
		return TC_ACT_SHOT;

	r.type = LB_ICMP_DEST_UNREACH;
	r.code = LB_ICMP_PORT_UNREACH;
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&r.type, 8 + LB_ICMP_QUOTE_LEN, 0);
	if (sum < 0)
		return TC_ACT_SHOT;
	r.checksum = lb_csum_fold(sum);

	r.ip.version = 4;
	r.ip.ihl = 5;
	r.ip.tot_len = bpf_htons(sizeof(r));
	r.ip.ttl = 64;
	r.ip.protocol = LB_IPPROTO_ICMP;
	r.ip.saddr = pkt->tuple.daddr;
	r.ip.daddr = pkt->tuple.saddr;
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&r.ip, LB_IP_HLEN, 0);
	if (sum < 0)
		return TC_ACT_SHOT;
	r.ip.check = lb_csum_fold(sum);

	if (bpf_skb_change_tail(skb, LB_ETH_HLEN + sizeof(r), 0) < 0 ||
	    bpf_skb_store_bytes(skb, 0, eth + 6, 6, 0) < 0 ||
	    bpf_skb_store_bytes(skb, 6, eth, 6, 0) < 0 ||
	    bpf_skb_store_bytes(skb, LB_ETH_HLEN, &r, sizeof(r), 0) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

#endif /* SLUICE_BPF_REJECT_H */
