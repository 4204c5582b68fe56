/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conntrack6.h: per-flow state of IPv6 translation on the north-south path,
 * in SLUICE_MAP_CT6. The rules are conntrack.h's (two entries per flow, one
 * deadline, the TCP state machine and timeouts of lb4_ct_next_flags and
 * lb4_ct_timeout_ns, claim-then-insert for every key that may exist, GC in
 * the kernel); only the keys and values carry 16-byte addresses.
 */
#ifndef SLUICE_BPF_CONNTRACK6_H
#define SLUICE_BPF_CONNTRACK6_H

#include "conntrack.h"
#include "nat6.h"

/* The node's IPv6 SNAT address (zero when the agent wrote none). */
static __always_inline void lb6_tc_snat_address(__u8 *out)
{
	__u32 zero = 0;
	struct lb6_tc_config *cfg = bpf_map_lookup_elem(&SLUICE_MAP_TC_CONFIG6, &zero);
	__u32 *w = (__u32 *)out;

	if (cfg) {
		lb6_addr_copy(out, cfg->snat_address);
		return;
	}
	w[0] = w[1] = w[2] = w[3] = 0;
}

/*
 * The IPv6 twin of lb4_snat_address_ctx (egress.h, multi-homed nodes): the
 * SNAT address of a new flow to `backend` is the one the agent wrote in
 * SLUICE_MAP_SNAT_DEV6 for the device the FIB sends it out of (a
 * node-to-node device, where the reply comes back), else the node's IPv6
 * SNAT address. One FIB lookup per new SNATed flow. ctx: the program's
 * context (__sk_buff or xdp_md: bpf_fib_lookup takes either); arrived: the
 * device the flow arrived on.
 */
static __noinline void lb6_snat_address_for(void *ctx, __u32 arrived, const __u8 *backend, __u8 *out)
{
	struct bpf_fib_lookup fib = {};
	struct lb6_snat_device *dev;
	__u32 ifindex;
	int rc;

	fib.family = AF_INET6;
	lb6_addr_copy((__u8 *)fib.ipv6_dst, backend);
	fib.ifindex = arrived;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	/* FRAG_NEEDED still names the egress device (pmtu.h answers later). */
	if (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH ||
	    rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		ifindex = fib.ifindex;
		dev = bpf_map_lookup_elem(&SLUICE_MAP_SNAT_DEV6, &ifindex);
		if (dev && !lb6_is_zero(dev->address)) {
			lb_count(LB_CNT_TC_SNAT_EGRESS_DEV);
			lb6_addr_copy(out, dev->address);
			return;
		}
	}
	lb6_tc_snat_address(out);
}

static __always_inline void
lb6_ct_key_set(struct lb6_ct_key *key, const __u8 *saddr, const __u8 *daddr, __be16 sport,
	       __be16 dport, __u8 proto, __u8 dir)
{
	lb6_addr_copy(key->saddr, saddr);
	lb6_addr_copy(key->daddr, daddr);
	key->sport = sport;
	key->dport = dport;
	key->proto = proto;
	key->dir = dir;
	key->pad[0] = 0;
	key->pad[1] = 0;
}

static __always_inline void lb6_ct_key_of(struct lb6_ct_key *key, const struct lb6_tuple *t, __u8 dir)
{
	lb6_ct_key_set(key, t->saddr, t->daddr, t->sport, t->dport, t->proto, dir);
}

/* lb4_ct_lookup_at over SLUICE_MAP_CT6: a live entry at time `now`, or NULL. */
static __always_inline struct lb6_ct_entry *lb6_ct_lookup_at(const struct lb6_ct_key *key, __u64 now)
{
	struct lb6_ct_entry *entry = bpf_map_lookup_elem(&SLUICE_MAP_CT6, key);

	if (!entry || entry->expires_ns <= now)
		return NULL;
	return entry;
}

