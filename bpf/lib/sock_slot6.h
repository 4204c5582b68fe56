/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_slot6.h: an IPv6 UDP socket's first frontend pair in its slot of
 * SLUICE_MAP_SOCK_USLOT6 (lb6_sock_uslot in sluice_abi.h), the twin of
 * sock_slot.h's lb4_sock_uslot, with the same reads and writes: writers
 * take the lock and move seq (odd while writing, even after), recvmsg6 and
 * sendmsg6 read without the lock under that sequence count on x86-64
 * (SLUICE_ORDERED_LOADS; elsewhere the lock), issue 12. Apart from
 * sock_slot.h so that IPv4's read path can change without touching IPv6's.
 */
#ifndef SLUICE_BPF_SOCK_SLOT6_H
#define SLUICE_BPF_SOCK_SLOT6_H

#include "sock_slot.h"

_Static_assert((SLUICE_SOCK_USLOTS6 & (SLUICE_SOCK_USLOTS6 - 1)) == 0, "SLUICE_SOCK_USLOTS6 is a power of two (the slot index is masked)");
/* The head of the TCP slots, with seq where they keep a rev-NAT id (as
 * lb4_sock_uslot). */
_Static_assert(__builtin_offsetof(struct lb6_sock_uslot, seq) == __builtin_offsetof(struct lb_sock_slot_head, rev_nat_id) &&
	       __builtin_offsetof(struct lb6_sock_uslot, cookie) == __builtin_offsetof(struct lb_sock_slot_head, cookie),
	       "lb6_sock_uslot starts with lock, seq, cookie");

/* The slot of this cookie; NULL only when the agent made the array smaller
 * than SLUICE_SOCK_USLOTS6 (the socket then keeps its pairs in storage). */
static __always_inline struct lb6_sock_uslot *lb6_sock_uslot(__u64 cookie)
{
	__u32 at = (__u32)cookie & (SLUICE_SOCK_USLOTS6 - 1);

	return bpf_map_lookup_elem(&SLUICE_MAP_SOCK_USLOT6, &at);
}

/* Writers (the caller holds slot->lock): seq odd before the first store,
 * even after the last (see lb4_sock_uslot_write_begin). */
static __always_inline __u32 lb6_sock_uslot_write_begin(struct lb6_sock_uslot *slot)
{
	__u32 odd = slot->seq | 1;

	*(volatile __u32 *)&slot->seq = odd;
	lb_compiler_barrier();
	return odd;
}

static __always_inline void lb6_sock_uslot_write_end(struct lb6_sock_uslot *slot, __u32 odd)
{
	lb_compiler_barrier();
	*(volatile __u32 *)&slot->seq = odd + 1;
}

/* The locked read (every architecture; the sequence count's fallback). */
static __always_inline bool lb6_sock_uslot_read_locked(struct lb6_sock_uslot *slot, __u64 cookie, struct lb6_sock_uslot *out)
{
	bool found = false;

	bpf_spin_lock(&slot->lock);
	if (slot->cookie == cookie) {
		out->cookie = cookie;
		out->pair = slot->pair;
		found = true;
	}
	bpf_spin_unlock(&slot->lock);
	return found;
}

/*
 * *out: a copy of this socket's UDP slot, when the slot is its own
 * (lb4_sock_uslot_read's rules). Only this socket writes its cookie into a
 * slot: another cookie, seen without the lock, is not its own. With
 * SLUICE_ORDERED_LOADS (x86-64) the copy is taken without the lock: seq
 * (even), cookie, pair, seq again; whole when both seq reads are equal.
 * Otherwise, or after meeting a write LB_USLOT_SEQ_TRIES times, the lock.
 */
static __always_inline bool lb6_sock_uslot_read(struct lb6_sock_uslot *slot, __u64 cookie, struct lb6_sock_uslot *out)
{
#ifdef SLUICE_ORDERED_LOADS
	int try;
#endif

	if (!slot || *(volatile __u64 *)&slot->cookie != cookie)
		return false;
#ifdef SLUICE_ORDERED_LOADS
#pragma unroll
	for (try = 0; try < LB_USLOT_SEQ_TRIES; try++) {
		__u32 seq = *(volatile __u32 *)&slot->seq;

		if (seq & 1)
			continue;
		lb_compiler_barrier();
		if (slot->cookie != cookie)
			break; /* freed (or claimed by another socket) meanwhile: not its own */
		out->pair = slot->pair;
		lb_compiler_barrier();
		if (*(volatile __u32 *)&slot->seq == seq) {
			out->cookie = cookie;
			return true;
		}
	}
#endif
	return lb6_sock_uslot_read_locked(slot, cookie, out);
}

/* Write want (cookie, pair) into the slot when it is free or already want's
 * socket's. */
static __always_inline bool lb6_sock_uslot_claim(struct lb6_sock_uslot *slot, const struct lb6_sock_uslot *want)
{
	bool claimed = false;
	__u32 odd;

	if (!slot)
		return false;
	bpf_spin_lock(&slot->lock);
	if (slot->cookie == 0 || slot->cookie == want->cookie) {
		odd = lb6_sock_uslot_write_begin(slot);
		slot->cookie = want->cookie;
		slot->pair = want->pair;
		lb6_sock_uslot_write_end(slot, odd);
		claimed = true;
	}
	bpf_spin_unlock(&slot->lock);
	return claimed;
}

static __always_inline bool lb6_sock_uslot_free(__u64 cookie)
{
	struct lb6_sock_uslot *slot = lb6_sock_uslot(cookie);
	bool freed = false;
	__u32 odd;

	if (!slot || *(volatile __u64 *)&slot->cookie != cookie) /* not its own (see lb6_sock_uslot_read) */
		return false;
	bpf_spin_lock(&slot->lock);
	if (slot->cookie == cookie) {
		odd = lb6_sock_uslot_write_begin(slot);
		slot->cookie = 0;
		lb6_sock_uslot_write_end(slot, odd);
		freed = true;
	}
	bpf_spin_unlock(&slot->lock);
	return freed;
}

#endif /* SLUICE_BPF_SOCK_SLOT6_H */
