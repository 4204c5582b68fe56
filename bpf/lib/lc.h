/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lc.h: least-connection (LB_ALG_LEAST_CONN, IPVS `lc`). Every backend id
 * has an active-connection count (SLUICE_MAP_LC_COUNT4); a new connection or
 * flow of a least-connection frontend goes to the slot whose backend has the
 * fewest, and holds one count on it until it ends:
 *
 *   socket path  connect4/sendmsg4 take the count and note it: a TCP
 *                socket in the reverse-pair slot it holds already
 *                (lb4_sock_slot's lc_backend_id, sock_slot.h: no
 *                allocation), any other socket (UDP, IPv6, a TCP socket
 *                whose slot was busy) in its own storage
 *                (SLUICE_MAP_LC_SOCK4); the socket's sock_release gives it
 *                back. A socket holds at most one count: translating it
 *                again (a TCP re-connect, a UDP send to another backend)
 *                moves the count.
 *   TC path      a new flow takes the count and records a marker keyed by
 *                its original conntrack key (SLUICE_MAP_LC_FLOW4, IPv6 flows
 *                SLUICE_MAP_LC_FLOW6), and its
 *                conntrack entries carry LB_CT_FLAG_LC. The count comes back
 *                when the TCP state machine reaches CLOSING, or when the
 *                conntrack GC finds the flow gone (expired, evicted,
 *                replaced by another flow of the same tuple).
 *
 * Exactly once: a marker changes from held to released by compare-and-swap
 * (flows) or under the slot's or the socket storage's lock (sockets); only the winner
 * decrements. Counts are atomic adds on one array shared by every CPU: the
 * pick compares the global values of up to LB_LC_SCAN backends, which
 * per-CPU counters would need summed over every CPU on every connect.
 */
#ifndef SLUICE_BPF_LC_H
#define SLUICE_BPF_LC_H

#include "common.h"
#include "maps.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, SLUICE_MAX_LC_COUNT4);
} SLUICE_MAP_LC_COUNT4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct lb_lc_sock);
	__uint(max_entries, 0);
} SLUICE_MAP_LC_SOCK4 SEC(".maps");

static __always_inline void lc_count_add(__u32 backend_id, int delta)
{
	__u32 *n;

	if (!backend_id)
		return;
	n = bpf_map_lookup_elem(&SLUICE_MAP_LC_COUNT4, &backend_id);
	if (n)
		__sync_fetch_and_add(n, delta);
}

static __always_inline __u32 lc_count_of(__u32 backend_id)
{
	__u32 *n = bpf_map_lookup_elem(&SLUICE_MAP_LC_COUNT4, &backend_id);

	return n ? *n : 0;
}

/*
 * The range position whose backend has the fewest active connections among
 * up to LB_LC_SCAN positions: every one of a frontend with at most
 * LB_LC_SCAN, else LB_LC_SCAN consecutive ones from a random start (order
 * in a range has no meaning, so a window is a random sample; the best of 16
 * samples keeps a large Service within a few connections of the least). The
 * scan walks the frontend's contiguous range (array loads, no hash lookup
 * per position), starts at a random position and keeps the first minimum,
 * so ties spread. NULL when none was found or the winner's backend is gone,
 * and the caller falls back to its retrying random choice. Sets
 * key->backend_slot (position + 1).
 */
static __always_inline struct lb4_backend *
lc4_select(struct lb4_service_key *key, const struct lb4_service *svc, __u32 *backend_id)
{
	__u32 count = svc->count, start, best_load = 0xffffffff, best_id = 0;
	struct lb4_backend *best;
	__u16 best_slot = 0;
	int i;

	if (count == 0)
		return NULL;
	start = bpf_get_prandom_u32() % count;
	/* Per position: the backend id and its count (two array loads); the
	 * backend entry only for the winner. */
	for (i = 0; i < LB_LC_SCAN; i++) {
		__u32 pos, id, load;

		if (i >= count)
			break;
		pos = start + i;
		if (pos >= count)
			pos -= count;
		id = lb4_range_backend_id(svc, pos);
		if (!id)
			continue;
		load = lc_count_of(id);
		if (load < best_load) {
			best_load = load;
			best_id = id;
			best_slot = (__u16)(pos + 1);
		}
	}
	if (!best_id)
		return NULL;
	best = lb4_backend_by_id(best_id);
	if (!best)
		return NULL; /* the backend went: the caller's retrying choice */
	key->backend_slot = best_slot;
	*backend_id = best_id;
	return best;
}

