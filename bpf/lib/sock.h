/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock.h: socket-level load balancing on cgroup v2 hooks.
 *
 * connect()/sendmsg() to a frontend are rewritten to a backend before the
 * kernel routes anything: no per-packet NAT and no conntrack entry for
 * traffic that starts on this node. A UDP socket keeps its choices in its own
 * storage (lb4_sock_state in sluice_abi.h): later datagrams of an
 * unconnected UDP socket go to the same backend, and recvmsg()/getpeername()
 * show the frontend again. A TCP socket's one choice goes into its slot of
 * an ARRAY indexed by its cookie (lb4_sock_slot, sock_slot.h), or into an LRU
 * keyed by its cookie (lb4_sock_tcp) when another live socket holds that
 * slot: both cheaper per connect() than creating storage. post_bind4 refuses
 * binds that would shadow a NodePort, ExternalIP or LoadBalancer frontend.
 */
#ifndef SLUICE_BPF_SOCK_H
#define SLUICE_BPF_SOCK_H

#include <bpf/bpf_core_read.h>
#include "lb.h"
#include "nodeport.h"
#include "events.h"
#include "sock_slot.h"

#ifndef EADDRINUSE
#define EADDRINUSE 98
#endif

_Static_assert((SLUICE_SOCK_PAIRS & (SLUICE_SOCK_PAIRS - 1)) == 0, "SLUICE_SOCK_PAIRS is a power of two (pair indices are masked)");

/* user_port is a __u32 holding the __be16 port in its first two bytes; a
 * narrower read is not allowed on every kernel, so read 4 bytes and truncate
 * (on little endian the first two bytes are the low 16 bits). */
static __always_inline __be16 sock4_dst_port(const struct bpf_sock_addr *ctx)
{
	volatile __u32 port = ctx->user_port;

	return (__be16)port;
}

static __always_inline bool sock_proto_supported(__u32 proto)
{
	return proto == LB_PROTO_TCP || proto == LB_PROTO_UDP;
}

/* ---- Which sockets: socketLB mode and the host network namespace ---------- */

static __always_inline const struct lb_sock_config *lb_sock_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&SLUICE_MAP_SOCK_CFG, &zero);
}

/* ctx: a bpf_sock_addr or bpf_sock context (both give a netns cookie). */
static __always_inline bool lb_sock_in_host_ns(void *ctx, const struct lb_sock_config *cfg)
{
	return cfg->host_netns_cookie && bpf_get_netns_cookie(ctx) == cfg->host_netns_cookie;
}

/* The socketLB mode leaves this socket alone. */
static __always_inline bool lb_sock_ns_excluded(struct bpf_sock_addr *ctx)
{
	const struct lb_sock_config *cfg = lb_sock_config();
	bool host;

	if (!cfg || cfg->mode == LB_SOCK_LB_ALL)
		return false;
	host = lb_sock_in_host_ns(ctx, cfg);
	return cfg->mode == LB_SOCK_LB_HOST_NS_ONLY ? !host : host;
}

/*
 * CVE-2020-8554: anyone who may create a Service may list any address as an
 * ExternalIP. Translating it at the socket would capture every pod's and the
 * node's own traffic to that address. As Cilium does, the socket LB
 * translates an ExternalIP only when it is one of this node's addresses
 * (traffic that really is for this node); any other passes untouched and is
 * routed like any packet (to the node that owns the address, whose TC
 * program serves it).
 */
static __always_inline bool lb4_extip_elsewhere(const struct lb4_service *svc, __be32 address)
{
	if (!(svc->flags & LB_SVC_FLAG_EXTERNAL_IP))
		return false;
	return !bpf_map_lookup_elem(&SLUICE_MAP_NODEIP4, &address);
}

/* ---- loadBalancerSourceRanges (issue 11 item 1) --------------------------- */

struct lb4_src_probe {
	__u32 rev_nat_id;
	__u8  allowed;
};

/* bpf_for_each_map_elem callback over SLUICE_MAP_NODEIP4: stops at the first
 * node address inside the frontend's ranges. */
static long lb4_src_probe_node(void *map, const __be32 *address, __u8 *value, struct lb4_src_probe *probe)
{
	if (lb4_source_allowed(probe->rev_nat_id, *address)) {
		probe->allowed = 1;
		return 1; /* stop */
	}
	return 0;
}

