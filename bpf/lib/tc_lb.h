/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tc_lb.h: north-south load balancing at TC on the node's external devices.
 *
 * Ingress (a packet arriving from outside):
 *   1. a reply of a SNATed flow (backend -> SNAT address:port): restore
 *      frontend -> client and send it back out (redirect);
 *   2. a packet of a known flow (client -> frontend): apply its DNAT (+SNAT);
 *   3. a new flow to a NodePort / ExternalIP / LoadBalancer frontend: source
 *      ranges, pick a backend, write both conntrack entries, translate.
 *   Anything else passes untouched.
 * Egress (a packet leaving through the device):
 *   a reply of a DNAT-only flow (local backend -> client): restore the
 *   frontend as its source.
 * ICMP errors about a translated flow are translated like its replies.
 *
 * Why SNATed packets are redirected instead of handed to the stack: their new
 * source (a node address, or the NodePort frontend on the reply) is local, and
 * the kernel's input routing rejects a forwarded packet with a local source
 * as martian. A FIB lookup and bpf_redirect(_neigh) forward them as Cilium
 * does; DNAT-only packets keep the client as source and are routed normally.
 */
#ifndef SLUICE_BPF_TC_LB_H
#define SLUICE_BPF_TC_LB_H

#include "lb.h"
#include "nat.h"
#include "conntrack.h"
/* issue 10 items 8-9: fragments, PMTU, SNAT address of the egress device */
#include "frag.h"
#include "pmtu.h"
#include "egress.h"

static __always_inline bool lb_svc_is_north_south(const struct lb4_service *svc)
{
	return svc->flags & (LB_SVC_FLAG_NODEPORT | LB_SVC_FLAG_EXTERNAL_IP | LB_SVC_FLAG_LOADBALANCER);
}

/* externalTrafficPolicy: Local: the client's address is kept, no SNAT. */
static __always_inline bool lb_svc_is_ext_local(const struct lb4_service *svc)
{
	return svc->flags & LB_SVC_FLAG_EXT_LOCAL;
}

static __always_inline bool lb_svc_has_source_ranges(const struct lb4_service *svc)
{
	return svc->flags & LB_SVC_FLAG_SOURCE_RANGE;
}

static __always_inline bool lb4_backend_is_local(const struct lb4_backend *backend)
{
	return backend->flags & LB_BACKEND_FLAG_LOCAL;
}

/* loadBalancerSourceRanges: is this client inside one of the frontend's CIDRs? */
static __always_inline bool lb4_source_allowed(__u32 rev_nat_id, __be32 client)
{
	struct lb4_src_range_key key = {
		.prefixlen = 64,
		.rev_nat_id = rev_nat_id,
		.address = client,
	};

	return bpf_map_lookup_elem(&SLUICE_MAP_SRCRANGE4, &key) != NULL;
}

/* Decrement the TTL of a packet we forward ourselves (the stack would). */
static __always_inline int lb4_dec_ttl(struct __sk_buff *skb)
{
	__u8 ttl_proto[2];
	__u16 old, new;

	if (bpf_skb_load_bytes(skb, LB_ETH_HLEN + 8, ttl_proto, 2) < 0)
		return -1;
	if (ttl_proto[0] <= 1)
		return -1;
	__builtin_memcpy(&old, ttl_proto, 2);
	ttl_proto[0]--;
	__builtin_memcpy(&new, ttl_proto, 2);
	if (bpf_l3_csum_replace(skb, LB_IP_OFF_CHECK, old, new, 2) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, LB_ETH_HLEN + 8, ttl_proto, 1, 0);
}

/*
 * Forward a translated packet whose source is a local address: route it with
 * the FIB and redirect it to the egress of the chosen device. When there is no
 * route (or the TTL is spent) the stack gets the packet and decides.
 * `arrived` is the packet as it came in (NULL: an ICMP error), `to` the tuple
 * it was rewritten to; a packet too big for the next hop is answered with
 * ICMP "fragmentation needed" (pmtu.h).
 */
