/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fe4lookup.bpf.c: the cost of one IPv4 frontend lookup, alone, for
 * bench/fe4lookup.c (BPF_PROG_TEST_RUN, no sockets). Each program draws
 * FE4L_LOOKUPS random frontends from `fe4l_keys` and looks each up in one
 * layout; `fe4l_keys_only` draws without looking up, so the difference is
 * the lookup. Layouts:
 *
 *  - fe4l_hash:     sluice_svc4 as bpf/lib/maps.h declares it (HASH,
 *                   BPF_F_NO_PREALLOC, SLUICE_MAX_SERVICE_ENTRIES)
 *  - fe4l_hash_pre: the same hash preallocated (elements contiguous)
 *  - fe4l_hash_fit: no preallocation, max_entries sized to the frontends
 *                   (fewer buckets; the loader sets it)
 *  - fe4l_table:    an open-addressed ARRAY of 32-byte slots holding the key
 *                   and the master together (one cache line per probe),
 *                   slot = lb_hash64 of the 8-byte key, linear
 *                   probing, read under a sequence word as a reader of a
 *                   table written make-before-break would read it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "sluice_abi.h"
#include "fe4lookup.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64); /* an lb4_frontend_key, as the table compares it */
	__uint(max_entries, FE4L_MAX_KEYS);
} fe4l_keys SEC(".maps");

/* FE4L_CFG_KEYS: keys in fe4l_keys; FE4L_CFG_MASK: table slots - 1. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, FE4L_CFG_N);
} fe4l_cfg SEC(".maps");

/* sluice_svc4's declaration (bpf/lib/maps.h) with other flags. */
#define FE4L_HASH(name, flags)                                         \
	struct {                                                       \
		__uint(type, BPF_MAP_TYPE_HASH);                       \
		__type(key, struct lb4_frontend_key);                  \
		__type(value, struct lb4_service);                     \
		__uint(max_entries, SLUICE_MAX_SERVICE_ENTRIES);       \
		__uint(map_flags, flags);                              \
	} name SEC(".maps")

FE4L_HASH(fe4l_hash, BPF_F_NO_PREALLOC);
FE4L_HASH(fe4l_hash_pre, 0);
FE4L_HASH(fe4l_hash_fit, BPF_F_NO_PREALLOC); /* the loader sets max_entries */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fe4l_slot);
	__uint(max_entries, 1); /* the loader sizes it (a power of two) */
} fe4l_table SEC(".maps");

static __always_inline __u32 fe4l_cfg_get(__u32 index)
{
	__u32 *v = bpf_map_lookup_elem(&fe4l_cfg, &index);

	return v ? *v : 0;
}

static __always_inline __u64 fe4l_draw(__u32 keys)
{
	__u32 i = bpf_get_prandom_u32() % (keys ? keys : 1);
	__u64 *k = bpf_map_lookup_elem(&fe4l_keys, &i);

	return k ? *k : 0;
}

/* The result feeds the return value so that nothing is optimised away. */
static __always_inline int fe4l_verdict(__u32 acc)
{
	return acc == 0xdeadbeef ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int fe4l_keys_only(struct xdp_md *ctx)
{
	__u32 keys = fe4l_cfg_get(FE4L_CFG_KEYS), acc = 0;

	for (int j = 0; j < FE4L_LOOKUPS; j++)
		acc += (__u32)fe4l_draw(keys);
	return fe4l_verdict(acc);
}

/* As lb4_lookup_service_copy: look up, copy the master once. */
static __always_inline int fe4l_hash_run(void *map)
{
	__u32 keys = fe4l_cfg_get(FE4L_CFG_KEYS), acc = 0;

	for (int j = 0; j < FE4L_LOOKUPS; j++) {
		__u64 k = fe4l_draw(keys);
		struct lb4_service *svc = bpf_map_lookup_elem(map, &k);
		struct lb4_service copy;

		if (svc) {
			copy = *svc;
			acc += copy.backend_id + copy.count;
		}
	}
	return fe4l_verdict(acc);
}

SEC("xdp")
int fe4l_hash_np(struct xdp_md *ctx) { return fe4l_hash_run(&fe4l_hash); }

SEC("xdp")
int fe4l_hash_prealloc(struct xdp_md *ctx) { return fe4l_hash_run(&fe4l_hash_pre); }

SEC("xdp")
int fe4l_hash_sized(struct xdp_md *ctx) { return fe4l_hash_run(&fe4l_hash_fit); }

/*
 * One frontend in the table: 1 found (copied to *out), 0 absent (an empty
 * slot ends the probe, or the bound is reached), -1 the slot changed while
 * it was read (a real reader asks the hash then).
 */
static __always_inline int fe4l_table_lookup(__u64 k, __u32 mask, struct lb4_service *out)
{
	__u32 home = (__u32)lb_hash64(k);

	for (int i = 0; i < FE4L_PROBES; i++) {
		__u32 index = (home + i) & mask;
		struct fe4l_slot *slot = bpf_map_lookup_elem(&fe4l_table, &index);
		__u32 seq;
		__u64 key;

		if (!slot)
			return 0;
		/* Sequence word, then key and value, then the word again: equal
		 * and even means no writer was in the middle of this slot. */
		seq = *(volatile __u32 *)&slot->seq;
		asm volatile("" ::: "memory");
		key = *(volatile __u64 *)&slot->key;
		*out = slot->svc;
		asm volatile("" ::: "memory");
		if ((seq & 1) || seq != *(volatile __u32 *)&slot->seq)
			return -1;
		if (key == k)
			return 1;
		if (!((struct lb4_frontend_key *)&key)->proto)
			return 0;
	}
	return 0;
}

SEC("xdp")
int fe4l_table_run(struct xdp_md *ctx)
{
	__u32 keys = fe4l_cfg_get(FE4L_CFG_KEYS), mask = fe4l_cfg_get(FE4L_CFG_MASK), acc = 0;

	for (int j = 0; j < FE4L_LOOKUPS; j++) {
		struct lb4_service copy;

		if (fe4l_table_lookup(fe4l_draw(keys), mask, &copy) > 0)
			acc += copy.backend_id + copy.count;
	}
	return fe4l_verdict(acc);
}

char LICENSE[] SEC("license") = "GPL";
