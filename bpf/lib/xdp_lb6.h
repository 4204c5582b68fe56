/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xdp_lb6.h: IPv6 NodePort / ExternalIP / LoadBalancer frontends at XDP
 * (issues 17 and 14), and the program's entry point for both families.
 *
 * The IPv6 steps are xdp_lb.h's, over the IPv6 tables and conntrack the TC
 * path uses (tc_lb6.h, nat_flow6.h): a packet to an address of
 * SLUICE_MAP_XDP_FE6 whose next header is TCP or UDP is
 *   - a known flow (original direction in SLUICE_MAP_CT6, north-south):
 *     rewritten to its backend (+SNAT) and sent;
 *   - a new flow: lb6_flow_new decides as it does for TC (frontend scope,
 *     loadBalancerSourceRanges -> XDP_DROP, the Service's algorithm, Maglev
 *     over the 5-tuple, SNAT to the node's IPv6 address unless
 *     externalTrafficPolicy Local keeps the client), then the route; only
 *     once XDP knows it sends the packet are both conntrack entries written
 *     (lb6_ct_create_flow), so TC continues the flow and XDP continues TC's.
 * Sent means: bpf_fib_lookup (AF_INET6), hop limit - 1, addresses and ports
 * rewritten with the TCP/UDP checksum updated over the pseudo-header (IPv6
 * has no header checksum), XDP_TX or XDP_REDIRECT as for IPv4.
 *
 * XDP_PASS, untouched, for TC: extension headers (fragments included: nat6.h
 * walks or passes them), ICMPv6 (Neighbor Discovery, errors TC translates),
 * replies to the SNAT address, hop limit 1, no neighbour or route yet, a
 * next hop on a device without XDP, and every packet to an address that is
 * no frontend (the prefilter, one hash lookup for what it lets through, and
 * one per-CPU slot, as for IPv4).
 */
#ifndef SLUICE_BPF_XDP_LB6_H
#define SLUICE_BPF_XDP_LB6_H

#include "xdp_lb.h"
#include "nat_flow6.h"
#include "xdp_fc6.h"

/* Frontend addresses of IPv6 north-south Services (SLUICE_MAP_XDP_FE4's twin). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb6_node_ip);
	__type(value, __u8);
	__uint(max_entries, SLUICE_MAX_XDP_FE6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_XDP_FE6 SEC(".maps");

/*
 * One packet's working set, per CPU (XDP does not nest on a CPU), off the
 * stack: the steps the IPv6 path shares with TC (lb6_ct_create_flow ->
 * lb6_snat_alloc_port -> its bpf_loop callback) take most of the 512 bytes
 * of the call chain. Packet pointers may not be stored in a map: they stay
 * on the stack (struct lb6_xdp_packet).
 */
struct lb6_xdp_work {
	struct lb6_tuple tuple; /* as it arrived */
	struct lb6_tuple to;    /* as it is sent */
	struct lb6_ct_key key;
	struct lb4_tc_config cfg;
};

_Static_assert(sizeof(struct lb6_xdp_work) == sizeof(struct lb6_xdp_scratch), "IPv6 XDP scratch size");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_xdp_scratch);
	__uint(max_entries, 1);
} SLUICE_MAP_XDP_S6 SEC(".maps");

/* lb4_xdp_packet's pointers: into the frame, valid until the program ends. */
struct lb6_xdp_packet {
	struct ethhdr *eth;
	struct ipv6hdr *ip;
	__sum16 *l4_check;
	__be16 *ports;
	__u32 len;         /* frame length (conntrack bytes) */
	bool service;      /* a Service packet: a flow or frontend matched */
};

