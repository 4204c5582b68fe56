/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_slot.h: a TCP socket's reverse pair in its slot of SLUICE_MAP_SOCK_SLOT4
 * (lb4_sock_slot in sluice_abi.h), shared by the socket hooks (sock.h) and
 * the stale-socket destroy (sock_destroy.h). Every access takes the slot's
 * lock and checks the cookie, so a slot never shows one socket another's pair.
 */
#ifndef SLUICE_BPF_SOCK_SLOT_H
#define SLUICE_BPF_SOCK_SLOT_H

#include "common.h"
#include "maps.h"

_Static_assert((SLUICE_SOCK_SLOTS4 & (SLUICE_SOCK_SLOTS4 - 1)) == 0, "SLUICE_SOCK_SLOTS4 is a power of two (the slot index is masked)");

/* The slot a TCP socket's pair goes to first (lb4_sock_slot in sluice_abi.h);
 * NULL only when the agent made the array smaller than SLUICE_SOCK_SLOTS4. */
static __always_inline struct lb4_sock_slot *lb4_sock_slot(__u64 cookie)
{
	__u32 at = (__u32)cookie & (SLUICE_SOCK_SLOTS4 - 1);

	return bpf_map_lookup_elem(&SLUICE_MAP_SOCK_SLOT4, &at);
}

/* The pair in this socket's slot, if the slot is its own and names this
 * backend (a copy taken under the lock). */
static __always_inline bool lb4_sock_slot_pair(__u64 cookie, __be32 address, __be16 port, struct lb4_sock_tcp *out)
{
	struct lb4_sock_slot *slot = lb4_sock_slot(cookie);
	bool found = false;

	if (!slot)
		return false;
	bpf_spin_lock(&slot->lock);
	if (slot->cookie == cookie && slot->backend_address == address && slot->backend_port == port) {
		out->frontend_address = slot->frontend_address;
		out->frontend_port = slot->frontend_port;
		out->rev_nat_id = slot->rev_nat_id;
		found = true;
	}
	bpf_spin_unlock(&slot->lock);
	return found;
}

/* Free this socket's slot, if it holds it. *lc_backend_id: the
 * least-connection count the slot held for it (0: none), which the caller
 * gives back (lc4_sock_give_back): the slot forgets it here, under the lock,
 * so the count comes back exactly once. */
static __always_inline bool lb4_sock_slot_free(__u64 cookie, __u32 *lc_backend_id)
{
	struct lb4_sock_slot *slot = lb4_sock_slot(cookie);
	bool freed = false;

	*lc_backend_id = 0;
	if (!slot)
		return false;
	bpf_spin_lock(&slot->lock);
	if (slot->cookie == cookie) {
		*lc_backend_id = slot->lc_backend_id;
		slot->lc_backend_id = 0;
		slot->cookie = 0;
		freed = true;
	}
	bpf_spin_unlock(&slot->lock);
	return freed;
}

/* The socket's pair is stale (its frontend went) but the socket lives on:
 * forget the pair. A slot that holds a least-connection count stays the
 * socket's (the connection still loads that backend; sock_release gives the
 * count back) with a backend no peer matches; any other slot is freed. */
static __always_inline void lb4_sock_slot_unpair(__u64 cookie)
{
	struct lb4_sock_slot *slot = lb4_sock_slot(cookie);

	if (!slot)
		return;
	bpf_spin_lock(&slot->lock);
	if (slot->cookie == cookie) {
		slot->backend_address = 0;
		slot->backend_port = 0;
		if (!slot->lc_backend_id)
			slot->cookie = 0;
	}
	bpf_spin_unlock(&slot->lock);
}

#endif /* SLUICE_BPF_SOCK_SLOT_H */
