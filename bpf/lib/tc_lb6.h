/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tc_lb6.h: north-south load balancing of IPv6 frontends at TC (the twin
 * of tc_lb.h and nat_flow.h; same steps, same conntrack rules, same
 * counters).
 *
 * Ingress: a reply of a SNATed flow is restored and forwarded by us (FIB +
 * redirect: its new source is local); a known flow's packet is translated;
 * a new flow to a NodePort / ExternalIP / LoadBalancer frontend in the IPv6
 * service table (lb6.h) checks loadBalancerSourceRanges (SLUICE_MAP_SRCRANGE6),
 * picks a backend, writes both conntrack entries and is translated.
 * Egress: a reply of a DNAT-only flow (externalTrafficPolicy Local, the
 * client's address kept) gets the frontend back as its source.
 * ICMPv6 errors (types 1-4) about a translated flow are translated like its
 * packets, inner (quoted) headers included; Neighbor Discovery and every
 * other informational ICMPv6 message passes untouched. A packet we forward
 * ourselves that is too big for the next hop is answered with a Packet Too
 * Big (RFC 4443 section 3.2) from the address the client talked to.
 *
 * The IPv6 steps are BPF subprograms (__noinline): each has its own
 * 512-byte stack, and the IPv4 path in the same program keeps its own.
 *
 * least-connection flows hold a count like IPv4's (markers in
 * SLUICE_MAP_LC_FLOW6, given back at the TCP close or by the conntrack GC);
 * Maglev hashes the 5-tuple (lb6_maglev_flow_hash), the same on every node.
 *
 * Not (yet) for IPv6: fragments (passed untouched, nat6.h), per-device SNAT
 * addresses (egress.h: IPv6 flows take the one address of
 * SLUICE_MAP_TC_CONFIG6).
 */
#ifndef SLUICE_BPF_TC_LB6_H
#define SLUICE_BPF_TC_LB6_H

#include "nat_flow.h"
#include "conntrack6.h"

/* ---- forwarding (nat_flow.h's lb4_tc_redirect) ---- */

static __always_inline int lb6_dec_hoplimit(struct __sk_buff *skb)
{
	__u8 hops;

	if (bpf_skb_load_bytes(skb, LB_IP6_OFF_HOPLIMIT, &hops, 1) < 0 || hops <= 1)
		return -1;
	hops--;
	return bpf_skb_store_bytes(skb, LB_IP6_OFF_HOPLIMIT, &hops, 1, 0);
}

/* An ICMPv6 Packet Too Big after its IPv6 header. */
struct lb6_icmp_too_big {
	__u8   type;
	__u8   code;
	__u16  checksum;
	__be32 mtu;
	__u8   quote[LB_IP6_HLEN + LB_ICMP_QUOTE_L4_BYTES]; /* the offending IPv6 header + 8 bytes */
};

/* The IPv6 pseudo-header of an upper-layer checksum (RFC 8200 section 8.1). */
struct lb6_pseudo_hdr {
	__u8   saddr[16];
	__u8   daddr[16];
	__be32 len;
	__be32 nexthdr;
};

/*
 * pmtu.h for IPv6: `arrived` was rewritten to `to` when the FIB said the
 * next hop takes at most `mtu` bytes. The packet is restored, and replaced by
 * a Packet Too Big quoting its first 48 bytes (enough for the sender to find
 * its socket), sent back out of the device it came in on, from the address
 * the sender talked to. IPv6 routers never fragment: no DF case.
 */
