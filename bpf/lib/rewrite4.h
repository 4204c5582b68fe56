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

/* The largest IPv4 header (IHL 15) after Ethernet. */
#define LB4_REWRITE_MAX_L4_OFF (LB_ETH_HLEN + 60)

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
	__u32 need, addr_diff = 0, port_diff = 0, csum_off;
	__u64 l4_off; /* 64 bits: no zero-extended copy for the bound to miss */
	void *data, *end;
	struct iphdr *ip;
	__be16 *ports;
	__u64 mm0;

	l4_off = (__u32)meta;
	if (l4_off < LB_ETH_HLEN + sizeof(*ip))
		return -1;
	/* The bound the verifier needs for data + l4_off, checked on the very
	 * register used below: clang would otherwise fold both checks into one
	 * on l4_off - 34 (or on a zero-extended copy of a 32-bit l4_off), and
	 * the verifier cannot map either back. */
	barrier_var(l4_off);
	if (l4_off > LB4_REWRITE_MAX_L4_OFF)
		return -1;
	/* The headers are usually in the linear part; pull them when not. */
	need = (__u8)(meta >> 40) == LB_FRAG_LATER ? LB_ETH_HLEN + sizeof(*ip) : l4_off + 4;
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
	/* A difference is 0 only for no change (each term ~from + to has
	 * bits set unless from is all ones and to is 0, which adds nothing
	 * either), so it doubles as the "changed" flag: the stack frame stays
	 * small (the deepest call chain of tc_ingress is at 512 bytes). */
	if ((__u32)(from >> 32) != (__u32)(to >> 32)) {
		addr_diff = lb_csum_diff4(addr_diff, from >> 32, to >> 32);
		ip->saddr = to >> 32;
	}
	if ((__u32)from != (__u32)to) {
		addr_diff = lb_csum_diff4(addr_diff, from, to);
		ip->daddr = to;
	}
	if (addr_diff)
		ip->check = lb_csum_replace_by_diff(ip->check, addr_diff);
	/* issue 10 item 8: a later fragment has no L4 header; the first
	 * fragment's checksum already covers the new pseudo-header. */
	if ((__u8)(meta >> 40) == LB_FRAG_LATER)
		return 0;
	ports = data + l4_off;
	if ((void *)(ports + 2) > end)
		return -1;
	if ((__u16)(ports_arg >> 48) != (__u16)(ports_arg >> 16)) {
		port_diff = lb_csum_diff2(port_diff, ports_arg >> 48, ports_arg >> 16);
		ports[0] = ports_arg >> 16;
	}
	if ((__u16)(ports_arg >> 32) != (__u16)ports_arg) {
		port_diff = lb_csum_diff2(port_diff, ports_arg >> 32, ports_arg);
		ports[1] = ports_arg;
	}
	/* From here on the helpers may move the packet: no pointer is used. */
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
