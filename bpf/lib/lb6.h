/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lb6.h: frontend lookup and backend selection for IPv6 frontends, over the
 * IPv6 maps (SLUICE_MAP_SERVICES6, SLUICE_MAP_RANGES6, SLUICE_MAP_BACKENDS6,
 * ...). The rules are those of lb.h (master entry naming a range, retries,
 * affinity; lb_range_backend_id is shared); the master value
 * (struct lb4_service) and the slot choice (lb4_slot_choice: round-robin
 * counters by rev-NAT id, source hash, random) are shared with IPv4, since
 * the agent allocates rev-NAT ids for both families from one pool.
 */
#ifndef SLUICE_BPF_LB6_H
#define SLUICE_BPF_LB6_H

#include "lb.h"

/* IPv6 addresses in the ABI are __u8[16] in 4-byte aligned structs: moved and
 * compared as four 32-bit words. */
static __always_inline void lb6_addr_copy(__u8 *dst, const __u8 *src)
{
	__u32 *d = (__u32 *)dst;
	const __u32 *s = (const __u32 *)src;

	d[0] = s[0];
	d[1] = s[1];
	d[2] = s[2];
	d[3] = s[3];
}

static __always_inline bool lb6_addr_equal(const __u8 *a, const __u8 *b)
{
	const __u32 *x = (const __u32 *)a;
	const __u32 *y = (const __u32 *)b;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3])) == 0;
}

/* ::ffff:a.b.c.d: IPv4 through an AF_INET6 socket (the IPv4 table serves it). */
static __always_inline bool lb6_addr_is_v4mapped(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;

	return w[0] == 0 && w[1] == 0 && w[2] == bpf_htonl(0x0000ffff);
}

/* lb4_lookup_service for the IPv6 table (internal: use the internal-scope twin). */
static __always_inline struct lb4_service *lb6_lookup_service(struct lb6_service_key *key, bool internal)
{
	struct lb4_service *svc;

	key->backend_slot = 0;
	key->scope = LB_SCOPE_EXTERNAL;
	svc = bpf_map_lookup_elem(&SLUICE_MAP_SERVICES6, key);
	if (!svc || !internal || !lb_svc_has_two_scopes(svc))
		return svc;
	key->scope = LB_SCOPE_INTERNAL;
	return bpf_map_lookup_elem(&SLUICE_MAP_SERVICES6, key);
}

/* The master of key's frontend and scope, copied (see lb4_lookup_service_copy). */
static __always_inline bool lb6_read_master(struct lb6_service_key *key, struct lb4_service *out)
{
	struct lb4_service *svc;

	key->backend_slot = 0;
	svc = bpf_map_lookup_elem(&SLUICE_MAP_SERVICES6, key);
	if (!svc)
		return false;
	*out = *svc;
	return true;
}

/* An IPv6 backend by id: NULL for an id outside the array or an empty entry
 * (proto 0: never written, or cleared when the backend went). */
static __always_inline struct lb6_backend *lb6_lookup_backend(__u32 backend_id)
{
	struct lb6_backend *backend = bpf_map_lookup_elem(&SLUICE_MAP_BACKENDS6, &backend_id);

	return backend && backend->proto ? backend : NULL;
}

/* The backend id at position pos of the range an IPv6 master names. */
static __always_inline __u32 lb6_range_backend_id(const struct lb4_service *svc, __u32 pos)
{
	return lb_range_backend_id(&SLUICE_MAP_RANGES6, svc, pos);
}

/*
 * The hash of an IPv6 flow for Maglev on the TC path (lb4_maglev_flow_hash's
 * twin): its 5-tuple and nothing node-local, so every node that sees the
 * flow picks the same table entry. The ports word is hashed, then each half
 * of each address (two 32-bit words as loaded) is mixed in and hashed again.
 * Mirrored in maglevFlowHash6 (src/datapath/maglev.ts); keep both the same.
 */