static __noinline int
lb6_pmtu_too_big(struct __sk_buff *skb, const struct lb6_packet *arrived, const struct lb6_tuple *to, __u32 mtu)
{
	struct lb6_icmp_too_big icmp = {};
	struct lb6_pseudo_hdr ph = {};
	__u8 eth[LB_ETH_HLEN], mac[6], ip[8] = {};
	__u32 len = LB_ETH_HLEN + LB_IP6_HLEN + sizeof(icmp);
	__s64 sum;

	/* Back to the packet as the sender sent it: that is what it must see quoted. */
	if (lb6_rewrite_tuple(skb, to, &arrived->tuple, arrived->l4_off) < 0)
		return TC_ACT_SHOT;
	if (bpf_skb_load_bytes(skb, 0, eth, sizeof(eth)) < 0 ||
	    bpf_skb_load_bytes(skb, LB_ETH_HLEN, icmp.quote, sizeof(icmp.quote)) < 0)
		goto drop;

	icmp.type = LB_ICMP6_PKT_TOOBIG;
	icmp.mtu = bpf_htonl(mtu);
	lb6_addr_copy(ph.saddr, arrived->tuple.daddr);
	lb6_addr_copy(ph.daddr, arrived->tuple.saddr);
	ph.len = bpf_htonl(sizeof(icmp));
	ph.nexthdr = bpf_htonl(LB_IPPROTO_ICMPV6);
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&ph, sizeof(ph), 0);
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&icmp, sizeof(icmp), (__u32)sum);
	icmp.checksum = lb_csum_fold(sum);

	ip[0] = 0x60;
	ip[4] = sizeof(icmp) >> 8;
	ip[5] = sizeof(icmp) & 0xff;
	ip[6] = LB_IPPROTO_ICMPV6;
	ip[7] = 64;

	__builtin_memcpy(mac, eth, 6);
	__builtin_memcpy(eth, eth + 6, 6);
	__builtin_memcpy(eth + 6, mac, 6);

	if (bpf_skb_change_tail(skb, len, 0) < 0 ||
	    bpf_skb_store_bytes(skb, 0, eth, sizeof(eth), BPF_F_INVALIDATE_HASH) < 0 ||
	    bpf_skb_store_bytes(skb, LB_ETH_HLEN, ip, sizeof(ip), 0) < 0 ||
	    bpf_skb_store_bytes(skb, LB_ETH_HLEN + 8, &ph, 32, 0) < 0 || /* the addresses */
	    bpf_skb_store_bytes(skb, LB_ETH_HLEN + LB_IP6_HLEN, &icmp, sizeof(icmp), 0) < 0)
		goto drop;
	lb_count(LB_CNT_TC_FRAG_NEEDED_SENT);
	return bpf_redirect(skb->ingress_ifindex, 0);
drop:
	lb_count(LB_CNT_TC_TOO_BIG_DROP);
	return TC_ACT_SHOT;
}

#define LB6_FWD_TOO_BIG (-1)

/*
 * Route a translated packet whose source is local ourselves (see tc_lb.h).
 * Returns the verdict, or LB6_FWD_TOO_BIG with *mtu set: the caller answers
 * with lb6_pmtu_too_big (a packet) or drops (an ICMPv6 error).
 */
static __noinline int lb6_tc_forward(struct __sk_buff *skb, const struct lb6_tuple *to, __u32 *mtu)
{
	struct bpf_fib_lookup fib = {};
	int rc;

	fib.family = AF_INET6;
	__builtin_memcpy(fib.ipv6_src, to->saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, to->daddr, 16);
	fib.ifindex = skb->ingress_ifindex;
	fib.tot_len = skb->gso_size ? 0 : skb->len - LB_ETH_HLEN;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		*mtu = fib.mtu_result;
		return LB6_FWD_TOO_BIG;
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) {
		lb_count(LB_CNT_TC_FIB_FAILED);
		return TC_ACT_OK;
	}
	if (lb6_dec_hoplimit(skb) < 0)
		return TC_ACT_OK;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib.ifindex, NULL, 0, 0);
	if (bpf_skb_store_bytes(skb, 0, fib.dmac, 6, 0) < 0 ||
	    bpf_skb_store_bytes(skb, 6, fib.smac, 6, 0) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(fib.ifindex, 0);
}

/* Forward a translated packet (`arrived` as it came in, now `to`). */
static __always_inline int
lb6_tc_redirect(struct __sk_buff *skb, const struct lb6_packet *arrived, const struct lb6_tuple *to)
{
	__u32 mtu = 0;
	int rc = lb6_tc_forward(skb, to, &mtu);

	return rc == LB6_FWD_TOO_BIG ? lb6_pmtu_too_big(skb, arrived, to, mtu) : rc;
}

/* ---- one flow (nat_flow.h) ---- */

static __always_inline int
lb6_flow_xlate_original(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb6_ct_entry *e)
{
	struct lb6_tuple to = pkt->tuple;

	lb6_addr_copy(to.daddr, e->backend_address);
	to.dport = e->backend_port;
	if (lb6_ct_has_nat(e)) {
		lb6_addr_copy(to.saddr, e->nat_address);
		to.sport = e->nat_port;
	}
	if (lb6_rewrite(skb, pkt, &to) < 0)
		return TC_ACT_SHOT;
	return (e->flags & LB_CT_FLAG_SNAT) ? lb6_tc_redirect(skb, pkt, &to) : TC_ACT_OK;
}