static __always_inline int
lb4_tc_redirect(struct __sk_buff *skb, const struct lb4_packet *arrived, const struct lb4_tuple *to)
{
	struct bpf_fib_lookup fib = {};
	int rc;

	fib.family = AF_INET;
	fib.ipv4_src = to->saddr;
	fib.ipv4_dst = to->daddr;
	fib.ifindex = skb->ingress_ifindex;
	/* issue 10 item 8: the IP length, so the FIB checks the route's MTU
	 * before the neighbour (a GSO packet is checked per segment by the
	 * device: 0 asks for that) */
	fib.tot_len = skb->gso_size ? 0 : skb->len - LB_ETH_HLEN;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return lb4_pmtu_too_big(skb, arrived, to, fib.mtu_result);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) {
		lb_count(LB_CNT_TC_FIB_FAILED);
		return TC_ACT_OK;
	}
	if (lb4_dec_ttl(skb) < 0)
		return TC_ACT_OK;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib.ifindex, NULL, 0, 0);
	if (bpf_skb_store_bytes(skb, 0, fib.dmac, 6, 0) < 0 ||
	    bpf_skb_store_bytes(skb, 6, fib.smac, 6, 0) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(fib.ifindex, 0);
}

/* Original direction of a known flow: client -> frontend becomes
 * client (or SNAT address) -> backend. */
static __always_inline int
lb4_tc_xlate_original(struct __sk_buff *skb, const struct lb4_packet *pkt,
		      const struct lb4_ct_entry *e)
{
	struct lb4_tuple to = pkt->tuple;
	bool snat = e->flags & LB_CT_FLAG_SNAT;

	to.daddr = e->backend_address;
	to.dport = e->backend_port;
	if (snat) {
		to.saddr = e->nat_address;
		to.sport = e->nat_port;
	}
	if (lb4_rewrite(skb, pkt, &to) < 0)
		return TC_ACT_SHOT;
	return snat ? lb4_tc_redirect(skb, pkt, &to) : TC_ACT_OK;
}

/* Reply direction: backend -> client (or SNAT address) becomes
 * frontend -> client. On ingress (SNATed flows) we forward it ourselves. */
static __always_inline int
lb4_tc_xlate_reply(struct __sk_buff *skb, const struct lb4_packet *pkt,
		   const struct lb4_ct_entry *e, bool ingress)
{
	struct lb4_tuple to = pkt->tuple;

	to.saddr = e->frontend_address;
	to.sport = e->frontend_port;
	to.daddr = e->client_address;
	to.dport = e->client_port;
	if (lb4_rewrite(skb, pkt, &to) < 0)
		return TC_ACT_SHOT;
	lb_count(LB_CNT_TC_REV_XLATED);
	return ingress ? lb4_tc_redirect(skb, pkt, &to) : TC_ACT_OK;
}

/*
 * SNAT source-port allocation: the reply entry is the reservation. The
 * client's own port is tried first when it is inside the range (kube-proxy's
 * masquerade keeps it too when it can), then random ports; an insert with
 * BPF_NOEXIST fails on a collision, and an expired holder may be replaced.
 */
static __always_inline int
lb4_snat_alloc_port(struct lb4_ct_entry *e, const struct lb4_tc_config *cfg)
{
	__u32 range = (__u32)cfg->snat_port_max - cfg->snat_port_min + 1;
	__u32 port = bpf_ntohs(e->client_port);
	struct lb4_ct_key key;
	int i;

	if (port < cfg->snat_port_min || port > cfg->snat_port_max)
		port = cfg->snat_port_min + bpf_get_prandom_u32() % range;
	e->dir = LB_CT_DIR_REPLY;
	for (i = 0; i <= LB_TC_SNAT_RETRIES; i++) {
		struct lb4_ct_entry *holder;

		e->nat_port = bpf_htons((__u16)port);
		lb4_ct_reply_key(&key, e);
		if (bpf_map_update_elem(&SLUICE_MAP_CT4, &key, e, BPF_NOEXIST) == 0)
			return 0;
		holder = bpf_map_lookup_elem(&SLUICE_MAP_CT4, &key);
		if (holder && holder->expires_ns <= bpf_ktime_get_ns() &&
		    bpf_map_update_elem(&SLUICE_MAP_CT4, &key, e, BPF_ANY) == 0)
			return 0;
		port = cfg->snat_port_min + bpf_get_prandom_u32() % range;
	}
	return -1;
}

