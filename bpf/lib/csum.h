/* SPDX-License-Identifier: Apache-2.0 */
/*
 * csum.h: one's-complement arithmetic (RFC 1071, RFC 1624) for checksums the
 * programs update themselves after writing a packet in place. The same
 * operations as the kernel's csum_add / csum_fold / csum_replace_by_diff, so
 * an update computed here gives the very bytes the kernel's helpers would
 * (test/bpf/tc_rewrite.test.ts pins them): a 32-bit sum with end-around carry
 * is 0 only when every term is 0, so the folded checksum is 0x0000 rather than
 * 0xffff exactly when the helpers' would be.
 */
#ifndef SLUICE_BPF_CSUM_H
#define SLUICE_BPF_CSUM_H

#include "common.h"

/* a + b with the carry added back in (csum_add). */
static __always_inline __u32 lb_csum_add(__u32 a, __u32 b)
{
	__u32 r = a + b;

	return r + (r < b);
}

/* The change of a 32-bit field from `from` to `to`, added to `diff`. */
static __always_inline __u32 lb_csum_diff4(__u32 diff, __u32 from, __u32 to)
{
	return lb_csum_add(lb_csum_add(diff, ~from), to);
}

/* The same for a 16-bit field (zero-extended, as csum_replace2 does). */
static __always_inline __u32 lb_csum_diff2(__u32 diff, __u16 from, __u16 to)
{
	return lb_csum_diff4(diff, from, to);
}

/* A 32-bit sum (or a bpf_csum_diff() result) folded to 16 bits and
 * complemented, ready to store (csum_fold). */
static __always_inline __u16 lb_csum_fold(__s64 sum)
{
	__u32 s = (__u32)sum;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* A checksum field after the data it covers changed by `diff`
 * (csum_replace_by_diff; the fields in memory order, as loaded). */
static __always_inline __u16 lb_csum_replace_by_diff(__u16 check, __u32 diff)
{
	return lb_csum_fold(lb_csum_add(diff, ~(__u32)check));
}

#endif /* SLUICE_BPF_CSUM_H */
