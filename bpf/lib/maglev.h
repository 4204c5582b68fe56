/* SPDX-License-Identifier: Apache-2.0 */
/*
 * maglev.h: Maglev consistent hashing (issue 15). The agent builds one lookup
 * table of M entries per frontend (src/datapath/maglevTable.ts, the
 * permutation fill of the Maglev paper) and swaps it in whole: the outer map
 * is keyed like the frontend, its value is an inner array the agent creates,
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

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__type(key, struct lb4_maglev_key);
	__uint(max_entries, SLUICE_MAX_MAGLEV4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__array(values, struct lb_maglev_inner);
} SLUICE_MAP_MAGLEV4 SEC(".maps");

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
	struct lb4_maglev_key mkey = {
		.rev_nat_id = svc->rev_nat_id,
		.proto = key->proto,
		.scope = key->scope,
	};
	struct lb_maglev_row *row;
	struct lb4_backend *backend;
	__u32 index = 0, m, entry, id;
	void *table;

	table = bpf_map_lookup_elem(&SLUICE_MAP_MAGLEV4, &mkey);
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
