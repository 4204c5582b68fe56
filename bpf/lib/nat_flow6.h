/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nat_flow6.h: IPv6 per-packet translation, one pipeline for the two TC
 * paths (the twin of nat_flow.h, which shares only the flow helpers): the
 * north-south path on the node's external devices (tc_lb6.h,
 * LB_PATH_NORTH_SOUTH) and the pod-veth path on the host side of each pod's
 * veth (pod_lb.bpf.c, LB_PATH_POD; docs/pod-veth.md). Both keep a flow's two
 * conntrack entries in SLUICE_MAP_CT6 (pod flows flagged LB_CT_FLAG_POD, and
 * each path acts only on its own entries: both may run on one veth) and
 * translate the original direction (X -> frontend becomes X or SNAT ->
 * backend) and the reply direction (backend -> X becomes frontend -> client)
 * the same way. enum lb_path decides the rest:
 *
 *                      north-south                      pod veth
 *   frontends          NodePort/ExternalIP/LB,          any, internal scope
 *                      external scope, source ranges
 *   SNAT               node address, but eTP Local      none, but hairpin (the
 *                      to a local backend               frontend, SNAT-range port)
 *   no endpoint        dropped                          ICMPv6 port unreachable
 *                                                       into the pod (DROP_NO_
 *                                                       BACKEND: dropped)
 *   local source       FIB + redirect, Packet Too Big   bounced back into the pod
 *   counters           LB_CNT_TC_*                      + LB_CNT_POD_OFFSET
 *
 * Ingress (lb6_flow_ingress): ICMPv6 errors of translated flows; a reply of
 * one of the path's SNATed flows; a known flow's packet; a new flow.
 * Egress (lb6_flow_egress): a reply of a DNAT-only flow gets the frontend back
 * as its source. Neighbor Discovery and every other informational ICMPv6
 * message, non-Service traffic, later fragments whose first was not seen
 * (frag6.h) and packets whose extension headers are not walked (nat6.h) pass
 * untouched; a datagram's fragments are translated like its first.
 *
 * The steps are BPF subprograms (__noinline) where their frames would add up
 * past the 512-byte stack on one call chain; the IPv4 path of the same
 * program is another chain.
 */
#ifndef SLUICE_BPF_NAT_FLOW6_H
#define SLUICE_BPF_NAT_FLOW6_H

#include "nat_flow.h"
#include "conntrack6.h"
#include "frag6.h"
#include "events6.h"

/* ---- forwarding (nat_flow.h's lb4_tc_redirect) ---- */

static __always_inline int lb6_dec_hoplimit(struct __sk_buff *skb)
{
	__u8 hops;

	if (bpf_skb_load_bytes(skb, LB_IP6_OFF_HOPLIMIT, &hops, 1) < 0 || hops <= 1)
		return -1;
	hops--;
	return bpf_skb_store_bytes(skb, LB_IP6_OFF_HOPLIMIT, &hops, 1, 0);
}

/* An ICMPv6 error message's header, after its IPv6 header (RFC 4443 section 2.1). */
struct lb6_icmp_error_hdr {
	__u8   type;
	__u8   code;
	__u16  checksum;
	__be32 param; /* Packet Too Big: the MTU; else unused (0) */
};

#define LB_ICMP6_PORT_UNREACH 4 /* Destination Unreachable code (RFC 4443 section 3.1) */
#define LB_IP6_MIN_MTU        1280
/* RFC 4443 section 2.4 (c): as much of the invoking packet as fits in the
 * minimum IPv6 MTU with the error's own IPv6 and ICMPv6 headers. */
#define LB_ICMP6_QUOTE_MAX    (LB_IP6_MIN_MTU - LB_IP6_HLEN - sizeof(struct lb6_icmp_error_hdr))
#define LB_ICMP6_CSUM_CHUNK   512 /* bpf_csum_diff's most bytes per call */

/* The IPv6 pseudo-header of an upper-layer checksum (RFC 8200 section 8.1). */
struct lb6_pseudo_hdr {
	__u8   saddr[16];
	__u8   daddr[16];
	__be32 len;
	__be32 nexthdr;
};

/* The one's-complement sum of the quote (qlen bytes of the invoking packet,
 * copied to the per-CPU scratch, zero-padded to 4 bytes), added to sum. */