static __always_inline __u64
lb6_maglev_flow_hash(const __u8 *saddr, const __u8 *daddr, __be16 sport, __be16 dport, __u8 proto)
{
	const __u32 *s = (const __u32 *)saddr, *d = (const __u32 *)daddr;
	__u64 h = lb_hash64(((__u64)sport << 32) | ((__u64)dport << 16) | proto);

	h = lb_hash64(h ^ (((__u64)s[0] << 32) | s[1]));
	h = lb_hash64(h ^ (((__u64)s[2] << 32) | s[3]));
	h = lb_hash64(h ^ (((__u64)d[0] << 32) | d[1]));
	return lb_hash64(h ^ (((__u64)d[2] << 32) | d[3]));
}

/*
 * Maglev for an IPv6 frontend (issue 15): lb4_maglev_select's walk of the
 * frontend's table, with the backend in the IPv6 backends map. The table is
 * in the same outer map as IPv4's (SLUICE_MAP_MAGLEV4, at lb_maglev_index of
 * rev-NAT id and scope): rev-NAT ids come from one pool for both families,
 * so an index names one frontend of either. NULL (counted) when the table or its
 * backend is missing: the caller falls back to a random slot.
 */
static __always_inline struct lb6_backend *
lb6_maglev_select(const struct lb6_service_key *key, const struct lb4_service *svc, __u64 hash, __u32 *backend_id)
{
	__u32 index = lb_maglev_index(svc->rev_nat_id, key->scope), m, entry, id = 0;
	struct lb_maglev_row *row;
	struct lb6_backend *backend = NULL;
	void *table;

	table = bpf_map_lookup_elem(&SLUICE_MAP_MAGLEV4, &index);
	index = 0;
	row = table ? bpf_map_lookup_elem(table, &index) : NULL;
	m = row ? row->backend_id[0] : 0;
	if (m) {
		entry = (__u32)hash % m;
		index = 1 + entry / LB_MAGLEV_ROW;
		row = bpf_map_lookup_elem(table, &index);
		id = row ? row->backend_id[entry & (LB_MAGLEV_ROW - 1)] : 0;
	}
	if (id)
		backend = lb6_lookup_backend(id);
	if (!backend) {
		lb_count(LB_CNT_MAGLEV_FALLBACK);
		return NULL;
	}
	*backend_id = id;
	lb_count(LB_CNT_MAGLEV_PICKED);
	return backend;
}

/*
 * least-connection for an IPv6 frontend: lc4_select's walk (bpf/lib/lc.h)
 * over the IPv6 range. Counts are per backend id in SLUICE_MAP_LC_COUNT4
 * (backend ids come from one pool for both families), and a socket's count
 * is held and given back by the family-blind lc4_sock_hold and sock_release.
 */
static __always_inline struct lb6_backend *
lc6_select(struct lb6_service_key *key, const struct lb4_service *svc, __u32 *backend_id)
{
	__u32 count = svc->count, start, best_load = 0xffffffff, best_id = 0;
	struct lb6_backend *best;
	__u16 best_slot = 0;
	int i;

	if (count == 0)
		return NULL;
	start = bpf_get_prandom_u32() % count;
	for (i = 0; i < LB_LC_SCAN; i++) {
		__u32 pos, id, load;

		if (i >= count)
			break;
		pos = start + i;
		if (pos >= count)
			pos -= count;
		id = lb6_range_backend_id(svc, pos);
		if (!id)
			continue;
		load = lc_count_of(id);
		if (load < best_load) {
			best_load = load;
			best_id = id;
			best_slot = (__u16)(pos + 1);
		}
	}
	best = best_id ? lb6_lookup_backend(best_id) : NULL;
	if (!best)
		return NULL; /* the backend went: the caller's retrying choice */
	key->backend_slot = best_slot;
	*backend_id = best_id;
	return best;
}

/* lb4_select_backend over the IPv6 maps: a position of the copied master's
 * range by its algorithm; on a missing backend, re-read the master and
 * choose again in its (new) range. */
