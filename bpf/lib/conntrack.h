/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conntrack.h: the per-flow state of north-south translation.
 *
 * Every entry carries its own deadline (expires_ns). A packet pushes the
 * deadline out by the timeout of its protocol and state; an expired entry is
 * treated as absent, so timeouts hold even before user space garbage-collects
 * (src/datapath/tc/conntrack.ts deletes expired entries to free LRU space).
 * The two entries of a flow (see LB_CT_DIR_* in sluice_abi.h) share one
 * deadline: a packet in either direction refreshes both.
 */
#ifndef SLUICE_BPF_CONNTRACK_H
#define SLUICE_BPF_CONNTRACK_H

#include "common.h"
#include "maps.h"
#include "nat.h"

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

/* A live entry for this exact key, or NULL. */
static __always_inline struct lb4_ct_entry *lb4_ct_lookup(const struct lb4_ct_key *key)
{
	struct lb4_ct_entry *entry = bpf_map_lookup_elem(&SLUICE_MAP_CT4, key);

	if (!entry || entry->expires_ns <= bpf_ktime_get_ns())
		return NULL;
	return entry;
}

static __always_inline __u64
lb4_ct_timeout_ns(const struct lb4_tc_config *cfg, __u8 proto, __u16 flags)
{
	__u32 seconds;

	if (proto != LB_PROTO_TCP)
		seconds = cfg->udp_timeout;
	else if (flags & LB_CT_FLAG_CLOSING)
		seconds = cfg->tcp_closing_timeout;
	else
		seconds = cfg->tcp_established_timeout;
	return (__u64)seconds * NSEC_PER_SEC;
}

/* A TCP SYN without ACK opens a new connection: a closing entry with the
 * same tuple (client port reuse) must not carry it to the old backend. */
static __always_inline bool
lb4_ct_is_reopen(const struct lb4_ct_entry *entry, const struct lb4_tuple *t)
{
	return t->proto == LB_PROTO_TCP && (entry->flags & LB_CT_FLAG_CLOSING) &&
	       (t->tcp_flags & (LB_TCP_FLAG_SYN | LB_TCP_FLAG_ACK)) == LB_TCP_FLAG_SYN;
}

/* The tuple a reply of this flow carries when it reaches this node. */
static __always_inline void
lb4_ct_reply_key(struct lb4_ct_key *key, const struct lb4_ct_entry *e)
{
	key->saddr = e->backend_address;
	key->sport = e->backend_port;
	if (e->flags & LB_CT_FLAG_SNAT) {
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

/*
 * A packet went through this entry: count it, note FIN/RST, push the
 * deadline out, and give the flow's other entry the same deadline, so a flow
 * whose traffic runs one way only (UDP streams, half-closed TCP) keeps both
 * halves and user-space GC never splits a live flow.
 */
static __always_inline void
lb4_ct_touch(struct lb4_ct_entry *entry, const struct lb4_tc_config *cfg,
	     const struct lb4_tuple *t, __u32 len)
{
	struct lb4_ct_entry *peer;
	struct lb4_ct_key peer_key;
	__u16 flags = entry->flags;
	__u64 expires;

	if (t->proto == LB_PROTO_TCP && (t->tcp_flags & (LB_TCP_FLAG_FIN | LB_TCP_FLAG_RST)))
		flags |= LB_CT_FLAG_CLOSING;
	if (flags != entry->flags)
		entry->flags = flags;
	expires = bpf_ktime_get_ns() + lb4_ct_timeout_ns(cfg, t->proto, flags);
	entry->expires_ns = expires;
	__sync_fetch_and_add(&entry->packets, 1);
	__sync_fetch_and_add(&entry->bytes, len);

	if (entry->dir == LB_CT_DIR_ORIGINAL)
		lb4_ct_reply_key(&peer_key, entry);
	else
		lb4_ct_original_key(&peer_key, entry);
	peer = bpf_map_lookup_elem(&SLUICE_MAP_CT4, &peer_key);
	if (peer && peer->expires_ns != expires)
		peer->expires_ns = expires;
}

/* Forget both entries of a flow (its backend is gone). Both keys are built
 * before the first delete: `e` may point into the entry being deleted. */
static __always_inline void lb4_ct_delete_flow(const struct lb4_ct_entry *e)
{
	struct lb4_ct_key original, reply;

	lb4_ct_original_key(&original, e);
	lb4_ct_reply_key(&reply, e);
	bpf_map_delete_elem(&SLUICE_MAP_CT4, &original);
	bpf_map_delete_elem(&SLUICE_MAP_CT4, &reply);
}

#endif /* SLUICE_BPF_CONNTRACK_H */
