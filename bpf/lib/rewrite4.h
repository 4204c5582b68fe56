/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rewrite4.h: the IPv4 address/port rewrite of a known flow's packets
 * (issue 12), written in place. lb4_rewrite (nat.h) makes up to ten helper
 * calls per packet (a store, an L3 and an L4 checksum replace per field);
 * here one bounds check admits direct writes of the addresses, the ports and
 * the IPv4 header checksum (one update by the combined difference, csum.h),
 * and the L4 checksum gets at most two bpf_l4_csum_replace calls by
 * difference (size 0). The L4 checksum stays with the kernel because only it
 * knows the skb's checksum state:
 *  - CHECKSUM_PARTIAL (a local socket's packet on a veth): the field holds
 *    the pseudo-header sum only, so the address change goes in un-complemented
 *    (BPF_F_PSEUDO_HDR) and the port change not at all (the device sums the
 *    ports later);
 *  - CHECKSUM_COMPLETE: the address change alters the L4 field without a
 *    compensating change in the data, so skb->csum is updated too
 *    (BPF_F_PSEUDO_HDR); ports and their checksum change together, leaving the
 *    sum of the data as it was;
 *  - otherwise the field gets the RFC 1624 update.
 * A UDP checksum of 0 stays 0 and a new sum of 0 is sent as 0xffff
 * (BPF_F_MARK_MANGLED_0), as in lb4_rewrite. The IPv4 header checksum is not
 * in any checksum state's scope beyond itself (a COMPLETE sum covers the
 * header, whose own sum the update keeps), so it is written directly.
 *
 * lb4_rewrite_packed is a global (non-inlined) BPF function: the verifier
 * checks it once, not at each of its call sites in the flow paths.
 */
#ifndef SLUICE_BPF_REWRITE4_H
#define SLUICE_BPF_REWRITE4_H

#include "nat.h"
#include "csum.h"

/* What lb4_rewrite_packed needs, in one block on the caller's stack (a
 * global function takes at most 5 arguments, and every byte is set). A
 * BPF-to-BPF argument, not ABI: no lb_ prefix, so scripts/gen-abi.js leaves
 * it out of src/abi/generated.ts. */
struct rewrite4_args {
	__be32 from_saddr, from_daddr; /* the packet as it is */
	__be32 to_saddr, to_daddr;     /* as it must leave */
	__be16 from_sport, from_dport;
	__be16 to_sport, to_dport;
	__u32 l4_off;                  /* lb4_packet.l4_off */
	__u8  proto;                   /* LB_PROTO_TCP or LB_PROTO_UDP */
	__u8  frag;                    /* lb4_packet.frag: LB_FRAG_LATER has no L4 header */
	__u8  pad[2];
};

/* The largest IPv4 header (IHL 15) after Ethernet. */
#define LB4_REWRITE_MAX_L4_OFF (LB_ETH_HLEN + 60)

__noinline int lb4_rewrite_packed(struct __sk_buff *skb, const struct rewrite4_args *rw)
{
	__u32 need, addr_diff = 0, port_diff = 0, csum_off;
	__u64 l4_off; /* 64 bits: no zero-extended copy for the bound to miss */
	bool addr_changed = false, port_changed = false, l4;
	void *data, *end;
	struct iphdr *ip;
	__be16 *ports;
	__u64 mm0;

	if (!rw)
		return -1;
	l4_off = rw->l4_off;
	if (l4_off < LB_ETH_HLEN + sizeof(*ip))
		return -1;
	/* The bound the verifier needs for data + l4_off, checked on the very
	 * register used below: clang would otherwise fold both checks into one
	 * on l4_off - 34 (or on a zero-extended copy of a 32-bit l4_off), and
	 * the verifier cannot map either back. */
	barrier_var(l4_off);
	if (l4_off > LB4_REWRITE_MAX_L4_OFF)
		return -1;
	l4 = rw->frag != LB_FRAG_LATER;
	/* The headers are usually in the linear part; pull them when not. */
	need = l4 ? l4_off + 4 : LB_ETH_HLEN + sizeof(*ip);
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	if (data + need > end) {
		if (bpf_skb_pull_data(skb, need) < 0)
			return -1;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	ip = data + LB_ETH_HLEN;
	if ((void *)(ip + 1) > end)
		return -1;
	if (rw->from_saddr != rw->to_saddr) {
		addr_diff = lb_csum_diff4(addr_diff, rw->from_saddr, rw->to_saddr);
		ip->saddr = rw->to_saddr;
		addr_changed = true;
	}
	if (rw->from_daddr != rw->to_daddr) {
		addr_diff = lb_csum_diff4(addr_diff, rw->from_daddr, rw->to_daddr);
		ip->daddr = rw->to_daddr;
		addr_changed = true;
	}
	if (addr_changed)
		ip->check = lb_csum_replace_by_diff(ip->check, addr_diff);
	/* issue 10 item 8: a later fragment has no L4 header; the first
	 * fragment's checksum already covers the new pseudo-header. */
	if (!l4)
		return 0;
	ports = data + l4_off;
	if ((void *)(ports + 2) > end)
		return -1;
	if (rw->from_sport != rw->to_sport) {
		port_diff = lb_csum_diff2(port_diff, rw->from_sport, rw->to_sport);
		ports[0] = rw->to_sport;
		port_changed = true;
	}
	if (rw->from_dport != rw->to_dport) {
		port_diff = lb_csum_diff2(port_diff, rw->from_dport, rw->to_dport);
		ports[1] = rw->to_dport;
		port_changed = true;
	}
	/* From here on the helpers may move the packet: no pointer is used. */
	csum_off = lb4_l4_csum_off(rw->proto, l4_off);
	mm0 = rw->proto == LB_PROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	if (addr_changed &&
	    bpf_l4_csum_replace(skb, csum_off, 0, addr_diff, mm0 | BPF_F_PSEUDO_HDR) < 0)
		return -1;
	if (port_changed && bpf_l4_csum_replace(skb, csum_off, 0, port_diff, mm0) < 0)
		return -1;
	return 0;
}

/* lb4_rewrite's interface (nat.h) over lb4_rewrite_packed. */
static __always_inline int
lb4_rewrite_fast(struct __sk_buff *skb, const struct lb4_packet *pkt, const struct lb4_tuple *to)
{
	struct rewrite4_args rw;

	__builtin_memset(&rw, 0, sizeof(rw));
	rw.from_saddr = pkt->tuple.saddr;
	rw.from_daddr = pkt->tuple.daddr;
	rw.from_sport = pkt->tuple.sport;
	rw.from_dport = pkt->tuple.dport;
	rw.to_saddr = to->saddr;
	rw.to_daddr = to->daddr;
	rw.to_sport = to->sport;
	rw.to_dport = to->dport;
	rw.proto = pkt->tuple.proto;
	rw.l4_off = pkt->l4_off;
	rw.frag = pkt->frag;
	return lb4_rewrite_packed(skb, &rw);
}

#endif /* SLUICE_BPF_REWRITE4_H */