static __always_inline int
lb6_flow_xlate_reply(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb6_ct_entry *e,
		     enum lb_hook hook)
{
	struct lb6_tuple to = pkt->tuple;

	lb6_addr_copy(to.saddr, e->frontend_address);
	to.sport = e->frontend_port;
	lb6_addr_copy(to.daddr, e->client_address);
	to.dport = e->client_port;
	if (lb6_rewrite(skb, pkt, &to) < 0)
		return TC_ACT_SHOT;
	lb_count(LB_CNT_TC_REV_XLATED);
	return hook == LB_HOOK_INGRESS ? lb6_tc_redirect(skb, pkt, &to) : TC_ACT_OK;
}

/* lb4_snat_alloc_port over SLUICE_MAP_CT6 (same order: the client's port,
 * LB_TC_SNAT_RETRIES random ones, then a scan of the whole range). */
struct lb6_snat_scan {
	struct lb6_ct_entry *e;
	__u32 min;
	__u32 range;
	__u32 start;
	__u32 found;
};

static long lb6_snat_scan_one(__u32 i, void *ctx)
{
	struct lb6_snat_scan *scan = ctx;
	struct lb6_ct_key key;
	__u32 range = scan->range;

	if (!range)
		return 1;
	scan->e->nat_port = bpf_htons((__u16)(scan->min + (scan->start + i) % range));
	lb6_ct_reply_key(&key, scan->e);
	if (lb6_ct_claim_insert(&key, scan->e) == 0) {
		scan->found = 1;
		return 1;
	}
	return 0;
}

static __noinline int lb6_snat_alloc_port(struct lb6_ct_entry *e, const struct lb4_tc_config *cfg)
{
	__u32 range = (__u32)cfg->snat_port_max - cfg->snat_port_min + 1;
	__u32 port = bpf_ntohs(e->client_port);
	struct lb6_snat_scan scan = {};
	struct lb6_ct_key key;
	int i;

	if (port < cfg->snat_port_min || port > cfg->snat_port_max)
		port = cfg->snat_port_min + bpf_get_prandom_u32() % range;
	e->dir = LB_CT_DIR_REPLY;
	for (i = 0; i <= LB_TC_SNAT_RETRIES; i++) {
		e->nat_port = bpf_htons((__u16)port);
		lb6_ct_reply_key(&key, e);
		if (lb6_ct_claim_insert(&key, e) == 0)
			return 0;
		port = cfg->snat_port_min + bpf_get_prandom_u32() % range;
	}
	scan.e = e;
	scan.min = cfg->snat_port_min;
	scan.range = range;
	scan.start = bpf_get_prandom_u32() % range;
	bpf_loop(range, lb6_snat_scan_one, &scan, 0);
	if (scan.found)
		return 0;
	lb_count(LB_CNT_TC_SNAT_EXHAUSTED);
	return -1;
}

/* lb4_ct_create_flow over SLUICE_MAP_CT6 (reply entry first: the SNAT port's
 * reservation, or the client port remapped when the DNATed tuple is taken). */
static __noinline int
lb6_ct_create_flow(struct __sk_buff *skb, const struct lb6_tuple *t, struct lb6_ct_entry *e,
		   const struct lb4_tc_config *cfg)
{
	struct lb6_ct_key key;
	int err = 0;

	e->dir = LB_CT_DIR_REPLY;
	if (e->flags & LB_CT_FLAG_SNAT) {
		err = lb6_snat_alloc_port(e, cfg);
	} else {
		lb6_ct_reply_key(&key, e);
		if (lb6_ct_claim_insert(&key, e) < 0) {
			e->flags |= LB_CT_FLAG_SPORT;
			lb6_addr_copy(e->nat_address, e->client_address);
			err = lb6_snat_alloc_port(e, cfg);
			if (!err)
				lb_count(LB_CNT_TC_SPORT_REMAPPED);
		}
	}
	if (err < 0) {
		lb_count(LB_CNT_TC_SNAT_FAILED);
		return -1;
	}
	/* Zero: the caller then translates this packet as a known flow, and
	 * that touch counts it. */
	e->dir = LB_CT_DIR_ORIGINAL;
	e->packets = 0;
	e->bytes = 0;
	lb6_ct_key_of(&key, t, LB_CT_DIR_ORIGINAL);
	if (lb6_ct_claim_insert(&key, e) < 0) {
		struct lb6_ct_key reply;

		lb6_ct_reply_key(&reply, e);
		bpf_map_delete_elem(&SLUICE_MAP_CT6, &reply);
		lb_count(LB_CNT_TC_CT_FAILED);
		return -1;
	}
	if (e->flags & LB_CT_FLAG_LC)
		lc6_flow_open(&key, e->backend_id);
	lb_count(LB_CNT_TC_TRANSLATED);
	return 0;
}