/*
 * Store a new flow's two conntrack entries: the reply entry first (with
 * LB_CT_FLAG_SNAT it is also the SNAT port's reservation), then the original.
 * Shared by the north-south and the pod-veth paths. Counts and returns -1 on
 * failure, leaving no half flow behind.
 */
static __always_inline int
lb4_ct_create_flow(struct __sk_buff *skb, const struct lb4_tuple *t, struct lb4_ct_entry *e,
		   const struct lb4_tc_config *cfg)
{
	struct lb4_ct_key key;

	if (e->flags & LB_CT_FLAG_SNAT) {
		if (lb4_snat_alloc_port(e, cfg) < 0) {
			lb_count(LB_CNT_TC_SNAT_FAILED);
			return -1;
		}
	} else {
		e->dir = LB_CT_DIR_REPLY;
		lb4_ct_reply_key(&key, e);
		if (bpf_map_update_elem(&SLUICE_MAP_CT4, &key, e, BPF_ANY) < 0) {
			lb_count(LB_CNT_TC_CT_FAILED);
			return -1;
		}
	}
	/* The reply entry starts at zero packets; this packet is the original's. */
	e->dir = LB_CT_DIR_ORIGINAL;
	e->packets = 1;
	e->bytes = skb->len;
	lb4_ct_key_of(&key, t, LB_CT_DIR_ORIGINAL);
	if (bpf_map_update_elem(&SLUICE_MAP_CT4, &key, e, BPF_ANY) < 0) {
		lb4_ct_delete_flow(e);
		lb_count(LB_CNT_TC_CT_FAILED);
		return -1;
	}
	lb_count(LB_CNT_TC_TRANSLATED);
	return 0;
}

/* A new flow to a north-south frontend. */
static __always_inline int
lb4_tc_new_flow(struct __sk_buff *skb, const struct lb4_packet *pkt, const struct lb4_tc_config *cfg)
{
	const struct lb4_tuple *t = &pkt->tuple;
	struct lb4_service_key skey = {
		.address = t->daddr,
		.port = t->dport,
		.proto = t->proto,
	};
	struct lb4_affinity_key akey = {};
	struct lb4_ct_entry e = {};
	struct lb4_backend *backend;
	struct lb4_service *svc;
	__u32 backend_id = 0;

	svc = lb4_lookup_service(&skey, false);
	if (!svc || !lb_svc_is_north_south(svc))
		return TC_ACT_OK;
	if (lb_svc_has_source_ranges(svc) && !lb4_source_allowed(svc->rev_nat_id, t->saddr)) {
		lb_count(LB_CNT_TC_SRC_RANGE_DROP);
		return TC_ACT_SHOT;
	}
	/* externalTrafficPolicy: Local without a local backend has count 0 in
	 * the external scope: dropped, as kube-proxy does. */
	if (!svc->count) {
		lb_count(LB_CNT_TC_NO_BACKEND);
		return TC_ACT_SHOT;
	}
	akey.client_id = t->saddr;
	akey.rev_nat_id = svc->rev_nat_id;
	backend = lb4_pick_backend(&skey, svc, &akey, &backend_id);
	if (!backend) {
		lb_count(LB_CNT_TC_NO_BACKEND);
		return TC_ACT_SHOT;
	}

	e.client_address = t->saddr;
	e.client_port = t->sport;
	e.frontend_address = t->daddr;
	e.frontend_port = t->dport;
	e.backend_address = backend->address;
	e.backend_port = backend->port;
	e.backend_id = backend_id;
	e.rev_nat_id = svc->rev_nat_id;
	e.proto = t->proto;
	e.ifindex = skb->ingress_ifindex;
	e.expires_ns = bpf_ktime_get_ns() + lb4_ct_timeout_ns(cfg, t->proto, 0);

	if (!lb_svc_is_ext_local(svc) || !lb4_backend_is_local(backend) || backend->address == t->saddr) {
		/* externalTrafficPolicy: Cluster masquerades, as kube-proxy does
		 * (the backend sees the node, on this node or another); so does
		 * a pod reaching its own NodePort (hairpin). The reply comes back
		 * to the node address: on the external device from another node,
		 * on the pod's device (where the agent attaches this program
		 * too) from a local pod. Only Local keeps the client's address. */
		/* issue 10 item 9: the egress device's address (egress.h) */
		e.nat_address = lb4_snat_address_for(skb, cfg, backend->address);
		if (!e.nat_address) {
			lb_count(LB_CNT_TC_SNAT_FAILED);
			return TC_ACT_SHOT;
		}
		e.flags |= LB_CT_FLAG_SNAT;
	}
	if (lb4_ct_create_flow(skb, t, &e, cfg) < 0)
		return TC_ACT_SHOT;
	return lb4_tc_xlate_original(skb, pkt, &e);
}

