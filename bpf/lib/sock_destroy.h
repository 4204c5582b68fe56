/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_destroy.h: end the sockets that still talk to a deleted backend.
 *
 * connect() on a Service is translated once (lib/sock.h): a connected UDP
 * socket (a resolver) or a TCP connection then keeps the backend's address for
 * as long as it lives, and keeps reaching the old Pod if its address still
 * answers, or a black hole if not. Nothing in the packet path can fix that:
 * there is no per-packet translation to redo. So the agent lists the deleted
 * backends in SLUICE_MAP_SOCKTERM4 and runs these iterators; a matching socket
 * is destroyed with bpf_sock_destroy() (the kernel's diag_destroy: the next
 * send/recv fails with ECONNABORTED), the application reconnects, and its new
 * connect() is translated to a live backend.
 *
 * Only sockets the socket LB sent to that backend are touched: the socket's
 * reverse entry (the one recvmsg()/getpeername() use) must name the backend.
 * A socket that dialled the Pod address directly is left alone.
 */
#ifndef SLUICE_BPF_SOCK_DESTROY_H
#define SLUICE_BPF_SOCK_DESTROY_H

#include "common.h"
#include "maps.h"
#include "lb6.h"
#include "sock_slot.h"
#include "sock_slot6.h"

/* The kfunc (kernel >= 6.5); the loader fails on an older kernel, which is
 * how the agent detects support. */
extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb4_sock_term_key);
	__type(value, __u8);
	__uint(max_entries, SLUICE_MAX_SOCKTERM4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_SOCKTERM4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb6_sock_term_key);
	__type(value, __u8);
	__uint(max_entries, SLUICE_MAX_SOCKTERM6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_SOCKTERM6 SEC(".maps");

/* The last socket destroyed (bpftool map dump of the object's .bss); it also
 * keeps the event layout in the object's BTF for the ABI generator. */
struct lb4_sock_term_event lb4_last_sock_term;
struct lb6_sock_term_event lb6_last_sock_term;

/* The socket LB sent this socket to the backend: a TCP socket's pair in its
 * slot (SLUICE_MAP_SOCK_SLOT4) or in SLUICE_MAP_SOCK_TCP4 (keyed by its
 * cookie and the backend), or one of the
 * pairs in its socket-local storage (UDP, whose first frontend is in its slot
 * of SLUICE_MAP_SOCK_USLOT4; and TCP sockets connected before an
 * upgrade to the LRU layout) names it (lib/sock.h). A socket never
 * translated has neither. A TCP pair the LRU recycled is not found: that
 * socket is left alone, as one that dialled the backend itself would be. */
static __always_inline bool lb4_sock_was_translated(struct sock_common *skc, __be32 address, __be16 port, __u8 proto)
{
	struct lb4_sock_state *st;
	bool found = false;
	int i;

	if (proto == LB_PROTO_TCP) {
		struct lb4_sock_tcp_key tkey = {
			.cookie = bpf_get_socket_cookie(skc),
			.backend_address = address,
			.backend_port = port,
		};

		struct lb4_sock_tcp pair;

		if (lb4_sock_slot_pair(tkey.cookie, address, port, &pair) ||
		    bpf_map_lookup_elem(&SLUICE_MAP_SOCK_TCP4, &tkey))
			return true;
	}
	if (proto == LB_PROTO_UDP) {
		__u64 cookie = bpf_get_socket_cookie(skc);
		struct lb4_sock_uslot copy;

		if (lb4_sock_uslot_read(lb4_sock_uslot(cookie), cookie, &copy))
			return copy.pair.used && copy.pair.backend_address == address && copy.pair.backend_port == port;
	}
	st = bpf_sk_storage_get(&SLUICE_MAP_SOCK4, skc, 0, 0);
	if (!st)
		return false;
	bpf_spin_lock(&st->lock);
	for (i = 0; i < SLUICE_SOCK_PAIRS; i++) {
		if (st->pairs[i].used && st->pairs[i].backend_address == address &&
		    st->pairs[i].backend_port == port)
			found = true;
	}
	bpf_spin_unlock(&st->lock);
	return found;
}

/*
 * One socket of the iterator: destroy it when it is an IPv4 socket connected
 * to a listed backend that the socket LB chose for it. skc must be the
 * iterator's own (trusted) pointer: bpf_sock_destroy() refuses one derived
 * from it, such as bpf_skc_to_tcp_sock()'s result; the caller has checked it
 * is a full socket (request and time-wait minisocks have no diag_destroy).
 */
static __always_inline int lb4_sock_term(struct seq_file *seq, struct sock_common *skc, __u8 proto)
{
	struct lb4_sock_term_key term = {};
	struct lb4_sock_term_event event = {};

	if (skc->skc_family == AF_INET6) {
		/* A dual-stack socket connected to ::ffff:a.b.c.d: the kernel keeps
		 * the IPv4 peer in skc_daddr, and the socket LB kept its state in
		 * the IPv4 maps (lib/sock6.h). Any other AF_INET6 peer: lb6_sock_term. */
		__u8 peer[16];

		lb6_addr_copy(peer, (const __u8 *)skc->skc_v6_daddr.in6_u.u6_addr32);
		if (!lb6_addr_is_v4mapped(peer))
			return 0;
	} else if (skc->skc_family != AF_INET) {
		return 0;
	}
	if (skc->skc_daddr == 0)
		return 0; /* not connected */
	term.address = skc->skc_daddr;
	term.port = skc->skc_dport;
	term.proto = proto;
	if (!bpf_map_lookup_elem(&SLUICE_MAP_SOCKTERM4, &term))
		return 0;
	if (!lb4_sock_was_translated(skc, term.address, term.port, proto))
		return 0;
	event.cookie = bpf_get_socket_cookie(skc);
	event.address = term.address;
	event.port = term.port;
	event.proto = proto;
	event.result = bpf_sock_destroy(skc);
	bpf_seq_write(seq, &event, sizeof(event));
	lb4_last_sock_term = event;
	return 0;
}

/* lb4_sock_was_translated for an AF_INET6 socket: a TCP socket's slot
 * (SLUICE_MAP_SOCK_SLOT6), a UDP socket's slot (SLUICE_MAP_SOCK_USLOT6, its
 * first frontend), or a pair in its sluice_sock6 storage (UDP's further
 * frontends; TCP whose slot was held, or connected before the slots), names
 * the backend. */
static __always_inline bool lb6_sock_was_translated(struct sock_common *skc, const __u8 *address, __be16 port, __u8 proto)
{
	struct lb6_sock_slot slot;
	struct lb6_sock_state *st;
	bool found = false;
	int i;

	if (proto == LB_PROTO_TCP && lb6_sock_slot_pair(bpf_get_socket_cookie(skc), address, port, &slot))
		return true;
	if (proto == LB_PROTO_UDP) {
		__u64 cookie = bpf_get_socket_cookie(skc);
		struct lb6_sock_uslot copy;

		if (lb6_sock_uslot_read(lb6_sock_uslot(cookie), cookie, &copy))
			return copy.pair.used && copy.pair.backend_port == port &&
			       lb6_addr_equal(copy.pair.backend_address, address);
	}
	st = bpf_sk_storage_get(&SLUICE_MAP_SOCK6, skc, 0, 0);
	if (!st)
		return false;
	bpf_spin_lock(&st->lock);
	for (i = 0; i < SLUICE_SOCK_PAIRS; i++) {
		if (st->pairs[i].used && st->pairs[i].backend_port == port &&
		    lb6_addr_equal(st->pairs[i].backend_address, address))
			found = true;
	}
	bpf_spin_unlock(&st->lock);
	return found;
}

/* lb4_sock_term for AF_INET6 sockets connected to an IPv6 backend listed in SLUICE_MAP_SOCKTERM6. */
static __always_inline int lb6_sock_term(struct seq_file *seq, struct sock_common *skc, __u8 proto)
{
	struct lb6_sock_term_key term = {};
	struct lb6_sock_term_event event = {};

	if (skc->skc_family != AF_INET6)
		return 0;
	lb6_addr_copy(term.address, (const __u8 *)skc->skc_v6_daddr.in6_u.u6_addr32);
	if (lb6_addr_is_v4mapped(term.address))
		return 0; /* IPv4 through a dual-stack socket: lb4_sock_term's */
	term.port = skc->skc_dport;
	term.proto = proto;
	if (term.port == 0 || !bpf_map_lookup_elem(&SLUICE_MAP_SOCKTERM6, &term))
		return 0; /* not connected (no peer port), or not a listed backend */
	if (!lb6_sock_was_translated(skc, term.address, term.port, proto))
		return 0;
	event.cookie = bpf_get_socket_cookie(skc);
	lb6_addr_copy(event.address, term.address);
	event.port = term.port;
	event.proto = proto;
	event.result = bpf_sock_destroy(skc);
	bpf_seq_write(seq, &event, sizeof(event));
	lb6_last_sock_term = event;
	return 0;
}

#endif /* SLUICE_BPF_SOCK_DESTROY_H */
