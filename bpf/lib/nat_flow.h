/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nat_flow.h: one translated flow, shared by the two per-packet paths: the
 * north-south path on the node's external devices (tc_lb.h) and the pod-veth
 * path (pod_lb.h). Both keep the flow's two conntrack entries in
 * SLUICE_MAP_CT4 (see LB_CT_DIR_* in sluice_abi.h), translate the original
 * direction (X -> frontend becomes X or SNAT -> backend) and the reply
 * direction (backend -> X becomes frontend -> client) the same way; they
 * differ only in which frontends they serve and in where a packet with a
 * local source is sent (enum lb_path).
 */
#ifndef SLUICE_BPF_NAT_FLOW_H
#define SLUICE_BPF_NAT_FLOW_H

#include "lb.h"
#include "nat.h"
#include "conntrack.h"
/* issue 10 items 8-9: fragments, PMTU, SNAT address of the egress device */
#include "frag.h"
#include "pmtu.h"
#include "egress.h"
#include "tc_fc.h" /* issue 12: TC's FIB cache */
#include "rewrite4.h" /* issue 12: the in-place rewrite */

/*
 * Where a program runs. It decides which conntrack entries are the path's
 * own (pod-veth entries carry LB_CT_FLAG_POD), how a packet whose new source
 * is a local address is forwarded, and the `path` label of its counters.
 */
enum lb_path {
	LB_PATH_NORTH_SOUTH = 0, /* TC on an external device: NodePort, ExternalIP, LoadBalancer */
	LB_PATH_POD         = 1, /* TC on the host side of a pod veth: per-packet ClusterIP */
};

/* Which TC hook of its device a program is attached to. */
enum lb_hook {
	LB_HOOK_INGRESS = 0, /* packets the device receives */
	LB_HOOK_EGRESS  = 1, /* packets the device sends */
};

/* The conntrack flags an entry must carry to belong to this path. */
static __always_inline __u16 lb_path_ct_flags(enum lb_path path)
{
	return path == LB_PATH_POD ? LB_CT_FLAG_POD : 0;
}

/* Count a per-packet flow event (LB_CNT_TC_*) on this path. */
static __always_inline void lb_path_count(enum lb_path path, __u32 counter)
{
	lb_count(lb_cnt_flow(lb_path_ct_flags(path), counter));
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

/* The next hop's MACs into the frame: destination first, one store. */
static __always_inline int lb_set_macs(struct __sk_buff *skb, const __u8 *smac, const __u8 *dmac)
{
	__u8 macs[12];

	__builtin_memcpy(macs, dmac, 6);
	__builtin_memcpy(macs + 6, smac, 6);
	return bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0);
}

/*
 * Send a packet the FIB found a way for (rc SUCCESS or NO_NEIGH): with the
 * next hop's MACs, or through the kernel's neighbour resolution when it has
 * none yet. Shared by every path that forwards a packet it rewrote (IPv4,
 * IPv6, DSR's encapsulation).
 */
static __always_inline int lb_fib_redirect(struct __sk_buff *skb, const struct bpf_fib_lookup *fib, int rc)
{
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib->ifindex, NULL, 0, 0);
	if (lb_set_macs(skb, fib->smac, fib->dmac) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(fib->ifindex, 0);
}

/*
 * Forward a translated packet whose source is a local address: route it with
 * the FIB and redirect it to the egress of the chosen device. When there is no
 * route (or the TTL is spent) the stack gets the packet and decides.
 * `arrived` is the packet as it came in (NULL: an ICMP error), `to` the tuple
 * it was rewritten to; a packet too big for the next hop is answered with
 * ICMP "fragmentation needed" (pmtu.h). A fresh answer of the same lookup
 * comes from the FIB cache (tc_fc.h) instead; a successful full lookup
 * fills its slot.
 */
