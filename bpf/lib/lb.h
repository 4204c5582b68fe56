/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lb.h: frontend lookup and backend selection, shared by the socket hooks and
 * (later) the TC programs. Pure map logic: no packet or socket access here.
 */
#ifndef SLUICE_BPF_LB_H
#define SLUICE_BPF_LB_H

#include "common.h"
#include "maps.h"

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
 * caller; the scope and slot are ours. Traffic that starts inside the cluster
 * (socket hooks: internal == true) uses the internal-scope twin when the
 * frontend has one (externalTrafficPolicy: Local short-circuit, see
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

/* Random choice over slots 1..count. Returns 0 (invalid id) when the slot is
 * missing, which only happens while the agent rewrites a frontend. */
static __always_inline __u32
lb4_select_backend_id(struct lb4_service_key *key, const struct lb4_service *svc)
{
	struct lb4_service *slot;

	key->backend_slot = (bpf_get_prandom_u32() % svc->count) + 1;
	slot = bpf_map_lookup_elem(&SLUICE_MAP_SERVICES4, key);
	return slot ? slot->backend_id : 0;
}

static __always_inline struct lb4_backend *lb4_lookup_backend(__u32 backend_id)
{
	return bpf_map_lookup_elem(&SLUICE_MAP_BACKENDS4, &backend_id);
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
 * the affinity backend when one applies, else a random slot. NULL when no
 * backend can be found (the caller counts and refuses).
 */
static __always_inline struct lb4_backend *
lb4_pick_backend(struct lb4_service_key *key, const struct lb4_service *svc,
		 const struct lb4_affinity_key *akey, __u32 *backend_id)
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
	id = lb4_select_backend_id(key, svc);
	if (!id)
		return NULL;
	backend = lb4_lookup_backend(id);
	if (!backend)
		return NULL;
	if (lb_svc_has_affinity(svc))
		lb4_affinity_remember(akey, id);
	*backend_id = id;
	return backend;
}

#endif /* SLUICE_BPF_LB_H */