static __always_inline struct lb6_ct_entry *lb6_ct_lookup(const struct lb6_ct_key *key)
{
	return lb6_ct_lookup_at(key, bpf_ktime_get_ns());
}

static __always_inline bool lb6_ct_has_nat(const struct lb6_ct_entry *e)
{
	return e->flags & (LB_CT_FLAG_SNAT | LB_CT_FLAG_SPORT);
}

static __always_inline void lb6_ct_reply_key(struct lb6_ct_key *key, const struct lb6_ct_entry *e)
{
	if (lb6_ct_has_nat(e))
		lb6_ct_key_set(key, e->backend_address, e->nat_address, e->backend_port, e->nat_port,
			       e->proto, LB_CT_DIR_REPLY);
	else
		lb6_ct_key_set(key, e->backend_address, e->client_address, e->backend_port,
			       e->client_port, e->proto, LB_CT_DIR_REPLY);
}

static __always_inline void lb6_ct_original_key(struct lb6_ct_key *key, const struct lb6_ct_entry *e)
{
	lb6_ct_key_set(key, e->client_address, e->frontend_address, e->client_port, e->frontend_port,
		       e->proto, LB_CT_DIR_ORIGINAL);
}

static __always_inline bool lb6_ct_same_flow(const struct lb6_ct_entry *a, const struct lb6_ct_entry *b)
{
	return lb6_addr_equal(a->client_address, b->client_address) && a->client_port == b->client_port &&
	       lb6_addr_equal(a->frontend_address, b->frontend_address) &&
	       a->frontend_port == b->frontend_port && a->proto == b->proto &&
	       (a->flags & LB_CT_FLAG_POD) == (b->flags & LB_CT_FLAG_POD);
}

static __always_inline bool lb6_ct_is_reopen(const struct lb6_ct_entry *entry, const struct lb6_tuple *t)
{
	return t->proto == LB_PROTO_TCP && (entry->flags & LB_CT_FLAG_CLOSING) &&
	       (t->tcp_flags & (LB_TCP_FLAG_SYN | LB_TCP_FLAG_ACK)) == LB_TCP_FLAG_SYN;
}

/* lb4_ct_claim_insert over SLUICE_MAP_CT6. */
static __always_inline int lb6_ct_claim_insert(const struct lb6_ct_key *key, const struct lb6_ct_entry *value)
{
	struct lb6_ct_entry *holder;
	__u64 seen;

	if (bpf_map_update_elem(&SLUICE_MAP_CT6, key, value, BPF_NOEXIST) == 0)
		return 0;
	holder = bpf_map_lookup_elem(&SLUICE_MAP_CT6, key);
	if (!holder)
		return bpf_map_update_elem(&SLUICE_MAP_CT6, key, value, BPF_NOEXIST) == 0 ? 0 : -1;
	seen = holder->expires_ns;
	if (seen == LB_CT_EXPIRES_CLAIMED)
		return -1;
	if (seen > bpf_ktime_get_ns() && !lb6_ct_same_flow(holder, value))
		return -1;
	if (__sync_val_compare_and_swap(&holder->expires_ns, seen, LB_CT_EXPIRES_CLAIMED) != seen)
		return -1;
	bpf_map_delete_elem(&SLUICE_MAP_CT6, key);
	return bpf_map_update_elem(&SLUICE_MAP_CT6, key, value, BPF_NOEXIST) == 0 ? 0 : -1;
}

/* This CPU's scratch entry (SLUICE_MAP_CT6_TMP), or NULL. */
static __always_inline struct lb6_ct_entry *lb6_ct_scratch(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&SLUICE_MAP_CT6_TMP, &zero);
}

static __always_inline void lb6_ct_delete_flow(const struct lb6_ct_entry *e)
{
	struct lb6_ct_key original, reply;

	lb6_ct_original_key(&original, e);
	lb6_ct_reply_key(&reply, e);
	bpf_map_delete_elem(&SLUICE_MAP_CT6, &original);
	bpf_map_delete_elem(&SLUICE_MAP_CT6, &reply);
}