/* ---- socket path ---------------------------------------------------------- */

/* A count a socket held (in its slot or its storage): back to its backend. */
static __always_inline void lc4_sock_give_back(__u32 backend_id)
{
	if (!backend_id)
		return;
	lc_count_add(backend_id, -1);
	lb_count(LB_CNT_LC_RELEASED);
}

/*
 * The socket `sk` now talks to backend_id (a least-connection frontend): it
 * holds one count there, and none anywhere else.
 */
static __always_inline void lc4_sock_hold(struct bpf_sock *sk, __u32 backend_id)
{
	struct lb_lc_sock *st;
	__u32 old;

	st = bpf_sk_storage_get(&SLUICE_MAP_LC_SOCK4, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		lb_count(LB_CNT_LC_UNTRACKED);
		return;
	}
	bpf_spin_lock(&st->lock);
	old = st->backend_id;
	st->backend_id = backend_id;
	bpf_spin_unlock(&st->lock);
	if (old == backend_id)
		return;
	lc4_sock_give_back(old);
	lc_count_add(backend_id, 1);
	lb_count(LB_CNT_LC_HELD);
}

/*
 * The TCP socket `sk` holds its slot (sock_slot.h), which now names
 * backend_id as its count, in place of `old` (what the slot named before;
 * 0: none): the slot is the socket's one count. A count an earlier connect
 * of the same socket took in socket storage (its slot was busy then) is
 * given back; looking for one costs no allocation.
 */
static __always_inline void lc4_sock_slot_hold(struct bpf_sock *sk, __u32 old, __u32 backend_id)
{
	struct lb_lc_sock *st = bpf_sk_storage_get(&SLUICE_MAP_LC_SOCK4, sk, 0, 0);

	if (st) {
		__u32 stored;

		bpf_spin_lock(&st->lock);
		stored = st->backend_id;
		st->backend_id = 0;
		bpf_spin_unlock(&st->lock);
		lc4_sock_give_back(stored);
	}
	if (old == backend_id)
		return;
	lc4_sock_give_back(old);
	lc_count_add(backend_id, 1);
	lb_count(LB_CNT_LC_HELD);
}

/* sock_release: give back the count this socket holds, if any. A socket
 * never sent to a least-connection frontend has no storage: one lookup. */
static __always_inline void lc4_sock_release(struct bpf_sock *sk)
{
	struct lb_lc_sock *st = bpf_sk_storage_get(&SLUICE_MAP_LC_SOCK4, sk, 0, 0);
	__u32 old;

	if (!st)
		return;
	bpf_spin_lock(&st->lock);
	old = st->backend_id;
	st->backend_id = 0;
	bpf_spin_unlock(&st->lock);
	lc4_sock_give_back(old);
}

/* ---- TC path (objects with conntrack) --------------------------------------- */
#ifndef SLUICE_NO_CONNTRACK

