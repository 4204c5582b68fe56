/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fib_cache.h: a cache of successful IPv4 bpf_fib_lookup answers, shared by
 * XDP's known-flow path (xdp_fc.h, SLUICE_MAP_XDP_FC) and TC's redirect of a
 * translated packet (tc_fc.h, SLUICE_MAP_TC_FC); native/sluice_abi.h has the
 * slot layout and the slot function.
 *
 * bpf_fib_lookup is the largest single step of a known flow's packet (a
 * route lookup and a neighbour lookup, every packet, for the same answer).
 * The answer depends only on the lookup's inputs, so a slot keeps it tagged
 * with all of them (arrival device, addresses, ports, protocol, TOS) and the
 * largest total length the MTU check passed: a hit gives exactly what the
 * lookup gave then. What the tag cannot see is the kernel's tables changing
 * (a route, a neighbour's MAC or its loss, a device's MTU): a slot answers
 * for SLUICE_XDP_FC_TTL_NS only, so such a change is seen within that time
 * (the agent does not flush it: the kernel's tables are not its).
 *
 * Each user has its own per-CPU array: no two CPUs write one slot, and a
 * slot is filled and read by the same packet's program (neither XDP nor TC
 * ingress, which runs with bottom halves off, nests on a CPU). Direct-mapped:
 * the slot index is computed, and the verifier inlines the array lookup (no
 * hashing call). Two flows in one slot alternate full lookups, as before.
 * Only successful lookups are cached.
 */
#ifndef SLUICE_BPF_FIB_CACHE_H
#define SLUICE_BPF_FIB_CACHE_H

#include "maps.h"

_Static_assert(SLUICE_XDP_FC_SLOTS == 1 << SLUICE_XDP_FC_SLOTS_LOG2, "FIB cache size");

/* The slot of `map` (a per-CPU array of SLUICE_XDP_FC_SLOTS) for a lookup's
 * inputs (`to`: the packet as it will be sent). */
static __always_inline struct lb4_xdp_fib_cache *lb4_fc_slot(void *map, const struct lb4_tuple *to, __u32 ifindex)
{
	__u32 ports = ((__u32)to->sport << 16) | to->dport;
	__u32 slot = sluice_bit_slot(to->saddr ^ to->daddr ^ ports ^ ifindex, SLUICE_XDP_FC_SLOTS_LOG2);

	return bpf_map_lookup_elem(map, &slot);
}

/* Does slot `c` hold a fresh answer for exactly these inputs and this length? */
static __always_inline bool
lb4_fc_hit(const struct lb4_xdp_fib_cache *c, const struct lb4_tuple *to, __u32 ifindex, __u8 tos,
	   __u16 tot_len, __u64 now)
{
	return c->expires_ns > now && c->daddr == to->daddr && c->saddr == to->saddr &&
	       c->sport == to->sport && c->dport == to->dport && c->in_ifindex == ifindex &&
	       c->proto == to->proto && c->tos == tos && tot_len <= c->max_len;
}

/* Keep a successful lookup's answer (`action`: what the user does with it). */
static __always_inline void
lb4_fc_fill(struct lb4_xdp_fib_cache *c, const struct bpf_fib_lookup *fib, const struct lb4_tuple *to,
	    __u32 ifindex, __u8 tos, __u16 tot_len, int action, __u64 now)
{
	c->expires_ns = now + SLUICE_XDP_FC_TTL_NS;
	c->saddr = to->saddr;
	c->daddr = to->daddr;
	c->sport = to->sport;
	c->dport = to->dport;
	c->in_ifindex = ifindex;
	c->out_ifindex = fib->ifindex;
	c->max_len = tot_len;
	c->proto = to->proto;
	c->tos = tos;
	__builtin_memcpy(c->smac, fib->smac, 6);
	__builtin_memcpy(c->dmac, fib->dmac, 6);
	c->action = action;
}

#endif /* SLUICE_BPF_FIB_CACHE_H */
