/* SPDX-License-Identifier: Apache-2.0 */
/*
 * maglev.h: Maglev consistent hashing (issue 15). The agent builds one lookup
 * table of M entries per frontend (src/datapath/maglevTable.ts, the
 * permutation fill of the Maglev paper) and swaps it in whole: the outer map
 * has an entry per frontend (lb_maglev_index), its value is an inner array the agent creates,
 * fills, and then installs with one update, so a pick sees either the old
 * table or the new one, never a mix. Included by lb.h (needs lb_hash64).
 */
#ifndef SLUICE_BPF_MAGLEV_H
#define SLUICE_BPF_MAGLEV_H

#include "common.h"
#include "maps.h"

/* BPF_F_INNER_MAP: tables of any size M fit, the size is in row 0. */
struct lb_maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP);
	/* Sizes, not types: BTF would carry lb_maglev_row only as a forward
	 * declaration here. The agent types each inner array itself. */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct lb_maglev_row));
	__uint(max_entries, 1);
};

/*
 * The outer map is an ARRAY indexed by lb_maglev_index (rev-NAT id and
 * scope), not a hash keyed by them: the JIT inlines an array-of-maps lookup
 * as a bounds check and one load, where a hash lookup of one frontend among
 * thousands is two dependent cache misses (bucket head, element), most of
 * what made a Maglev connect ~540 ns dearer than a random one at 10 000
 * Services (docs/socket-path.md). The agent sizes it to twice the rev-NAT
 * capacity (src/agent/mapSizing.ts).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, SLUICE_MAX_MAGLEV4);
	__array(values, struct lb_maglev_inner);
} SLUICE_MAP_MAGLEV4 SEC(".maps");

/* A frontend's entry in SLUICE_MAP_MAGLEV4: rev-NAT ids come from one pool
 * for both families and each names one address, port and protocol, so the
 * id and the scope name one frontend. Mirrored in maglevIndexOf
 * (src/datapath/maglev.ts). */
static __always_inline __u32 lb_maglev_index(__u32 rev_nat_id, __u8 scope)
{
	return rev_nat_id * 2 + (scope == LB_SCOPE_INTERNAL);
}

/*
 * The hash of a flow: its 5-tuple and nothing node-local, so every node that
 * sees the flow (ECMP, a moved route) picks the same table entry. Mirrored in
 * maglevFlowHash (src/datapath/maglev.ts); keep both the same.
 */
static __always_inline __u64
lb4_maglev_flow_hash(__be32 saddr, __be32 daddr, __be16 sport, __be16 dport, __u8 proto)
{
	__u64 ports = ((__u64)sport << 32) | ((__u64)dport << 16) | proto;

	return lb_hash64((((__u64)saddr << 32) | daddr) ^ lb_hash64(ports));
}

/*
 * What TC paths hash by. With ClientIP affinity the client address (the
 * affinity key must be the client; the first pick is then by client, the
 * same on every node), else the flow.
 */
static __always_inline __u64
lb4_maglev_tc_client(const struct lb4_service *svc, __be32 saddr, __be32 daddr, __be16 sport, __be16 dport, __u8 proto)
{
	if (svc->algorithm != LB_ALG_MAGLEV || (svc->flags & LB_SVC_FLAG_AFFINITY))
		return saddr;
	return lb4_maglev_flow_hash(saddr, daddr, sport, dport, proto);
}

/*
 * The backend in entry (__u32)hash % M of the frontend's table. NULL (and
 * counted) when the table or its backend is missing: the caller falls back
 * to a random slot, so a frontend whose table is not written yet still
 * serves.
 */
static __always_inline struct lb4_backend *
lb4_maglev_select(const struct lb4_service_key *key, const struct lb4_service *svc, __u64 hash, __u32 *backend_id)
{
	__u32 index = lb_maglev_index(svc->rev_nat_id, key->scope), m, entry, id;
	struct lb_maglev_row *row;
	struct lb4_backend *backend;
	void *table;

	table = bpf_map_lookup_elem(&SLUICE_MAP_MAGLEV4, &index);
	index = 0;
	if (!table)
		goto fallback;
	row = bpf_map_lookup_elem(table, &index);
	if (!row)
		goto fallback;
	m = row->backend_id[0];
	if (!m)
		goto fallback;
	entry = (__u32)hash % m;
	index = 1 + entry / LB_MAGLEV_ROW;
	row = bpf_map_lookup_elem(table, &index);
	if (!row)
		goto fallback;
	id = row->backend_id[entry & (LB_MAGLEV_ROW - 1)];
	backend = lb4_backend_by_id(id);
	if (!backend)
		goto fallback;
	*backend_id = id;
	lb_count(LB_CNT_MAGLEV_PICKED);
	return backend;
fallback:
	lb_count(LB_CNT_MAGLEV_FALLBACK);
	return NULL;
}

#endif /* SLUICE_BPF_MAGLEV_H */