/*
 * kube-proxy's firewall chain drops a connection to a LoadBalancer IP whose
 * source is outside loadBalancerSourceRanges, for the node's and pods' own
 * clients too (the flag is set on LoadBalancer frontends only: ClusterIPs
 * are never filtered). The source kube-proxy sees is the packet's: here the
 * socket's bound address. An unbound socket gets its address only after
 * this hook (routing picks it): in a pod's netns that is the pod's address,
 * which the CNI plugin recorded under the netns cookie (SLUICE_MAP_POD_ADDR;
 * refused, counted apart, when there is none); in the host netns it is one of
 * the node's addresses, so it is allowed when a range holds one of them
 * (kube-proxy also lets the node in when a range holds its node IP).
 * Returns 0 when allowed, else the counter of the refusal.
 */
/* For an unbound socket (both families): true in the host netns (judged by
 * the node's addresses), else *pod is what the CNI plugin recorded for the
 * socket's netns (NULL: nothing). */
static __always_inline bool lb_sock_unbound_source(struct bpf_sock_addr *ctx, struct lb_pod_addr **pod)
{
	const struct lb_sock_config *cfg = lb_sock_config();
	__u64 netns;

	if (cfg && lb_sock_in_host_ns(ctx, cfg))
		return true;
	netns = bpf_get_netns_cookie(ctx);
	*pod = bpf_map_lookup_elem(&SLUICE_MAP_POD_ADDR, &netns);
	return false;
}

static __always_inline __u32 lb4_sock_src_range_refusal(struct bpf_sock_addr *ctx, const struct lb4_service *svc)
{
	struct lb4_src_probe probe = { .rev_nat_id = svc->rev_nat_id };
	struct bpf_sock *sk = ctx->sk;
	struct lb_pod_addr *pod = NULL;
	__be32 source;

	if (!lb_svc_has_source_ranges(svc))
		return 0;
	source = sk ? sk->src_ip4 : 0;
	if (!source) {
		if (lb_sock_unbound_source(ctx, &pod)) {
			bpf_for_each_map_elem(&SLUICE_MAP_NODEIP4, lb4_src_probe_node, &probe, 0);
			return probe.allowed ? 0 : LB_CNT_SOCK_SRC_RANGE_DROP;
		}
		if (!pod || !(pod->flags & LB_POD_ADDR_HAS4))
			return LB_CNT_SOCK_SRC_RANGE_UNKNOWN;
		source = pod->address4;
	}
	return lb4_source_allowed(svc->rev_nat_id, source) ? 0 : LB_CNT_SOCK_SRC_RANGE_DROP;
}

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/*
 * Whether the socket already has a cookie, read without creating one
 * (bpf_get_socket_cookie() allocates it on first use): the kernel's struct
 * sock behind any socket (TCP or UDP, a sock_addr or a sock_release
 * context), read only. false only when it surely has none; any doubt: true
 * (look).
 */
static __always_inline bool lb_sock_has_cookie(struct bpf_sock *sk)
{
	struct sock *s = bpf_rdonly_cast(sk, bpf_core_type_id_kernel(struct sock));

	return !s || s->__sk_common.skc_cookie.counter != 0;
}

/*
 * The socket's lock is held (lock_sock(): sk_lock.owned, the kernel's
 * struct sock read only). getpeername4/6 run under it on every kernel that
 * has the hooks (inet_getname() takes it since 5.16; before, the hook ran
 * under BPF_CGROUP_RUN_SA_PROG_LOCK): this check keeps the lock-free TCP
 * slot read (lb4_sock_slot_pair_sk_locked) to that case should a kernel
 * ever run the hook without it (then the slot's lock is taken). false when
 * the struct cannot be read.
 */
static __always_inline bool lb_sock_lock_owned(struct bpf_sock *sk)
{
	struct sock *s = bpf_rdonly_cast(sk, bpf_core_type_id_kernel(struct sock));

	return s && s->sk_lock.owned;
}

/* ---- Per-socket pairs (lb4_sock_state; the caller holds st->lock) --------- */

static __always_inline bool sock_pair_is_frontend(const struct lb4_sock_pair *p, const struct lb4_service_key *key)
{
	return p->used && p->frontend_address == key->address && p->frontend_port == key->port;
}

static __always_inline bool sock_pair_is_backend(const struct lb4_sock_pair *p, __be32 address, __be16 port)
{
	return p->used && p->backend_address == address && p->backend_port == port;
}

/* Copy the pair of this frontend; marks it the last one sent to. */
static __always_inline bool sock_pair_of_frontend(struct lb4_sock_state *st, const struct lb4_service_key *key,
						  struct lb4_sock_pair *out)
{
	int i;

	for (i = 0; i < SLUICE_SOCK_PAIRS; i++) {
		if (sock_pair_is_frontend(&st->pairs[i], key)) {
			*out = st->pairs[i];
			st->last = i;
			return true;
		}
	}
	return false;
}

