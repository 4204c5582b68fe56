/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lb.h: frontend lookup and backend selection, shared by the socket hooks and
 * (later) the TC programs. Pure map logic: no packet or socket access here.
 */
#ifndef SLUICE_BPF_LB_H
#define SLUICE_BPF_LB_H

#include "common.h"
#include "maps.h"
#include "lc.h"

static __always_inline bool lb_svc_has_affinity(const struct lb4_service *svc)
{
	return svc->flags & LB_SVC_FLAG_AFFINITY;
}

static __always_inline bool lb_svc_has_two_scopes(const struct lb4_service *svc)
{
	return svc->flags & LB_SVC_FLAG_TWO_SCOPES;
}

/*
 * Find the master entry of a frontend. key->address/port/proto are set by the
 * caller; the scope is ours (the map is keyed by the first 8 bytes of key,
 * an lb4_frontend_key; backend_slot is reset). Traffic that starts inside
 * the cluster (socket hooks: internal == true) uses the internal-scope twin
 * when the frontend has one (externalTrafficPolicy: Local short-circuit, see
 * LB_SCOPE_* in sluice_abi.h).
 */
static __always_inline struct lb4_service *
lb4_lookup_service(struct lb4_service_key *key, bool internal)
{
	struct lb4_service *svc;

	key->backend_slot = 0;
	key->scope = LB_SCOPE_EXTERNAL;
	svc = bpf_map_lookup_elem(&SLUICE_MAP_SERVICES4, key);
	if (!svc || !internal || !lb_svc_has_two_scopes(svc))
		return svc;
	key->scope = LB_SCOPE_INTERNAL;
	return bpf_map_lookup_elem(&SLUICE_MAP_SERVICES4, key);
}

/*
 * The master entry, copied once. A pointer into the services map may see
 * the entry replaced (and its memory reused by another entry) while the
 * program reads it; every decision about one connection must come from one
 * consistent copy: its count and range start always belong together (one
 * map update wrote both), and the range it names is not rewritten before a
 * grace period has passed. Returns false when the frontend does not exist.
 */
static __always_inline bool
lb4_lookup_service_copy(struct lb4_service_key *key, bool internal, struct lb4_service *out)
{
	struct lb4_service *svc = lb4_lookup_service(key, internal);

	if (!svc)
		return false;
	*out = *svc;
	return true;
}

/* Re-read the master of key's frontend and scope (after a missing backend). */
static __always_inline bool lb4_reread_service(struct lb4_service_key *key, struct lb4_service *out)
{
	struct lb4_service *svc;

	key->backend_slot = 0;
	svc = bpf_map_lookup_elem(&SLUICE_MAP_SERVICES4, key);
	if (!svc)
		return false;
	*out = *svc;
	return true;
}

#include "hash64.h" /* lb_hash64 */

#include "maglev.h" /* h-maglev: needs lb_hash64 */

/*
 * The number a slot is derived from (slot = choice % count + 1), once per
 * pick. Round-robin takes the frontend's next counter value (shared by every
 * CPU and both paths); a rev-NAT id beyond the counter array falls back to
 * random. Source-hash mixes the client identity with the frontend, so one
 * client spreads differently over different Services. Random draws anew on
 * every attempt (lb4_slot_choice is called again on a retry).
 */
static __always_inline __u32
lb4_slot_choice(const struct lb4_service *svc, __u64 client_id)
{
	__u32 rev_nat_id = svc->rev_nat_id;
	__u32 *next;

	switch (svc->algorithm) {
	case LB_ALG_ROUND_ROBIN:
		next = bpf_map_lookup_elem(&SLUICE_MAP_RR4, &rev_nat_id);
		if (next) {
			/* Read, then an atomic add whose result is unused: the
			 * fetching add needs -mcpu=v3, which the other programs
			 * are not built for. The counter never loses a step; two
			 * CPUs picking at the same instant may read the same
			 * value (one extra connection on a backend, not a drift). */
			__u32 position = *next;

			__sync_fetch_and_add(next, 1);
			return position;
		}
		break;
	case LB_ALG_SOURCE_HASH:
		return (__u32)lb_hash64(client_id ^ ((__u64)rev_nat_id << 32));
	}
	return bpf_get_prandom_u32();
}

/*
 * Choice over positions 0..count-1 of the range the copy in *svc names, by
 * its algorithm: one array load for the backend id, one for the backend. The
 * range of a master copy is intact (the agent writes a backend-set change as
 * a new range and reuses the old one only after a grace period), so a miss
 * means the backend itself went: the agent replaced the master and deleted a
 * backend no frontend uses any more, after this program copied the master.
 * Then re-read the master (*svc is updated: the caller uses its rev-NAT id)
 * and choose again in its range: at most LB_SELECT_ATTEMPTS tries.
 * Round-robin and source-hash keep their choice across attempts (one counter
 * step per connection; a client's hash stays its own). Returns the backend
 * and sets *backend_id and key->backend_slot (position + 1), or NULL when no
 * attempt found one (the frontend was deleted or emptied meanwhile).
 */
