/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uslot_race.bpf.c: the IPv4 UDP slot's lock-free read (issue 12,
 * bpf/lib/sock_slot.h lb4_sock_uslot_read) raced against its writer, for
 * test/bpf/sock_udp_slot.test.ts. Two programs run at once on two CPUs
 * (BPF_PROG_TEST_RUN, repeat N):
 *
 *  - writer: claims the slot for one cookie over and over with pair A, then
 *    pair B, 16 times a run (lb4_sock_uslot_claim, the sendmsg4 code), every field of A
 *    different from B's;
 *  - reader: reads it with lb4_sock_uslot_read (the recvmsg4 code) and
 *    counts copies that are neither A nor B (torn: a frontend from one
 *    write with a backend from the other);
 *  - reader_noseq: the same copy without the sequence count (cookie check,
 *    then the pair), to show that the race really produces torn copies
 *    here, i.e. that the reader's zero means something.
 *
 * writer6, reader6, reader6_noseq: the same for the IPv6 UDP slot
 * (bpf/lib/sock_slot6.h, lb6_sock_uslot_claim/read), counted in
 * race_counts6.
 *
 * Own maps, not bpf/lib/maps.h (no need to create every Sluice map): the
 * slot maps sock_slot.h and sock_slot6.h name, a few entries each.
 */
#include "common.h"
#include "sluice_abi.h"

#define SLUICE_BPF_MAPS_H /* the four maps sock_slot.h and sock_slot6.h use, declared here */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb4_sock_slot);
	__uint(max_entries, 1);
} SLUICE_MAP_SOCK_SLOT4 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_sock_slot);
	__uint(max_entries, 1);
} SLUICE_MAP_SOCK_SLOT6 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb4_sock_uslot);
	__uint(max_entries, 8);
} SLUICE_MAP_SOCK_USLOT4 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_sock_uslot);
	__uint(max_entries, 8);
} SLUICE_MAP_SOCK_USLOT6 SEC(".maps");

#include "sock_slot.h"
#include "sock_slot6.h"

#define RACE_COOKIE 7ULL /* slot 7 */

/* Counters (index): reads that found the slot, torn copies, copies the
 * sequence count caught mid-write (it retried or took the lock). */
enum { RACE_READS, RACE_TORN, RACE_SEQ_RETRIES, RACE_NOSEQ_READS, RACE_NOSEQ_TORN, RACE_WRITES, RACE_N };
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, RACE_N);
} race_counts SEC(".maps");

static __always_inline void race_count(__u32 at)
{
	__u64 *n = bpf_map_lookup_elem(&race_counts, &at);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* Pair A (which = 0) or B (which = 1): every field differs. */
static __always_inline void race_pair(struct lb4_sock_pair *p, __u32 which)
{
	p->frontend_address = which ? 0x0b00600a : 0x0a00600a;
	p->frontend_port = which ? 0x3600 : 0x3500;
	p->scope = which ? 2 : 1;
	p->used = 1;
	p->backend_address = which ? 0x031112c6 : 0x021112c6;
	p->backend_port = which ? 0xea14 : 0xe914;
	p->backend_slot = which ? 2 : 1;
	p->backend_id = which ? 22 : 11;
	p->rev_nat_id = which ? 202 : 101;
}

/* 1: the copy is A or B; 0: torn. */
static __always_inline int race_whole(const struct lb4_sock_pair *p)
{
	struct lb4_sock_pair want = {};

	race_pair(&want, p->frontend_address == 0x0b00600a);
	return p->frontend_address == want.frontend_address && p->frontend_port == want.frontend_port &&
	       p->scope == want.scope && p->used == want.used && p->backend_address == want.backend_address &&
	       p->backend_port == want.backend_port && p->backend_slot == want.backend_slot &&
	       p->backend_id == want.backend_id && p->rev_nat_id == want.rev_nat_id;
}

/* Writes and reads per run: more time in the race, less in the test run's
 * own loop. */
#define RACE_PER_RUN 16

SEC("tc")
int writer(struct __sk_buff *skb)
{
	struct lb4_sock_uslot *slot = lb4_sock_uslot(RACE_COOKIE);
	struct lb4_sock_uslot want = { .cookie = RACE_COOKIE };
	int i;

	if (!slot)
		return 0;
	for (i = 0; i < RACE_PER_RUN; i++) {
		race_pair(&want.pair, i & 1);
		if (lb4_sock_uslot_claim(slot, &want))
			race_count(RACE_WRITES);
	}
	return 0;
}

SEC("tc")
int reader(struct __sk_buff *skb)
{
	struct lb4_sock_uslot *slot = lb4_sock_uslot(RACE_COOKIE);
	int i;

	if (!slot)
		return 0;
	for (i = 0; i < RACE_PER_RUN; i++) {
		struct lb4_sock_uslot copy = {};
		__u32 seq = *(volatile __u32 *)&slot->seq;

		if (!lb4_sock_uslot_read(slot, RACE_COOKIE, &copy))
			continue;
		race_count(RACE_READS);
		if (!race_whole(&copy.pair))
			race_count(RACE_TORN);
		/* A write ran during this read: the race the sequence count is for. */
		if (*(volatile __u32 *)&slot->seq != seq)
			race_count(RACE_SEQ_RETRIES);
	}
	return 0;
}

SEC("tc")
int reader_noseq(struct __sk_buff *skb)
{
	struct lb4_sock_uslot *slot = lb4_sock_uslot(RACE_COOKIE);
	int i;

	if (!slot)
		return 0;
	for (i = 0; i < RACE_PER_RUN; i++) {
		struct lb4_sock_pair copy;

		if (*(volatile __u64 *)&slot->cookie != RACE_COOKIE)
			continue;
		lb_compiler_barrier();
		copy = slot->pair;
		lb_compiler_barrier();
		race_count(RACE_NOSEQ_READS);
		if (!race_whole(&copy))
			race_count(RACE_NOSEQ_TORN);
	}
	return 0;
}

/* ---- IPv6 (lb6_sock_uslot) ------------------------------------------------ */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, RACE_N);
} race_counts6 SEC(".maps");

