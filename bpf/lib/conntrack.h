/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conntrack.h: the per-flow state of per-packet translation (north-south and
 * pod-veth paths).
 *
 * Every entry carries its own deadline (expires_ns). A packet pushes the
 * deadline out by the timeout of its protocol and state; an expired entry is
 * treated as absent, so timeouts hold even before garbage collection (the
 * agent runs sluice_ct_gc, which deletes expired entries in the kernel, to
 * free LRU space). The two entries of a flow (see LB_CT_DIR_* in
 * sluice_abi.h) share one deadline and one set of flags: a packet in either
 * direction refreshes both, and re-creates the other when it is missing.
 *
 * TCP state, per direction (flags in sluice_abi.h):
 *   SYN seen                       -> tcp_syn_timeout (60 s): a SYN flood or
 *                                     scan leaves entries GC can reclaim soon;
 *   a reply, then the client again -> ESTABLISHED: tcp_established_timeout;
 *   FIN from one side              -> FIN_ORIGINAL / FIN_REPLY, still
 *                                     established (a half-closed stream lives);
 *   FIN from both sides, or RST    -> CLOSING: tcp_closing_timeout.
 *
 * Writing a key that may already exist goes through lb4_ct_claim_insert: an
 * expired holder (or the same flow's) is first claimed with compare-and-swap
 * on its deadline, then deleted, then the new value is inserted with
 * BPF_NOEXIST. Two CPUs (or the data path and GC) can never both replace
 * one entry, and a live entry of another flow is never overwritten.
 */
#ifndef SLUICE_BPF_CONNTRACK_H
#define SLUICE_BPF_CONNTRACK_H

#include "common.h"
#include "maps.h"
#include "nat.h"
#include "lc.h"

/* The agent's configuration, or a zeroed one when it wrote none yet. */
static __always_inline struct lb4_tc_config lb4_tc_config_get(void)
{
	struct lb4_tc_config cfg = {};
	__u32 zero = 0;
	struct lb4_tc_config *stored = bpf_map_lookup_elem(&SLUICE_MAP_TC_CONFIG, &zero);

	if (stored)
		cfg = *stored;
	if (!cfg.tcp_established_timeout)
		cfg.tcp_established_timeout = LB_TC_DEFAULT_TCP_ESTABLISHED_S;
	if (!cfg.tcp_syn_timeout)
		cfg.tcp_syn_timeout = LB_TC_DEFAULT_TCP_SYN_S;
	if (!cfg.tcp_closing_timeout)
		cfg.tcp_closing_timeout = LB_TC_DEFAULT_TCP_CLOSING_S;
	if (!cfg.udp_timeout)
		cfg.udp_timeout = LB_TC_DEFAULT_UDP_S;
	if (!cfg.snat_port_min || !cfg.snat_port_max || cfg.snat_port_min > cfg.snat_port_max) {
		cfg.snat_port_min = LB_TC_DEFAULT_SNAT_PORT_MIN;
		cfg.snat_port_max = LB_TC_DEFAULT_SNAT_PORT_MAX;
	}
	return cfg;
}

static __always_inline void
lb4_ct_key_of(struct lb4_ct_key *key, const struct lb4_tuple *t, __u8 dir)
{
	key->saddr = t->saddr;
	key->daddr = t->daddr;
	key->sport = t->sport;
	key->dport = t->dport;
	key->proto = t->proto;
	key->dir = dir;
	key->pad[0] = 0;
	key->pad[1] = 0;
}

/* A live entry for this exact key at time `now`, or NULL. (A caller that
 * reads the clock once per packet passes it on: XDP's known-flow path.) */
static __always_inline struct lb4_ct_entry *lb4_ct_lookup_at(const struct lb4_ct_key *key, __u64 now)
{
	struct lb4_ct_entry *entry = bpf_map_lookup_elem(&SLUICE_MAP_CT4, key);

	if (!entry || entry->expires_ns <= now)
		return NULL;
	return entry;
}

/* A live entry for this exact key, or NULL. */
static __always_inline struct lb4_ct_entry *lb4_ct_lookup(const struct lb4_ct_key *key)
{
	return lb4_ct_lookup_at(key, bpf_ktime_get_ns());
}

static __always_inline __u64
lb4_ct_timeout_ns(const struct lb4_tc_config *cfg, __u8 proto, __u16 flags)
{
	__u32 seconds;

	if (proto != LB_PROTO_TCP)
		seconds = cfg->udp_timeout;
	else if (flags & LB_CT_FLAG_CLOSING)
		seconds = cfg->tcp_closing_timeout;
	else if (flags & LB_CT_FLAG_ESTABLISHED)
		seconds = cfg->tcp_established_timeout;
	else
		seconds = cfg->tcp_syn_timeout;
	return (__u64)seconds * NSEC_PER_SEC;
}

/*
 * The flags after a packet in direction `dir` with TCP flags `tcp`: the
 * per-direction state machine described at the top of this file.
 */
static __always_inline __u16 lb4_ct_next_flags(__u16 flags, __u8 dir, __u8 proto, __u8 tcp)
{
	if (dir == LB_CT_DIR_REPLY)
		flags |= LB_CT_FLAG_SEEN_REPLY;
	if (proto != LB_PROTO_TCP)
		return flags;
	if (dir == LB_CT_DIR_ORIGINAL && (flags & LB_CT_FLAG_SEEN_REPLY) && !(tcp & LB_TCP_FLAG_SYN))
		flags |= LB_CT_FLAG_ESTABLISHED;
	if (tcp & LB_TCP_FLAG_FIN)
		flags |= dir == LB_CT_DIR_ORIGINAL ? LB_CT_FLAG_FIN_ORIGINAL : LB_CT_FLAG_FIN_REPLY;
	if ((tcp & LB_TCP_FLAG_RST) ||
	    (flags & (LB_CT_FLAG_FIN_ORIGINAL | LB_CT_FLAG_FIN_REPLY)) ==
		    (LB_CT_FLAG_FIN_ORIGINAL | LB_CT_FLAG_FIN_REPLY))
		flags |= LB_CT_FLAG_CLOSING;
	return flags;
}

/* A TCP SYN without ACK opens a new connection: a closing entry with the
 * same tuple (client port reuse) must not carry it to the old backend. */
static __always_inline bool
lb4_ct_is_reopen(const struct lb4_ct_entry *entry, const struct lb4_tuple *t)
{
	return t->proto == LB_PROTO_TCP && (entry->flags & LB_CT_FLAG_CLOSING) &&
	       (t->tcp_flags & (LB_TCP_FLAG_SYN | LB_TCP_FLAG_ACK)) == LB_TCP_FLAG_SYN;
}

/* The backend sees a rewritten source (a node address, or the client's
 * address with another port): replies carry nat_address:nat_port. */
static __always_inline bool lb4_ct_has_nat(const struct lb4_ct_entry *e)
{
	return e->flags & (LB_CT_FLAG_SNAT | LB_CT_FLAG_SPORT);
}

/* The tuple a reply of this flow carries when it reaches this node. */
static __always_inline void
lb4_ct_reply_key(struct lb4_ct_key *key, const struct lb4_ct_entry *e)
{
	key->saddr = e->backend_address;
	key->sport = e->backend_port;
	if (lb4_ct_has_nat(e)) {
		key->daddr = e->nat_address;
		key->dport = e->nat_port;
	} else {
		key->daddr = e->client_address;
		key->dport = e->client_port;
	}
	key->proto = e->proto;
	key->dir = LB_CT_DIR_REPLY;
	key->pad[0] = 0;
	key->pad[1] = 0;
}

/* The tuple the client's packets carry when they reach this node. */
static __always_inline void
lb4_ct_original_key(struct lb4_ct_key *key, const struct lb4_ct_entry *e)
{
	key->saddr = e->client_address;
	key->daddr = e->frontend_address;
	key->sport = e->client_port;
	key->dport = e->frontend_port;
	key->proto = e->proto;
	key->dir = LB_CT_DIR_ORIGINAL;
	key->pad[0] = 0;
	key->pad[1] = 0;
}

/* Do two entries describe the same flow (same client, frontend, path)? */
static __always_inline bool
lb4_ct_same_flow(const struct lb4_ct_entry *a, const struct lb4_ct_entry *b)
{
	return a->client_address == b->client_address && a->client_port == b->client_port &&
	       a->frontend_address == b->frontend_address && a->frontend_port == b->frontend_port &&
	       a->proto == b->proto && (a->flags & LB_CT_FLAG_POD) == (b->flags & LB_CT_FLAG_POD);
}

/*
 * Store `value` under `key` unless a live entry of another flow holds it.
 * An expired holder, or one of the same flow (a reopened connection), is
 * claimed first (compare-and-swap of its deadline to LB_CT_EXPIRES_CLAIMED),
 * so of all CPUs and the GC that saw it only one replaces it; that one
 * deletes it and inserts with BPF_NOEXIST, which fails rather than
 * overwrite anything another CPU inserted meanwhile. Returns 0 or -1.
 */
static __always_inline int
lb4_ct_claim_insert(const struct lb4_ct_key *key, const struct lb4_ct_entry *value)
{
	struct lb4_ct_entry *holder;
	__u64 seen;

	if (bpf_map_update_elem(&SLUICE_MAP_CT4, key, value, BPF_NOEXIST) == 0)
		return 0;
	holder = bpf_map_lookup_elem(&SLUICE_MAP_CT4, key);
	if (!holder)
		return bpf_map_update_elem(&SLUICE_MAP_CT4, key, value, BPF_NOEXIST) == 0 ? 0 : -1;
	seen = holder->expires_ns;
	if (seen == LB_CT_EXPIRES_CLAIMED)
		return -1;
	if (seen > bpf_ktime_get_ns() && !lb4_ct_same_flow(holder, value))
		return -1;
	if (__sync_val_compare_and_swap(&holder->expires_ns, seen, LB_CT_EXPIRES_CLAIMED) != seen)
		return -1;
	bpf_map_delete_elem(&SLUICE_MAP_CT4, key);
	return bpf_map_update_elem(&SLUICE_MAP_CT4, key, value, BPF_NOEXIST) == 0 ? 0 : -1;
}

/* Forget both entries of a flow. Both keys are built before the first
 * delete: `e` may point into the entry being deleted. */
static __always_inline void lb4_ct_delete_flow(const struct lb4_ct_entry *e)
{
	struct lb4_ct_key original, reply;

	lb4_ct_original_key(&original, e);
	lb4_ct_reply_key(&reply, e);
	bpf_map_delete_elem(&SLUICE_MAP_CT4, &original);
	bpf_map_delete_elem(&SLUICE_MAP_CT4, &reply);
}

/*
 * A packet went through this entry: count it, advance the TCP state, push
 * the deadline out, and give the flow's other entry the same flags and
 * deadline, so a flow whose traffic runs one way only (UDP streams,
 * half-closed TCP) keeps both halves.
 *
 * The two entries are separate LRU elements: eviction can take one and
 * leave the other. A missing peer is put back (lb4_ct_claim_insert, never
 * over another flow's live entry): without it a SNATed flow's port would be
 * free for the next flow and its replies would reach the wrong client. When
 * the peer's key is held by another live flow (the port went to someone
 * else while the entry was gone), this flow cannot continue on its tuple
 * without corrupting the other: it is deleted and -1 returned, so the
 * caller balances the packet as a new flow (with a new port).
 *
 * The flags are read, changed and written without a lock: two CPUs that
 * change them at once may lose one bit until the next packet sets it again.
 */
static __always_inline int
lb4_ct_touch_at(struct lb4_ct_entry *entry, const struct lb4_tc_config *cfg,
		const struct lb4_tuple *t, __u32 len, __u64 now)
{
	struct lb4_ct_entry *peer;
	struct lb4_ct_key peer_key;
	__u16 flags = lb4_ct_next_flags(entry->flags, entry->dir, t->proto, t->tcp_flags);
	__u64 expires;

	if (flags != entry->flags) {
		/* least-connection: the count comes back at the close. */
		if ((flags & LB_CT_FLAG_LC) && (flags & LB_CT_FLAG_CLOSING) && !(entry->flags & LB_CT_FLAG_CLOSING)) {
			lb4_ct_original_key(&peer_key, entry);
			lc4_flow_close(&peer_key, entry->backend_id);
		}
		entry->flags = flags;
	}
	expires = now + lb4_ct_timeout_ns(cfg, t->proto, flags);
	entry->expires_ns = expires;
	__sync_fetch_and_add(&entry->packets, 1);
	__sync_fetch_and_add(&entry->bytes, len);

	if (entry->dir == LB_CT_DIR_ORIGINAL)
		lb4_ct_reply_key(&peer_key, entry);
	else
		lb4_ct_original_key(&peer_key, entry);
	peer = lb4_ct_lookup_at(&peer_key, now);
	if (peer) {
		if (peer->flags != flags)
			peer->flags = flags;
		if (peer->expires_ns != expires)
			peer->expires_ns = expires;
		return 0;
	}
	{
		struct lb4_ct_entry restored = *entry;

		restored.dir = peer_key.dir;
		restored.packets = 0;
		restored.bytes = 0;
		if (lb4_ct_claim_insert(&peer_key, &restored) == 0) {
			lb_count(lb_cnt_flow(flags, LB_CNT_TC_CT_RESTORED_ORIG + peer_key.dir));
			return 0;
		}
	}
	lb_count(lb_cnt_flow(flags, LB_CNT_TC_CT_PEER_LOST));
	lb4_ct_key_of(&peer_key, t, entry->dir);
	bpf_map_delete_elem(&SLUICE_MAP_CT4, &peer_key);
	return -1;
}

/* lb4_ct_touch_at, reading the clock. */
static __always_inline int
lb4_ct_touch(struct lb4_ct_entry *entry, const struct lb4_tc_config *cfg,
	     const struct lb4_tuple *t, __u32 len)
{
	return lb4_ct_touch_at(entry, cfg, t, len, bpf_ktime_get_ns());
}

/*
 * Garbage collection, in the kernel: user space that dumped the map and
 * then deleted the expired keys could delete an entry the data path had
 * re-created under the same key in between (a reopened flow, a reused SNAT
 * port). Here each expired entry is claimed with the same compare-and-swap
 * the data path uses before replacing an entry, and deleted only when the
 * claim succeeds; an entry refreshed or claimed meanwhile stays.
 */
struct lb4_ct_gc_ctx {
	__u64 now;
	__u32 deleted;
	__u32 live;
};

static long lb4_ct_gc_one(void *map, struct lb4_ct_key *key, struct lb4_ct_entry *e,
			  struct lb4_ct_gc_ctx *ctx)
{
	__u64 seen = e->expires_ns;

	if (seen > ctx->now) {
		ctx->live++;
		return 0;
	}
	if (seen == LB_CT_EXPIRES_CLAIMED)
		return 0; /* a CPU is replacing it right now */
	if (__sync_val_compare_and_swap(&e->expires_ns, seen, LB_CT_EXPIRES_CLAIMED) != seen)
		return 0;
	if (bpf_map_delete_elem(map, key) == 0)
		ctx->deleted++;
	return 0;
}

/* One pass over the conntrack map; returns how many entries it deleted. */
static __always_inline int lb4_ct_gc(void)
{
	struct lb4_ct_gc_ctx ctx = { .now = bpf_ktime_get_ns() };

	bpf_for_each_map_elem(&SLUICE_MAP_CT4, lb4_ct_gc_one, &ctx, 0);
	return ctx.deleted;
}

#endif /* SLUICE_BPF_CONNTRACK_H */