static __always_inline int
lb4_tc_redirect(struct __sk_buff *skb, const struct lb4_packet *arrived, const struct lb4_tuple *to)
{
	struct bpf_fib_lookup fib = {};
	__u32 in = skb->ingress_ifindex;
	/* The IP length, so the FIB checks the route's MTU before the
	 * neighbour (a GSO packet is checked per segment by the device: 0
	 * asks for that). */
	__u16 tot_len = skb->gso_size ? 0 : skb->len - LB_ETH_HLEN;
	__u64 now = bpf_ktime_get_ns();
	struct lb4_xdp_fib_cache *c = lb4_tc_fc_slot(to, in);
	int rc;

	if (c && lb4_fc_hit(c, to, in, 0, tot_len, now)) {
		if (lb4_dec_ttl(skb) < 0)
			return TC_ACT_OK;
		lb_count(LB_CNT_TC_FIB_CACHED);
		if (lb_set_macs(skb, c->smac, c->dmac) < 0)
			return TC_ACT_SHOT;
		return bpf_redirect(c->out_ifindex, 0);
	}
	fib.family = AF_INET;
	fib.ipv4_src = to->saddr;
	fib.ipv4_dst = to->daddr;
	fib.ifindex = in;
	fib.tot_len = tot_len;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return lb4_pmtu_too_big(skb, arrived, to, fib.mtu_result);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) {
		lb_count(LB_CNT_TC_FIB_FAILED);
		return TC_ACT_OK;
	}
	lb_count(LB_CNT_TC_FIB_LOOKUP);
	if (c && rc == BPF_FIB_LKUP_RET_SUCCESS)
		lb4_fc_fill(c, &fib, to, in, 0, tot_len, TC_ACT_REDIRECT, now);
	if (lb4_dec_ttl(skb) < 0)
		return TC_ACT_OK;
	return lb_fib_redirect(skb, &fib, rc);
}

/* A frame going back where it came from: source and destination MACs swap. */
static __always_inline int lb_swap_macs(struct __sk_buff *skb)
{
	__u8 macs[12], swapped[12];

	if (bpf_skb_load_bytes(skb, 0, macs, sizeof(macs)) < 0)
		return -1;
	__builtin_memcpy(swapped, macs + 6, 6);
	__builtin_memcpy(swapped + 6, macs, 6);
	return bpf_skb_store_bytes(skb, 0, swapped, sizeof(swapped), 0);
}

/*
 * Send the (rewritten) frame back into the pod it came from: the pod's MAC
 * was the source and the gateway's the destination, so the two swap, and the
 * TTL drops by one as through any router (lb6_pod_bounce: the IPv6 twin).
 */
