/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by bench/fe4lookup.bpf.c and bench/fe4lookup.c (see there). */
#ifndef SLUICE_BENCH_FE4LOOKUP_H
#define SLUICE_BENCH_FE4LOOKUP_H

#define FE4L_MAX_KEYS 524288 /* frontends drawn from (100 000 Services x tcp, udp fit) */
#define FE4L_LOOKUPS  32     /* lookups per program run (amortises the run's own cost) */
#define FE4L_PROBES   8      /* reader's probe bound; the loader refuses longer chains */

#include "hash64.h" /* lb_hash64 (bpf/lib): the slot of a key is its low bits */

#define FE4L_CFG_KEYS 0
#define FE4L_CFG_MASK 1
#define FE4L_CFG_N    2

/* One table slot: a whole cache line holds two; proto 0 is an empty slot. */
struct fe4l_slot {
	struct lb4_frontend_key key; /* the frontend (8 bytes, compared as one __u64) */
	__u32 seq;                   /* odd while a writer rewrites the slot */
	struct lb4_service svc;      /* the master, as sluice_svc4 holds it */
};

_Static_assert(sizeof(struct fe4l_slot) == 32, "fe4l_slot: 32 bytes, two per cache line");

#endif
