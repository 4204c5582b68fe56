/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock.h: socket-level load balancing on cgroup v2 sock_addr hooks.
 *
 * connect()/sendmsg() to a frontend are rewritten to a backend once, before
 * the kernel routes anything: no per-packet NAT and no conntrack entry for
 * traffic that starts on this node. recvmsg()/getpeername() show the frontend
 * again, from the per-socket reverse entry written at translation time: the
 * socket's slot in SLUICE_MAP_SOCKSLOT4 for its first backend, the
 * SLUICE_MAP_SOCKREV4 LRU for any further one (see lb4_sock_slot).
 */
#ifndef SLUICE_BPF_SOCK_H
#define SLUICE_BPF_SOCK_H

#include "lb.h"

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

/* The slot of a socket in the direct-mapped reverse table (see lb4_sock_slot).
 * NULL only if the loader shrank the map below SLUICE_SOCK_SLOTS. */
static __always_inline struct lb4_sock_slot *sock_slot(__u64 cookie)
{
	__u32 index = (__u32)cookie & (SLUICE_SOCK_SLOTS - 1);

	return bpf_map_lookup_elem(&SLUICE_MAP_SOCKSLOT4, &index);
}

/* The slot holds this socket's entry for this backend. */
static __always_inline bool sock_slot_holds(const struct lb4_sock_slot *slot,
					    const struct lb4_sock_rev_key *key)
{
	return slot->key.cookie == key->cookie && slot->key.address == key->address &&
	       slot->key.port == key->port && slot->key.proto == key->proto;
}

static __always_inline void
sock4_remember_reverse(struct bpf_sock_addr *ctx, const struct lb4_backend *backend,
		       const struct lb4_service_key *frontend, __u32 rev_nat_id)
{
	struct lb4_sock_rev_key key = {
		.cookie = bpf_get_socket_cookie(ctx),
		.address = backend->address,
		.port = backend->port,
		.proto = frontend->proto,
	};
	struct lb4_sock_rev value = {
		.address = frontend->address,
		.port = frontend->port,
		.rev_nat_id = rev_nat_id,
	};
	struct lb4_sock_slot *slot;

	/*
	 * TCP: the socket's slot, a store to a line that is almost always in
	 * cache (cookies are sequential). A slot is taken over by the socket
	 * SLUICE_SOCK_SLOTS cookies later; only getpeername() reads it, so a
	 * very old connection then shows its backend, never a wrong frontend.
	 *
	 * UDP: the LRU. recvmsg() reads it on every reply, which keeps a
	 * long-lived socket's entry fresh; a slot could be taken over while the
	 * socket still receives, and its replies would then show the backend
	 * (resolvers drop such replies as spoofed).
	 */
	if (frontend->proto == LB_PROTO_TCP) {
		slot = sock_slot(key.cookie);
		if (slot) {
			slot->key = key;
			slot->rev = value;
			return;
		}
	}
	if (bpf_map_update_elem(&SLUICE_MAP_SOCKREV4, &key, &value, BPF_ANY) < 0)
		lb_count(LB_CNT_SOCK_REV_FAILED);
}

/*
 * Forward translation for connect4 and sendmsg4. Returns 0 when the address
 * was rewritten or is not a frontend, -ECONNREFUSED when the frontend has no
 * backend to offer (kube-proxy rejects such traffic; we fail the call at once).
 */
static __always_inline int lb4_sock_xlate_fwd(struct bpf_sock_addr *ctx)
{
	struct lb4_service_key key = {
		.address = ctx->user_ip4,
		.port = sock4_dst_port(ctx),
		.proto = (__u8)ctx->protocol,
	};
	struct lb4_affinity_key akey = {};
	struct lb4_backend *backend;
	struct lb4_service *svc;
	__u32 backend_id = 0;
	__u32 rev_nat_id;

	if (!sock_proto_supported(ctx->protocol))
		return 0;
	svc = lb4_lookup_service(&key, true);
	if (!svc)
		return 0;
	if (svc->count == 0) {
		lb_count(LB_CNT_SOCK_NO_BACKEND);
		/* kube-proxy drops here; a socket cannot: "unreachable from here"
		 * (Cilium's answer) instead of "refused". */
		return (svc->flags & LB_SVC_FLAG_DROP_NO_BACKEND) ? -EHOSTUNREACH : -ECONNREFUSED;
	}
	rev_nat_id = svc->rev_nat_id;
	if (lb_svc_has_affinity(svc)) {
		akey.client_id = bpf_get_netns_cookie(ctx);
		akey.rev_nat_id = rev_nat_id;
		akey.netns_cookie = 1;
	}
	backend = lb4_pick_backend(&key, svc, &akey, &backend_id);
	if (!backend) {
		/* Only while the agent rewrites this frontend: fail like a full
		 * backend set would have, rather than sending to the VIP. */
		lb_count(LB_CNT_SOCK_SLOT_MISSING);
		return -ECONNREFUSED;
	}

	sock4_remember_reverse(ctx, backend, &key, rev_nat_id);
	ctx->user_ip4 = backend->address;
	ctx->user_port = (__u32)backend->port;
	lb_count(LB_CNT_SOCK_TRANSLATED);
	return 0;
}

/* Reverse translation for recvmsg4 and getpeername4: the peer is a backend
 * this socket was sent to; show the frontend instead, if it still exists. */
static __always_inline void lb4_sock_xlate_rev(struct bpf_sock_addr *ctx)
{
	struct lb4_sock_rev_key key = {
		.cookie = bpf_get_socket_cookie(ctx),
		.address = ctx->user_ip4,
		.port = sock4_dst_port(ctx),
		.proto = (__u8)ctx->protocol,
	};
	struct lb4_sock_slot *slot = key.proto == LB_PROTO_TCP ? sock_slot(key.cookie) : NULL;
	struct lb4_reverse_nat *rev_nat;
	struct lb4_sock_rev *rev;
	bool in_slot = slot && sock_slot_holds(slot, &key);

	/* Not in a slot: UDP, or a TCP socket translated by the object this one
	 * replaced (an upgrade keeps the pinned LRU). */
	rev = in_slot ? &slot->rev : bpf_map_lookup_elem(&SLUICE_MAP_SOCKREV4, &key);
	if (!rev)
		return;
	/* The frontend may have been deleted or re-used since: only rewrite when
	 * its rev-NAT entry still names the same address and port. */
	rev_nat = bpf_map_lookup_elem(&SLUICE_MAP_REVNAT4, &rev->rev_nat_id);
	if (!rev_nat || rev_nat->address != rev->address || rev_nat->port != rev->port) {
		if (in_slot)
			slot->key.cookie = 0;
		else
			bpf_map_delete_elem(&SLUICE_MAP_SOCKREV4, &key);
		return;
	}
	ctx->user_ip4 = rev->address;
	ctx->user_port = (__u32)rev->port;
	lb_count(LB_CNT_SOCK_REV_XLATED);
}

static __always_inline int lb4_sock_forward(struct bpf_sock_addr *ctx)
{
	int err = lb4_sock_xlate_fwd(ctx);

	if (err < 0) {
		/* connect()/sendmsg() then fail with this errno, not EPERM. */
		bpf_set_retval(err);
		return SYS_REJECT;
	}
	return SYS_PROCEED;
}

#endif /* SLUICE_BPF_SOCK_H */