static __always_inline __s64
lb6_icmp_quote_sum(struct __sk_buff *skb, struct lb6_icmp_scratch *buf, __u64 qlen, __s64 sum)
{
	__u64 n = (qlen + 3) & ~3ull;
	int i;

	if (bpf_skb_load_bytes(skb, LB_ETH_HLEN, buf->bytes, qlen) < 0)
		return -1;
#pragma unroll
	for (i = 0; i < 3; i++) {
		__u64 at = qlen + i;

		if (at < n && at < sizeof(buf->bytes))
			buf->bytes[at] = 0;
	}
#pragma unroll
	for (i = 0; i < 3; i++) {
		__u64 c = n > LB_ICMP6_CSUM_CHUNK ? LB_ICMP6_CSUM_CHUNK : n;

		if (!c || sum < 0)
			break;
		sum = bpf_csum_diff(NULL, 0, (__be32 *)(buf->bytes + i * LB_ICMP6_CSUM_CHUNK), c, (__u32)sum);
		n -= c;
	}
	return sum;
}

/*
 * Turn the frame, in place, into an ICMPv6 error `type`/`code` about it,
 * from the address it was sent to (about->daddr) back to its sender, quoting
 * as much of it as fits in the minimum IPv6 MTU (1 232 bytes: the sender
 * finds its socket past any extension headers; RFC 4443 section 2.4 (c)),
 * with the MAC addresses swapped. The caller redirects it. 0, or -1 (nothing
 * usable left).
 */
static __noinline int
lb6_icmp_error_reply(struct __sk_buff *skb, const struct lb6_tuple *about, __u8 type, __u8 code, __u32 param)
{
	struct lb6_icmp_error_hdr icmp = {};
	struct lb6_pseudo_hdr ph = {};
	struct lb6_icmp_scratch *buf;
	__u8 eth[LB_ETH_HLEN], mac[6], ip[8] = {};
	__u64 qlen = skb->len; /* 64 bits: the checks below bound the register the helpers get */
	__u32 zero = 0;
	__s64 sum;

	if (qlen < LB_ETH_HLEN + LB_IP6_HLEN)
		return -1;
	qlen -= LB_ETH_HLEN;
	if (qlen > LB_ICMP6_QUOTE_MAX)
		qlen = LB_ICMP6_QUOTE_MAX;
	asm volatile("" : "+r"(qlen)); /* a check the verifier sees, not folded into the clamp */
	if (qlen > LB_ICMP6_QUOTE_MAX)
		return -1;
	buf = bpf_map_lookup_elem(&SLUICE_MAP_ICMP6_TMP, &zero);
	if (!buf || bpf_skb_load_bytes(skb, 0, eth, sizeof(eth)) < 0)
		return -1;

	icmp.type = type;
	icmp.code = code;
	icmp.param = bpf_htonl(param);
	lb6_addr_copy(ph.saddr, about->daddr);
	lb6_addr_copy(ph.daddr, about->saddr);
	ph.len = bpf_htonl(sizeof(icmp) + qlen);
	ph.nexthdr = bpf_htonl(LB_IPPROTO_ICMPV6);
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&ph, sizeof(ph), 0);
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&icmp, sizeof(icmp), (__u32)sum);
	sum = lb6_icmp_quote_sum(skb, buf, qlen, sum);
	if (sum < 0)
		return -1;
	icmp.checksum = lb_csum_fold(sum);

	ip[0] = 0x60;
	ip[4] = (sizeof(icmp) + qlen) >> 8;
	ip[5] = (sizeof(icmp) + qlen) & 0xff;
	ip[6] = LB_IPPROTO_ICMPV6;
	ip[7] = 64;

	__builtin_memcpy(mac, eth, 6);
	__builtin_memcpy(eth, eth + 6, 6);
	__builtin_memcpy(eth + 6, mac, 6);

	/* Room for the new IPv6 + ICMPv6 headers before the packet, which
	 * becomes the quote, cut to qlen. */
	if (bpf_skb_adjust_room(skb, LB_IP6_HLEN + sizeof(icmp), BPF_ADJ_ROOM_MAC, 0) < 0 ||
	    bpf_skb_change_tail(skb, LB_ETH_HLEN + LB_IP6_HLEN + sizeof(icmp) + qlen, 0) < 0 ||
	    bpf_skb_store_bytes(skb, 0, eth, sizeof(eth), BPF_F_INVALIDATE_HASH) < 0 ||
	    bpf_skb_store_bytes(skb, LB_ETH_HLEN, ip, sizeof(ip), 0) < 0 ||
	    bpf_skb_store_bytes(skb, LB_ETH_HLEN + 8, &ph, 32, 0) < 0 || /* the addresses */
	    bpf_skb_store_bytes(skb, LB_ETH_HLEN + LB_IP6_HLEN, &icmp, sizeof(icmp), 0) < 0)
		return -1;
	return 0;
}

