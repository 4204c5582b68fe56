/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_slot.h: a TCP socket's reverse pair in its slot of SLUICE_MAP_SOCK_SLOT4
 * (lb4_sock_slot in sluice_abi.h) or, for an IPv6 peer, SLUICE_MAP_SOCK_SLOT6
 * (lb6_sock_slot), shared by the socket hooks (sock.h, sock6.h) and the
 * stale-socket destroy (sock_destroy.h). Every write takes the slot's lock
 * and checks the cookie, so a slot never shows one socket another's pair.
 * Reads take the lock too, except (issue 12): getpeername4/6 read the TCP
 * slot under the socket's own lock (lb4/lb6_sock_slot_pair_sk_locked), and
 * the UDP slots are read under a sequence count on x86-64
 * (lb4_sock_uslot_read here, lb6_sock_uslot_read in sock_slot6.h). The TCP slot types start with the same head:
 * claim, read and free are one code (lb_sock_slot_*) for both families;
 * only the pair after the head differs.
 */
#ifndef SLUICE_BPF_SOCK_SLOT_H
#define SLUICE_BPF_SOCK_SLOT_H

#include "common.h"
#include "maps.h"

_Static_assert((SLUICE_SOCK_SLOTS4 & (SLUICE_SOCK_SLOTS4 - 1)) == 0, "SLUICE_SOCK_SLOTS4 is a power of two (the slot index is masked)");
_Static_assert((SLUICE_SOCK_SLOTS6 & (SLUICE_SOCK_SLOTS6 - 1)) == 0, "SLUICE_SOCK_SLOTS6 is a power of two (the slot index is masked)");
_Static_assert((SLUICE_SOCK_USLOTS4 & (SLUICE_SOCK_USLOTS4 - 1)) == 0, "SLUICE_SOCK_USLOTS4 is a power of two (the slot index is masked)");

/* What every slot starts with; the pair follows in 8-byte words. */
struct lb_sock_slot_head {
	struct bpf_spin_lock lock;
	__u32 rev_nat_id;
	__u64 cookie;
};

#define LB_SOCK_SLOT_HEAD_OF(type)                                                                              \
	_Static_assert(__builtin_offsetof(struct type, rev_nat_id) == __builtin_offsetof(struct lb_sock_slot_head, rev_nat_id) && \
		       __builtin_offsetof(struct type, cookie) == __builtin_offsetof(struct lb_sock_slot_head, cookie) &&         \
		       sizeof(struct type) % 8 == 0, #type " starts with lb_sock_slot_head")
LB_SOCK_SLOT_HEAD_OF(lb4_sock_slot);
LB_SOCK_SLOT_HEAD_OF(lb6_sock_slot);

/* A word of a slot's pair as the copy loops move it: may_alias, since the
 * pair is read back through its own typed fields (__be16 ports, __u8
 * addresses); without it clang's type-based alias analysis may treat those
 * fields as never written by the copy and fold their comparisons away. */
typedef __u64 __attribute__((__may_alias__)) lb_slot_word_t;

/* The words of the pair after the head. */
#define LB_SOCK_SLOT_WORDS(type) ((sizeof(struct type) - sizeof(struct lb_sock_slot_head)) / 8)

/* Claim the slot for want (a slot value without its lock: cookie, rev-NAT
 * id, pair) when it is free (cookie 0) or already want's socket's (a second
 * connect() after a failed one). */
static __always_inline bool lb_sock_slot_claim(void *value, const void *want, const __u32 words)
{
	struct lb_sock_slot_head *slot = value;
	const struct lb_sock_slot_head *w = want;
	lb_slot_word_t *dst = (lb_slot_word_t *)(slot + 1);
	const lb_slot_word_t *src = (const lb_slot_word_t *)(w + 1);
	bool claimed = false;
	__u32 i;

	bpf_spin_lock(&slot->lock);
	if (slot->cookie == 0 || slot->cookie == w->cookie) {
		slot->cookie = w->cookie;
		slot->rev_nat_id = w->rev_nat_id;
#pragma unroll
		for (i = 0; i < words; i++)
			dst[i] = src[i];
		claimed = true;
	}
	bpf_spin_unlock(&slot->lock);
	return claimed;
}

/* A copy of the slot (lock aside) into out, taken under the lock, when it
 * is this socket's. */
static __always_inline bool lb_sock_slot_read(void *value, __u64 cookie, void *out, const __u32 words)
{
	struct lb_sock_slot_head *slot = value;
	struct lb_sock_slot_head *o = out;
	const lb_slot_word_t *src = (const lb_slot_word_t *)(slot + 1);
	lb_slot_word_t *dst = (lb_slot_word_t *)(o + 1);
	bool found = false;
	__u32 i;

	/* Only this socket writes its cookie into a slot: another cookie seen
	 * without the lock is not this socket's (a lock spared per lookup). */
	if (*(volatile __u64 *)&slot->cookie != cookie)
		return false;
	bpf_spin_lock(&slot->lock);
	if (slot->cookie == cookie) {
		o->cookie = cookie;
		o->rev_nat_id = slot->rev_nat_id;
#pragma unroll
		for (i = 0; i < words; i++)
			dst[i] = src[i];
		found = true;
	}
	bpf_spin_unlock(&slot->lock);
	return found;
}

/* Free the slot, if this socket holds it. */
static __always_inline bool lb_sock_slot_release(void *value, __u64 cookie)
{
	struct lb_sock_slot_head *slot = value;
	bool freed = false;

	if (!slot || *(volatile __u64 *)&slot->cookie != cookie) /* not its own (see lb_sock_slot_read) */
		return false;
	bpf_spin_lock(&slot->lock);
	if (slot->cookie == cookie) {
		slot->cookie = 0;
		freed = true;
	}
	bpf_spin_unlock(&slot->lock);
	return freed;
}

/* ---- IPv4 (lb4_sock_slot) -------------------------------------------------- */

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
	struct lb4_sock_slot copy;

	if (!slot || !lb_sock_slot_read(slot, cookie, &copy, LB_SOCK_SLOT_WORDS(lb4_sock_slot)))
		return false;
	if (copy.backend_address != address || copy.backend_port != port)
		return false;
	out->frontend_address = copy.frontend_address;
	out->frontend_port = copy.frontend_port;
	out->rev_nat_id = copy.rev_nat_id;
	return true;
}