static __always_inline struct lb4_backend *
lb4_select_backend(struct lb4_service_key *key, struct lb4_service *svc, __u64 client_id, __u32 *backend_id)
{
	__u32 choice;
	int attempt;

	/* Least-connection and Maglev pick without a slot choice: it is drawn
	 * (bpf_get_prandom_u32() for both) only when they fall back to the
	 * range below (issue 12: 16-55 ns of connect4 per least-connection
	 * connect). */
	if (svc->algorithm == LB_ALG_LEAST_CONN) {
		struct lb4_backend *least = lc4_select(key, svc, backend_id);

		if (least)
			return least;
	}
	/* Maglev: the table names the backend; without one, a random slot. */
	if (svc->algorithm == LB_ALG_MAGLEV) {
		struct lb4_backend *picked = lb4_maglev_select(key, svc, client_id, backend_id);

		if (picked)
			return picked;
	}
	choice = lb4_slot_choice(svc, client_id);
	for (attempt = 0; attempt < LB_SELECT_ATTEMPTS; attempt++) {
		struct lb4_backend *backend;
		__u32 pos, id;

		if (svc->count == 0)
			return NULL;
		pos = choice % svc->count;
		id = lb4_range_backend_id(svc, pos);
		backend = id ? lb4_backend_by_id(id) : NULL;
		if (backend) {
			key->backend_slot = (__u16)(pos + 1);
			*backend_id = id;
			return backend;
		}
		lb_count(LB_CNT_SELECT_RETRY);
		if (!lb4_reread_service(key, svc))
			return NULL;
		if (svc->algorithm == LB_ALG_RANDOM)
			choice = bpf_get_prandom_u32();
	}
	return NULL;
}

static __always_inline struct lb4_backend *lb4_lookup_backend(__u32 backend_id)
{
	return lb4_backend_by_id(backend_id);
}

/*
 * ClientIP session affinity: the backend this client used last, if it was used
 * within the timeout and still exists. The agent deletes affinity entries of
 * backends it removes from a frontend, so a hit names a current backend.
 */
static __always_inline __u32
lb4_affinity_backend_id(const struct lb4_affinity_key *akey, const struct lb4_service *svc)
{
	struct lb_affinity *aff = bpf_map_lookup_elem(&SLUICE_MAP_AFFINITY4, akey);
	__u64 now = bpf_ktime_get_ns();

	if (!aff)
		return 0;
	if (now - aff->last_used_ns > (__u64)svc->affinity_timeout * NSEC_PER_SEC)
		return 0;
	aff->last_used_ns = now;
	return aff->backend_id;
}

static __always_inline void
lb4_affinity_remember(const struct lb4_affinity_key *akey, __u32 backend_id)
{
	struct lb_affinity aff = {
		.last_used_ns = bpf_ktime_get_ns(),
		.backend_id = backend_id,
	};

	bpf_map_update_elem(&SLUICE_MAP_AFFINITY4, akey, &aff, BPF_ANY);
}

/*
 * Pick the backend for a new connection or datagram flow of this frontend:
 * the affinity backend when one applies, else a slot by the frontend's
 * algorithm (retried, see lb4_select_backend). akey->client_id is the client
 * identity source-hash uses (set by the caller for affinity or source-hash). *svc is the caller's copy of the master entry and is
 * refreshed when selection had to re-read it. NULL when no backend can be
 * found (the caller counts and refuses).
 */
static __always_inline struct lb4_backend *
lb4_pick_backend_copy(struct lb4_service_key *key, struct lb4_service *svc,
		      struct lb4_affinity_key *akey, __u32 *backend_id)
{
	struct lb4_backend *backend;
	__u32 id = 0;

	if (lb_svc_has_affinity(svc)) {
		id = lb4_affinity_backend_id(akey, svc);
		if (id) {
			backend = lb4_lookup_backend(id);
			if (backend) {
				*backend_id = id;
				return backend;
			}
		}
	}
	backend = lb4_select_backend(key, svc, akey->client_id, &id);
	if (!backend)
		return NULL;
	if (lb_svc_has_affinity(svc)) {
		akey->rev_nat_id = svc->rev_nat_id;
		lb4_affinity_remember(akey, id);
	}
	*backend_id = id;
	return backend;
}

/* The same for callers that hold a pointer into the services map (TC): works
 * on a copy of it. */
static __always_inline struct lb4_backend *
lb4_pick_backend(struct lb4_service_key *key, const struct lb4_service *svc,
		 const struct lb4_affinity_key *akey, __u32 *backend_id)
{
	struct lb4_service copy = *svc;
	struct lb4_affinity_key acopy = *akey;

	return lb4_pick_backend_copy(key, &copy, &acopy, backend_id);
}

/* loadBalancerSourceRanges, checked by the TC path and the socket hooks. */
static __always_inline bool lb_svc_has_source_ranges(const struct lb4_service *svc)
{
	return svc->flags & LB_SVC_FLAG_SOURCE_RANGE;
}

/* loadBalancerSourceRanges: is this client inside one of the frontend's CIDRs? */
static __always_inline bool lb4_source_allowed(__u32 rev_nat_id, __be32 client)
{
	struct lb4_src_range_key key = {
		.prefixlen = 64,
		.rev_nat_id = rev_nat_id,
		.address = client,
	};

	return bpf_map_lookup_elem(&SLUICE_MAP_SRCRANGE4, &key) != NULL;
}

#endif /* SLUICE_BPF_LB_H */