/*
 * pmtu.h for IPv6: `arrived` was rewritten to `to` when the FIB said the
 * next hop takes at most `mtu` bytes. The packet is restored (that is what
 * its sender must see quoted) and answered with a Packet Too Big (RFC 4443
 * section 3.2), sent back out of the device it came in on, from the address
 * the sender talked to. IPv6 routers never fragment: no DF case.
 */
static __noinline int
lb6_pmtu_too_big(struct __sk_buff *skb, const struct lb6_packet *arrived, const struct lb6_tuple *to, __u32 mtu)
{
	if (lb6_rewrite_tuple(skb, to, &arrived->tuple, arrived->l4_off, arrived->frag) < 0)
		return TC_ACT_SHOT;
	if (lb6_icmp_error_reply(skb, &arrived->tuple, LB_ICMP6_PKT_TOOBIG, 0, mtu) < 0) {
		lb_count(LB_CNT_TC_TOO_BIG_DROP);
		return TC_ACT_SHOT;
	}
	lb_count(LB_CNT_TC_FRAG_NEEDED_SENT);
	return bpf_redirect(skb->ingress_ifindex, 0);
}

/*
 * reject.h for IPv6: a packet to a frontend without any endpoint becomes an
 * ICMPv6 port unreachable (Destination Unreachable, code 4) from the
 * frontend, sent back out of the device it came in on (what ip6tables'
 * REJECT sends; TCP connect() then fails with ECONNREFUSED). A GSO packet
 * (never a first packet in practice) is dropped instead.
 */