/* Markers are written per new least-connection flow. Not preallocated:
 * memory follows the flows that use least-connection. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb4_ct_key);
	__type(value, struct lb_lc_flow);
	__uint(max_entries, SLUICE_MAX_LC_FLOW4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_LC_FLOW4 SEC(".maps");

/* IPv6 TC flows' markers: the same words, keyed by the IPv6 original key. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb6_ct_key);
	__type(value, struct lb_lc_flow);
	__uint(max_entries, SLUICE_MAX_LC_FLOW6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_LC_FLOW6 SEC(".maps");

static __always_inline __u64 lc_flow_word(__u32 backend_id, __u32 gen, __u32 state)
{
	return ((__u64)backend_id << 32) | ((__u64)(gen & 0x3fffffff) << 2) | (state & 3);
}

static __always_inline __u32 lc_flow_state(__u64 word)
{
	return word & 3;
}

static __always_inline __u32 lc_flow_backend(__u64 word)
{
	return word >> 32;
}

static __always_inline __u32 lc_flow_gen(__u64 word)
{
	return (word >> 2) & 0x3fffffff;
}

/* held -> released by compare-and-swap of this exact word: true for the one
 * caller that gave the count back. */
static __always_inline bool lc_flow_release(struct lb_lc_flow *m, __u64 seen)
{
	if (lc_flow_state(seen) != LB_LC_FLOW_HELD)
		return false;
	if (__sync_val_compare_and_swap(&m->word, seen, seen - LB_LC_FLOW_HELD + LB_LC_FLOW_RELEASED) != seen)
		return false;
	lc_count_add(lc_flow_backend(seen), -1);
	return true;
}

/*
 * A new flow (original conntrack key `key`) was balanced to backend_id by a
 * least-connection frontend and its conntrack entries were stored: take the
 * count. A marker left by an earlier flow of the same tuple is released if
 * still held and re-used (new generation); one the GC is deleting cannot
 * be, and the flow stays uncounted (counted as such; never a drift).
 */
static __always_inline void lc_flow_open(void *markers, const void *key, __u32 backend_id)
{
	struct lb_lc_flow fresh = { .word = lc_flow_word(backend_id, bpf_get_prandom_u32(), LB_LC_FLOW_HELD) };
	struct lb_lc_flow *m;
	__u64 seen, reviving;

	if (bpf_map_update_elem(markers, key, &fresh, BPF_NOEXIST) == 0) {
		lc_count_add(backend_id, 1);
		lb_count(LB_CNT_LC_HELD);
		return;
	}
	m = bpf_map_lookup_elem(markers, key);
	if (!m)
		goto untracked;
	seen = m->word;
	if (lc_flow_release(m, seen)) {
		lb_count(LB_CNT_LC_GC_RELEASED);
		seen = seen - LB_LC_FLOW_HELD + LB_LC_FLOW_RELEASED;
	}
	if (lc_flow_state(seen) != LB_LC_FLOW_RELEASED)
		goto untracked;
	reviving = lc_flow_word(backend_id, lc_flow_gen(seen) + 1, LB_LC_FLOW_REVIVING);
	if (__sync_val_compare_and_swap(&m->word, seen, reviving) != seen)
		goto untracked;
	lc_count_add(backend_id, 1);
	/* Nobody else changes a reviving marker: a plain store publishes it. */
	m->word = reviving + LB_LC_FLOW_HELD;
	lb_count(LB_CNT_LC_HELD);
	return;
untracked:
	lb_count(LB_CNT_LC_UNTRACKED);
}

static __always_inline void lc4_flow_open(const struct lb4_ct_key *key, __u32 backend_id)
{
	lc_flow_open(&SLUICE_MAP_LC_FLOW4, key, backend_id);
}

static __always_inline void lc6_flow_open(const struct lb6_ct_key *key, __u32 backend_id)
{
	lc_flow_open(&SLUICE_MAP_LC_FLOW6, key, backend_id);
}

/* The TCP flow of conntrack entry `e` reached CLOSING: give its count back
 * (the GC would too, later: whichever comes first). */
static __always_inline void lc_flow_close(void *markers, const void *original, __u32 backend_id)
{
	struct lb_lc_flow *m = bpf_map_lookup_elem(markers, original);
	__u64 seen;

	if (!m)
		return;
	seen = m->word;
	if (lc_flow_backend(seen) == backend_id && lc_flow_release(m, seen))
		lb_count(LB_CNT_LC_RELEASED);
}