/* Ethernet + IPv6 + TCP/UDP right after it; -1 for anything else (TC's). */
static __always_inline int lb6_xdp_parse(struct xdp_md *ctx, struct lb6_xdp_packet *p, struct lb6_tuple *t)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip = data + sizeof(struct ethhdr);
	void *l4 = ip + 1;

	if ((void *)(ip + 1) > end || ip->version != 6)
		return -1;
	if (ip->nexthdr == LB_PROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > end)
			return -1;
		p->l4_check = &tcp->check;
		t->tcp_flags = ((__u8 *)tcp)[13];
	} else if (ip->nexthdr == LB_PROTO_UDP) {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) > end)
			return -1;
		p->l4_check = &udp->check;
		t->tcp_flags = 0;
	} else {
		return -1; /* extension headers, fragments, ICMPv6, others */
	}
	p->eth = data;
	p->ip = ip;
	p->ports = l4;
	p->len = end - data;
	__builtin_memcpy(t->saddr, &ip->saddr, 16);
	__builtin_memcpy(t->daddr, &ip->daddr, 16);
	t->sport = p->ports[0];
	t->dport = p->ports[1];
	t->proto = ip->nexthdr;
	t->pad[0] = 0;
	t->pad[1] = 0;
	return 0;
}

/* The IPv6 header's traffic class and flow label (its first word without
 * the version), as the stack's forwarding gives them to the route lookup. */
static __always_inline __be32 lb6_xdp_flowinfo(const struct ipv6hdr *ip)
{
	return *(const __be32 *)ip & bpf_htonl(0x0fffffff);
}

/* The packet length the lookup's MTU check compares (40 + payload length). */
static __always_inline __u32 lb6_xdp_len(const struct ipv6hdr *ip)
{
	return LB_IP6_HLEN + bpf_ntohs(ip->payload_len);
}

/* lb4_xdp_route for IPv6: XDP_TX / XDP_REDIRECT (fib filled in) or XDP_PASS. */
static __always_inline int
lb6_xdp_route(struct xdp_md *ctx, const struct lb6_xdp_packet *p, const struct lb6_tuple *to,
	      struct bpf_fib_lookup *fib)
{
	if (p->ip->hop_limit <= 1)
		return XDP_PASS; /* the stack sends "time exceeded" */
	fib->family = AF_INET6;
	fib->l4_protocol = to->proto;
	fib->sport = to->sport;
	fib->dport = to->dport;
	fib->tot_len = lb6_xdp_len(p->ip);
	/* Set every packet: the scratch still holds the last lookup's answer
	 * there (rt_metric shares the field), and the cache tags this input. */
	fib->flowinfo = lb6_xdp_flowinfo(p->ip);
	__builtin_memcpy(fib->ipv6_src, to->saddr, 16);
	__builtin_memcpy(fib->ipv6_dst, to->daddr, 16);
	return lb_xdp_fib_action(ctx, fib);
}

/* RFC 1624 over a 16-byte address: eight 16-bit words. */
static __always_inline __u32 lb6_csum_addr(__u32 delta, const __u8 *from, const __u8 *to)
{
	const __u16 *f = (const __u16 *)from, *t = (const __u16 *)to;
	int i;

#pragma unroll
	for (i = 0; i < 8; i++)
		delta = lb_csum_word(delta, f[i], t[i]);
	return delta;
}

/* lb4_xdp_rewrite for IPv6: the frame from `from` to `to`, hop limit - 1. */
static __always_inline void
lb6_xdp_rewrite(const struct lb6_xdp_packet *p, const struct lb6_tuple *from, const struct lb6_tuple *to)
{
	struct ipv6hdr *ip = p->ip;
	__u32 l4 = 0;

	/* The addresses are in the pseudo-header (RFC 8200 section 8.1); IPv6
	 * itself has no header checksum. */
	l4 = lb6_csum_addr(l4, from->saddr, to->saddr);
	l4 = lb6_csum_addr(l4, from->daddr, to->daddr);
	l4 = lb_csum_word(l4, from->sport, to->sport);
	l4 = lb_csum_word(l4, from->dport, to->dport);
	lb_xdp_l4_csum(p->l4_check, from->proto, l4);
	ip->hop_limit--;
	__builtin_memcpy(&ip->saddr, to->saddr, 16);
	__builtin_memcpy(&ip->daddr, to->daddr, 16);
	p->ports[0] = to->sport;
	p->ports[1] = to->dport;
}

/* lb4_xdp_send for IPv6: rewrite the frame from `from` to `to`, send it. */
static __always_inline int
lb6_xdp_send(const struct lb6_xdp_packet *p, const struct lb6_tuple *from, const struct lb6_tuple *to,
	     const struct bpf_fib_lookup *fib, int action)
{
	lb6_xdp_rewrite(p, from, to);
	return lb_xdp_out(p->eth, fib, action);
}