static __always_inline int lb6_icmp_reject(struct __sk_buff *skb, const struct lb6_packet *pkt)
{
	if (skb->gso_size ||
	    lb6_icmp_error_reply(skb, &pkt->tuple, LB_ICMP6_DEST_UNREACH, LB_ICMP6_PORT_UNREACH, 0) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
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
	return lb_fib_redirect(skb, &fib, rc);
}

/* Forward a translated packet (`arrived` as it came in, now `to`). */
static __always_inline int
lb6_tc_redirect(struct __sk_buff *skb, const struct lb6_packet *arrived, const struct lb6_tuple *to)
{
	__u32 mtu = 0;
	int rc = lb6_tc_forward(skb, to, &mtu);

	return rc == LB6_FWD_TOO_BIG ? lb6_pmtu_too_big(skb, arrived, to, mtu) : rc;
}

/* lb4_pod_bounce for IPv6: back into the pod it came from, hop limit - 1
 * (a subprogram: its MAC buffers stay off its callers' frames). */
static __noinline int lb6_pod_bounce(struct __sk_buff *skb)
{
	if (lb_swap_macs(skb) < 0 || lb6_dec_hoplimit(skb) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

/* lb4_flow_forward: a packet whose new source is local is routed by us on
 * the north-south path, sent straight back into the pod on the pod path
 * (hairpin, the only case there). */
static __always_inline int
lb6_flow_forward(struct __sk_buff *skb, enum lb_path path, const struct lb6_packet *arrived,
		 const struct lb6_tuple *to)
{
	if (path == LB_PATH_POD)
		return lb6_pod_bounce(skb);
	return lb6_tc_redirect(skb, arrived, to);
}

/* ---- one flow (nat_flow.h) ---- */

static __always_inline int
lb6_flow_xlate_original(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb6_ct_entry *e,
			enum lb_path path)
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
	return (e->flags & LB_CT_FLAG_SNAT) ? lb6_flow_forward(skb, path, pkt, &to) : TC_ACT_OK;
}

static __always_inline int
lb6_flow_xlate_reply(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb6_ct_entry *e,
		     enum lb_path path, enum lb_hook hook)
{
	struct lb6_tuple to = pkt->tuple;

	lb6_addr_copy(to.saddr, e->frontend_address);
	to.sport = e->frontend_port;
	lb6_addr_copy(to.daddr, e->client_address);
	to.dport = e->client_port;
	if (lb6_rewrite(skb, pkt, &to) < 0)
		return TC_ACT_SHOT;
	lb_path_count(path, LB_CNT_TC_REV_XLATED);
	return hook == LB_HOOK_INGRESS ? lb6_flow_forward(skb, path, pkt, &to) : TC_ACT_OK;
}

/*
 * A new flow from `t` to the frontend of `skey` (its master copied in *svc,
 * which selection may re-read): a backend by ClientIP affinity or the
 * frontend's algorithm, and the flow's conntrack value (lb4_flow_fill) in
 * this CPU's scratch entry, before SNAT is decided (the caller sets
 * LB_CT_FLAG_SNAT and nat_address when it applies, then stores it with
 * lb6_ct_create_flow). LB6_START_NO_BACKEND: none could be picked.
 */
#define LB6_START_NO_BACKEND (-1)
#define LB6_START_FAILED     (-2)

/* A new flow's conntrack value (client -> frontend, to `backend`), the
 * translation and the first deadline: lb6_flow_start and the DSR backend
 * node (dsr6.h) fill the scratch entry with it. */
static __always_inline void
lb6_ct_fill(struct lb6_ct_entry *e, const struct lb6_tuple *t, const struct lb6_backend *backend, __u32 backend_id,
	    __u32 rev_nat_id, __u32 flags, __u32 ifindex, const struct lb4_tc_config *cfg)
{
	__builtin_memset(e, 0, sizeof(*e));
	lb6_addr_copy(e->client_address, t->saddr);
	e->client_port = t->sport;
	lb6_addr_copy(e->frontend_address, t->daddr);
	e->frontend_port = t->dport;
	lb6_addr_copy(e->backend_address, backend->address);
	e->backend_port = backend->port;
	e->backend_id = backend_id;
	e->rev_nat_id = rev_nat_id;
	e->proto = t->proto;
	e->flags = flags;
	e->ifindex = ifindex;
	e->expires_ns = bpf_ktime_get_ns() + lb4_ct_timeout_ns(cfg, t->proto, e->flags);
}

static __always_inline int
lb6_flow_start(const struct lb6_tuple *t, struct lb6_service_key *skey, struct lb4_service *svc,
	       enum lb_path path, __u32 ifindex, const struct lb4_tc_config *cfg)
{
	const __u32 *sw = (const __u32 *)t->saddr;
	struct lb6_affinity_key akey = {};
	struct lb6_backend *backend;
	struct lb6_ct_entry *e;
	__u32 backend_id = 0;
	__u64 client;

	lb6_addr_copy(akey.client, t->saddr);
	/* Maglev hashes the flow (the same on every node); with ClientIP
	 * affinity, and for source-hash, the client. */
	if (svc->algorithm == LB_ALG_MAGLEV && !(svc->flags & LB_SVC_FLAG_AFFINITY))
		client = lb6_maglev_flow_hash(t->saddr, t->daddr, t->sport, t->dport, t->proto);
	else
		client = sw[0] ^ sw[1] ^ sw[2] ^ sw[3];
	backend = lb6_pick_backend_copy(skey, svc, &akey, client, &backend_id);
	if (!backend)
		return LB6_START_NO_BACKEND;
	e = lb6_ct_scratch();
	if (!e)
		return LB6_START_FAILED;
	lb6_ct_fill(e, t, backend, backend_id, svc->rev_nat_id,
		    lb_path_ct_flags(path) | (svc->algorithm == LB_ALG_LEAST_CONN ? LB_CT_FLAG_LC : 0), ifindex, cfg);
	return 0;
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
	lb_count(e->flags & LB_CT_FLAG_POD ? LB_CNT_POD_SNAT_EXHAUSTED : LB_CNT_TC_SNAT_EXHAUSTED);
	return -1;
}

/* lb4_ct_create_flow over SLUICE_MAP_CT6 (reply entry first: the SNAT port's
 * reservation, or the client port remapped when the DNATed tuple is taken). */
static __noinline int
lb6_ct_create_flow(const struct lb6_tuple *t, struct lb6_ct_entry *e, const struct lb4_tc_config *cfg)
{
	struct lb6_ct_key key;
	int err = 0;

	e->dir = LB_CT_DIR_REPLY;
	if (e->flags & LB_CT_FLAG_SNAT) {
		err = lb6_snat_alloc_port(e, cfg);
	} else if (e->flags & LB_CT_FLAG_DSR) {
		/* No reply reaches this node (dsr6.h): the entry only keeps the
		 * flow's pair complete; a key in use is left to its flow. */
		lb6_ct_reply_key(&key, e);
		(void)lb6_ct_claim_insert(&key, e);
	} else {
		lb6_ct_reply_key(&key, e);
		if (lb6_ct_claim_insert(&key, e) < 0) {
			e->flags |= LB_CT_FLAG_SPORT;
			lb6_addr_copy(e->nat_address, e->client_address);
			err = lb6_snat_alloc_port(e, cfg);
			if (!err)
				lb_count(lb_cnt_flow(e->flags, LB_CNT_TC_SPORT_REMAPPED));
		}
	}
	if (err < 0) {
		lb_count(lb_cnt_flow(e->flags, LB_CNT_TC_SNAT_FAILED));
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
		lb_count(lb_cnt_flow(e->flags, LB_CNT_TC_CT_FAILED));
		return -1;
	}
	if (e->flags & LB_CT_FLAG_LC)
		lc6_flow_open(&key, e->backend_id);
	lb_count(lb_cnt_flow(e->flags, LB_CNT_TC_TRANSLATED));
	return 0;
}

static __always_inline bool lb6_ct_backend_alive(const struct lb6_ct_entry *e)
{
	struct lb6_backend *backend = lb6_lookup_backend(e->backend_id);

	return backend && lb6_addr_equal(backend->address, e->backend_address) &&
	       backend->port == e->backend_port;
}

/* An entry of this path (pod-veth entries carry LB_CT_FLAG_POD, north-south
 * ones do not): the two paths share SLUICE_MAP_CT6 and may run on one veth. */
static __always_inline bool lb6_ct_on_path(const struct lb6_ct_entry *e, enum lb_path path)
{
	return (e->flags & LB_CT_FLAG_POD) == lb_path_ct_flags(path);
}

/* lb4_ct_live_original over SLUICE_MAP_CT6: the touched original entry of a
 * known flow of this path whose backend is still there, else NULL (a flow
 * whose backend went away is deleted, to be balanced again). */
static __noinline struct lb6_ct_entry *
lb6_ct_live_original(struct __sk_buff *skb, const struct lb6_tuple *t, const struct lb4_tc_config *cfg,
		     enum lb_path path)
{
	struct lb6_ct_entry *e;
	struct lb6_ct_key key;

	lb6_ct_key_of(&key, t, LB_CT_DIR_ORIGINAL);
	e = lb6_ct_lookup(&key);
	if (!e || !lb6_ct_on_path(e, path) || lb6_ct_is_reopen(e, t))
		return NULL;
	if (lb6_ct_backend_alive(e))
		return lb6_ct_touch(e, cfg, t, skb->len) == 0 ? e : NULL;
	lb_path_count(path, LB_CNT_TC_BACKEND_GONE);
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
			 const struct lb6_ct_entry *e, enum lb_path path, bool ingress)
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
	lb_path_count(path, LB_CNT_TC_REV_XLATED);
	if (!ingress)
		return TC_ACT_OK;
	if (path == LB_PATH_POD) /* hairpin: the pod told about itself */
		return lb6_pod_bounce(skb);
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

static __noinline int
lb6_flow_icmp_error(struct __sk_buff *skb, const struct lb6_packet *pkt, enum lb_path path, enum lb_hook hook)
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
	if (e && lb6_ct_on_path(e, path) && !!(e->flags & LB_CT_FLAG_SNAT) == ingress)
		return lb6_icmp_error_to_client(skb, pkt, &q, e, path, ingress);
	if (!ingress)
		return TC_ACT_OK;
	key.dir = LB_CT_DIR_ORIGINAL;
	e = lb6_ct_lookup(&key);
	return e && lb6_ct_on_path(e, path) ? lb6_icmp_error_to_backend(skb, pkt, &q, e) : TC_ACT_OK;
}

/* ---- Direct Server Return, ingress node (issue 17 item 2 for IPv6; docs/dsr.md) ---- */

/* lb6_flow_ingress: "an ip6ip6 packet, give it to lb6_dsr_receive" (dsr6.h;
 * the TC entry calls it, so its frame is not added to this chain's). */
#define LB_TC_DSR6_RECEIVE 0x7ffd

/*
 * The packet of a DSR flow (LB_CT_FLAG_DSR), kept as it arrived (client ->
 * frontend) and put in an outer IPv6 header (ip6ip6, RFC 2473: next header
 * 41, LB_DSR6_ENCAP_LEN bytes): source the node's address (nat_address),
 * destination the backend, routed by the FIB. LB6_DSR_TOO_BIG + the MTU
 * left for the client's packet (the route's less the outer header) when
 * it would no longer fit: the caller answers with a Packet Too Big. A subprogram: its FIB
 * and header buffers stay off the callers' frames.
 */
#define LB6_DSR_TOO_BIG 0x10000 /* + the MTU: no out-parameter on the caller's frame (the chain is at 512 bytes) */

static __noinline int lb6_dsr_forward(struct __sk_buff *skb, const struct lb6_ct_entry *e)
{
	struct bpf_fib_lookup fib = {};
	struct ipv6hdr outer;
	__u32 len = skb->len - LB_ETH_HLEN; /* the client's IPv6 packet */
	int rc;

	if (skb->len < LB_ETH_HLEN + LB_IP6_HLEN ||
	    bpf_skb_load_bytes(skb, LB_ETH_HLEN, &outer, 4) < 0) /* version, traffic class, flow label */
		return TC_ACT_SHOT;
	fib.family = AF_INET6;
	__builtin_memcpy(fib.ipv6_src, e->nat_address, 16);
	__builtin_memcpy(fib.ipv6_dst, e->backend_address, 16);
	fib.ifindex = skb->ingress_ifindex;
	/* The length once encapsulated, so the FIB checks the route's MTU. */
	fib.tot_len = skb->gso_size ? 0 : len + LB_DSR6_ENCAP_LEN;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return LB6_DSR_TOO_BIG + (fib.mtu_result > LB_DSR6_ENCAP_LEN ? fib.mtu_result - LB_DSR6_ENCAP_LEN : 0);
	if (bpf_skb_adjust_room(skb, LB_DSR6_ENCAP_LEN, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6) < 0)
		return TC_ACT_SHOT;
	outer.payload_len = bpf_htons((__u16)len);
	outer.nexthdr = LB_IPPROTO_IPV6;
	outer.hop_limit = 64;
	__builtin_memcpy(&outer.saddr, e->nat_address, 16);
	__builtin_memcpy(&outer.daddr, e->backend_address, 16);
	if (bpf_skb_store_bytes(skb, LB_ETH_HLEN, &outer, sizeof(outer), BPF_F_INVALIDATE_HASH) < 0)
		return TC_ACT_SHOT;
	lb_count(LB_CNT_TC_DSR_ENCAP);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) {
		lb_count(LB_CNT_TC_FIB_FAILED);
		return TC_ACT_OK;
	}
	return lb_fib_redirect(skb, &fib, rc);
}