static __always_inline int lb4_pod_bounce(struct __sk_buff *skb)
{
	if (lb_swap_macs(skb) < 0 || lb4_dec_ttl(skb) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

/*
 * A translated packet whose source is now a local address cannot go through
 * the stack (input routing drops a forwarded packet with a local source as
 * martian): the north-south path routes it itself, the pod path (hairpin,
 * the only case there) sends it straight back into the pod.
 */
static __always_inline int
lb4_flow_forward(struct __sk_buff *skb, enum lb_path path, const struct lb4_packet *arrived,
		 const struct lb4_tuple *to)
{
	if (path == LB_PATH_POD)
		return lb4_pod_bounce(skb);
	return lb4_tc_redirect(skb, arrived, to);
}

/* Original direction of a known flow: client -> frontend becomes
 * client (or SNAT address:port) -> backend. */
static __always_inline int
lb4_flow_xlate_original(struct __sk_buff *skb, const struct lb4_packet *pkt,
			const struct lb4_ct_entry *e, enum lb_path path)
{
	struct lb4_tuple to = pkt->tuple;

	to.daddr = e->backend_address;
	to.dport = e->backend_port;
	if (lb4_ct_has_nat(e)) {
		to.saddr = e->nat_address;
		to.sport = e->nat_port;
	}
	if (lb4_rewrite(skb, pkt, &to) < 0)
		return TC_ACT_SHOT;
	/* Only a node address as source needs forwarding by us; a remapped
	 * client port keeps the client's address and routes normally. */
	return (e->flags & LB_CT_FLAG_SNAT) ? lb4_flow_forward(skb, path, pkt, &to)
					     : TC_ACT_OK;
}

/*
 * Reply direction: backend -> client (or SNAT address:port) becomes
 * frontend -> client. A reply seen at ingress is addressed to this node (a
 * SNATed flow) and is forwarded by us; one seen at egress continues out.
 */
static __always_inline int
lb4_flow_xlate_reply(struct __sk_buff *skb, const struct lb4_packet *pkt,
		     const struct lb4_ct_entry *e, enum lb_path path, enum lb_hook hook)
{
	struct lb4_tuple to = pkt->tuple;

	to.saddr = e->frontend_address;
	to.sport = e->frontend_port;
	to.daddr = e->client_address;
	to.dport = e->client_port;
	if (lb4_rewrite(skb, pkt, &to) < 0)
		return TC_ACT_SHOT;
	lb_path_count(path, LB_CNT_TC_REV_XLATED);
	return hook == LB_HOOK_INGRESS ? lb4_flow_forward(skb, path, pkt, &to) : TC_ACT_OK;
}

/*
 * The conntrack value of a new flow from `t` to `backend`, before SNAT is
 * decided (the caller sets LB_CT_FLAG_SNAT and nat_address when it applies).
 */
static __always_inline void
lb4_flow_fill(struct lb4_ct_entry *e, const struct lb4_tuple *t, const struct lb4_service *svc,
	      const struct lb4_backend *backend, __u32 backend_id, enum lb_path path,
	      __u32 ifindex, const struct lb4_tc_config *cfg)
{
	e->client_address = t->saddr;
	e->client_port = t->sport;
	e->frontend_address = t->daddr;
	e->frontend_port = t->dport;
	e->backend_address = backend->address;
	e->backend_port = backend->port;
	e->backend_id = backend_id;
	e->rev_nat_id = svc->rev_nat_id;
	e->proto = t->proto;
	e->flags = lb_path_ct_flags(path);
	if (svc->algorithm == LB_ALG_LEAST_CONN)
		e->flags |= LB_CT_FLAG_LC;
	e->ifindex = ifindex;
	e->expires_ns = bpf_ktime_get_ns() + lb4_ct_timeout_ns(cfg, t->proto, e->flags);
}

/*
 * Source-port allocation for a flow whose backend sees a rewritten source
 * (LB_CT_FLAG_SNAT: the node's address; LB_CT_FLAG_SPORT: the client's
 * address with another port). The reply entry is the reservation: the
 * client's own port is tried first when it is inside the range (kube-proxy's
 * masquerade keeps it too when it can), then LB_TC_SNAT_RETRIES random ports
 * (cheap while the range toward this backend:port is mostly free), then a
 * linear scan of the whole range from a random start (bpf_loop). Random tries
 * alone failed flows long before the range was full (issue 13 item 5: 634 of
 * 100 000 flows over 25 backends, 184 of 4 536 toward one backend:port); with
 * the scan a flow fails only when every port is held by a live flow, and that
 * is counted as snat_ports_exhausted. The scan's cost is bounded by the range
 * (at most 65 536 lookups, about 0.5 ms for the default 4 536) and is paid
 * only when the random tries found the range nearly full.
 * A port is taken only through lb4_ct_claim_insert: never from a live flow,
 * and an expired holder is replaced by exactly one CPU (claim, delete,
 * BPF_NOEXIST).
 */
struct lb4_snat_scan {
	struct lb4_ct_entry *e;
	__u32 min;
	__u32 range;
	__u32 start;
	__u32 found;
};

static long lb4_snat_scan_one(__u32 i, void *ctx)
{
	struct lb4_snat_scan *scan = ctx;
	struct lb4_ct_key key;
	__u32 range = scan->range;

	if (!range)
		return 1;
	scan->e->nat_port = bpf_htons((__u16)(scan->min + (scan->start + i) % range));
	lb4_ct_reply_key(&key, scan->e);
	if (lb4_ct_claim_insert(&key, scan->e) == 0) {
		scan->found = 1;
		return 1;
	}
	return 0;
}

static __always_inline int
lb4_snat_alloc_port(struct lb4_ct_entry *e, const struct lb4_tc_config *cfg)
{
	__u32 range = (__u32)cfg->snat_port_max - cfg->snat_port_min + 1;
	__u32 port = bpf_ntohs(e->client_port);
	struct lb4_snat_scan scan = {};
	struct lb4_ct_key key;
	int i;

	if (port < cfg->snat_port_min || port > cfg->snat_port_max)
		port = cfg->snat_port_min + bpf_get_prandom_u32() % range;
	e->dir = LB_CT_DIR_REPLY;
	for (i = 0; i <= LB_TC_SNAT_RETRIES; i++) {
		e->nat_port = bpf_htons((__u16)port);
		lb4_ct_reply_key(&key, e);
		if (lb4_ct_claim_insert(&key, e) == 0)
			return 0;
		port = cfg->snat_port_min + bpf_get_prandom_u32() % range;
	}
	scan.e = e;
	scan.min = cfg->snat_port_min;
	scan.range = range;
	scan.start = bpf_get_prandom_u32() % range;
	bpf_loop(range, lb4_snat_scan_one, &scan, 0);
	if (scan.found)
		return 0;
	lb_count(e->flags & LB_CT_FLAG_POD ? LB_CNT_POD_SNAT_EXHAUSTED : LB_CNT_TC_SNAT_EXHAUSTED);
	return -1;
}

/*
 * False when a packet arriving at ingress cannot be the reply of one of our
 * SNATed flows (LB_CT_FLAG_SNAT: north-south masquerade, pod-path hairpin;
 * IPv4 and IPv6): such a reply goes to nat_address:nat_port, and a SNATed
 * flow's nat port always comes from the SNAT range (lb4_snat_alloc_port and
 * lb6_snat_alloc_port keep the client's port only when it lies in the range,
 * and cfg is lb4_tc_config_get's, whose range they use). Not a check for the
 * other entries: DSR ones (no reply reaches the node) and DNAT-only ones
 * (LB_CT_FLAG_SPORT included: their replies are translated at egress) are
 * never acted on at ingress. ICMP/ICMPv6 never get here (errors are matched
 * by their quote, echo is not balanced). A client's packet to a Service port
 * outside the range, new flow or known, skips the reply-key lookup, and so
 * does a reply of the node's own connections (ephemeral ports below the
 * default 61000-65535, which the agent reserves from them). A flow opened
 * before the range in sluice_tc_cfg was changed (the agent always writes the
 * default one) is no longer found once its port lies outside the new range.
 */
static __always_inline bool lb_maybe_snat_reply(__be16 dport, const struct lb4_tc_config *cfg)
{
	__u16 port = bpf_ntohs(dport);

	return port >= cfg->snat_port_min && port <= cfg->snat_port_max;
}

/*
 * The reply entry of a flow without SNAT. Its key (backend -> client:port)
 * can be in use by another flow: two frontends with the same backend, and a
 * client that used one source port for both. As netfilter does, the second
 * flow then gets another source port (LB_CT_FLAG_SPORT, the client's address
 * kept) instead of overwriting the first flow's entry.
 */
static __always_inline int
lb4_ct_reserve_reply(struct lb4_ct_entry *e, const struct lb4_tc_config *cfg)
{
	struct lb4_ct_key key;

	e->dir = LB_CT_DIR_REPLY;
	lb4_ct_reply_key(&key, e);
	if (lb4_ct_claim_insert(&key, e) == 0)
		return 0;
	e->flags |= LB_CT_FLAG_SPORT;
	e->nat_address = e->client_address;
	if (lb4_snat_alloc_port(e, cfg) < 0)
		return -1;
	lb_count(lb_cnt_flow(e->flags, LB_CNT_TC_SPORT_REMAPPED));
	return 0;
}

/*
 * Store a new flow's two conntrack entries: the reply entry first (with
 * LB_CT_FLAG_SNAT it is also the SNAT port's reservation), then the original.
 * Counts and returns -1 on failure, leaving no half flow behind.
 */
static __always_inline int
lb4_ct_create_flow_len(const struct lb4_tuple *t, struct lb4_ct_entry *e,
		       const struct lb4_tc_config *cfg, __u32 len)
{
	struct lb4_ct_key key;
	int err;

	if (e->flags & LB_CT_FLAG_SNAT) {
		err = lb4_snat_alloc_port(e, cfg);
	} else if (e->flags & LB_CT_FLAG_DSR) {
		/* No reply reaches this node (dsr.h): the entry only keeps the
		 * flow's pair complete; a key in use is left to its flow. */
		e->dir = LB_CT_DIR_REPLY;
		lb4_ct_reply_key(&key, e);
		(void)lb4_ct_claim_insert(&key, e);
		err = 0;
	} else {
		err = lb4_ct_reserve_reply(e, cfg);
	}
	if (err < 0) {
		lb_count(lb_cnt_flow(e->flags, LB_CNT_TC_SNAT_FAILED));
		return -1;
	}
	/* The reply entry starts at zero packets; this packet is the original's. */
	e->dir = LB_CT_DIR_ORIGINAL;
	e->packets = 1;
	e->bytes = len;
	lb4_ct_key_of(&key, t, LB_CT_DIR_ORIGINAL);
	if (lb4_ct_claim_insert(&key, e) < 0) {
		struct lb4_ct_key reply;

		lb4_ct_reply_key(&reply, e);
		bpf_map_delete_elem(&SLUICE_MAP_CT4, &reply);
		lb_count(lb_cnt_flow(e->flags, LB_CNT_TC_CT_FAILED));
		return -1;
	}
	if (e->flags & LB_CT_FLAG_LC)
		lc4_flow_open(&key, e->backend_id);
	lb_count(lb_cnt_flow(e->flags, LB_CNT_TC_TRANSLATED));
	return 0;
}

/* The same for a TC program (the XDP path passes the frame length itself). */
static __always_inline int
lb4_ct_create_flow(struct __sk_buff *skb, const struct lb4_tuple *t, struct lb4_ct_entry *e,
		   const struct lb4_tc_config *cfg)
{
	return lb4_ct_create_flow_len(t, e, cfg, skb->len);
}

/* Is the backend a flow was balanced to still there, at the same address? */
static __always_inline bool lb4_ct_backend_alive(const struct lb4_ct_entry *e)
{
	struct lb4_backend *backend = lb4_lookup_backend(e->backend_id);

	return backend && backend->address == e->backend_address && backend->port == e->backend_port;
}

/*
 * The original-direction entry of a known flow of this path, touched, when
 * its backend is still there; NULL otherwise. A flow whose backend went away
 * (UDP included) is deleted here, so the caller balances it again instead of
 * feeding a dead address (the stale-conntrack bug).
 */
static __always_inline struct lb4_ct_entry *
lb4_ct_live_original(struct __sk_buff *skb, const struct lb4_tuple *t,
		     const struct lb4_tc_config *cfg, enum lb_path path)
{
	__u16 need_flags = lb_path_ct_flags(path);
	struct lb4_ct_entry *e;
	struct lb4_ct_key key;

	lb4_ct_key_of(&key, t, LB_CT_DIR_ORIGINAL);
	e = lb4_ct_lookup(&key);
	if (!e || (e->flags & need_flags) != need_flags || lb4_ct_is_reopen(e, t))
		return NULL;
	if (lb4_ct_backend_alive(e))
		return lb4_ct_touch(e, cfg, t, skb->len) == 0 ? e : NULL;
	lb_path_count(path, LB_CNT_TC_BACKEND_GONE);
	lb4_ct_delete_flow(e);
	return NULL;
}

/*
 * ICMP errors about translated flows. Both kinds are found by the quoted
 * packet's tuple reversed.
 *
 * About a packet on its way to the backend (quoted as X -> backend, X the
 * client or the SNAT address; e.g. "port unreachable" from the backend): the
 * quote reversed is the flow's reply key. The error is rewritten to quote
 * client -> frontend and sent to the client; its outer source, if it is the
 * backend, becomes the frontend. Seen at egress (DNAT-only flows: from a
 * local backend) and at ingress (SNATed flows: from the remote backend or a
 * router on its way).
 *
 * About a reply on its way to the client (quoted as frontend -> client;
 * e.g. "fragmentation needed" from a router between us and the client),
 * arriving at ingress: the quote reversed is the flow's original key. The
 * error is rewritten to quote what the backend sent (backend -> client or
 * SNAT address) and sent on to the backend, so its PMTU discovery works.
 */
static __always_inline int
lb4_flow_icmp_error(struct __sk_buff *skb, const struct lb4_packet *pkt, enum lb_path path,
		    enum lb_hook hook)
{
	bool ingress = hook == LB_HOOK_INGRESS;
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
	/* SNATed flows' replies come back in at ingress, the others' leave at egress. */
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
		lb_path_count(path, LB_CNT_TC_REV_XLATED);
		if (!ingress)
			return TC_ACT_OK;
		quote_to.saddr = outer_saddr;
		quote_to.daddr = e->client_address;
		return lb4_flow_forward(skb, path, NULL, &quote_to);
	}
	if (!ingress)
		return TC_ACT_OK;

	lb4_ct_key_of(&key, &rev, LB_CT_DIR_ORIGINAL);
	e = lb4_ct_lookup(&key);
	if (!e)
		return TC_ACT_OK;
	quote_to.saddr = e->backend_address;
	quote_to.sport = e->backend_port;
	if (lb4_ct_has_nat(e)) {
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

/* Does --nodeport-mode send a new remote-backend flow of `proto` by DSR?
 * (one mode per node, both families: dsr.h and nat_flow6.h ask it) */
static __always_inline bool lb_dsr_applies(__u8 proto)
{
	__u32 zero = 0;
	struct lb_dsr_config *cfg = bpf_map_lookup_elem(&SLUICE_MAP_DSR_CFG, &zero);

	if (!cfg)
		return false;
	if (cfg->mode == LB_NODEPORT_MODE_DSR)
		return proto == LB_PROTO_TCP || proto == LB_PROTO_UDP;
	return cfg->mode == LB_NODEPORT_MODE_HYBRID && proto == LB_PROTO_TCP;
}

#endif /* SLUICE_BPF_NAT_FLOW_H */