/*
 * lb4_sock_slot_pair without the slot's lock, for a hook that runs under the
 * socket's own lock (getpeername4: inet_getname() holds lock_sock() around
 * the program since 5.16, and ran it under BPF_CGROUP_RUN_SA_PROG_LOCK,
 * i.e. lock_sock() too, before). Why that is enough: while the slot names
 * this socket's cookie, only this socket writes it (connect4, under the
 * same socket lock; unpair, from this socket's getpeername; free, from its
 * sock_release, which cannot run while a getpeername holds the file). Every
 * other writer claims only a free slot or its own. So a reader that holds
 * the socket lock and sees its own cookie sees the pair its last connect4
 * wrote: that write happened before connect4's release_sock(), which is
 * ordered before this hook's lock_sock() on every architecture (no TSO
 * needed). socket_locked: the caller checked that this hook holds the
 * socket lock (sk_lock.owned, read through CO-RE); otherwise the locked
 * read.
 */
static __always_inline bool lb4_sock_slot_pair_sk_locked(__u64 cookie, __be32 address, __be16 port,
							  struct lb4_sock_tcp *out, bool socket_locked)
{
	struct lb4_sock_slot *slot;

	if (!socket_locked)
		return lb4_sock_slot_pair(cookie, address, port, out);
	slot = lb4_sock_slot(cookie);
	if (!slot || slot->cookie != cookie || slot->backend_address != address || slot->backend_port != port)
		return false;
	out->frontend_address = slot->frontend_address;
	out->frontend_port = slot->frontend_port;
	out->rev_nat_id = slot->rev_nat_id;
	return true;
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

/* ---- IPv6 (lb6_sock_slot) -------------------------------------------------- */

static __always_inline struct lb6_sock_slot *lb6_sock_slot(__u64 cookie)
{
	__u32 at = (__u32)cookie & (SLUICE_SOCK_SLOTS6 - 1);

	return bpf_map_lookup_elem(&SLUICE_MAP_SOCK_SLOT6, &at);
}

/* This socket's slot names this backend (address: 16 bytes, as four
 * words); *out: a copy of it, taken under the lock. */
static __always_inline bool lb6_sock_slot_pair(__u64 cookie, const __u8 *address, __be16 port, struct lb6_sock_slot *out)
{
	struct lb6_sock_slot *slot = lb6_sock_slot(cookie);
	const __u32 *a = (const __u32 *)address;
	const __u32 *b = (const __u32 *)out->backend_address;

	if (!slot || !lb_sock_slot_read(slot, cookie, out, LB_SOCK_SLOT_WORDS(lb6_sock_slot)))
		return false;
	return out->backend_port == port && !((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]));
}