/* ---- the two paths' steps, told apart by enum lb_path ---- */

static __always_inline bool lb6_backend_is_local(__u32 backend_id)
{
	struct lb6_backend *backend = lb6_lookup_backend(backend_id);

	return backend && (backend->flags & LB_BACKEND_FLAG_LOCAL);
}

/* A frontend without any usable endpoint: the north-south path drops (as
 * tc_lb6.h always did for IPv6); the pod path rejects with an ICMPv6 port
 * unreachable into the pod (LB6_FLOW_REJECT: the caller has the packet), or
 * drops when no endpoint may be used from here (LB_SVC_FLAG_DROP_NO_BACKEND),
 * as kube-proxy does. */
#define LB6_FLOW_REJECT (-3)

static __always_inline int
lb6_flow_no_backend(const struct lb4_service *svc, enum lb_path path, const struct lb6_tuple *t, __u32 ifindex)
{
	bool drop = path == LB_PATH_NORTH_SOUTH || (svc->flags & LB_SVC_FLAG_DROP_NO_BACKEND);

	lb_path_count(path, LB_CNT_TC_NO_BACKEND);
	lb6_event_packet(drop ? LB_EVENT_DROP : LB_EVENT_REFUSED, lb_cnt_flow(lb_path_ct_flags(path), LB_CNT_TC_NO_BACKEND),
			 t, svc->rev_nat_id, ifindex);
	if (drop)
		return TC_ACT_SHOT;
	return LB6_FLOW_REJECT;
}