static __always_inline void race_count6(__u32 at)
{
	__u64 *n = bpf_map_lookup_elem(&race_counts6, &at);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* Pair A (which = 0) or B (which = 1) of the IPv6 slot: every field, and
 * every byte of both addresses, differs. */
static __always_inline void race_pair6(struct lb6_sock_pair *p, __u32 which)
{
	int i;

#pragma unroll
	for (i = 0; i < 16; i++) {
		p->frontend_address[i] = (which ? 0xb0 : 0xa0) + i;
		p->backend_address[i] = (which ? 0xd0 : 0xc0) + i;
	}
	p->frontend_port = which ? 0x3600 : 0x3500;
	p->backend_port = which ? 0xea14 : 0xe914;
	p->scope = which ? 2 : 1;
	p->used = which ? 1 : 3;
	p->backend_slot = which ? 2 : 1;
	p->backend_id = which ? 22 : 11;
	p->rev_nat_id = which ? 202 : 101;
}

/* 1: the copy is A or B; 0: torn. Word compares (addresses as 4 words). */
static __always_inline int race_whole6(const struct lb6_sock_pair *p)
{
	struct lb6_sock_pair want = {};
	const __u32 *a = (const __u32 *)p->frontend_address, *b = (const __u32 *)want.frontend_address;
	__u32 diff = 0;
	int i;

	race_pair6(&want, p->frontend_address[0] == 0xb0);
#pragma unroll
	for (i = 0; i < 8; i++) /* frontend_address, then backend_address */
		diff |= a[i] ^ b[i];
	return !diff && p->frontend_port == want.frontend_port && p->backend_port == want.backend_port &&
	       p->scope == want.scope && p->used == want.used && p->backend_slot == want.backend_slot &&
	       p->backend_id == want.backend_id && p->rev_nat_id == want.rev_nat_id;
}

SEC("tc")
int writer6(struct __sk_buff *skb)
{
	struct lb6_sock_uslot *slot = lb6_sock_uslot(RACE_COOKIE);
	struct lb6_sock_uslot want = { .cookie = RACE_COOKIE };
	int i;

	if (!slot)
		return 0;
	for (i = 0; i < RACE_PER_RUN; i++) {
		race_pair6(&want.pair, i & 1);
		if (lb6_sock_uslot_claim(slot, &want))
			race_count6(RACE_WRITES);
	}
	return 0;
}

SEC("tc")
int reader6(struct __sk_buff *skb)
{
	struct lb6_sock_uslot *slot = lb6_sock_uslot(RACE_COOKIE);
	int i;

	if (!slot)
		return 0;
	for (i = 0; i < RACE_PER_RUN; i++) {
		struct lb6_sock_uslot copy = {};
		__u32 seq = *(volatile __u32 *)&slot->seq;

		if (!lb6_sock_uslot_read(slot, RACE_COOKIE, &copy))
			continue;
		race_count6(RACE_READS);
		if (!race_whole6(&copy.pair))
			race_count6(RACE_TORN);
		if (*(volatile __u32 *)&slot->seq != seq)
			race_count6(RACE_SEQ_RETRIES);
	}
	return 0;
}

SEC("tc")
int reader6_noseq(struct __sk_buff *skb)
{
	struct lb6_sock_uslot *slot = lb6_sock_uslot(RACE_COOKIE);
	int i;

	if (!slot)
		return 0;
	for (i = 0; i < RACE_PER_RUN; i++) {
		struct lb6_sock_pair copy;

		if (*(volatile __u64 *)&slot->cookie != RACE_COOKIE)
			continue;
		lb_compiler_barrier();
		copy = slot->pair;
		lb_compiler_barrier();
		race_count6(RACE_NOSEQ_READS);
		if (!race_whole6(&copy))
			race_count6(RACE_NOSEQ_TORN);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