static __always_inline bool lb6_ct_backend_alive(const struct lb6_ct_entry *e)
{
	struct lb6_backend *backend = lb6_lookup_backend(e->backend_id);

	return backend && lb6_addr_equal(backend->address, e->backend_address) &&
	       backend->port == e->backend_port;
}

static __noinline struct lb6_ct_entry *
lb6_ct_live_original(struct __sk_buff *skb, const struct lb6_tuple *t, const struct lb4_tc_config *cfg)
{
	struct lb6_ct_entry *e;
	struct lb6_ct_key key;

	lb6_ct_key_of(&key, t, LB_CT_DIR_ORIGINAL);
	e = lb6_ct_lookup(&key);
	if (!e || (e->flags & LB_CT_FLAG_POD) || lb6_ct_is_reopen(e, t))
		return NULL;
	if (lb6_ct_backend_alive(e))
		return lb6_ct_touch(e, cfg, t, skb->len) == 0 ? e : NULL;
	lb_count(LB_CNT_TC_BACKEND_GONE);
	lb6_ct_delete_flow(e);
	return NULL;
}

/*
 * ICMPv6 errors about translated flows (lb4_flow_icmp_error's two cases):
 * about a packet on its way to the backend (quote reversed = the reply key):
 * rewritten to quote client -> frontend and sent to the client; about a reply
 * on its way to the client (quote reversed = the original key, at ingress):
 * rewritten to quote what the backend sent and sent on to the backend.
 */
/* About a packet on its way to the backend: quote client -> frontend, sent
 * to the client (forwarded by us at ingress: SNATed flows). */
static __noinline int
lb6_icmp_error_to_client(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb6_icmp_quote *q,
			 const struct lb6_ct_entry *e, bool ingress)
{
	struct lb6_tuple quote_to = q->tuple, outer = {};
	__u32 mtu;
	int rc;

	lb6_addr_copy(quote_to.saddr, e->client_address);
	quote_to.sport = e->client_port;
	lb6_addr_copy(quote_to.daddr, e->frontend_address);
	quote_to.dport = e->frontend_port;
	/* From the backend itself: from the frontend, as the client knows it. */
	if (lb6_addr_equal(pkt->tuple.saddr, e->backend_address))
		lb6_addr_copy(outer.saddr, e->frontend_address);
	else
		lb6_addr_copy(outer.saddr, pkt->tuple.saddr);
	lb6_addr_copy(outer.daddr, e->client_address);
	if (lb6_rewrite_icmp_error(skb, pkt, q, &outer, &quote_to) < 0)
		return TC_ACT_SHOT;
	lb_count(LB_CNT_TC_REV_XLATED);
	if (!ingress)
		return TC_ACT_OK;
	rc = lb6_tc_forward(skb, &outer, &mtu);
	if (rc != LB6_FWD_TOO_BIG)
		return rc;
	lb_count(LB_CNT_TC_TOO_BIG_DROP); /* an error is never answered with an error */
	return TC_ACT_SHOT;
}

/* About a reply on its way to the client: quote what the backend sent, sent
 * on to the backend by the stack (the router that sent it stays the source). */
