/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock6.h: the socket LB for AF_INET6 sockets (connect6, sendmsg6, recvmsg6,
 * getpeername6, post_bind6), with the guarantees of sock.h: UDP replies and
 * getpeername() show the frontend, a frontend without backends refuses at
 * once, non-Service traffic is left alone, an unconnected UDP socket stays on
 * one backend per frontend.
 *
 * Two cases per hook:
 *  - ::ffff:a.b.c.d (IPv4 through a dual-stack socket): the IPv4 table and
 *    the socket's IPv4 state (lb4_* of sock.h on the low 32 bits). The kernel
 *    runs sendmsg4 (not sendmsg6) for such a socket's unconnected datagrams,
 *    so connect, send and receive all meet in the same IPv4 state.
 *  - any other address: the IPv6 table and the socket's IPv6 state: a TCP
 *    socket's one pair in its slot of SLUICE_MAP_SOCK_SLOT6 (sock_slot.h,
 *    as IPv4's), a UDP socket's first frontend pair in its slot of
 *    SLUICE_MAP_SOCK_USLOT6 (sock_slot6.h, as IPv4's), and the rest (a UDP
 *    socket's further frontends, pairs whose slot was held) in
 *    SLUICE_MAP_SOCK6, its own socket-local storage.
 */
#ifndef SLUICE_BPF_SOCK6_H
#define SLUICE_BPF_SOCK6_H

#include "sock.h"
#include "lb6.h"
#include "sock_slot6.h"

/* user_ip6 is read and written as four 32-bit words (the only ctx access allowed). */
static __always_inline void sock6_dst_addr(const struct bpf_sock_addr *ctx, __u8 *out)
{
	__u32 *w = (__u32 *)out;

	w[0] = ctx->user_ip6[0];
	w[1] = ctx->user_ip6[1];
	w[2] = ctx->user_ip6[2];
	w[3] = ctx->user_ip6[3];
}

static __always_inline void sock6_set_dst(struct bpf_sock_addr *ctx, const __u8 *address, __be16 port)
{
	const __u32 *w = (const __u32 *)address;

	ctx->user_ip6[0] = w[0];
	ctx->user_ip6[1] = w[1];
	ctx->user_ip6[2] = w[2];
	ctx->user_ip6[3] = w[3];
	ctx->user_port = (__u32)port;
}

/* CVE-2020-8554 rule of lb4_extip_elsewhere, for IPv6 ExternalIPs. */
static __always_inline bool lb6_extip_elsewhere(const struct lb4_service *svc, const __u8 *address)
{
	struct lb6_node_ip ip;

	if (!(svc->flags & LB_SVC_FLAG_EXTERNAL_IP))
		return false;
	lb6_addr_copy(ip.address, address);
	return !bpf_map_lookup_elem(&SLUICE_MAP_NODEIP6, &ip);
}

/* ---- loadBalancerSourceRanges (lb4_sock_src_range_refusal's rules) ------- */

/* bpf_for_each_map_elem callback over SLUICE_MAP_NODEIP6: stops at the first
 * node address inside the frontend's ranges. */
static long lb6_src_probe_node(void *map, const struct lb6_node_ip *ip, __u8 *value, struct lb4_src_probe *probe)
{
	if (lb6_source_allowed(probe->rev_nat_id, ip->address)) {
		probe->allowed = 1;
		return 1; /* stop */
	}
	return 0;
}

/*
 * The IPv6 twin of lb4_sock_src_range_refusal (the firewall chain of
 * kube-proxy's ip6tables/nftables ip6 table): the socket's bound IPv6
 * address; unbound, the host netns by the node's IPv6 addresses
 * (SLUICE_MAP_NODEIP6), a pod's netns by the IPv6 address the CNI plugin
 * recorded (SLUICE_MAP_POD_ADDR address6; refused, counted apart, when there
 * is none). The same counters as IPv4. Returns 0 when allowed, else the
 * counter of the refusal.
 */
static __always_inline __u32 lb6_sock_src_range_refusal(struct bpf_sock_addr *ctx, const struct lb4_service *svc)
{
	struct lb4_src_probe probe = { .rev_nat_id = svc->rev_nat_id };
	struct bpf_sock *sk = ctx->sk;
	struct lb_pod_addr *pod = NULL;
	struct lb6_node_ip source = {};
	__u32 *w = (__u32 *)source.address;

	if (!lb_svc_has_source_ranges(svc))
		return 0;
	if (sk) {
		w[0] = sk->src_ip6[0];
		w[1] = sk->src_ip6[1];
		w[2] = sk->src_ip6[2];
		w[3] = sk->src_ip6[3];
	}
	if (!(w[0] | w[1] | w[2] | w[3])) {
		if (lb_sock_unbound_source(ctx, &pod)) {
			bpf_for_each_map_elem(&SLUICE_MAP_NODEIP6, lb6_src_probe_node, &probe, 0);
			return probe.allowed ? 0 : LB_CNT_SOCK_SRC_RANGE_DROP;
		}
		if (!pod || !(pod->flags & LB_POD_ADDR_HAS6))
			return LB_CNT_SOCK_SRC_RANGE_UNKNOWN;
		lb6_addr_copy(source.address, pod->address6);
	}
	return lb6_source_allowed(svc->rev_nat_id, source.address) ? 0 : LB_CNT_SOCK_SRC_RANGE_DROP;
}

/* ---- Per-socket pairs (lb6_sock_state; the caller holds st->lock) -------- */

static __always_inline bool sock6_pair_is_frontend(const struct lb6_sock_pair *p, const struct lb6_service_key *key)
{
	return p->used && p->frontend_port == key->port && lb6_addr_equal(p->frontend_address, key->address);
}

static __always_inline bool sock6_pair_is_backend(const struct lb6_sock_pair *p, const __u8 *address, __be16 port)
{
	return p->used && p->backend_port == port && lb6_addr_equal(p->backend_address, address);
}

/* The pair of this frontend, as sock_pair_of_frontend. */
static __always_inline bool sock6_pair_of_frontend(struct lb6_sock_state *st, const struct lb6_service_key *key,
						   struct lb6_sock_pair *out)
{
	int i;

	for (i = 0; i < SLUICE_SOCK_PAIRS; i++) {
		if (sock6_pair_is_frontend(&st->pairs[i], key)) {
			*out = st->pairs[i];
			st->last = i;
			return true;
		}
	}
	return false;
}

/* The pair naming this backend; the last one sent to wins a tie. */
static __always_inline bool sock6_pair_of_backend(const struct lb6_sock_state *st, const __u8 *address, __be16 port,
						  struct lb6_sock_pair *out)
{
	bool found = false;
	int i;

	for (i = 0; i < SLUICE_SOCK_PAIRS; i++) {
		if (sock6_pair_is_backend(&st->pairs[i], address, port) && (!found || i == st->last)) {
			*out = st->pairs[i];
			found = true;
		}
	}
	return found;
}

/* Where a new pair goes: its old pair, a free one, else the next in turn. */
static __always_inline __u32 sock6_pair_index(struct lb6_sock_state *st, const struct lb6_service_key *key,
					      bool *evicted)
{
	__u32 at;
	int i;

	for (i = 0; i < SLUICE_SOCK_PAIRS; i++)
		if (sock6_pair_is_frontend(&st->pairs[i], key))
			return i;
	for (i = 0; i < SLUICE_SOCK_PAIRS; i++)
		if (!st->pairs[i].used)
			return i;
	at = st->next & (SLUICE_SOCK_PAIRS - 1);
	st->next = (at + 1) & (SLUICE_SOCK_PAIRS - 1);
	*evicted = true;
	return at;
}

/* The backend a UDP socket's pair for this frontend names, if the frontend
 * still lists it at the same range position (as lb4_sock_pair_backend).
 * NULL: pick again. */
static __always_inline struct lb6_backend *
lb6_sock_pair_backend(const struct lb6_sock_pair *pair, struct lb6_service_key *key, const struct lb4_service *svc,
		      __u32 *backend_id)
{
	struct lb6_backend *backend;

	if (pair->scope != key->scope || pair->rev_nat_id != svc->rev_nat_id ||
	    pair->backend_slot == 0 || pair->backend_slot > svc->count)
		return NULL;
	key->backend_slot = pair->backend_slot;
	if (lb6_range_backend_id(svc, pair->backend_slot - 1) != pair->backend_id)
		return NULL;
	backend = lb6_lookup_backend(pair->backend_id);
	if (!backend || backend->port != pair->backend_port || !lb6_addr_equal(backend->address, pair->backend_address))
		return NULL;
	*backend_id = pair->backend_id;
	lb_count(LB_CNT_SOCK_STICKY);
	return backend;
}

/* The same, for the pair of this frontend in the socket's storage. */
static __always_inline struct lb6_backend *
lb6_sock_sticky_backend(struct lb6_sock_state *st, struct lb6_service_key *key, const struct lb4_service *svc,
			__u32 *backend_id)
{
	struct lb6_sock_pair pair = {};
	bool found;

	bpf_spin_lock(&st->lock);
	found = sock6_pair_of_frontend(st, key, &pair);
	bpf_spin_unlock(&st->lock);
	if (!found)
		return NULL;
	return lb6_sock_pair_backend(&pair, key, svc, backend_id);
}

/* The choice as a pair: key->backend_slot is the slot it came from (0: affinity). */
static __always_inline void
lb6_sock_pair_fill(struct lb6_sock_pair *pair, const struct lb6_service_key *key, const struct lb4_service *svc,
		   const struct lb6_backend *backend, __u32 backend_id)
{
	lb6_addr_copy(pair->frontend_address, key->address);
	lb6_addr_copy(pair->backend_address, backend->address);
	pair->frontend_port = key->port;
	pair->backend_port = backend->port;
	pair->scope = key->scope;
	pair->used = 1;
	pair->backend_slot = key->backend_slot;
	pair->backend_id = backend_id;
	pair->rev_nat_id = svc->rev_nat_id;
}

/* Keep a pair in the socket's storage (replacing its frontend's old pair),
 * as the one last sent to. */
static __always_inline void lb6_sock_remember_pair(struct lb6_sock_state *st, const struct lb6_sock_pair *pair)
{
	struct lb6_service_key fkey = { .port = pair->frontend_port };
	bool evicted = false;
	__u32 at;

	lb6_addr_copy(fkey.address, pair->frontend_address);
	bpf_spin_lock(&st->lock);
	at = sock6_pair_index(st, &fkey, &evicted) & (SLUICE_SOCK_PAIRS - 1);
	st->pairs[at] = *pair;
	st->last = at;
	bpf_spin_unlock(&st->lock);
	if (evicted)
		lb_count(LB_CNT_SOCK_PAIR_EVICTED);
}

static __always_inline void
lb6_sock_remember(struct lb6_sock_state *st, const struct lb6_service_key *key, const struct lb4_service *svc,
		  const struct lb6_backend *backend, __u32 backend_id)
{
	struct lb6_sock_pair pair = {};

	lb6_sock_pair_fill(&pair, key, svc, backend, backend_id);
	lb6_sock_remember_pair(st, &pair);
}

/* ---- UDP: the first frontend in a slot, more in socket storage ------------ */

/* Where a UDP socket's pairs are (lb4_sock_udp's twin): its slot (own: the
 * slot holds its one pair) or its storage (st), or neither yet. */
struct lb6_sock_udp {
	__u64 cookie;
	struct lb6_sock_uslot *slot;
	struct lb6_sock_state *st;
	bool own;
};

/* A socket that had its first frontend in its slot now sends to another:
 * create its storage, copy the slot's pair there, then free the slot (in that
 * order, so a reply finds the pair in one of them). NULL: no storage (the
 * slot keeps being used, for the newest frontend only). */
static __always_inline struct lb6_sock_state *
lb6_sock_udp_to_storage(struct bpf_sock_addr *ctx, struct lb6_sock_udp *u, const struct lb6_sock_pair *first)
{
	struct lb6_sock_state *st = bpf_sk_storage_get(&SLUICE_MAP_SOCK6, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (!st) {
		lb_count(LB_CNT_SOCK_STATE_FAILED);
		return NULL;
	}
	lb6_sock_remember_pair(st, first);
	lb6_sock_uslot_free(u->cookie);
	u->own = false;
	return st;
}

/* The backend this UDP socket already uses for this frontend (NULL: pick),
 * from its slot, else from its storage (found without creating it). */
static __always_inline struct lb6_backend *
lb6_sock_udp_sticky(struct bpf_sock_addr *ctx, struct lb6_sock_udp *u, struct lb6_service_key *key,
		    const struct lb4_service *svc, __u32 *backend_id)
{
	/* A socket without a cookie yet (its first datagram) holds no slot:
	 * its slot is not read. */
	bool had_cookie = lb_sock_has_cookie(ctx->sk);
	struct lb6_sock_uslot copy;

	u->cookie = bpf_get_socket_cookie(ctx);
	u->slot = lb6_sock_uslot(u->cookie);
	u->own = had_cookie && lb6_sock_uslot_read(u->slot, u->cookie, &copy);
	if (u->own) {
		if (sock6_pair_is_frontend(&copy.pair, key))
			return lb6_sock_pair_backend(&copy.pair, key, svc, backend_id);
		if (copy.pair.used)
			u->st = lb6_sock_udp_to_storage(ctx, u, &copy.pair);
		return NULL;
	}
	u->st = bpf_sk_storage_get(&SLUICE_MAP_SOCK6, ctx->sk, 0, 0);
	return u->st ? lb6_sock_sticky_backend(u->st, key, svc, backend_id) : NULL;
}

/* Keep a UDP socket's choice: in its slot while it has no storage and the
 * slot is free or its own, else in its storage (created here). */
static __always_inline void lb6_sock_udp_remember(struct bpf_sock_addr *ctx, struct lb6_sock_udp *u,
						  const struct lb6_sock_pair *pair)
{
	struct lb6_sock_uslot want = { .cookie = u->cookie, .pair = *pair };

	if (!u->st) {
		if (lb6_sock_uslot_claim(u->slot, &want)) {
			lb_count(LB_CNT_SOCK_UDP_SLOT);
			return;
		}
		u->st = bpf_sk_storage_get(&SLUICE_MAP_SOCK6, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!u->st) {
			lb_count(LB_CNT_SOCK_STATE_FAILED);
			return;
		}
	}
	lb6_sock_remember_pair(u->st, pair);
	lb_count(LB_CNT_SOCK_UDP_STORAGE);
}

/* A TCP connect6's reverse pair: its slot when the slot is free or already
 * its own (lb6_sock_slot in sluice_abi.h), else the socket's storage, as
 * every IPv6 pair was kept before the slots. */
static __always_inline void
lb6_sock_tcp_remember(struct bpf_sock_addr *ctx, const struct lb6_service_key *key, const struct lb4_service *svc,
		      const struct lb6_backend *backend, __u32 backend_id)
{
	struct lb6_sock_slot want = {
		.rev_nat_id = svc->rev_nat_id,
		.cookie = bpf_get_socket_cookie(ctx),
		.backend_port = backend->port,
		.frontend_port = key->port,
	};
	struct lb6_sock_slot *slot = lb6_sock_slot(want.cookie);
	struct lb6_sock_state *st;

	lb6_addr_copy(want.backend_address, backend->address);
	lb6_addr_copy(want.frontend_address, key->address);
	if (slot && lb_sock_slot_claim(slot, &want, LB_SOCK_SLOT_WORDS(lb6_sock_slot)))
		return;
	lb_count(LB_CNT_SOCK6_SLOT_HELD);
	st = bpf_sk_storage_get(&SLUICE_MAP_SOCK6, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		lb_count(LB_CNT_SOCK_STATE_FAILED);
		return;
	}
	lb6_sock_remember(st, key, svc, backend, backend_id);
}

/* ---- Forward: connect6 / sendmsg6 ---------------------------------------- */

/* lb4_sock_xlate_fwd for an IPv6 destination: 1 rewritten, 0 left alone, <0 refused. */
static __always_inline int lb6_sock_xlate_fwd(struct bpf_sock_addr *ctx, const __u8 *address)
{
	struct lb6_service_key key = {
		.port = sock4_dst_port(ctx),
		.proto = (__u8)ctx->protocol,
	};
	struct lb6_affinity_key akey = {};
	struct lb6_backend *backend = NULL;
	struct lb6_sock_udp udp = {};
	struct lb6_sock_pair pair = {};
	struct lb4_service svc, *found;
	__u64 client_id = 0;
	__u32 backend_id = 0;
	__u32 refusal;

	if (!sock_proto_supported(ctx->protocol))
		return 0;
	lb6_addr_copy(key.address, address);
	found = lb6_lookup_service(&key, true);
	if (!found)
		return 0;
	svc = *found;
	if (lb_sock_ns_excluded(ctx)) {
		lb_count(LB_CNT_SOCK_NS_SKIPPED);
		return 0;
	}
	if (lb6_extip_elsewhere(&svc, key.address)) {
		lb_count(LB_CNT_SOCK_EXTIP_PASSED);
		return 0;
	}
	refusal = lb6_sock_src_range_refusal(ctx, &svc);
	if (refusal) {
		lb_count(refusal);
		lb6_event_sock(ctx, refusal, &key, svc.rev_nat_id);
		return -EHOSTUNREACH; /* as lb4_sock_xlate_fwd: kube-proxy drops */
	}
	if (svc.count == 0) {
		lb_count(LB_CNT_SOCK_NO_BACKEND);
		lb6_event_sock(ctx, LB_CNT_SOCK_NO_BACKEND, &key, svc.rev_nat_id);
		return (svc.flags & LB_SVC_FLAG_DROP_NO_BACKEND) ? -EHOSTUNREACH : -ECONNREFUSED;
	}
	/* UDP keeps its backend per frontend: its first in its slot
	 * (lb6_sock_uslot), more in its storage. TCP's one pair goes to its
	 * slot (lb6_sock_tcp_remember), storage only when the slot is held, so
	 * a connect6 or a fresh socket's sendmsg6 usually creates no storage. */
	if (key.proto == LB_PROTO_UDP)
		backend = lb6_sock_udp_sticky(ctx, &udp, &key, &svc, &backend_id);
	if (!backend) {
		if (lb_svc_has_affinity(&svc) || svc.algorithm == LB_ALG_SOURCE_HASH) {
			__u32 *cookie = (__u32 *)akey.client;

			client_id = bpf_get_netns_cookie(ctx);
			cookie[0] = (__u32)client_id;
			cookie[1] = (__u32)(client_id >> 32);
			akey.netns_cookie = 1;
		} else if (svc.algorithm == LB_ALG_MAGLEV) {
			/* As connect4: no 5-tuple yet at connect; the socket is the flow. */
			client_id = lb_hash64(bpf_get_socket_cookie(ctx));
		}
		key.backend_slot = 0;
		backend = lb6_pick_backend_copy(&key, &svc, &akey, client_id, &backend_id);
		if (!backend) {
			lb_count(LB_CNT_SOCK_SLOT_MISSING);
			return -ECONNREFUSED;
		}
		if (key.proto == LB_PROTO_UDP) {
			lb6_sock_pair_fill(&pair, &key, &svc, backend, backend_id);
			lb6_sock_udp_remember(ctx, &udp, &pair);
		} else {
			lb6_sock_tcp_remember(ctx, &key, &svc, backend, backend_id);
		}
	}
	if (svc.algorithm == LB_ALG_LEAST_CONN)
		lc4_sock_hold(ctx->sk, backend_id);
	sock6_set_dst(ctx, backend->address, backend->port);
	lb_count(LB_CNT_SOCK_TRANSLATED);
	return 1;
}

static __always_inline int lb6_sock_forward(struct bpf_sock_addr *ctx)
{
	struct lb6_node_ip dst;
	int err;

	sock6_dst_addr(ctx, dst.address);
	if (lb6_addr_is_v4mapped(dst.address)) {
		__be32 *v4 = (__be32 *)&dst.address[12];

		err = lb4_sock_xlate_fwd(ctx, v4);
		if (err > 0) {
			ctx->user_ip6[3] = *v4;
			lb_count(LB_CNT_SOCK6_V4MAPPED);
		}
	} else {
		err = lb6_sock_xlate_fwd(ctx, dst.address);
	}
	if (err < 0) {
		bpf_set_retval(err);
		return SYS_REJECT;
	}
	return SYS_PROCEED;
}

/* ---- Reverse: recvmsg6 / getpeername6 ------------------------------------ */

static __always_inline void lb6_sock_forget(struct lb6_sock_state *st, const struct lb6_sock_pair *gone)
{
	int i;

	bpf_spin_lock(&st->lock);
	for (i = 0; i < SLUICE_SOCK_PAIRS; i++) {
		struct lb6_sock_pair *p = &st->pairs[i];

		if (sock6_pair_is_backend(p, gone->backend_address, gone->backend_port) &&
		    p->frontend_port == gone->frontend_port && p->rev_nat_id == gone->rev_nat_id &&
		    lb6_addr_equal(p->frontend_address, gone->frontend_address))
			p->used = 0;
	}
	bpf_spin_unlock(&st->lock);
}

/* The frontend still exists with this address and port under this rev-NAT
 * id (it may have been deleted or re-used since the socket was sent). */
static __always_inline bool lb6_sock_frontend_current(__u32 rev_nat_id, const __u8 *address, __be16 port)
{
	struct lb6_reverse_nat *rev_nat = bpf_map_lookup_elem(&SLUICE_MAP_REVNAT6, &rev_nat_id);

	return rev_nat && rev_nat->port == port && lb6_addr_equal(rev_nat->address, address);
}

/* TCP: the pair in this socket's slot (lb6_sock_slot). 1: rewritten to the
 * frontend; 0: found, but the frontend is gone (slot freed, left alone);
 * -1: not in the slot (look in the storage: the slot was held at connect,
 * or the socket was connected before the slots). */
static __always_inline int lb6_sock_tcp_xlate_rev(struct bpf_sock_addr *ctx, const __u8 *address)
{
	struct lb6_sock_slot pair;
	__u64 cookie;

	/* No cookie: connect6 never keyed a slot by it (lb_sock_has_cookie). */
	if (!lb_sock_has_cookie(ctx->sk))
		return -1;
	cookie = bpf_get_socket_cookie(ctx);
	/* getpeername6: the socket's lock is held, no slot lock needed (see
	 * lb4_sock_slot_pair_sk_locked). */
	if (!lb6_sock_slot_pair_sk_locked(cookie, address, sock4_dst_port(ctx), &pair, lb_sock_lock_owned(ctx->sk)))
		return -1;
	if (!lb6_sock_frontend_current(pair.rev_nat_id, pair.frontend_address, pair.frontend_port)) {
		lb6_sock_slot_free(cookie);
		return 0;
	}
	sock6_set_dst(ctx, pair.frontend_address, pair.frontend_port);
	lb_count(LB_CNT_SOCK_REV_XLATED);
	return 1;
}

/* UDP: the pair in this socket's slot (lb6_sock_uslot). 1: rewritten to
 * the frontend; 0: the slot is the socket's but names another peer or a
 * frontend that is gone (left alone: a socket with its slot has no
 * storage); -1: not its slot (look in its storage). A socket without a
 * cookie has no slot: no cookie created, no slot looked up. */
static __always_inline int lb6_sock_udp_xlate_rev(struct bpf_sock_addr *ctx, const __u8 *address)
{
	struct lb6_sock_uslot copy;
	__u64 cookie;

	if (!lb_sock_has_cookie(ctx->sk))
		return -1; /* storage only: sockets sent before the slots existed */
	cookie = bpf_get_socket_cookie(ctx);
	if (!lb6_sock_uslot_read(lb6_sock_uslot(cookie), cookie, &copy))
		return -1;
	if (!sock6_pair_is_backend(&copy.pair, address, sock4_dst_port(ctx)) ||
	    !lb6_sock_frontend_current(copy.pair.rev_nat_id, copy.pair.frontend_address, copy.pair.frontend_port))
		return 0;
	sock6_set_dst(ctx, copy.pair.frontend_address, copy.pair.frontend_port);
	lb_count(LB_CNT_SOCK_REV_XLATED);
	return 1;
}

/* sock_release: an AF_INET6 UDP socket's IPv6 slot is freed, if it holds it
 * (a socket never sent to a Service has no cookie: nothing looked up). Its
 * IPv4 slot is freed too (lb4_sock_udp_forget): an unconnected dual-stack
 * socket can hold both, one per family of Service it sent to (::ffff:
 * destinations go through sendmsg4). */
static __always_inline void lb6_sock_udp_forget(struct bpf_sock *sk)
{
	if (sk->family != AF_INET6 || sk->protocol != LB_PROTO_UDP || !lb_sock_has_cookie(sk))
		return;
	lb6_sock_uslot_free(bpf_get_socket_cookie(sk));
}

static __always_inline void lb6_sock_xlate_rev6(struct bpf_sock_addr *ctx, const __u8 *address)
{
	struct lb6_sock_pair pair = {};
	struct lb6_sock_state *st;
	__u32 protocol = ctx->protocol;
	bool found;

	/* One read of ctx->protocol, kept in a register: clang otherwise
	 * reloads it through ctx plus a variable offset, which the verifier
	 * refuses ("dereference of modified ctx ptr"). */
	barrier_var(protocol);
	if (protocol == LB_PROTO_TCP && lb6_sock_tcp_xlate_rev(ctx, address) >= 0)
		return;
	if (protocol == LB_PROTO_UDP && lb6_sock_udp_xlate_rev(ctx, address) >= 0)
		return;
	st = bpf_sk_storage_get(&SLUICE_MAP_SOCK6, ctx->sk, 0, 0);
	if (!st)
		return;
	bpf_spin_lock(&st->lock);
	found = sock6_pair_of_backend(st, address, sock4_dst_port(ctx), &pair);
	bpf_spin_unlock(&st->lock);
	if (!found)
		return;
	if (!lb6_sock_frontend_current(pair.rev_nat_id, pair.frontend_address, pair.frontend_port)) {
		lb6_sock_forget(st, &pair);
		return;
	}
	sock6_set_dst(ctx, pair.frontend_address, pair.frontend_port);
	lb_count(LB_CNT_SOCK_REV_XLATED);
}

static __always_inline void lb6_sock_xlate_rev(struct bpf_sock_addr *ctx)
{
	struct lb6_node_ip peer;

	sock6_dst_addr(ctx, peer.address);
	if (lb6_addr_is_v4mapped(peer.address)) {
		__be32 *v4 = (__be32 *)&peer.address[12];

		if (lb4_sock_xlate_rev_addr(ctx, v4)) {
			ctx->user_ip6[3] = *v4;
			lb_count(LB_CNT_SOCK6_V4MAPPED);
		}
		return;
	}
	lb6_sock_xlate_rev6(ctx, peer.address);
}

/* ---- post_bind6: the bind rule of post_bind4 ------------------------------ */

struct lb6_bind_probe {
	__be16 port;
	__u8   proto;
	__u8   nodeport;
};

/* bpf_for_each_map_elem callback over SLUICE_MAP_NODEIP6. */
static long lb6_bind_probe_address(void *map, const struct lb6_node_ip *ip, __u8 *value, struct lb6_bind_probe *probe)
{
	struct lb6_service_key key = { .port = probe->port, .proto = probe->proto };
	struct lb4_service *svc;

	lb6_addr_copy(key.address, ip->address);
	svc = lb6_lookup_service(&key, false);
	if (svc && (svc->flags & LB_SVC_FLAG_NODEPORT)) {
		probe->nodeport = 1;
		return 1;
	}
	return 0;
}

/*
 * As lb4_sock_post_bind, for AF_INET6 sockets of the host namespace:
 * ::ffff:a.b.c.d asks the IPv4 rule; "::" asks both families, since a
 * dual-stack socket bound to "::" also receives IPv4 (bpf_sock does not say
 * whether IPV6_V6ONLY is set, so a v6-only socket on a NodePort port is
 * refused too: the port is the Service's either way); any other address asks
 * the IPv6 table.
 */
static __always_inline int lb6_sock_post_bind(struct bpf_sock *ctx)
{
	const struct lb_sock_config *cfg = lb_sock_config();
	struct lb6_bind_probe probe = {
		.port = bpf_htons((__u16)ctx->src_port),
		.proto = (__u8)ctx->protocol,
	};
	struct lb6_service_key key = { .port = probe.port, .proto = probe.proto };
	const __u32 *w = (const __u32 *)key.address;
	struct lb4_service *svc;
	__u32 *a = (__u32 *)key.address;

	if (!sock_proto_supported(ctx->protocol) || !cfg || !lb_sock_in_host_ns(ctx, cfg))
		return 0;
	a[0] = ctx->src_ip6[0];
	a[1] = ctx->src_ip6[1];
	a[2] = ctx->src_ip6[2];
	a[3] = ctx->src_ip6[3];
	if (lb6_addr_is_v4mapped(key.address))
		return lb4_bind_shadows(w[3], probe.port, probe.proto) ? -EADDRINUSE : 0;
	if (w[0] | w[1] | w[2] | w[3]) {
		svc = lb6_lookup_service(&key, false);
		if (!svc || !(svc->flags & LB_BIND_SHADOWED))
			return 0;
	} else {
		if (lb4_bind_shadows(0, probe.port, probe.proto))
			return -EADDRINUSE;
		bpf_for_each_map_elem(&SLUICE_MAP_NODEIP6, lb6_bind_probe_address, &probe, 0);
		if (!probe.nodeport)
			return 0;
	}
	lb_count(LB_CNT_SOCK_BIND_REFUSED);
	return -EADDRINUSE;
}

#endif /* SLUICE_BPF_SOCK6_H */