/* lb4_ct_touch_at over SLUICE_MAP_CT6 (a least-connection flow gives its
 * count back when it reaches CLOSING, lc6_flow_close). `now`: the caller's
 * clock read (XDP's known-flow path reads it once per packet). */
static __noinline int
lb6_ct_touch_at(struct lb6_ct_entry *entry, const struct lb4_tc_config *cfg, const struct lb6_tuple *t, __u32 len,
		__u64 now)
{
	struct lb6_ct_entry *peer;
	struct lb6_ct_key peer_key;
	__u16 flags = lb4_ct_next_flags(entry->flags, entry->dir, t->proto, t->tcp_flags);
	__u64 expires = now + lb4_ct_timeout_ns(cfg, t->proto, flags);

	if (flags != entry->flags) {
		if ((flags & LB_CT_FLAG_LC) && (flags & LB_CT_FLAG_CLOSING) && !(entry->flags & LB_CT_FLAG_CLOSING)) {
			lb6_ct_original_key(&peer_key, entry);
			lc6_flow_close(&peer_key, entry->backend_id);
		}
		entry->flags = flags;
	}
	entry->expires_ns = expires;
	__sync_fetch_and_add(&entry->packets, 1);
	__sync_fetch_and_add(&entry->bytes, len);

	if (entry->dir == LB_CT_DIR_ORIGINAL)
		lb6_ct_reply_key(&peer_key, entry);
	else
		lb6_ct_original_key(&peer_key, entry);
	peer = lb6_ct_lookup_at(&peer_key, now);
	if (peer) {
		if (peer->flags != flags)
			peer->flags = flags;
		if (peer->expires_ns != expires)
			peer->expires_ns = expires;
		return 0;
	}
	peer = lb6_ct_scratch();
	if (peer) {
		*peer = *entry;
		peer->dir = peer_key.dir;
		peer->packets = 0;
		peer->bytes = 0;
		if (lb6_ct_claim_insert(&peer_key, peer) == 0) {
			lb_count(lb_cnt_flow(flags, LB_CNT_TC_CT_RESTORED_ORIG + peer_key.dir));
			return 0;
		}
	}
	lb_count(lb_cnt_flow(flags, LB_CNT_TC_CT_PEER_LOST));
	lb6_ct_key_of(&peer_key, t, entry->dir);
	bpf_map_delete_elem(&SLUICE_MAP_CT6, &peer_key);
	return -1;
}

/* lb6_ct_touch_at, reading the clock. */
static __always_inline int
lb6_ct_touch(struct lb6_ct_entry *entry, const struct lb4_tc_config *cfg, const struct lb6_tuple *t, __u32 len)
{
	return lb6_ct_touch_at(entry, cfg, t, len, bpf_ktime_get_ns());
}

static long lb6_ct_gc_one(void *map, struct lb6_ct_key *key, struct lb6_ct_entry *e,
			  struct lb4_ct_gc_ctx *ctx)
{
	__u64 seen = e->expires_ns;

	if (seen > ctx->now) {
		ctx->live++;
		return 0;
	}
	if (seen == LB_CT_EXPIRES_CLAIMED)
		return 0;
	if (__sync_val_compare_and_swap(&e->expires_ns, seen, LB_CT_EXPIRES_CLAIMED) != seen)
		return 0;
	if (bpf_map_delete_elem(map, key) == 0)
		ctx->deleted++;
	return 0;
}

static __always_inline int lb6_ct_gc(void)
{
	struct lb4_ct_gc_ctx ctx = { .now = bpf_ktime_get_ns() };

	bpf_for_each_map_elem(&SLUICE_MAP_CT6, lb6_ct_gc_one, &ctx, 0);
	return ctx.deleted;
}

#endif /* SLUICE_BPF_CONNTRACK6_H */