/*
 * A new flow to a frontend of this path: on the north-south path a NodePort /
 * ExternalIP / LoadBalancer frontend in the external scope (source ranges
 * checked); on the pod path any frontend in the internal scope (ClusterIPs,
 * and the others reached from inside the cluster). Then a backend, and SNAT
 * or not: north-south masquerades but for externalTrafficPolicy Local to a
 * local backend; the pod path keeps the pod's address but for hairpin (the
 * pod is its own backend: source frontend:port-from-the-SNAT-range, see
 * pod_lb.h). The conntrack value is built in the scratch entry;
 * LB6_FLOW_NEW asks the caller to store it (lb6_ct_create_flow) and
 * translate the packet as a known flow. Anything else passes (TC_ACT_OK) or
 * is dropped (TC_ACT_SHOT, counted). No packet access (ctx only for the
 * FIB lookup of the SNAT device): the TC paths and the XDP program
 * (xdp_lb6.h, `ifindex` its arrival device) share it.
 */
#define LB6_FLOW_NEW (-1)

static __noinline int
lb6_flow_new(void *ctx, const struct lb6_tuple *t, const struct lb4_tc_config *cfg, enum lb_path path, __u32 ifindex)
{
	bool pod = path == LB_PATH_POD;
	struct lb6_service_key skey = {};
	struct lb6_ct_entry *e;
	struct lb4_service *found, svc;
	int rc;

	lb6_addr_copy(skey.address, t->daddr);
	skey.port = t->dport;
	skey.proto = t->proto;
	found = lb6_lookup_service(&skey, pod);
	if (!found)
		return TC_ACT_OK;
	if (!pod && !(found->flags & (LB_SVC_FLAG_NODEPORT | LB_SVC_FLAG_EXTERNAL_IP | LB_SVC_FLAG_LOADBALANCER)))
		return TC_ACT_OK;
	svc = *found; /* selection may re-read the master into it */
	if (!pod && lb_svc_has_source_ranges(&svc) && !lb6_source_allowed(svc.rev_nat_id, t->saddr)) {
		lb_count(LB_CNT_TC_SRC_RANGE_DROP);
		lb6_event_packet(LB_EVENT_DROP, LB_CNT_TC_SRC_RANGE_DROP, t, svc.rev_nat_id, ifindex);
		return TC_ACT_SHOT;
	}
	if (!svc.count)
		return lb6_flow_no_backend(&svc, path, t, ifindex);
	rc = lb6_flow_start(t, &skey, &svc, path, ifindex, cfg);
	if (rc == LB6_START_NO_BACKEND)
		return lb6_flow_no_backend(&svc, path, t, ifindex);
	e = lb6_ct_scratch();
	if (rc < 0 || !e)
		return TC_ACT_SHOT;
	if (lb6_addr_equal(e->backend_address, t->saddr)) {
		/* Hairpin (the client is its own backend): it must not see its own
		 * address as the source. The pod path uses the frontend. */
		if (pod)
			lb6_addr_copy(e->nat_address, t->daddr);
	} else if (pod || ((svc.flags & LB_SVC_FLAG_EXT_LOCAL) && lb6_backend_is_local(e->backend_id))) {
		return LB6_FLOW_NEW; /* DNAT only: the client's address is kept */
	}
	if (!pod)
		lb6_snat_address_for(ctx, ifindex, e->backend_address, e->nat_address);
	if (lb6_is_zero(e->nat_address)) {
		lb_path_count(path, LB_CNT_TC_SNAT_FAILED);
		lb6_event_packet(LB_EVENT_DROP, lb_cnt_flow(lb_path_ct_flags(path), LB_CNT_TC_SNAT_FAILED), t, svc.rev_nat_id,
				 ifindex);
		return TC_ACT_SHOT;
	}
	/* DSR (lb6_dsr_forward): a remote backend gets the client's packet in
	 * ip6ip6; nat_address is the outer source. The reply never passes
	 * here: the flow counts as answered. */
	if (!pod && !lb6_addr_equal(e->backend_address, t->saddr) && !lb6_backend_is_local(e->backend_id) &&
	    lb_dsr_applies(t->proto)) {
		e->flags |= LB_CT_FLAG_DSR | LB_CT_FLAG_SEEN_REPLY;
		return LB6_FLOW_NEW;
	}
	e->flags |= LB_CT_FLAG_SNAT;
	return LB6_FLOW_NEW;
}