/* Copy the pair naming this backend; the last one sent to wins a tie (two
 * frontends on one backend: the reply most likely answers the last send). */
static __always_inline bool sock_pair_of_backend(const struct lb4_sock_state *st, __be32 address, __be16 port,
						 struct lb4_sock_pair *out)
{
	bool found = false;
	int i;

	for (i = 0; i < SLUICE_SOCK_PAIRS; i++) {
		if (sock_pair_is_backend(&st->pairs[i], address, port) && (!found || i == st->last)) {
			*out = st->pairs[i];
			found = true;
		}
	}
	return found;
}

/* Where a new pair for this frontend goes: its old pair, else a free one,
 * else the next in turn (*evicted then). */
static __always_inline __u32 sock_pair_index(struct lb4_sock_state *st, const struct lb4_service_key *key, bool *evicted)
{
	__u32 at;
	int i;

	for (i = 0; i < SLUICE_SOCK_PAIRS; i++)
		if (sock_pair_is_frontend(&st->pairs[i], key))
			return i;
	for (i = 0; i < SLUICE_SOCK_PAIRS; i++)
		if (!st->pairs[i].used)
			return i;
	at = st->next & (SLUICE_SOCK_PAIRS - 1);
	st->next = (at + 1) & (SLUICE_SOCK_PAIRS - 1);
	*evicted = true;
	return at;
}

/* ---- Forward: connect4 / sendmsg4 --------------------------------------- */

/*
 * The backend this socket already uses for this frontend, if the frontend
 * still lists it at the same range position (kube-proxy's conntrack keeps a UDP flow on
 * its backend the same way, until the backend goes). NULL: pick again.
 */
static __always_inline struct lb4_backend *
lb4_sock_pair_backend(const struct lb4_sock_pair *pair, struct lb4_service_key *key, const struct lb4_service *svc,
		      __u32 *backend_id)
{
	struct lb4_backend *backend;

	if (pair->scope != key->scope || pair->rev_nat_id != svc->rev_nat_id ||
	    pair->backend_slot == 0 || pair->backend_slot > svc->count)
		return NULL;
	key->backend_slot = pair->backend_slot;
	if (lb4_range_backend_id(svc, pair->backend_slot - 1) != pair->backend_id)
		return NULL;
	backend = lb4_lookup_backend(pair->backend_id);
	if (!backend || backend->address != pair->backend_address || backend->port != pair->backend_port)
		return NULL;
	*backend_id = pair->backend_id;
	lb_count(LB_CNT_SOCK_STICKY);
	return backend;
}

/* The same, for the pair of this frontend in the socket's storage. */
static __always_inline struct lb4_backend *
lb4_sock_sticky_backend(struct lb4_sock_state *st, struct lb4_service_key *key, __be32 frontend,
			const struct lb4_service *svc, __u32 *backend_id)
{
	struct lb4_service_key fkey = *key;
	struct lb4_sock_pair pair = {};
	bool found;

	fkey.address = frontend; /* the address the socket used (key: a NodePort's wildcard) */
	bpf_spin_lock(&st->lock);
	found = sock_pair_of_frontend(st, &fkey, &pair);
	bpf_spin_unlock(&st->lock);
	if (!found)
		return NULL;
	return lb4_sock_pair_backend(&pair, key, svc, backend_id);
}

/* The choice as a pair: key->backend_slot is the slot it came from (0: affinity). */
static __always_inline void
lb4_sock_pair_fill(struct lb4_sock_pair *pair, const struct lb4_service_key *key, __be32 frontend,
		   const struct lb4_service *svc, const struct lb4_backend *backend, __u32 backend_id)
{
	pair->frontend_address = frontend;
	pair->frontend_port = key->port;
	pair->scope = key->scope;
	pair->used = 1;
	pair->backend_address = backend->address;
	pair->backend_port = backend->port;
	pair->backend_slot = key->backend_slot;
	pair->backend_id = backend_id;
	pair->rev_nat_id = svc->rev_nat_id;
}

/* Keep a pair in the socket's storage (replacing its frontend's old pair),
 * as the one last sent to. */
static __always_inline void lb4_sock_remember(struct lb4_sock_state *st, const struct lb4_sock_pair *pair)
{
	struct lb4_service_key fkey = {
		.address = pair->frontend_address,
		.port = pair->frontend_port,
	};
	bool evicted = false;
	__u32 at;

	bpf_spin_lock(&st->lock);
	at = sock_pair_index(st, &fkey, &evicted) & (SLUICE_SOCK_PAIRS - 1);
	st->pairs[at] = *pair;
	st->last = at;
	bpf_spin_unlock(&st->lock);
	if (evicted)
		lb_count(LB_CNT_SOCK_PAIR_EVICTED);
}

