/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_slot6.h: an IPv6 UDP socket's first frontend pair in its slot of
 * SLUICE_MAP_SOCK_USLOT6 (lb6_sock_uslot in sluice_abi.h), the twin of
 * sock_slot.h's lb4_sock_uslot. The slot starts with the shared head
 * (lb_sock_slot_head), so claim, read and free are sock_slot.h's one code;
 * only where the slot lives and how big the pair is differ. Apart from
 * sock_slot.h so that IPv4's read path can change without touching IPv6's.
 */
#ifndef SLUICE_BPF_SOCK_SLOT6_H
#define SLUICE_BPF_SOCK_SLOT6_H

#include "sock_slot.h"

_Static_assert((SLUICE_SOCK_USLOTS6 & (SLUICE_SOCK_USLOTS6 - 1)) == 0, "SLUICE_SOCK_USLOTS6 is a power of two (the slot index is masked)");
LB_SOCK_SLOT_HEAD_OF(lb6_sock_uslot);

/* The slot of this cookie; NULL only when the agent made the array smaller
 * than SLUICE_SOCK_USLOTS6 (the socket then keeps its pairs in storage). */
static __always_inline struct lb6_sock_uslot *lb6_sock_uslot(__u64 cookie)
{
	__u32 at = (__u32)cookie & (SLUICE_SOCK_USLOTS6 - 1);

	return bpf_map_lookup_elem(&SLUICE_MAP_SOCK_USLOT6, &at);
}

/* *out: a copy of this socket's UDP slot (taken under the lock), when the
 * slot is its own. */
static __always_inline bool lb6_sock_uslot_read(struct lb6_sock_uslot *slot, __u64 cookie, struct lb6_sock_uslot *out)
{
	return slot && lb_sock_slot_read(slot, cookie, out, LB_SOCK_SLOT_WORDS(lb6_sock_uslot));
}

/* Write want (cookie, rev-NAT id, pair) into the slot when it is free or
 * already want's socket's. */
static __always_inline bool lb6_sock_uslot_claim(struct lb6_sock_uslot *slot, const struct lb6_sock_uslot *want)
{
	return slot && lb_sock_slot_claim(slot, want, LB_SOCK_SLOT_WORDS(lb6_sock_uslot));
}

static __always_inline bool lb6_sock_uslot_free(__u64 cookie)
{
	return lb_sock_slot_release(lb6_sock_uslot(cookie), cookie);
}

#endif /* SLUICE_BPF_SOCK_SLOT6_H */