/*
 * A packet of a known flow at ingress: a reply of one of this path's SNATed
 * flows (north-south: backend -> node; pod path: the pod answering itself,
 * hairpin; looked up only to a port of the SNAT range), or the client's
 * packet. LB6_FLOW_UNKNOWN when neither.
 */
#define LB6_FLOW_UNKNOWN (-2)

/*
 * False when the packet cannot be the reply of one of this path's SNATed
 * flows (north-south masquerade to the node's IPv6 address, pod-path
 * hairpin): their nat port always comes from the SNAT range
 * (lb6_snat_alloc_port; lb_maybe_snat_reply in nat_flow.h has the cases).
 * ICMPv6 never gets here (lb6_flow_ingress: errors go by their quote, echo
 * is never translated). A new flow from an ephemeral port (pod path) or to a
 * NodePort (north-south) skips the reply-key miss, and so does every other
 * packet of a known flow whose destination port lies outside the range.
 */
static __always_inline bool lb6_flow_maybe_snat_reply(const struct lb6_tuple *t, const struct lb4_tc_config *cfg)
{
	return lb_maybe_snat_reply(t->dport, cfg);
}

static __noinline int
lb6_flow_ingress_known(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb4_tc_config *cfg,
		       enum lb_path path)
{
	struct lb6_ct_entry *e;
	struct lb6_ct_key key;