/* ---- UDP: the first frontend in a slot, more in socket storage ------------ */

/* Where a UDP socket's pairs are: its slot (own: the slot holds its one
 * pair) or its storage (st), or neither yet. */
struct lb4_sock_udp {
	__u64 cookie;
	struct lb4_sock_uslot *slot;
	struct lb4_sock_state *st;
	bool own;
};

/* A socket that had its first frontend in its slot now sends to another:
 * create its storage, copy the slot's pair there, then free the slot (in that
 * order, so a reply finds the pair in one of them). NULL: no storage (the
 * slot keeps being used, for the newest frontend only). */
static __always_inline struct lb4_sock_state *
lb4_sock_udp_to_storage(struct bpf_sock_addr *ctx, struct lb4_sock_udp *u, const struct lb4_sock_pair *first)
{
	struct lb4_sock_state *st = bpf_sk_storage_get(&SLUICE_MAP_SOCK4, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (!st) {
		lb_count(LB_CNT_SOCK_STATE_FAILED);
		return NULL;
	}
	lb4_sock_remember(st, first);
	lb4_sock_uslot_free(u->cookie);
	u->own = false;
	return st;
}

/* The backend this UDP socket already uses for this frontend (NULL: pick),
 * from its slot, else from its storage (found without creating it). */
static __always_inline struct lb4_backend *
lb4_sock_udp_sticky(struct bpf_sock_addr *ctx, struct lb4_sock_udp *u, struct lb4_service_key *key, __be32 frontend,
		    const struct lb4_service *svc, __u32 *backend_id)
{
	struct lb4_service_key fkey = { .address = frontend, .port = key->port };
	/* A socket without a cookie yet (its first datagram) holds no slot:
	 * its slot is not read. */
	bool had_cookie = lb_sock_has_cookie(ctx->sk);
	struct lb4_sock_uslot copy;

	u->cookie = bpf_get_socket_cookie(ctx);
	u->slot = lb4_sock_uslot(u->cookie);
	u->own = had_cookie && lb4_sock_uslot_read(u->slot, u->cookie, &copy);
	if (u->own) {
		if (sock_pair_is_frontend(&copy.pair, &fkey))
			return lb4_sock_pair_backend(&copy.pair, key, svc, backend_id);
		if (copy.pair.used)
			u->st = lb4_sock_udp_to_storage(ctx, u, &copy.pair);
		return NULL;
	}
	u->st = bpf_sk_storage_get(&SLUICE_MAP_SOCK4, ctx->sk, 0, 0);
	return u->st ? lb4_sock_sticky_backend(u->st, key, frontend, svc, backend_id) : NULL;
}

/* Keep a UDP socket's choice: in its slot while it has no storage and the
 * slot is free or its own, else in its storage (created here). */
static __always_inline void lb4_sock_udp_remember(struct bpf_sock_addr *ctx, struct lb4_sock_udp *u,
						  const struct lb4_sock_pair *pair)
{
	struct lb4_sock_uslot want = { .cookie = u->cookie, .pair = *pair };

	if (!u->st) {
		if (lb4_sock_uslot_claim(u->slot, &want)) {
			lb_count(LB_CNT_SOCK_UDP_SLOT);
			return;
		}
		u->st = bpf_sk_storage_get(&SLUICE_MAP_SOCK4, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!u->st) {
			lb_count(LB_CNT_SOCK_STATE_FAILED);
			return;
		}
	}
	lb4_sock_remember(u->st, pair);
	lb_count(LB_CNT_SOCK_UDP_STORAGE);
}

/* A TCP connect's reverse pair: its slot when the slot is free or already
 * its own (a second connect() after a failed one), else the LRU
 * (lb4_sock_tcp in sluice_abi.h). A least-connection connect (lc_id: its
 * backend id, else 0) notes its count in the slot too, under the same lock;
 * *lc_old is the count the slot held for this socket before (0: none).
 * True when the slot is the socket's. */
static __always_inline bool
lb4_sock_tcp_remember(struct bpf_sock_addr *ctx, const struct lb4_service_key *key, __be32 frontend,
		      const struct lb4_service *svc, const struct lb4_backend *backend, __u32 lc_id, __u32 *lc_old)
{
	struct lb4_sock_tcp_key tkey = {
		.cookie = bpf_get_socket_cookie(ctx),
		.backend_address = backend->address,
		.backend_port = backend->port,
	};
	struct lb4_sock_tcp pair = {
		.frontend_address = frontend,
		.frontend_port = key->port,
		.rev_nat_id = svc->rev_nat_id,
	};
	struct lb4_sock_slot *slot = lb4_sock_slot(tkey.cookie);
	bool claimed = false;

	/* IPv4's own claim, not lb_sock_slot_claim: the least-connection
	 * count must be read and set under the same lock as the pair. */
	if (slot) {
		bpf_spin_lock(&slot->lock);
		if (slot->cookie == 0 || slot->cookie == tkey.cookie) {
			/* A free slot holds no count (lb4_sock_slot_free). */
			*lc_old = slot->cookie ? slot->lc_backend_id : 0;
			if (lc_id || !slot->cookie)
				slot->lc_backend_id = lc_id;
			slot->cookie = tkey.cookie;
			slot->backend_address = tkey.backend_address;
			slot->backend_port = tkey.backend_port;
			slot->frontend_address = frontend;
			slot->frontend_port = key->port;
			slot->rev_nat_id = svc->rev_nat_id;
			claimed = true;
		}
		bpf_spin_unlock(&slot->lock);
		if (claimed)
			return true;
	}
	if (bpf_map_update_elem(&SLUICE_MAP_SOCK_TCP4, &tkey, &pair, BPF_ANY))
		lb_count(LB_CNT_SOCK_STATE_FAILED);
	return false;
}

/*
 * Forward translation for connect4 and sendmsg4 (and connect6 to an
 * IPv4-mapped address: *address is the destination, in and out). Returns 1
 * when the address was rewritten, 0 when it is left alone, -ECONNREFUSED when the frontend has no
 * backend to offer (kube-proxy rejects such traffic; we fail the call at once).
 */
static __always_inline int lb4_sock_xlate_fwd(struct bpf_sock_addr *ctx, __be32 *address)
{
	struct lb4_service_key key = {
		.address = *address,
		.port = sock4_dst_port(ctx),
		.proto = (__u8)ctx->protocol,
	};
	struct lb4_affinity_key akey = {};
	struct lb4_backend *backend = NULL;
	struct lb4_sock_udp udp = {};
	struct lb4_sock_pair pair = {};
	__be32 frontend = *address; /* key.address becomes 0 for a NodePort (nodeport.h) */
	struct lb4_service svc;
	__u32 backend_id = 0, lc_old = 0;
	bool in_slot = false;
	__u32 refusal;

	if (!sock_proto_supported(ctx->protocol))
		return 0;
	if (!lb4_lookup_frontend_copy(&key, true, &svc))
		return 0;
	if (lb_sock_ns_excluded(ctx)) {
		lb_count(LB_CNT_SOCK_NS_SKIPPED);
		return 0;
	}
	if (lb4_extip_elsewhere(&svc, frontend)) {
		lb_count(LB_CNT_SOCK_EXTIP_PASSED);
		return 0;
	}
	refusal = lb4_sock_src_range_refusal(ctx, &svc);
	if (refusal) {
		lb_count(refusal);
		lb4_event_sock(ctx, refusal, &key, svc.rev_nat_id);
		/* kube-proxy drops: answered as a drop is at the socket (see
		 * LB_SVC_FLAG_DROP_NO_BACKEND below). */
		return -EHOSTUNREACH;
	}
	if (svc.count == 0) {
		lb_count(LB_CNT_SOCK_NO_BACKEND);
		lb4_event_sock(ctx, LB_CNT_SOCK_NO_BACKEND, &key, svc.rev_nat_id);
		/* kube-proxy drops here; a socket cannot: "unreachable from here"
		 * (Cilium's answer) instead of "refused". */
		return (svc.flags & LB_SVC_FLAG_DROP_NO_BACKEND) ? -EHOSTUNREACH : -ECONNREFUSED;
	}
	/* UDP keeps its backend per frontend: in its slot, or its storage. TCP
	 * has no storage (its pair goes into its slot or the LRU below); a TCP
	 * socket that connects again (its first attempt failed) picks again, as
	 * a new socket would. */
	if (key.proto == LB_PROTO_UDP)
		backend = lb4_sock_udp_sticky(ctx, &udp, &key, frontend, &svc, &backend_id);
	if (!backend) {
		/* The client, as far as a socket hook knows it: its network
		 * namespace (a pod). Source-hash uses it too. */
		if (lb_svc_has_affinity(&svc) || svc.algorithm == LB_ALG_SOURCE_HASH) {
			akey.client_id = bpf_get_netns_cookie(ctx);
			akey.rev_nat_id = svc.rev_nat_id;
			akey.netns_cookie = 1;
		} else if (svc.algorithm == LB_ALG_MAGLEV) {
			/* h-maglev: no 5-tuple yet at connect; the socket is the flow. */
			akey.client_id = lb_hash64(bpf_get_socket_cookie(ctx));
		}
		key.backend_slot = 0;
		backend = lb4_pick_backend_copy(&key, &svc, &akey, &backend_id);
		if (!backend) {
			/* Every attempt met a frontend being emptied or deleted:
			 * fail like an empty backend set, rather than sending to
			 * the VIP. */
			lb_count(LB_CNT_SOCK_SLOT_MISSING);
			return -ECONNREFUSED;
		}
		if (key.proto == LB_PROTO_UDP) {
			lb4_sock_pair_fill(&pair, &key, frontend, &svc, backend, backend_id);
			lb4_sock_udp_remember(ctx, &udp, &pair);
		} else {
			in_slot = lb4_sock_tcp_remember(ctx, &key, frontend, &svc, backend,
							svc.algorithm == LB_ALG_LEAST_CONN ? backend_id : 0, &lc_old);
		}
	}
	/* least-connection: a TCP socket with a slot holds its count there
	 * (noted above); any other socket in a storage of its own. */
	if (svc.algorithm == LB_ALG_LEAST_CONN) {
		if (in_slot)
			lc4_sock_slot_hold(ctx->sk, lc_old, backend_id);
		else
			lc4_sock_hold(ctx->sk, backend_id);
	}
	*address = backend->address;
	ctx->user_port = (__u32)backend->port;
	lb_count(LB_CNT_SOCK_TRANSLATED);
	return 1;
}

/* ---- Reverse: recvmsg4 / getpeername4 ------------------------------------ */

/* Drop a pair whose frontend is gone, unless it was replaced meanwhile. */
static __always_inline void lb4_sock_forget(struct lb4_sock_state *st, const struct lb4_sock_pair *gone)
{
	int i;

	bpf_spin_lock(&st->lock);
	for (i = 0; i < SLUICE_SOCK_PAIRS; i++) {
		struct lb4_sock_pair *p = &st->pairs[i];

		if (sock_pair_is_backend(p, gone->backend_address, gone->backend_port) &&
		    p->frontend_address == gone->frontend_address && p->frontend_port == gone->frontend_port &&
		    p->rev_nat_id == gone->rev_nat_id)
			p->used = 0;
	}
	bpf_spin_unlock(&st->lock);
}

/* The frontend still exists with this address and port under this rev-NAT
 * id (it may have been deleted or re-used since the socket was sent). */
static __always_inline bool lb4_sock_frontend_current(__u32 rev_nat_id, __be32 address, __be16 port)
{
	struct lb4_reverse_nat *rev_nat = bpf_map_lookup_elem(&SLUICE_MAP_REVNAT4, &rev_nat_id);

	return rev_nat && lb4_rev_nat_address_matches(rev_nat->address, address) && rev_nat->port == port;
}

/* TCP: the pair in this socket's slot, else in the LRU under its cookie and
 * its peer (*address, the peer, in and out). 1: rewritten to the frontend; 0: found,
 * but the frontend is gone (left alone); -1: none (not translated,
 * translated before an upgrade to this layout, or recycled by the LRU). */
static __always_inline int lb4_sock_tcp_xlate_rev(struct bpf_sock_addr *ctx, __be32 *address)
{
	struct lb4_sock_tcp_key tkey = {
		.backend_address = *address,
		.backend_port = sock4_dst_port(ctx),
	};
	struct lb4_sock_tcp *found;
	struct lb4_sock_tcp pair;
	bool in_slot;

	/* A socket whose cookie was never asked for was never translated
	 * (connect4 keys its pair by the cookie): no lookup, which for such
	 * a socket is a miss in a cold bucket, and no cookie created. */
	if (!lb_sock_has_cookie(ctx->sk))
		return -1;
	tkey.cookie = bpf_get_socket_cookie(ctx);
	/* getpeername: the socket's lock is held, no slot lock needed (see
	 * lb4_sock_slot_pair_sk_locked). */
	in_slot = lb4_sock_slot_pair_sk_locked(tkey.cookie, tkey.backend_address, tkey.backend_port, &pair,
					       lb_sock_lock_owned(ctx->sk));
	if (!in_slot) {
		found = bpf_map_lookup_elem(&SLUICE_MAP_SOCK_TCP4, &tkey);
		if (!found)
			return -1;
		pair = *found;
	}
	if (!lb4_sock_frontend_current(pair.rev_nat_id, pair.frontend_address, pair.frontend_port)) {
		if (in_slot)
			lb4_sock_slot_unpair(tkey.cookie);
		else
			bpf_map_delete_elem(&SLUICE_MAP_SOCK_TCP4, &tkey);
		return 0;
	}
	*address = pair.frontend_address;
	ctx->user_port = (__u32)pair.frontend_port;
	lb_count(LB_CNT_SOCK_REV_XLATED);
	return 1;
}

/* UDP: the pair in this socket's slot (*address, the peer, in and out). 1:
 * rewritten to the frontend; 0: the slot is the socket's but names another
 * peer or a frontend that is gone (left alone: a socket with its slot has no
 * storage); -1: not its slot (look in its storage). A socket without a
 * cookie has no slot: no cookie created, no slot looked up. */
static __always_inline int lb4_sock_udp_xlate_rev(struct bpf_sock_addr *ctx, __be32 *address)
{
	struct lb4_sock_uslot copy;
	__u64 cookie;

	if (!lb_sock_has_cookie(ctx->sk))
		return -1; /* storage only: sockets sent before the slots existed */
	cookie = bpf_get_socket_cookie(ctx);
	if (!lb4_sock_uslot_read(lb4_sock_uslot(cookie), cookie, &copy))
		return -1;
	if (!sock_pair_is_backend(&copy.pair, *address, sock4_dst_port(ctx)) ||
	    !lb4_sock_frontend_current(copy.pair.rev_nat_id, copy.pair.frontend_address, copy.pair.frontend_port))
		return 0;
	*address = copy.pair.frontend_address;
	ctx->user_port = (__u32)copy.pair.frontend_port;
	lb_count(LB_CNT_SOCK_REV_XLATED);
	return 1;
}

/* sock_release: a UDP socket's slot is freed, if it holds it (a socket
 * never sent to a Service has no cookie: nothing looked up). */
static __always_inline void lb4_sock_udp_forget(struct bpf_sock *sk)
{
	if (sk->protocol != LB_PROTO_UDP || !lb_sock_has_cookie(sk))
		return;
	lb4_sock_uslot_free(bpf_get_socket_cookie(sk));
}

/* sock_release: a TCP socket's pair goes with the socket (its slot freed, or
 * its LRU entry deleted), so both hold live connections only (the LRU would
 * otherwise keep every closed socket's pair until recycled). The hook runs
 * before the protocol's close, so the peer is still the backend connect4
 * chose. A socket never translated has no cookie: nothing is looked up. */
static __always_inline void lb4_sock_tcp_forget(struct bpf_sock *sk)
{
	struct lb4_sock_tcp_key tkey = {};
	__u32 lc_id;

	if (sk->protocol != LB_PROTO_TCP)
		return;
	/* No cookie: never translated. */
	if (!lb_sock_has_cookie(sk))
		return;
	tkey.cookie = bpf_get_socket_cookie(sk);
	/* An AF_INET6 socket sent to an IPv6 frontend: its IPv6 slot (if it
	 * holds none, its pair is in its storage, freed with it). */
	if (sk->family == AF_INET6 && lb6_sock_slot_free(tkey.cookie))
		return;
	/* Its slot, whatever the peer now is (an AF_INET6 socket to ::ffff:
	 * included): then it has no LRU pair (connect4 writes one or the other). */
	if (lb4_sock_slot_free(tkey.cookie, &lc_id)) {
		lc4_sock_give_back(lc_id);
		return;
	}
	if (!sk->dst_ip4)
		return;
	tkey.backend_address = sk->dst_ip4;
	tkey.backend_port = (__be16)sk->dst_port;
	bpf_map_delete_elem(&SLUICE_MAP_SOCK_TCP4, &tkey);
}

/* The peer is a backend this socket was sent to: show the frontend instead,
 * if it still exists. A TCP socket looks in the LRU first; a socket never
 * translated has no storage: one more lookup. (A TCP socket connected
 * before an upgrade to the LRU layout has its pair in storage.) *address is
 * the peer (an IPv4-mapped one for connect6's sockets), in and out; true
 * when it was rewritten. */
static __always_inline bool lb4_sock_xlate_rev_addr(struct bpf_sock_addr *ctx, __be32 *address)
{
	struct lb4_sock_pair pair = {};
	struct lb4_sock_state *st;
	bool found;

	if (ctx->protocol == LB_PROTO_TCP || ctx->protocol == LB_PROTO_UDP) {
		int r = ctx->protocol == LB_PROTO_TCP ? lb4_sock_tcp_xlate_rev(ctx, address)
						      : lb4_sock_udp_xlate_rev(ctx, address);

		if (r >= 0)
			return r == 1;
	}
	st = bpf_sk_storage_get(&SLUICE_MAP_SOCK4, ctx->sk, 0, 0);
	if (!st)
		return false;
	bpf_spin_lock(&st->lock);
	found = sock_pair_of_backend(st, *address, sock4_dst_port(ctx), &pair);
	bpf_spin_unlock(&st->lock);
	if (!found)
		return false;
	/* The frontend may have been deleted or re-used since: only rewrite when
	 * its rev-NAT entry still names the same address and port. */
	if (!lb4_sock_frontend_current(pair.rev_nat_id, pair.frontend_address, pair.frontend_port)) {
		lb4_sock_forget(st, &pair);
		return false;
	}
	*address = pair.frontend_address;
	ctx->user_port = (__u32)pair.frontend_port;
	lb_count(LB_CNT_SOCK_REV_XLATED);
	return true;
}

static __always_inline void lb4_sock_xlate_rev(struct bpf_sock_addr *ctx)
{
	__be32 address = ctx->user_ip4;

	if (lb4_sock_xlate_rev_addr(ctx, &address))
		ctx->user_ip4 = address;
}

static __always_inline int lb4_sock_forward(struct bpf_sock_addr *ctx)
{
	__be32 address = ctx->user_ip4;
	int err = lb4_sock_xlate_fwd(ctx, &address);

	if (err > 0)
		ctx->user_ip4 = address;
	if (err < 0) {
		/* connect()/sendmsg() then fail with this errno, not EPERM. */
		bpf_set_retval(err);
		return SYS_REJECT;
	}
	return SYS_PROCEED;
}

/* ---- post_bind4: no local socket shadows a Service ----------------------- */

struct lb4_bind_probe {
	__be16 port;
	__u8   proto;
	__u8   nodeport; /* set: a NodePort frontend has this port on some node address */
};

/* bpf_for_each_map_elem callback over SLUICE_MAP_NODEIP4. */
static long lb4_bind_probe_address(void *map, const __be32 *address, __u8 *value, struct lb4_bind_probe *probe)
{
	struct lb4_service_key key = { .address = *address, .port = probe->port, .proto = probe->proto };
	struct lb4_service *svc = lb4_lookup_service(&key, false);

	if (svc && (svc->flags & LB_SVC_FLAG_NODEPORT)) {
		probe->nodeport = 1;
		return 1; /* stop */
	}
	return 0;
}

/*
 * A host-namespace socket bound to the address:port of a NodePort, ExternalIP
 * or LoadBalancer frontend would receive that Service's traffic from outside
 * the node: refuse it with EADDRINUSE, as Cilium does. A bind to 0.0.0.0 is
 * refused when the port is a NodePort: the IPv4 wildcard entry (nodeport.h),
 * else per-address NodePort entries (a walk of the node's addresses: a few
 * lookups, once per bind). Sockets of other namespaces (pods) cannot
 * shadow node addresses and are left alone; so are all sockets while the host
 * namespace is unknown.
 */
#define LB_BIND_SHADOWED (LB_SVC_FLAG_NODEPORT | LB_SVC_FLAG_EXTERNAL_IP | LB_SVC_FLAG_LOADBALANCER)

/* A bind of address:port (0.0.0.0: every node address) would shadow a
 * frontend; counted. post_bind6 asks the same for IPv4-mapped and "::". */
static __always_inline bool lb4_bind_shadows(__be32 address, __be16 port, __u8 proto)
{
	struct lb4_bind_probe probe = { .port = port, .proto = proto };
	struct lb4_service_key key = { .address = address, .port = port, .proto = proto };
	struct lb4_service *svc;

	if (address) {
		svc = lb4_lookup_frontend(&key, false);
		if (!svc || !(svc->flags & LB_BIND_SHADOWED))
			return false;
	} else {
		/* The NodePort wildcard (nodeport.h), else per-address NodePorts. */
		svc = lb4_lookup_service(&key, false);
		if (!svc || !(svc->flags & LB_SVC_FLAG_NODEPORT))
			bpf_for_each_map_elem(&SLUICE_MAP_NODEIP4, lb4_bind_probe_address, &probe, 0);
		else
			probe.nodeport = 1;
		if (!probe.nodeport)
			return false;
	}
	lb_count(LB_CNT_SOCK_BIND_REFUSED);
	return true;
}

static __always_inline int lb4_sock_post_bind(struct bpf_sock *ctx)
{
	const struct lb_sock_config *cfg = lb_sock_config();
	struct lb4_bind_probe probe = {
		.port = bpf_htons((__u16)ctx->src_port),
		.proto = (__u8)ctx->protocol,
	};

	if (!sock_proto_supported(ctx->protocol) || !cfg || !lb_sock_in_host_ns(ctx, cfg))
		return 0;
	return lb4_bind_shadows(ctx->src_ip4, probe.port, probe.proto) ? -EADDRINUSE : 0;
}

#endif /* SLUICE_BPF_SOCK_H */