/* Is the backend a flow was balanced to still there, at the same address? */
static __always_inline bool lb4_ct_backend_alive(const struct lb4_ct_entry *e)
{
	struct lb4_backend *backend = lb4_lookup_backend(e->backend_id);

	return backend && backend->address == e->backend_address && backend->port == e->backend_port;
}

/*
 * ICMP errors about translated flows. Both kinds are found by the quoted
 * packet's tuple reversed.
 *
 * About a packet on its way to the backend (quoted as X -> backend, X the
 * client or the SNAT address; e.g. "port unreachable" from the backend): the
 * quote reversed is the flow's reply key. The error is rewritten to quote
 * client -> frontend and sent to the client; its outer source, if it is the
 * backend, becomes the frontend. Seen on egress (DNAT-only flows: from a
 * local backend) and on ingress (SNATed flows: from the remote backend or a
 * router on its way).
 *
 * About a reply on its way to the client (quoted as frontend -> client;
 * e.g. "fragmentation needed" from a router between us and the client),
 * arriving on ingress: the quote reversed is the flow's original key. The
 * error is rewritten to quote what the backend sent (backend -> client or
 * SNAT address) and sent on to the backend, so its PMTU discovery works.
 */
static __always_inline int
lb4_tc_icmp_error(struct __sk_buff *skb, const struct lb4_packet *pkt, bool ingress)
{
	struct lb4_icmp_quote q;
	struct lb4_tuple rev, quote_to;
	struct lb4_ct_key key;
	struct lb4_ct_entry *e;
	__be32 outer_saddr;

	if (lb4_parse_icmp_quote(skb, pkt, &q) < 0)
		return TC_ACT_OK;
	rev.saddr = q.tuple.daddr;
	rev.daddr = q.tuple.saddr;
	rev.sport = q.tuple.dport;
	rev.dport = q.tuple.sport;
	rev.proto = q.tuple.proto;
	quote_to = q.tuple;

	lb4_ct_key_of(&key, &rev, LB_CT_DIR_REPLY);
	e = lb4_ct_lookup(&key);
	if (e && !!(e->flags & LB_CT_FLAG_SNAT) == ingress) {
		quote_to.saddr = e->client_address;
		quote_to.sport = e->client_port;
		quote_to.daddr = e->frontend_address;
		quote_to.dport = e->frontend_port;
		outer_saddr = pkt->tuple.saddr == e->backend_address ? e->frontend_address
								   : pkt->tuple.saddr;
		if (lb4_rewrite_icmp_error(skb, pkt, &q, outer_saddr, e->client_address,
					   &quote_to) < 0)
			return TC_ACT_SHOT;
		lb_count(LB_CNT_TC_REV_XLATED);
		if (!ingress)
			return TC_ACT_OK;
		quote_to.saddr = outer_saddr;
		quote_to.daddr = e->client_address;
		return lb4_tc_redirect(skb, NULL, &quote_to);
	}
	if (!ingress)
		return TC_ACT_OK;

	lb4_ct_key_of(&key, &rev, LB_CT_DIR_ORIGINAL);
	e = lb4_ct_lookup(&key);
	if (!e)
		return TC_ACT_OK;
	quote_to.saddr = e->backend_address;
	quote_to.sport = e->backend_port;
	if (e->flags & LB_CT_FLAG_SNAT) {
		quote_to.daddr = e->nat_address;
		quote_to.dport = e->nat_port;
	} else {
		quote_to.daddr = e->client_address;
		quote_to.dport = e->client_port;
	}
	/* The router that sent it stays the source: not a local address, so
	 * the stack forwards the error to the backend like any packet. */
	if (lb4_rewrite_icmp_error(skb, pkt, &q, pkt->tuple.saddr, e->backend_address,
				   &quote_to) < 0)
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

/*
 * The original-direction entry of a known flow, touched, when its backend is
 * still there and it carries `need_flags`; NULL otherwise. A flow whose
 * backend went away (UDP included) is deleted here, so the caller balances it
 * again instead of feeding a dead address (the stale-conntrack bug).
 */
static __always_inline struct lb4_ct_entry *
lb4_ct_live_original(struct __sk_buff *skb, const struct lb4_tuple *t,
		     const struct lb4_tc_config *cfg, __u16 need_flags)
{
	struct lb4_ct_entry *e;
	struct lb4_ct_key key;

	lb4_ct_key_of(&key, t, LB_CT_DIR_ORIGINAL);
	e = lb4_ct_lookup(&key);
	if (!e || (e->flags & need_flags) != need_flags || lb4_ct_is_reopen(e, t))
		return NULL;
	if (lb4_ct_backend_alive(e)) {
		lb4_ct_touch(e, cfg, t, skb->len);
		return e;
	}
	lb_count(LB_CNT_TC_BACKEND_GONE);
	lb4_ct_delete_flow(e);
	return NULL;
}

static __always_inline int lb4_tc_ingress(struct __sk_buff *skb)
{
	struct lb4_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb4_ct_entry *e;
	struct lb4_ct_key key;

	if (lb4_tc_parse(skb, &pkt) < 0) /* issue 10 item 8: fragments (frag.h) */
		return TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMP)
		return lb4_icmp_is_error(pkt.icmp_type) ? lb4_tc_icmp_error(skb, &pkt, true) : TC_ACT_OK;
	cfg = lb4_tc_config_get();

	lb4_ct_key_of(&key, &pkt.tuple, LB_CT_DIR_REPLY);
	e = lb4_ct_lookup(&key);
	if (e && (e->flags & LB_CT_FLAG_SNAT)) {
		lb4_ct_touch(e, &cfg, &pkt.tuple, skb->len);
		return lb4_tc_xlate_reply(skb, &pkt, e, true);
	}

	e = lb4_ct_live_original(skb, &pkt.tuple, &cfg, 0);
	if (e)
		return lb4_tc_xlate_original(skb, &pkt, e);
	if (pkt.frag == LB_FRAG_LATER) /* issue 10 item 8: only a first fragment opens a flow */
		return TC_ACT_OK;
	return lb4_tc_new_flow(skb, &pkt, &cfg);
}

static __always_inline int lb4_tc_egress(struct __sk_buff *skb)
{
	struct lb4_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb4_ct_entry *e;
	struct lb4_ct_key key;

	if (lb4_tc_parse(skb, &pkt) < 0) /* issue 10 item 8: fragments (frag.h) */
		return TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMP)
		return lb4_icmp_is_error(pkt.icmp_type) ? lb4_tc_icmp_error(skb, &pkt, false) : TC_ACT_OK;
	lb4_ct_key_of(&key, &pkt.tuple, LB_CT_DIR_REPLY);
	e = lb4_ct_lookup(&key);
	if (!e || (e->flags & LB_CT_FLAG_SNAT))
		return TC_ACT_OK;
	cfg = lb4_tc_config_get();
	lb4_ct_touch(e, &cfg, &pkt.tuple, skb->len);
	return lb4_tc_xlate_reply(skb, &pkt, e, false);
}

#endif /* SLUICE_BPF_TC_LB_H */