static __noinline int
lb6_icmp_error_to_backend(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb6_icmp_quote *q,
			  const struct lb6_ct_entry *e)
{
	struct lb6_tuple quote_to = q->tuple, outer = {};

	lb6_addr_copy(quote_to.saddr, e->backend_address);
	quote_to.sport = e->backend_port;
	if (lb6_ct_has_nat(e)) {
		lb6_addr_copy(quote_to.daddr, e->nat_address);
		quote_to.dport = e->nat_port;
	} else {
		lb6_addr_copy(quote_to.daddr, e->client_address);
		quote_to.dport = e->client_port;
	}
	lb6_addr_copy(outer.saddr, pkt->tuple.saddr);
	lb6_addr_copy(outer.daddr, e->backend_address);
	if (lb6_rewrite_icmp_error(skb, pkt, q, &outer, &quote_to) < 0)
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

static __noinline int lb6_flow_icmp_error(struct __sk_buff *skb, const struct lb6_packet *pkt, enum lb_hook hook)
{
	bool ingress = hook == LB_HOOK_INGRESS;
	struct lb6_icmp_quote q;
	struct lb6_ct_key key;
	struct lb6_ct_entry *e;

	if (lb6_parse_icmp_quote(skb, pkt, &q) < 0)
		return TC_ACT_OK;
	lb6_ct_key_set(&key, q.tuple.daddr, q.tuple.saddr, q.tuple.dport, q.tuple.sport, q.tuple.proto,
		       LB_CT_DIR_REPLY);
	e = lb6_ct_lookup(&key);
	/* SNATed flows' replies come back in at ingress, the others' leave at egress. */
	if (e && !!(e->flags & LB_CT_FLAG_SNAT) == ingress)
		return lb6_icmp_error_to_client(skb, pkt, &q, e, ingress);
	if (!ingress)
		return TC_ACT_OK;
	key.dir = LB_CT_DIR_ORIGINAL;
	e = lb6_ct_lookup(&key);
	return e ? lb6_icmp_error_to_backend(skb, pkt, &q, e) : TC_ACT_OK;
}

/* ---- the north-south steps (tc_lb.h) ---- */

static __always_inline bool lb6_source_allowed(__u32 rev_nat_id, const __u8 *client)
{
	struct lb6_src_range_key key = { .prefixlen = 32 + 128, .rev_nat_id = rev_nat_id };

	lb6_addr_copy(key.address, client);
	return bpf_map_lookup_elem(&SLUICE_MAP_SRCRANGE6, &key) != NULL;
}

/*
 * A new flow to a north-south frontend: source ranges, a backend, SNAT or
 * not. Its conntrack value is built in the scratch entry; LB6_FLOW_NEW asks
 * the caller to store it (lb6_ct_create_flow) and translate the packet as a
 * known flow. Separate steps keep each call chain's stack inside 512 bytes.
 */
#define LB6_FLOW_NEW (-1)

static __noinline int
lb6_tc_new_flow(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb4_tc_config *cfg)
{
	const struct lb6_tuple *t = &pkt->tuple;
	const __u32 *sw = (const __u32 *)t->saddr;
	struct lb6_service_key skey = {};
	struct lb6_affinity_key akey = {};
	struct lb6_ct_entry *e;
	struct lb6_backend *backend;
	struct lb4_service *found, svc;
	__u32 backend_id = 0;
	__u64 client;

	lb6_addr_copy(skey.address, t->daddr);
	skey.port = t->dport;
	skey.proto = t->proto;
	found = lb6_lookup_service(&skey, false);
	if (!found || !(found->flags & (LB_SVC_FLAG_NODEPORT | LB_SVC_FLAG_EXTERNAL_IP | LB_SVC_FLAG_LOADBALANCER)))
		return TC_ACT_OK;
	svc = *found; /* selection may re-read the master into it */
	if (lb_svc_has_source_ranges(&svc) && !lb6_source_allowed(svc.rev_nat_id, t->saddr)) {
		lb_count(LB_CNT_TC_SRC_RANGE_DROP);
		return TC_ACT_SHOT;
	}
	if (!svc.count) {
		lb_count(LB_CNT_TC_NO_BACKEND);
		return TC_ACT_SHOT;
	}
	lb6_addr_copy(akey.client, t->saddr);
	/* Maglev hashes the flow (the same on every node); with ClientIP
	 * affinity, and for source-hash, the client. */
	if (svc.algorithm == LB_ALG_MAGLEV && !(svc.flags & LB_SVC_FLAG_AFFINITY))
		client = lb6_maglev_flow_hash(t->saddr, t->daddr, t->sport, t->dport, t->proto);
	else
		client = sw[0] ^ sw[1] ^ sw[2] ^ sw[3];
	backend = lb6_pick_backend_copy(&skey, &svc, &akey, client, &backend_id);
	if (!backend) {
		lb_count(LB_CNT_TC_NO_BACKEND);
		return TC_ACT_SHOT;
	}
	e = lb6_ct_scratch();
	if (!e)
		return TC_ACT_SHOT;
	__builtin_memset(e, 0, sizeof(*e));
	lb6_addr_copy(e->client_address, t->saddr);
	e->client_port = t->sport;
	lb6_addr_copy(e->frontend_address, t->daddr);
	e->frontend_port = t->dport;
	lb6_addr_copy(e->backend_address, backend->address);
	e->backend_port = backend->port;
	e->backend_id = backend_id;
	e->rev_nat_id = svc.rev_nat_id;
	e->proto = t->proto;
	e->ifindex = skb->ingress_ifindex;
	if (svc.algorithm == LB_ALG_LEAST_CONN)
		e->flags |= LB_CT_FLAG_LC;
	e->expires_ns = bpf_ktime_get_ns() + lb4_ct_timeout_ns(cfg, t->proto, e->flags);

	/* As tc_lb.h: only externalTrafficPolicy Local to a local backend (not
	 * the client itself: hairpin) keeps the client's address. */
	if (!(svc.flags & LB_SVC_FLAG_EXT_LOCAL) || !(backend->flags & LB_BACKEND_FLAG_LOCAL) ||
	    lb6_addr_equal(backend->address, t->saddr)) {
		lb6_tc_snat_address(e->nat_address);
		if (lb6_is_zero(e->nat_address)) {
			lb_count(LB_CNT_TC_SNAT_FAILED);
			return TC_ACT_SHOT;
		}
		e->flags |= LB_CT_FLAG_SNAT;
	}
	return LB6_FLOW_NEW;
}

/* A packet of a known flow at ingress: a SNATed flow's reply, or the
 * client's packet. LB6_FLOW_UNKNOWN when neither. */
#define LB6_FLOW_UNKNOWN (-2)

static __noinline int
lb6_tc_ingress_known(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb4_tc_config *cfg)
{
	struct lb6_ct_entry *e;
	struct lb6_ct_key key;

	lb6_ct_key_of(&key, &pkt->tuple, LB_CT_DIR_REPLY);
	e = lb6_ct_lookup(&key);
	if (e && (e->flags & LB_CT_FLAG_SNAT)) {
		(void)lb6_ct_touch(e, cfg, &pkt->tuple, skb->len);
		return lb6_flow_xlate_reply(skb, pkt, e, LB_HOOK_INGRESS);
	}
	e = lb6_ct_live_original(skb, &pkt->tuple, cfg);
	if (!e)
		return LB6_FLOW_UNKNOWN;
	return lb6_flow_xlate_original(skb, pkt, e);
}

static __noinline int lb6_tc_ingress(struct __sk_buff *skb)
{
	struct lb6_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb6_ct_entry *e;
	int rc;

	if (lb6_parse(skb, &pkt) < 0)
		return TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMPV6)
		return lb6_icmp_is_error(pkt.icmp_type) ? lb6_flow_icmp_error(skb, &pkt, LB_HOOK_INGRESS) : TC_ACT_OK;
	cfg = lb4_tc_config_get();
	rc = lb6_tc_ingress_known(skb, &pkt, &cfg);
	if (rc != LB6_FLOW_UNKNOWN)
		return rc;
	rc = lb6_tc_new_flow(skb, &pkt, &cfg);
	if (rc != LB6_FLOW_NEW)
		return rc;
	e = lb6_ct_scratch();
	if (!e || lb6_ct_create_flow(skb, &pkt.tuple, e, &cfg) < 0)
		return TC_ACT_SHOT;
	/* Its entries are written: translated as a known flow. */
	rc = lb6_tc_ingress_known(skb, &pkt, &cfg);
	return rc == LB6_FLOW_UNKNOWN ? TC_ACT_SHOT : rc;
}

static __noinline int lb6_tc_egress(struct __sk_buff *skb)
{
	struct lb6_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb6_ct_entry *e;
	struct lb6_ct_key key;

	if (lb6_parse(skb, &pkt) < 0)
		return TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMPV6)
		return lb6_icmp_is_error(pkt.icmp_type) ? lb6_flow_icmp_error(skb, &pkt, LB_HOOK_EGRESS) : TC_ACT_OK;
	lb6_ct_key_of(&key, &pkt.tuple, LB_CT_DIR_REPLY);
	e = lb6_ct_lookup(&key);
	if (!e || (e->flags & LB_CT_FLAG_SNAT))
		return TC_ACT_OK;
	cfg = lb4_tc_config_get();
	(void)lb6_ct_touch(e, &cfg, &pkt.tuple, skb->len);
	return lb6_flow_xlate_reply(skb, &pkt, e, LB_HOOK_EGRESS);
}

#endif /* SLUICE_BPF_TC_LB6_H */