static __always_inline struct lb6_backend *
lb6_select_backend(struct lb6_service_key *key, struct lb4_service *svc, __u64 client_id, __u32 *backend_id)
{
	__u32 choice;
	int attempt;

	/* Least-connection and Maglev pick without a slot choice: it is drawn
	 * (bpf_get_prandom_u32() for both) only when they fall back to the
	 * range below (issue 12: 16-55 ns of connect4 per least-connection
	 * connect). */
	if (svc->algorithm == LB_ALG_LEAST_CONN) {
		struct lb6_backend *least = lc6_select(key, svc, backend_id);

		if (least)
			return least;
	}
	/* Maglev: the table names the backend; without one, a random slot. */
	if (svc->algorithm == LB_ALG_MAGLEV) {
		struct lb6_backend *picked = lb6_maglev_select(key, svc, client_id, backend_id);

		if (picked)
			return picked;
	}
	choice = lb4_slot_choice(svc, client_id);
	for (attempt = 0; attempt < LB_SELECT_ATTEMPTS; attempt++) {
		struct lb6_backend *backend;
		__u32 pos, id;

		if (svc->count == 0)
			return NULL;
		pos = choice % svc->count;
		id = lb6_range_backend_id(svc, pos);
		backend = id ? lb6_lookup_backend(id) : NULL;
		if (backend) {
			key->backend_slot = (__u16)(pos + 1);
			*backend_id = id;
			return backend;
		}
		lb_count(LB_CNT_SELECT_RETRY);
		if (!lb6_read_master(key, svc))
			return NULL;
		if (svc->algorithm == LB_ALG_RANDOM)
			choice = bpf_get_prandom_u32();
	}
	return NULL;
}

/*
 * lb4_pick_backend_copy for IPv6: ClientIP affinity first (entries in
 * SLUICE_MAP_AFFINITY6), else a slot by the frontend's algorithm. client_id
 * is what source-hash mixes (the netns cookie on the socket path).
 */
static __always_inline struct lb6_backend *
lb6_pick_backend_copy(struct lb6_service_key *key, struct lb4_service *svc, struct lb6_affinity_key *akey,
		      __u64 client_id, __u32 *backend_id)
{
	struct lb6_backend *backend;
	struct lb_affinity *aff;
	__u32 id = 0;

	if (lb_svc_has_affinity(svc)) {
		__u64 now = bpf_ktime_get_ns();

		akey->rev_nat_id = svc->rev_nat_id;
		aff = bpf_map_lookup_elem(&SLUICE_MAP_AFFINITY6, akey);
		if (aff && now - aff->last_used_ns <= (__u64)svc->affinity_timeout * NSEC_PER_SEC) {
			aff->last_used_ns = now;
			backend = lb6_lookup_backend(aff->backend_id);
			if (backend) {
				*backend_id = aff->backend_id;
				return backend;
			}
		}
	}
	backend = lb6_select_backend(key, svc, client_id, &id);
	if (!backend)
		return NULL;
	if (lb_svc_has_affinity(svc)) {
		struct lb_affinity fresh = { .last_used_ns = bpf_ktime_get_ns(), .backend_id = id };

		akey->rev_nat_id = svc->rev_nat_id;
		bpf_map_update_elem(&SLUICE_MAP_AFFINITY6, akey, &fresh, BPF_ANY);
	}
	*backend_id = id;
	return backend;
}

/* loadBalancerSourceRanges: is this client inside one of the frontend's IPv6
 * CIDRs? (lb4_source_allowed's twin; the TC and socket paths share it.) */
static __always_inline bool lb6_source_allowed(__u32 rev_nat_id, const __u8 *client)
{
	struct lb6_src_range_key key = { .prefixlen = 32 + 128, .rev_nat_id = rev_nat_id };

	lb6_addr_copy(key.address, client);
	return bpf_map_lookup_elem(&SLUICE_MAP_SRCRANGE6, &key) != NULL;
}

#endif /* SLUICE_BPF_LB6_H */