/* lb6_flow_xlate_original's tuple: client (or SNAT address:port) -> backend. */
static __always_inline void
lb6_xdp_to_backend(struct lb6_tuple *to, const struct lb6_tuple *from, const struct lb6_ct_entry *e)
{
	*to = *from;
	lb6_addr_copy(to->daddr, e->backend_address);
	to->dport = e->backend_port;
	if (lb6_ct_has_nat(e)) {
		lb6_addr_copy(to->saddr, e->nat_address);
		to->sport = e->nat_port;
	}
}

/*
 * lb4_xdp_known_flow for IPv6: touched only once XDP knows it sends the
 * packet; a flow whose backend is gone is TC's (lb6_ct_live_original
 * deletes it and balances again). Where it goes: the fresh slot of
 * SLUICE_MAP_XDP_FC6 for these exact inputs (xdp_fc6.h), else a full
 * lookup, whose success fills the slot. `now`: the clock read once for the
 * packet (conntrack and cache).
 */
static __always_inline int
lb6_xdp_known_flow(struct xdp_md *ctx, const struct lb6_xdp_packet *p, struct lb6_xdp_work *w,
		   struct lb6_ct_entry *e, __u64 now)
{
	__u32 in = ctx->ingress_ifindex;
	struct lb6_xdp_fib_cache *c;
	__be32 flowinfo;
	__u32 len;

	if (!lb6_ct_backend_alive(e) || (e->flags & LB_CT_FLAG_DSR)) /* DSR: TC's (lb6_dsr_forward) */
		return XDP_PASS;
	if (p->ip->hop_limit <= 1)
		return XDP_PASS; /* the stack sends "time exceeded" */
	lb6_xdp_to_backend(&w->to, &w->tuple, e);
	c = lb6_xdp_fc_slot(&w->to, in);
	if (!c)
		return XDP_PASS;
	flowinfo = lb6_xdp_flowinfo(p->ip);
	len = lb6_xdp_len(p->ip);
	if (lb6_xdp_fc_hit(c, &w->to, in, flowinfo, len, now)) {
		if (!lb_xdp_fc_usable(c->out_ifindex, c->action))
			return XDP_PASS;
	} else {
		struct bpf_fib_lookup *fib = lb_xdp_fib_scratch();
		int action;

		if (!fib)
			return XDP_PASS;
		action = lb6_xdp_route(ctx, p, &w->to, fib);
		if (action == XDP_PASS)
			return XDP_PASS;
		lb_count(LB_CNT_XDP_FIB_LOOKUP);
		lb6_xdp_fc_fill(c, fib, &w->to, in, flowinfo, len, action, now);
	}
	if (lb6_ct_touch_at(e, &w->cfg, &w->tuple, p->len, now) < 0)
		return XDP_PASS; /* its peer entry was lost: TC balances it again */
	lb6_xdp_rewrite(p, &w->tuple, &w->to);
	return lb_xdp_out_to(p->eth, c->smac, c->dmac, c->out_ifindex, c->action);
}

/*
 * A new flow: lb6_flow_new (TC's decisions, the conntrack value built in the
 * per-CPU scratch entry), the route, then the two entries, then the packet
 * as a known flow's (its SNAT port is chosen by lb6_ct_create_flow).
 */
