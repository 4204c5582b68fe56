/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xdp_fc.h: the FIB cache of XDP's known-flow path (SLUICE_MAP_XDP_FC; the
 * cache itself: fib_cache.h). Its slots' `action` is XDP_TX or XDP_REDIRECT.
 * Only successful lookups are cached: NO_NEIGH, no route, MTU, and devices
 * without XDP still pass the packet to TC every time (lb_xdp_fib_action).
 */
#ifndef SLUICE_BPF_XDP_FC_H
#define SLUICE_BPF_XDP_FC_H

#include "fib_cache.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lb4_xdp_fib_cache);
	__uint(max_entries, SLUICE_XDP_FC_SLOTS);
} SLUICE_MAP_XDP_FC SEC(".maps");

static __always_inline struct lb4_xdp_fib_cache *lb4_xdp_fc_slot(const struct lb4_tuple *to, __u32 ifindex)
{
	return lb4_fc_slot(&SLUICE_MAP_XDP_FC, to, ifindex);
}

#endif /* SLUICE_BPF_XDP_FC_H */