	if (lb6_flow_maybe_snat_reply(&pkt->tuple, cfg)) {
		lb6_ct_key_of(&key, &pkt->tuple, LB_CT_DIR_REPLY);
		e = lb6_ct_lookup(&key);
		if (e && (e->flags & LB_CT_FLAG_SNAT) && lb6_ct_on_path(e, path)) {
			(void)lb6_ct_touch(e, cfg, &pkt->tuple, skb->len);
			return lb6_flow_xlate_reply(skb, pkt, e, path, LB_HOOK_INGRESS);
		}
	}
	e = lb6_ct_live_original(skb, &pkt->tuple, cfg, path);
	if (!e)
		return LB6_FLOW_UNKNOWN;
	if (e->flags & LB_CT_FLAG_DSR) {
		int rc = lb6_dsr_forward(skb, e);

		return rc >= LB6_DSR_TOO_BIG ? lb6_pmtu_too_big(skb, pkt, &pkt->tuple, rc - LB6_DSR_TOO_BIG) : rc;
	}
	return lb6_flow_xlate_original(skb, pkt, e, path);
}

/* TC ingress of either path: ICMPv6 errors, known flows, new flows. (unused:
 * the XDP object includes this file for the flow steps, not the TC entries) */
static __noinline __attribute__((unused)) int lb6_flow_ingress(struct __sk_buff *skb, enum lb_path path)
{
	struct lb6_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb6_ct_entry *e;
	int rc;

	if (lb6_tc_parse(skb, &pkt) < 0) /* later fragments too (frag6.h); ip6ip6: DSR (dsr6.h) */
		return pkt.tuple.proto == LB_IPPROTO_IPV6 && path == LB_PATH_NORTH_SOUTH ? LB_TC_DSR6_RECEIVE : TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMPV6)
		return lb6_icmp_is_error(pkt.icmp_type) ? lb6_flow_icmp_error(skb, &pkt, path, LB_HOOK_INGRESS) : TC_ACT_OK;
	cfg = lb4_tc_config_get();
	rc = lb6_flow_ingress_known(skb, &pkt, &cfg, path);
	if (rc != LB6_FLOW_UNKNOWN)
		return rc;
	rc = lb6_flow_new(skb, &pkt.tuple, &cfg, path, path == LB_PATH_POD ? skb->ifindex : skb->ingress_ifindex);
	if (rc == LB6_FLOW_REJECT)
		return lb6_icmp_reject(skb, &pkt);
	if (rc != LB6_FLOW_NEW)
		return rc;
	e = lb6_ct_scratch();
	if (!e || lb6_ct_create_flow(&pkt.tuple, e, &cfg) < 0)
		return TC_ACT_SHOT;
	lb6_event_flow(e);
	/* Its entries are written: translated as a known flow. */
	rc = lb6_flow_ingress_known(skb, &pkt, &cfg, path);
	return rc == LB6_FLOW_UNKNOWN ? TC_ACT_SHOT : rc;
}

/* TC egress of either path: a reply of one of this path's DNAT-only flows
 * (north-south: externalTrafficPolicy Local; pod path: every flow but
 * hairpin) gets the frontend back as its source. */
static __noinline __attribute__((unused)) int lb6_flow_egress(struct __sk_buff *skb, enum lb_path path)
{
	struct lb6_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb6_ct_entry *e;
	struct lb6_ct_key key;

	if (lb6_tc_parse(skb, &pkt) < 0) /* later fragments too (frag6.h) */
		return TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMPV6)
		return lb6_icmp_is_error(pkt.icmp_type) ? lb6_flow_icmp_error(skb, &pkt, path, LB_HOOK_EGRESS) : TC_ACT_OK;
	lb6_ct_key_of(&key, &pkt.tuple, LB_CT_DIR_REPLY);
	e = lb6_ct_lookup(&key);
	if (!e || (e->flags & LB_CT_FLAG_SNAT) || !lb6_ct_on_path(e, path))
		return TC_ACT_OK;
	cfg = lb4_tc_config_get();
	(void)lb6_ct_touch(e, &cfg, &pkt.tuple, skb->len);
	return lb6_flow_xlate_reply(skb, &pkt, e, path, LB_HOOK_EGRESS);
}

#endif /* SLUICE_BPF_NAT_FLOW6_H */
