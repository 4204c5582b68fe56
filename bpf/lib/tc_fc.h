/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tc_fc.h: the FIB cache of TC's IPv4 redirect (SLUICE_MAP_TC_FC; the cache
 * itself: fib_cache.h, shared with XDP's known-flow path).
 *
 * Every SNATed packet TC rewrites (a NodePort flow's original packets, its
 * replies at ingress) is routed by bpf_fib_lookup and redirected
 * (nat_flow.h's lb4_tc_redirect); the lookup was most of a known flow's
 * packet time at TC. A slot keeps a successful (BPF_FIB_LKUP_RET_SUCCESS)
 * answer for SLUICE_XDP_FC_TTL_NS, tagged with the lookup's inputs: the
 * arrival device, the addresses (the tuple's ports and protocol too, which
 * only narrow the tag) and the largest IPv4 length the MTU check passed (0:
 * a GSO packet, which the lookup does not check). TC's lookup passes no TOS
 * (tos 0 in the tag). NO_NEIGH, no route and "fragmentation needed" are
 * never cached: those packets take the full lookup every time, as before.
 * Its own map, not XDP's: an XDP slot's answer was judged for XDP
 * (lb_xdp_fib_action), and its `action` is an XDP verdict.
 */
#ifndef SLUICE_BPF_TC_FC_H
#define SLUICE_BPF_TC_FC_H

#include "fib_cache.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lb4_xdp_fib_cache);
	__uint(max_entries, SLUICE_XDP_FC_SLOTS);
} SLUICE_MAP_TC_FC SEC(".maps");

static __always_inline struct lb4_xdp_fib_cache *lb4_tc_fc_slot(const struct lb4_tuple *to, __u32 ifindex)
{
	return lb4_fc_slot(&SLUICE_MAP_TC_FC, to, ifindex);
}

#endif /* SLUICE_BPF_TC_FC_H */