/* lb6_sock_slot_pair without the slot's lock, for getpeername6, which runs
 * under the socket's own lock: the argument of lb4_sock_slot_pair_sk_locked
 * (while the slot names this socket's cookie, only this socket writes it,
 * under that same socket lock). *out: the fields the caller reads (rev-NAT
 * id, frontend address and port). socket_locked: the caller checked
 * sk_lock.owned; otherwise the locked read. */
static __always_inline bool lb6_sock_slot_pair_sk_locked(__u64 cookie, const __u8 *address, __be16 port,
							  struct lb6_sock_slot *out, bool socket_locked)
{
	struct lb6_sock_slot *slot;
	const __u32 *a = (const __u32 *)address;
	const __u32 *b;

	if (!socket_locked)
		return lb6_sock_slot_pair(cookie, address, port, out);
	slot = lb6_sock_slot(cookie);
	if (!slot || slot->cookie != cookie || slot->backend_port != port)
		return false;
	b = (const __u32 *)slot->backend_address;
	if ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]))
		return false;
	out->rev_nat_id = slot->rev_nat_id;
	__builtin_memcpy(out->frontend_address, slot->frontend_address, 16);
	out->frontend_port = slot->frontend_port;
	return true;
}

static __always_inline bool lb6_sock_slot_free(__u64 cookie)
{
	return lb_sock_slot_release(lb6_sock_slot(cookie), cookie);
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

/* ---- IPv4 UDP (lb4_sock_uslot): a UDP socket's first frontend ------------- */

/* The same head as the TCP slots, with seq where they keep a rev-NAT id. */
_Static_assert(__builtin_offsetof(struct lb4_sock_uslot, seq) == __builtin_offsetof(struct lb_sock_slot_head, rev_nat_id) &&
	       __builtin_offsetof(struct lb4_sock_uslot, cookie) == __builtin_offsetof(struct lb_sock_slot_head, cookie),
	       "lb4_sock_uslot starts with lock, seq, cookie");

/* Compiler barrier: no load or store is moved across it. The hardware side
 * is the JIT's: BPF loads and stores become plain moves, which x86-64 keeps
 * in program order (TSO: loads not reordered with loads, stores not with
 * stores). */
#define lb_compiler_barrier() __asm__ __volatile__("" ::: "memory")

/* Seqlock reads before falling back to the lock: a reader that meets a
 * write in progress twice is racing a writer hard; the lock waits it out. */
#define LB_USLOT_SEQ_TRIES 2

/*
 * LB_SOCK_USLOT_FUNCS(T, MAP, SLOTS): the functions of a UDP slot type T
 * (lb4_sock_uslot, lb6_sock_uslot: lock, seq, cookie, pair), one code for
 * both families:
 *
 * T(cookie): the slot of this cookie in MAP (SLOTS, a power of two); NULL
 * only when the agent made the array smaller (the socket then keeps its
 * pairs in storage).
 *
 * Writers (the caller holds slot->lock): seq odd before the first store,
 * even after the last. (seq | 1): a slot carried from the layout where this
 * word was a rev-NAT id may start odd; it ends even after one write.
 *
 * T_read(slot, cookie, out): *out, a copy of this socket's slot, when the
 * slot is its own. Only this socket writes its cookie into a slot: another
 * cookie, seen without the lock, is not this socket's (no lock taken for a
 * miss). With SLUICE_ORDERED_LOADS (the Makefile sets it for x86-64 only)
 * the copy is taken without the lock: seq (even), cookie, pair, seq again;
 * the copy is whole when both seq reads are equal and even, since every
 * write makes seq odd first and even last. Other architectures (or a reader
 * that met a write LB_USLOT_SEQ_TRIES times) take the lock. recvmsg runs
 * this per datagram: 232-261 -> 136-139 ns measured for IPv4
 * (docs/socket-path.md).
 *
 * T_claim(slot, want): write want (cookie, pair) into the slot when it is
 * free or already want's socket's. T_free(cookie): free the socket's slot.
 */
#ifdef SLUICE_ORDERED_LOADS
#define LB_USLOT_READ_UNLOCKED(slot, cookie, out)						\
	do {											\
		int try;									\
												\
		_Pragma("unroll")								\
		for (try = 0; try < LB_USLOT_SEQ_TRIES; try++) {				\
			__u32 seq = *(volatile __u32 *)&(slot)->seq;				\
												\
			if (seq & 1)								\
				continue;							\
			lb_compiler_barrier();							\
			if ((slot)->cookie != (cookie))						\
				break; /* freed (or claimed by another socket) meanwhile */	\
			(out)->pair = (slot)->pair;						\
			lb_compiler_barrier();							\
			if (*(volatile __u32 *)&(slot)->seq == seq) {				\
				(out)->cookie = (cookie);					\
				return true;							\
			}									\
		}										\
	} while (0)
#else
#define LB_USLOT_READ_UNLOCKED(slot, cookie, out) do { } while (0)
#endif

#define LB_SOCK_USLOT_FUNCS(T, MAP, SLOTS)							\
static __always_inline struct T *T(__u64 cookie)						\
{												\
	__u32 at = (__u32)cookie & ((SLOTS) - 1);						\
												\
	return bpf_map_lookup_elem(&MAP, &at);							\
}												\
												\
static __always_inline __u32 T##_write_begin(struct T *slot)					\
{												\
	__u32 odd = slot->seq | 1;								\
												\
	*(volatile __u32 *)&slot->seq = odd;							\
	lb_compiler_barrier();									\
	return odd;										\
}												\
												\
static __always_inline void T##_write_end(struct T *slot, __u32 odd)				\
{												\
	lb_compiler_barrier();									\
	*(volatile __u32 *)&slot->seq = odd + 1;						\
}												\
												\
static __always_inline bool T##_read_locked(struct T *slot, __u64 cookie, struct T *out)	\
{												\
	bool found = false;									\
												\
	bpf_spin_lock(&slot->lock);								\
	if (slot->cookie == cookie) {								\
		out->cookie = cookie;								\
		out->pair = slot->pair;								\
		found = true;									\
	}											\
	bpf_spin_unlock(&slot->lock);								\
	return found;										\
}												\
												\
static __always_inline bool T##_read(struct T *slot, __u64 cookie, struct T *out)		\
{												\
	if (!slot || *(volatile __u64 *)&slot->cookie != cookie)				\
		return false;									\
	LB_USLOT_READ_UNLOCKED(slot, cookie, out);						\
	return T##_read_locked(slot, cookie, out);						\
}												\
												\
static __always_inline bool T##_claim(struct T *slot, const struct T *want)			\
{												\
	bool claimed = false;									\
	__u32 odd;										\
												\
	if (!slot)										\
		return false;									\
	bpf_spin_lock(&slot->lock);								\
	if (slot->cookie == 0 || slot->cookie == want->cookie) {				\
		odd = T##_write_begin(slot);							\
		slot->cookie = want->cookie;							\
		slot->pair = want->pair;							\
		T##_write_end(slot, odd);							\
		claimed = true;									\
	}											\
	bpf_spin_unlock(&slot->lock);								\
	return claimed;										\
}												\
												\
static __always_inline bool T##_free(__u64 cookie)						\
{												\
	struct T *slot = T(cookie);								\
	bool freed = false;									\
	__u32 odd;										\
												\
	if (!slot || *(volatile __u64 *)&slot->cookie != cookie) /* not its own (see _read) */	\
		return false;									\
	bpf_spin_lock(&slot->lock);								\
	if (slot->cookie == cookie) {								\
		odd = T##_write_begin(slot);							\
		slot->cookie = 0;								\
		T##_write_end(slot, odd);							\
		freed = true;									\
	}											\
	bpf_spin_unlock(&slot->lock);								\
	return freed;										\
}

LB_SOCK_USLOT_FUNCS(lb4_sock_uslot, SLUICE_MAP_SOCK_USLOT4, SLUICE_SOCK_USLOTS4)

#endif /* SLUICE_BPF_SOCK_SLOT_H */
