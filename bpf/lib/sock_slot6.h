/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_slot6.h: an IPv6 UDP socket's first frontend pair in its slot of
 * SLUICE_MAP_SOCK_USLOT6 (lb6_sock_uslot in sluice_abi.h), the twin of
 * sock_slot.h's lb4_sock_uslot, with the same reads and writes: writers
 * take the lock and move seq (odd while writing, even after), recvmsg6 and
 * sendmsg6 read without the lock under that sequence count on x86-64
 * (SLUICE_ORDERED_LOADS; elsewhere the lock), issue 12. Apart from
 * sock_slot.h so that IPv4's read path can change without touching IPv6's.
 */
#ifndef SLUICE_BPF_SOCK_SLOT6_H
#define SLUICE_BPF_SOCK_SLOT6_H

#include "sock_slot.h"

_Static_assert((SLUICE_SOCK_USLOTS6 & (SLUICE_SOCK_USLOTS6 - 1)) == 0, "SLUICE_SOCK_USLOTS6 is a power of two (the slot index is masked)");
/* The head of the TCP slots, with seq where they keep a rev-NAT id (as
 * lb4_sock_uslot). */
_Static_assert(__builtin_offsetof(struct lb6_sock_uslot, seq) == __builtin_offsetof(struct lb_sock_slot_head, rev_nat_id) &&
	       __builtin_offsetof(struct lb6_sock_uslot, cookie) == __builtin_offsetof(struct lb_sock_slot_head, cookie),
	       "lb6_sock_uslot starts with lock, seq, cookie");

/* lookup, read (lock-free under seq on x86-64), claim and free: sock_slot.h */
LB_SOCK_USLOT_FUNCS(lb6_sock_uslot, SLUICE_MAP_SOCK_USLOT6, SLUICE_SOCK_USLOTS6)

#endif /* SLUICE_BPF_SOCK_SLOT6_H */
