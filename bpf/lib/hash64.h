/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash64.h: lb_hash64, on its own so that user-space code that must place
 * keys where a program looks for them (bench/fe4lookup.c) includes the
 * programs' own function instead of a copy. Needs only __u64.
 */
#ifndef SLUICE_BPF_HASH64_H
#define SLUICE_BPF_HASH64_H

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* 64-bit mix (MurmurHash3's finaliser): nearby inputs (consecutive netns
 * cookies, addresses of one subnet) land on unrelated values. */
static __always_inline __u64 lb_hash64(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

#endif /* SLUICE_BPF_HASH64_H */