static __always_inline int
lb6_xdp_new_flow(struct xdp_md *ctx, struct lb6_xdp_packet *p, struct lb6_xdp_work *w)
{
	struct bpf_fib_lookup *fib;
	struct lb6_ct_entry *e;
	int rc, action;

	rc = lb6_flow_new(ctx, &w->tuple, &w->cfg, LB_PATH_NORTH_SOUTH, ctx->ingress_ifindex);
	if (rc == TC_ACT_SHOT) { /* source ranges, no endpoint, no SNAT address: counted */
		p->service = true;
		return XDP_DROP;
	}
	if (rc != LB6_FLOW_NEW)
		return XDP_PASS; /* no north-south frontend: e.g. a reply to the SNAT address */
	p->service = true;
	e = lb6_ct_scratch();
	fib = lb_xdp_fib_scratch();
	if (!e || !fib || (e->flags & LB_CT_FLAG_DSR)) /* DSR: TC encapsulates (lb6_dsr_forward) */
		return XDP_PASS;
	lb6_xdp_to_backend(&w->to, &w->tuple, e); /* the route needs the addresses only */
	action = lb6_xdp_route(ctx, p, &w->to, fib);
	if (action == XDP_PASS)
		return XDP_PASS;
	if (lb6_ct_create_flow(&w->tuple, e, &w->cfg) < 0)
		return XDP_PASS; /* counted; TC tries (and drops) on its own */
	lb6_ct_key_of(&w->key, &w->tuple, LB_CT_DIR_ORIGINAL);
	e = lb6_ct_lookup(&w->key);
	if (!e || lb6_ct_touch(e, &w->cfg, &w->tuple, p->len) < 0)
		return XDP_PASS;
	lb6_xdp_to_backend(&w->to, &w->tuple, e);
	return lb6_xdp_send(p, &w->tuple, &w->to, fib, action);
}

/* A packet to an IPv6 frontend address: a subprogram (lb4_xdp_service's twin). */
static __noinline int lb6_xdp_service(struct xdp_md *ctx, bool *ours)
{
	struct lb6_xdp_packet p = {};
	struct lb6_xdp_work *w;
	struct lb6_ct_entry *e;
	__u32 zero = 0;
	int verdict;
	__u64 now;

	*ours = false;
	w = bpf_map_lookup_elem(&SLUICE_MAP_XDP_S6, &zero);
	if (!w || lb6_xdp_parse(ctx, &p, &w->tuple) < 0)
		return XDP_PASS;
	w->cfg = lb4_tc_config_get();
	lb6_ct_key_of(&w->key, &w->tuple, LB_CT_DIR_ORIGINAL);
	now = bpf_ktime_get_ns();
	e = lb6_ct_lookup_at(&w->key, now);
	/* A pod-path entry is not ours; a SYN on a closing flow is a new one. */
	if (e && !(e->flags & LB_CT_FLAG_POD) && !lb6_ct_is_reopen(e, &w->tuple)) {
		p.service = true;
		verdict = lb6_xdp_known_flow(ctx, &p, w, e, now);
	} else {
		verdict = lb6_xdp_new_flow(ctx, &p, w);
	}
	*ours = p.service;
	return verdict;
}

/*
 * The program, both families: the prefilter (one inlined array load), then
 * the frontend-address sets (one hash lookup keyed by the packet's own
 * destination) for the addresses it lets through; a Service packet goes to
 * its family's subprogram, anything else leaves with XDP_PASS.
 */
static __always_inline int lb_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct ipv6hdr *ip6 = data + sizeof(*eth);
	bool ours; /* set by the Service subprograms */
	int verdict;

	if ((void *)(ip + 1) <= end && eth->h_proto == bpf_htons(LB_ETH_P_IP)) {
		if (lb_xdp_prefilter(bpf_ntohl(ip->daddr)) && bpf_map_lookup_elem(&SLUICE_MAP_XDP_FE4, &ip->daddr)) {
			verdict = lb4_xdp_service(ctx, &ours);
			return lb_xdp_count(ctx->ingress_ifindex, verdict, ours);
		}
	} else if ((void *)(ip6 + 1) <= end && eth->h_proto == bpf_htons(LB_ETH_P_IPV6)) {
		const __u32 *d = (const __u32 *)&ip6->daddr;

		if (lb_xdp_prefilter(bpf_ntohl(d[0] ^ d[1] ^ d[2] ^ d[3])) &&
		    bpf_map_lookup_elem(&SLUICE_MAP_XDP_FE6, &ip6->daddr)) {
			verdict = lb6_xdp_service(ctx, &ours);
			return lb_xdp_count(ctx->ingress_ifindex, verdict, ours);
		}
	}
	return lb_xdp_pass(ctx->ingress_ifindex);
}

#endif /* SLUICE_BPF_XDP_LB6_H */