static __always_inline void lc4_flow_close(const struct lb4_ct_key *original, __u32 backend_id)
{
	lc_flow_close(&SLUICE_MAP_LC_FLOW4, original, backend_id);
}

static __always_inline void lc6_flow_close(const struct lb6_ct_key *original, __u32 backend_id)
{
	lc_flow_close(&SLUICE_MAP_LC_FLOW6, original, backend_id);
}

struct lc4_gc_ctx {
	__u64 now;
	__u32 released;
	__u32 deleted;
};

/*
 * GC over the markers: a held marker whose flow is gone (no live original
 * conntrack entry of a least-connection flow on the same backend, or one
 * that is closing) is released; a released marker is claimed and deleted.
 * Only the GC deletes markers, and only claimed ones, which nobody else
 * changes: the delete cannot remove a marker a new flow just re-used.
 */
/* Whether the marker's flow is alive: its original conntrack entry
 * (expires_ns, flags, backend_id of either family) holds the count. */
#define LC_FLOW_ALIVE(e, ctx, seen)                                                                       \
	((e) && (e)->expires_ns > (ctx)->now && (e)->expires_ns != LB_CT_EXPIRES_CLAIMED &&                \
	 ((e)->flags & LB_CT_FLAG_LC) && !((e)->flags & LB_CT_FLAG_CLOSING) &&                              \
	 (e)->backend_id == lc_flow_backend(seen))

/* The marker part of a GC step; `alive`: the flow still holds its count. */
static __always_inline long lc_gc_marker(void *map, void *key, struct lb_lc_flow *m, struct lc4_gc_ctx *ctx,
					 __u64 seen, bool alive)
{
	if (lc_flow_state(seen) == LB_LC_FLOW_HELD) {
		if (alive)
			return 0;
		if (!lc_flow_release(m, seen))
			return 0;
		lb_count(LB_CNT_LC_GC_RELEASED);
		ctx->released++;
		seen = seen - LB_LC_FLOW_HELD + LB_LC_FLOW_RELEASED;
	}
	if (lc_flow_state(seen) != LB_LC_FLOW_RELEASED)
		return 0;
	if (__sync_val_compare_and_swap(&m->word, seen, seen + 1) != seen) /* RELEASED + 1 = CLAIMED */
		return 0;
	if (bpf_map_delete_elem(map, key) == 0)
		ctx->deleted++;
	return 0;
}

static long lc4_gc_one(void *map, struct lb4_ct_key *key, struct lb_lc_flow *m, struct lc4_gc_ctx *ctx)
{
	__u64 seen = m->word;
	struct lb4_ct_entry *e = NULL;

	if (lc_flow_state(seen) == LB_LC_FLOW_HELD)
		e = bpf_map_lookup_elem(&SLUICE_MAP_CT4, key);
	return lc_gc_marker(map, key, m, ctx, seen, LC_FLOW_ALIVE(e, ctx, seen));
}

static long lc6_gc_one(void *map, struct lb6_ct_key *key, struct lb_lc_flow *m, struct lc4_gc_ctx *ctx)
{
	__u64 seen = m->word;
	struct lb6_ct_entry *e = NULL;

	if (lc_flow_state(seen) == LB_LC_FLOW_HELD)
		e = bpf_map_lookup_elem(&SLUICE_MAP_CT6, key);
	return lc_gc_marker(map, key, m, ctx, seen, LC_FLOW_ALIVE(e, ctx, seen));
}

/* One pass over both families' markers; returns how many counts it gave back. */
static __always_inline int lc4_gc(void)
{
	struct lc4_gc_ctx ctx = { .now = bpf_ktime_get_ns() };

	bpf_for_each_map_elem(&SLUICE_MAP_LC_FLOW4, lc4_gc_one, &ctx, 0);
	bpf_for_each_map_elem(&SLUICE_MAP_LC_FLOW6, lc6_gc_one, &ctx, 0);
	return ctx.released;
}

#endif /* SLUICE_NO_CONNTRACK */

#endif /* SLUICE_BPF_LC_H */
