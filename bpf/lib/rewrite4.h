/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rewrite4.h: the IPv4 address/port rewrite of a known flow's packets
 * (issue 12), written in place. lb4_rewrite (nat.h) makes up to ten helper
 * calls per packet (a store, an L3 and an L4 checksum replace per field);
 * here the addresses go in one bpf_skb_store_bytes (they are adjacent), the
 * ports in another, the IPv4 header checksum gets one bpf_l3_csum_replace by
 * the combined difference (csum.h), and the L4 checksum at most two
 * bpf_l4_csum_replace calls by difference: at most 5 helper calls.
 * No direct packet write: with one anywhere in a TC program the verifier adds
 * a prologue that unclones (bpf_skb_pull_data(skb, 0)) every cloned skb, and
 * TCP transmits clones, so the node's own non-Service TCP through
 * sluice_tc_egress / sluice_pod_egress paid about 100 ns a packet for it
 * (bench/uncloneprogstats.ts). The helpers make only rewritten packets
 * writable, as before.
 * The L4 checksum stays with the kernel because only it
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
 * header, whose own sum the update keeps), so it is updated by the plain difference.
 *
 * lb4_rewrite_packed is a global (non-inlined) BPF function: the verifier
 * checks it once, not at each of its call sites in the flow paths.
 */
#ifndef SLUICE_BPF_REWRITE4_H
#define SLUICE_BPF_REWRITE4_H

#include "nat.h"
#include "csum.h"


/*
 * The rewrite, its arguments packed in registers (a global function takes at
 * most 5, and a struct on the caller's stack would add to the deepest call
 * chain's 512 bytes, pmtu.h's): `from` and `to` are the addresses as
 * saddr << 32 | daddr, `ports` from_sport << 48 | from_dport << 32 |
 * to_sport << 16 | to_dport, all as on the wire; `meta` is l4_off |
 * proto << 32 | frag << 40 (lb4_packet's fields; LB_FRAG_LATER: no L4 header).
 */
__noinline int lb4_rewrite_packed(struct __sk_buff *skb, __u64 from, __u64 to, __u64 ports_arg, __u64 meta)
{
	__u32 addr_diff = 0, port_diff = 0, csum_off, l4_off;
	__u64 buf; /* the bytes stored: both addresses, then both ports */
	__u64 mm0;

	l4_off = (__u32)meta;
	if (l4_off < LB_ETH_HLEN + sizeof(struct iphdr))
		return -1;
	/* A difference is 0 only for no change (each term ~from + to has
	 * bits set unless from is all ones and to is 0, which adds nothing
	 * either), so it doubles as the "changed" flag: the stack frame stays
	 * small (the deepest call chain of tc_ingress is at 512 bytes). */
	if ((__u32)(from >> 32) != (__u32)(to >> 32))
		addr_diff = lb_csum_diff4(addr_diff, from >> 32, to >> 32);
	if ((__u32)from != (__u32)to)
		addr_diff = lb_csum_diff4(addr_diff, from, to);
	if (addr_diff) {
		/* saddr and daddr are adjacent: one store of both (an unchanged
		 * one is written with its own value). DNAT of the original
		 * direction (saddr kept, no IP options, ports changed): daddr
		 * and both ports are the 8 adjacent bytes, one store instead of
		 * two; bit 48 of meta then tells the port step below (a flag
		 * of its own costs a spill, and the stack has no byte left). */
		__u32 off = LB_ETH_HLEN + __builtin_offsetof(struct iphdr, saddr);

		buf = (__u64)(__u32)(to >> 32) | (__u64)(__u32)to << 32;
		if ((__u32)(from >> 32) == (__u32)(to >> 32) && l4_off == LB_ETH_HLEN + sizeof(struct iphdr) &&
		    (__u8)(meta >> 40) != LB_FRAG_LATER && (__u32)(ports_arg >> 32) != (__u32)ports_arg) {
			off = LB_ETH_HLEN + __builtin_offsetof(struct iphdr, daddr);
			buf = (__u64)(__u32)to | (__u64)(__u16)(ports_arg >> 16) << 32 | (__u64)(__u16)ports_arg << 48;
			meta |= 1ULL << 48;
		}
		if (bpf_skb_store_bytes(skb, off, &buf, 8, 0) < 0 ||
		    bpf_l3_csum_replace(skb, LB_ETH_HLEN + __builtin_offsetof(struct iphdr, check), 0, addr_diff, 0) < 0)
			return -1;
	}
	/* issue 10 item 8: a later fragment has no L4 header; the first
	 * fragment's checksum already covers the new pseudo-header. */
	if ((__u8)(meta >> 40) == LB_FRAG_LATER)
		return 0;
	if ((__u16)(ports_arg >> 48) != (__u16)(ports_arg >> 16))
		port_diff = lb_csum_diff2(port_diff, ports_arg >> 48, ports_arg >> 16);
	if ((__u16)(ports_arg >> 32) != (__u16)ports_arg)
		port_diff = lb_csum_diff2(port_diff, ports_arg >> 32, ports_arg);
	if (port_diff && !(meta >> 48)) {
		buf = (__u64)(__u16)(ports_arg >> 16) | (__u64)(__u16)ports_arg << 16;
		if (bpf_skb_store_bytes(skb, l4_off, &buf, 4, 0) < 0)
			return -1;
	}
	csum_off = lb4_l4_csum_off((__u8)(meta >> 32), l4_off);
	mm0 = (__u8)(meta >> 32) == LB_PROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	if (addr_diff &&
	    bpf_l4_csum_replace(skb, csum_off, 0, addr_diff, mm0 | BPF_F_PSEUDO_HDR) < 0)
		return -1;
	if (port_diff && bpf_l4_csum_replace(skb, csum_off, 0, port_diff, mm0) < 0)
		return -1;
	return 0;
}

/*
 * Rewrite a TCP/UDP packet from its tuple to `to`: addresses, ports, the
 * IPv4 header checksum and the L4 checksum. Only changed fields are touched.
 * Returns 0 or -1 (the caller drops: a half-rewritten packet must not leave).
 */
static __always_inline int
lb4_rewrite(struct __sk_buff *skb, const struct lb4_packet *pkt, const struct lb4_tuple *to)
{
	const struct lb4_tuple *from = &pkt->tuple;

	return lb4_rewrite_packed(skb,
				  (__u64)from->saddr << 32 | from->daddr,
				  (__u64)to->saddr << 32 | to->daddr,
				  (__u64)from->sport << 48 | (__u64)from->dport << 32 |
					  (__u64)to->sport << 16 | to->dport,
				  (__u64)pkt->frag << 40 | (__u64)from->proto << 32 | pkt->l4_off);
}

#endif /* SLUICE_BPF_REWRITE4_H */
