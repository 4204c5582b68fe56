/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xdp_fc6.h: the FIB cache of XDP's known IPv6 flows (SLUICE_MAP_XDP_FC6),
 * xdp_fc.h's twin: the same slot count, TTL and rules (a slot answers only
 * for exactly the inputs of the lookup it keeps, for SLUICE_XDP_FC_TTL_NS;
 * only successful lookups are kept; per CPU, direct-mapped).
 *
 * Its own map rather than xdp_fc.h's with a wider tag: the IPv6 tag needs
 * 32 bytes of addresses and 4 of flow info, so a shared slot would be 72
 * bytes for IPv4 too (the IPv4 map's pinned layout would change) and the
 * families would evict each other; the verifier walks each family's compare
 * either way. Two 256-slot maps cost 12 + 18 KiB per CPU.
 */
#ifndef SLUICE_BPF_XDP_FC6_H
#define SLUICE_BPF_XDP_FC6_H

#include "xdp_fc.h"
#include "lb6.h"
#include "nat6.h" /* struct lb6_tuple */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_xdp_fib_cache);
	__uint(max_entries, SLUICE_XDP_FC_SLOTS);
} SLUICE_MAP_XDP_FC6 SEC(".maps");

/* The four 32-bit words of an address folded into one (slot hash only). */
static __always_inline __u32 lb6_xdp_fc_fold(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;

	return w[0] ^ w[1] ^ w[2] ^ w[3];
}

/* The slot of a lookup's inputs (`to`: the packet as it will be sent). */
static __always_inline struct lb6_xdp_fib_cache *lb6_xdp_fc_slot(const struct lb6_tuple *to, __u32 ifindex)
{
	__u32 ports = ((__u32)to->sport << 16) | to->dport;
	__u32 h = lb6_xdp_fc_fold(to->saddr) ^ lb6_xdp_fc_fold(to->daddr) ^ ports ^ ifindex;
	__u32 slot = sluice_bit_slot(h, SLUICE_XDP_FC_SLOTS_LOG2);

	return bpf_map_lookup_elem(&SLUICE_MAP_XDP_FC6, &slot);
}

/* Does slot `c` hold a fresh answer for exactly these inputs and this length? */
static __always_inline bool
lb6_xdp_fc_hit(const struct lb6_xdp_fib_cache *c, const struct lb6_tuple *to, __u32 ifindex, __be32 flowinfo,
	       __u32 len, __u64 now)
{
	return c->expires_ns > now && lb6_addr_equal(c->daddr, to->daddr) && lb6_addr_equal(c->saddr, to->saddr) &&
	       c->sport == to->sport && c->dport == to->dport && c->in_ifindex == ifindex && c->proto == to->proto &&
	       c->flowinfo == flowinfo && len <= c->max_len;
}

/* Keep a successful lookup's answer (`action`: XDP_TX or XDP_REDIRECT). */
static __always_inline void
lb6_xdp_fc_fill(struct lb6_xdp_fib_cache *c, const struct bpf_fib_lookup *fib, const struct lb6_tuple *to,
		__u32 ifindex, __be32 flowinfo, __u32 len, int action, __u64 now)
{
	c->expires_ns = now + SLUICE_XDP_FC_TTL_NS;
	lb6_addr_copy(c->saddr, to->saddr);
	lb6_addr_copy(c->daddr, to->daddr);
	c->flowinfo = flowinfo;
	c->sport = to->sport;
	c->dport = to->dport;
	c->in_ifindex = ifindex;
	c->out_ifindex = fib->ifindex;
	c->max_len = len; /* past 16 bits (a payload length near 64 KiB): cut, so smaller: only stricter */
	c->proto = to->proto;
	c->action = action;
	__builtin_memcpy(c->smac, fib->smac, 6);
	__builtin_memcpy(c->dmac, fib->dmac, 6);
}

#endif /* SLUICE_BPF_XDP_FC6_H */
