/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xdp_lb.h: north-south load balancing at XDP (issue 17 item 1), before the
 * stack allocates an skb. Opt-in (--xdp-mode); the TC program (tc_lb.h) stays
 * on the same devices as the fallback and the reply path.
 *
 * What XDP does, for an IPv4 TCP/UDP packet to a NodePort, ExternalIP or
 * LoadBalancer frontend (IPv6: xdp_lb6.h, the same steps over the IPv6
 * tables; it also holds the entry point, lb_xdp, for both families):
 *   - a known flow (original direction, SLUICE_MAP_CT4: the entries the TC
 *     path writes too): rewrite to the backend (+SNAT), send it out;
 *   - a new flow: loadBalancerSourceRanges (XDP_DROP), pick a backend with
 *     the Service's algorithm (lb.h), write both conntrack entries exactly as
 *     TC does (nat_flow.h), rewrite, send it out.
 * "Send it out" is a FIB lookup (bpf_fib_lookup) and XDP_TX (same device) or
 * XDP_REDIRECT (another device the agent listed in SLUICE_MAP_XDP_TX, i.e.
 * one where XDP runs: a device without XDP support would drop the frame).
 * A known flow takes the lookup's answer from the FIB cache (xdp_fc.h) while
 * a fresh one exists for exactly the same inputs.
 *
 * Everything else leaves with XDP_PASS, and TC handles it as before:
 *   - not IPv4/IPv6, or not to a frontend address (SLUICE_MAP_XDP_FE4/6): the
 *     cheapest exit: two loads, the prefilter (SLUICE_MAP_XDP_PF, one
 *     inlined array load; the hash lookup only for an address whose bit
 *     is set) and one per-CPU array increment (SLUICE_MAP_XDP_NP; the
 *     per-device hash is for Service packets);
 *   - replies (backend -> SNAT address) and DNAT-only flows' packets: TC
 *     restores them (the reply path is unchanged);
 *   - ICMP, fragments, IPv4 options: TC's ICMP and fragment handling;
 *   - a Service packet XDP cannot send itself (no neighbour yet, no route, a
 *     local backend behind a device without XDP, MTU, TTL): the packet is
 *     passed UNTOUCHED, before any state is written, and TC balances it.
 *     TC resolves the neighbour (bpf_redirect_neigh), so the next packets
 *     of the flow stay in XDP.
 * Because the decision to send is made before the first write, a flow is
 * never half-translated by XDP and then seen again by TC.
 *
 * Checksums: XDP sees complete checksums (no CHECKSUM_PARTIAL on receive;
 * veth resolves it before running XDP), so the updates are the plain
 * incremental ones of RFC 1624.
 */
#ifndef SLUICE_BPF_XDP_LB_H
#define SLUICE_BPF_XDP_LB_H

#include "nat_flow.h"
#include "events.h"
#include "tc_lb.h" /* lb_svc_is_north_south, lb_svc_is_ext_local, lb4_backend_is_local */
#include "xdp_fc.h"

#ifndef XDP_PASS
#define XDP_ABORTED  0
#define XDP_DROP     1
#define XDP_PASS     2
#define XDP_TX       3
#define XDP_REDIRECT 4
#endif

/* Frontend addresses of north-south Services: the first check of every packet. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __be32);
	__type(value, __u8);
	__uint(max_entries, SLUICE_MAX_XDP_FE4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_XDP_FE4 SEC(".maps");

/* Per-device counters: per CPU, so a plain increment. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__type(key, __u32);
	__type(value, struct lb_xdp_stats);
	__uint(max_entries, SLUICE_MAX_XDP_DEVS);
} SLUICE_MAP_XDP_STATS SEC(".maps");

/*
 * Non-Service packets passed, per device: a per-CPU array indexed by ifindex,
 * whose lookup the verifier inlines (a few instructions, no hashing), so the
 * common case costs one hash lookup (the frontend set) and this. A device
 * of a higher ifindex counts in SLUICE_MAP_XDP_STATS as before. Readers add
 * it to that device's `passed` and `packets` (readXdpStats).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, SLUICE_MAX_XDP_IFINDEX);
} SLUICE_MAP_XDP_NP SEC(".maps");

/*
 * The prefilter in front of the frontend-address sets (native/sluice_abi.h
 * has the slot function): an ARRAY, whose lookup the verifier inlines, of
 * bits the agent keeps set for every frontend address of both families. A
 * clear bit: no frontend, XDP_PASS without the hash lookup.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, SLUICE_XDP_PF_WORDS);
} SLUICE_MAP_XDP_PF SEC(".maps");

_Static_assert(SLUICE_XDP_PF_WORDS * 64 == 1 << SLUICE_XDP_PF_BITS_LOG2, "prefilter size");

/* May `h` (the destination's fold, sluice_abi.h) be a frontend address? */
static __always_inline bool lb_xdp_prefilter(__u32 h)
{
	__u32 slot = sluice_bit_slot(h, SLUICE_XDP_PF_BITS_LOG2);
	__u32 word = slot >> 6;
	__u64 *bits = bpf_map_lookup_elem(&SLUICE_MAP_XDP_PF, &word);

	return bits && ((*bits >> (slot & 63)) & 1);
}

/* Devices XDP_REDIRECT may send to (the agent's XDP devices). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, SLUICE_MAX_XDP_DEVS);
} SLUICE_MAP_XDP_TX SEC(".maps");

/* The FIB lookup's parameters and answer (64 bytes): kept off the stack, which
 * the balancing code already fills near the verifier's 512-byte limit. Per
 * CPU, and used by one packet at a time (XDP does not nest on a CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lb_xdp_fib_scratch);
	__uint(max_entries, 1);
} SLUICE_MAP_XDP_FIB SEC(".maps");

_Static_assert(sizeof(struct lb_xdp_fib_scratch) == sizeof(struct bpf_fib_lookup), "FIB scratch size");

static __always_inline struct bpf_fib_lookup *lb_xdp_fib_scratch(void)
{
	__u32 zero = 0;
	struct bpf_fib_lookup *fib = bpf_map_lookup_elem(&SLUICE_MAP_XDP_FIB, &zero);

	if (fib)
		__builtin_memset(fib, 0, sizeof(*fib));
	return fib;
}

/* The counters of the device a packet arrived on (created on its first packet). */
static __always_inline struct lb_xdp_stats *lb_xdp_stats_of(__u32 ifindex)
{
	struct lb_xdp_stats *st = bpf_map_lookup_elem(&SLUICE_MAP_XDP_STATS, &ifindex);
	struct lb_xdp_stats zero = {};

	if (st)
		return st;
	bpf_map_update_elem(&SLUICE_MAP_XDP_STATS, &ifindex, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&SLUICE_MAP_XDP_STATS, &ifindex);
}

/* ---- checksums (RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')) ----
 * One's-complement sums do not depend on byte order, so network-order
 * 16-bit words are summed as they are. */

static __always_inline __u32 lb_csum_word(__u32 delta, __u16 from, __u16 to)
{
	return delta + (__u16)~from + to;
}

static __always_inline __u32 lb_csum_addr(__u32 delta, __be32 from, __be32 to)
{
	delta = lb_csum_word(delta, (__u16)from, (__u16)to);
	return lb_csum_word(delta, (__u16)(from >> 16), (__u16)(to >> 16));
}

static __always_inline __u16 lb_csum_apply(__u16 check, __u32 delta)
{
	__u32 sum = (__u16)~check + delta;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* A parsed packet: pointers into the frame (valid until the program ends:
 * nothing here resizes it) and the tuple as it arrived. */
struct lb4_xdp_packet {
	struct ethhdr *eth;
	struct iphdr *ip;
	__sum16 *l4_check; /* TCP/UDP checksum field */
	__be16 *ports;     /* source port, destination port */
	struct lb4_tuple tuple;
	__u32 len;         /* frame length (conntrack bytes) */
	bool service;      /* a Service packet: a flow or frontend matched */
};

/*
 * Ethernet + IPv4 header of a packet the entry point (lb_xdp, xdp_lb6.h)
 * found to be for a frontend address. Returns 0 when they are there.
 */
static __always_inline int lb4_xdp_parse_ip(struct xdp_md *ctx, struct lb4_xdp_packet *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);

	if ((void *)(ip + 1) > end)
		return -1;
	p->eth = eth;
	p->ip = ip;
	p->len = end - data;
	return 0;
}

/*
 * The L4 part, for a packet to a frontend address. -1: TC's business
 * (options, fragments, ICMP, other protocols, truncated).
 */
static __always_inline int lb4_xdp_parse_l4(struct xdp_md *ctx, struct lb4_xdp_packet *p)
{
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = p->ip;
	void *l4 = ip + 1;

	if (ip->version != 4 || ip->ihl != 5)
		return -1;
	if (ip->frag_off & bpf_htons(LB_IP_MF | LB_IP_OFFSET))
		return -1;
	if (ip->protocol == LB_PROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > end)
			return -1;
		p->l4_check = &tcp->check;
		p->tuple.tcp_flags = ((__u8 *)tcp)[13];
	} else if (ip->protocol == LB_PROTO_UDP) {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) > end)
			return -1;
		p->l4_check = &udp->check;
		p->tuple.tcp_flags = 0;
	} else {
		return -1;
	}
	p->ports = l4;
	p->tuple.saddr = ip->saddr;
	p->tuple.daddr = ip->daddr;
	p->tuple.sport = p->ports[0];
	p->tuple.dport = p->ports[1];
	p->tuple.proto = ip->protocol;
	return 0;
}

/*
 * Both families: the FIB lookup `fib` was filled for, from the arrival
 * device. XDP_TX or XDP_REDIRECT (fib holds the next hop) when XDP can send
 * the packet itself, XDP_PASS when TC must.
 */
static __always_inline int lb_xdp_fib_action(struct xdp_md *ctx, struct bpf_fib_lookup *fib)
{
	__u32 out;
	int rc;

	fib->ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	/* NO_NEIGH: TC's bpf_redirect_neigh resolves it; FRAG_NEEDED: TC
	 * answers with ICMP (pmtu.h); anything else: the stack decides. */
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	out = fib->ifindex;
	if (out == ctx->ingress_ifindex)
		return XDP_TX;
	/* Only to devices with XDP (veth: only with NAPI on its peer). */
	if (!bpf_map_lookup_elem(&SLUICE_MAP_XDP_TX, &out))
		return XDP_PASS;
	return XDP_REDIRECT;
}

/*
 * Both families: may a fresh FIB-cache slot's answer be used (xdp_fc.h,
 * xdp_fc6.h)? As lb_xdp_fib_action: a redirect only to a device that is
 * still one of the agent's XDP devices. Counted when it is.
 */
static __always_inline bool lb_xdp_fc_usable(__u32 out, int action)
{
	if (action == XDP_REDIRECT && !bpf_map_lookup_elem(&SLUICE_MAP_XDP_TX, &out))
		return false;
	lb_count(LB_CNT_XDP_FIB_CACHED);
	return true;
}

/* Both families: the TCP/UDP checksum after the changes summed in `delta`.
 * UDP without a checksum (0) stays without; a computed 0 is sent as 0xffff. */
static __always_inline void lb_xdp_l4_csum(__sum16 *check, __u8 proto, __u32 delta)
{
	if (proto == LB_PROTO_TCP) {
		*check = lb_csum_apply(*check, delta);
	} else if (*check) {
		__u16 c = lb_csum_apply(*check, delta);

		*check = c ? c : 0xffff;
	}
}

/* Both families: next-hop MAC addresses, then out (`action`; `out`: the
 * device of an XDP_REDIRECT). */
static __always_inline int
lb_xdp_out_to(struct ethhdr *eth, const __u8 *smac, const __u8 *dmac, __u32 out, int action)
{
	__builtin_memcpy(eth->h_dest, dmac, 6);
	__builtin_memcpy(eth->h_source, smac, 6);
	/* The device was checked in lb_xdp_fib_action (or, for a cached
	 * answer, just before); if the agent removed it since, the frame goes
	 * up translated and the stack drops it (one packet, as when any route
	 * changes under a flow). */
	if (action == XDP_REDIRECT)
		return bpf_redirect_map(&SLUICE_MAP_XDP_TX, out, XDP_PASS);
	return XDP_TX;
}

/* Both families: next-hop MAC addresses from `fib`, then out (`action`). */
static __always_inline int lb_xdp_out(struct ethhdr *eth, const struct bpf_fib_lookup *fib, int action)
{
	return lb_xdp_out_to(eth, fib->smac, fib->dmac, fib->ifindex, action);
}

/*
 * Where the translated packet goes: a FIB lookup from the arrival device.
 * Returns XDP_TX or XDP_REDIRECT (fib filled in) when XDP can send it
 * itself, XDP_PASS when TC must (nothing has been written yet).
 */
static __always_inline int
lb4_xdp_route(struct xdp_md *ctx, const struct lb4_xdp_packet *p, const struct lb4_tuple *to,
	      struct bpf_fib_lookup *fib)
{
	if (p->ip->ttl <= 1)
		return XDP_PASS; /* the stack sends "time exceeded" */
	fib->family = AF_INET;
	fib->tos = p->ip->tos;
	fib->l4_protocol = to->proto;
	fib->sport = to->sport;
	fib->dport = to->dport;
	fib->tot_len = bpf_ntohs(p->ip->tot_len);
	fib->ipv4_src = to->saddr;
	fib->ipv4_dst = to->daddr;
	return lb_xdp_fib_action(ctx, fib);
}

/* Rewrite the IPv4 and TCP/UDP headers to `to`, TTL - 1 (checksums updated). */
static __always_inline void lb4_xdp_rewrite(const struct lb4_xdp_packet *p, const struct lb4_tuple *to)
{
	const struct lb4_tuple *from = &p->tuple;
	struct iphdr *ip = p->ip;
	__u32 l3 = 0, l4 = 0;
	__u16 old_ttl, new_ttl;

	l3 = lb_csum_addr(l3, from->saddr, to->saddr);
	l3 = lb_csum_addr(l3, from->daddr, to->daddr);
	/* The addresses are in the TCP/UDP pseudo-header too; the ports only there. */
	l4 = lb_csum_word(l3, from->sport, to->sport);
	l4 = lb_csum_word(l4, from->dport, to->dport);
	lb_xdp_l4_csum(p->l4_check, from->proto, l4);
	__builtin_memcpy(&old_ttl, &ip->ttl, 2); /* ttl and protocol: one checksum word */
	ip->ttl--;
	__builtin_memcpy(&new_ttl, &ip->ttl, 2);
	l3 = lb_csum_word(l3, old_ttl, new_ttl);
	ip->check = lb_csum_apply(ip->check, l3);
	ip->saddr = to->saddr;
	ip->daddr = to->daddr;
	p->ports[0] = to->sport;
	p->ports[1] = to->dport;
}

/* Rewrite the frame to `to`, next hop from `fib`, TTL - 1; then send it. */
static __always_inline int
lb4_xdp_send(const struct lb4_xdp_packet *p, const struct lb4_tuple *to,
	     const struct bpf_fib_lookup *fib, int action)
{
	lb4_xdp_rewrite(p, to);
	return lb_xdp_out(p->eth, fib, action);
}

/* What the backend is sent: client (or SNAT address:port) -> backend. */
static __always_inline void
lb4_xdp_to_backend(struct lb4_tuple *to, const struct lb4_tuple *from, const struct lb4_ct_entry *e)
{
	*to = *from;
	to->daddr = e->backend_address;
	to->dport = e->backend_port;
	if (lb4_ct_has_nat(e)) {
		to->saddr = e->nat_address;
		to->sport = e->nat_port;
	}
}

/*
 * A packet of a known north-south flow (an original-direction entry of the
 * TC path's format, created by XDP or by TC): sent to its backend. The entry
 * is touched only once XDP knows it sends the packet; a flow TC must handle
 * is left for TC to count. A flow whose backend is gone is left to TC too
 * (it deletes the flow and balances again, lb4_ct_live_original).
 *
 * Where it goes: the FIB cache's answer when it has a fresh one for these
 * exact inputs (xdp_fc.h), else a full lookup, whose success fills the
 * slot. `now`: the clock read once for the packet (conntrack and cache).
 */
static __always_inline int
lb4_xdp_known_flow(struct xdp_md *ctx, const struct lb4_xdp_packet *p, struct lb4_ct_entry *e,
		   const struct lb4_tc_config *cfg, __u64 now)
{
	__u32 in = ctx->ingress_ifindex;
	struct lb4_xdp_fib_cache *c;
	struct lb4_tuple to;
	__u16 tot_len;

	if (!lb4_ct_backend_alive(e) || (e->flags & LB_CT_FLAG_DSR)) /* DSR: TC's (dsr.h) */
		return XDP_PASS;
	if (p->ip->ttl <= 1)
		return XDP_PASS; /* the stack sends "time exceeded" */
	lb4_xdp_to_backend(&to, &p->tuple, e);
	c = lb4_xdp_fc_slot(&to, in);
	if (!c)
		return XDP_PASS;
	tot_len = bpf_ntohs(p->ip->tot_len);
	if (lb4_fc_hit(c, &to, in, p->ip->tos, tot_len, now)) {
		if (!lb_xdp_fc_usable(c->out_ifindex, c->action))
			return XDP_PASS;
	} else {
		struct bpf_fib_lookup *fib = lb_xdp_fib_scratch();
		int action;

		if (!fib)
			return XDP_PASS;
		action = lb4_xdp_route(ctx, p, &to, fib);
		if (action == XDP_PASS)
			return XDP_PASS;
		lb_count(LB_CNT_XDP_FIB_LOOKUP);
		lb4_fc_fill(c, fib, &to, in, p->ip->tos, tot_len, action, now);
	}
	if (lb4_ct_touch_at(e, cfg, &p->tuple, p->len, now) < 0)
		return XDP_PASS; /* its peer entry was lost: TC balances it again */
	lb4_xdp_rewrite(p, &to);
	return lb_xdp_out_to(p->eth, c->smac, c->dmac, c->out_ifindex, c->action);
}

/* A frontend refusal: counted and reported as TC's are (same counter rows). */
static __always_inline int
lb4_xdp_refuse(struct xdp_md *ctx, const struct lb4_tuple *t, __u32 rev_nat_id, __u32 counter)
{
	lb_count(counter);
	lb4_event_packet(LB_EVENT_DROP, counter, t, rev_nat_id, ctx->ingress_ifindex);
	return XDP_DROP;
}

/*
 * A new flow to a north-south frontend: the decisions of lb4_tc_new_flow
 * (tc_lb.h), in the same order, so XDP and TC balance alike; the conntrack
 * entries are written only after the route is known to be XDP's.
 */
static __always_inline int
lb4_xdp_new_flow(struct xdp_md *ctx, struct lb4_xdp_packet *p, const struct lb4_tc_config *cfg)
{
	const struct lb4_tuple *t = &p->tuple;
	struct lb4_service_key skey = { .address = t->daddr, .port = t->dport, .proto = t->proto };
	struct lb4_affinity_key akey = {};
	struct bpf_fib_lookup *fib;
	struct lb4_ct_entry e = {};
	struct lb4_backend *backend;
	struct lb4_service *svc;
	struct lb4_tuple to;
	__u32 backend_id = 0;
	int action;

	svc = lb4_lookup_frontend(&skey, false); /* exact, then the NodePort wildcard (nodeport.h) */
	if (!svc || !lb_svc_is_north_south(svc))
		return XDP_PASS; /* e.g. a reply to the SNAT address: TC's */
	p->service = true;
	if (lb_svc_has_source_ranges(svc) && !lb4_source_allowed(svc->rev_nat_id, t->saddr))
		return lb4_xdp_refuse(ctx, t, svc->rev_nat_id, LB_CNT_TC_SRC_RANGE_DROP);
	if (!svc->count) /* externalTrafficPolicy: Local without a local backend */
		return lb4_xdp_refuse(ctx, t, svc->rev_nat_id, LB_CNT_TC_NO_BACKEND);
	akey.client_id = lb4_maglev_tc_client(svc, t->saddr, t->daddr, t->sport, t->dport, t->proto);
	akey.rev_nat_id = svc->rev_nat_id;
	backend = lb4_pick_backend(&skey, svc, &akey, &backend_id);
	if (!backend)
		return lb4_xdp_refuse(ctx, t, svc->rev_nat_id, LB_CNT_TC_NO_BACKEND);

	lb4_flow_fill(&e, t, svc, backend, backend_id, LB_PATH_NORTH_SOUTH, ctx->ingress_ifindex, cfg);
	if (!lb_svc_is_ext_local(svc) || !lb4_backend_is_local(backend) || backend->address == t->saddr) {
		if (!lb4_backend_is_local(backend) && backend->address != t->saddr && lb_dsr_applies(t->proto))
			return XDP_PASS; /* DSR: TC encapsulates (dsr.h) */
		e.nat_address = lb4_snat_address_ctx(ctx, ctx->ingress_ifindex, cfg, backend->address);
		if (!e.nat_address)
			return XDP_PASS; /* TC counts and drops it */
		e.flags |= LB_CT_FLAG_SNAT;
	}
	/* The route needs the addresses only: the SNAT port comes later. */
	fib = lb_xdp_fib_scratch();
	if (!fib)
		return XDP_PASS;
	lb4_xdp_to_backend(&to, t, &e);
	action = lb4_xdp_route(ctx, p, &to, fib);
	if (action == XDP_PASS)
		return XDP_PASS;
	if (lb4_ct_create_flow_len(t, &e, cfg, p->len) < 0)
		return XDP_PASS; /* counted; TC tries (and drops) on its own */
	lb4_event_flow(&e);
	lb4_xdp_to_backend(&to, t, &e);
	return lb4_xdp_send(p, &to, fib, action);
}

/* The Service part of the program, for a packet to a frontend address. */
static __always_inline int lb4_xdp_flow(struct xdp_md *ctx, struct lb4_xdp_packet *p)
{
	struct lb4_tc_config cfg;
	struct lb4_ct_entry *e;
	struct lb4_ct_key key;
	__u64 now;

	if (lb4_xdp_parse_ip(ctx, p) < 0 || lb4_xdp_parse_l4(ctx, p) < 0)
		return XDP_PASS;
	cfg = lb4_tc_config_get();
	lb4_ct_key_of(&key, &p->tuple, LB_CT_DIR_ORIGINAL);
	now = bpf_ktime_get_ns();
	e = lb4_ct_lookup_at(&key, now);
	/* A pod-path entry is not ours; a SYN on a closing flow is a new one. */
	if (e && !(e->flags & LB_CT_FLAG_POD) && !lb4_ct_is_reopen(e, &p->tuple)) {
		p->service = true;
		return lb4_xdp_known_flow(ctx, p, e, &cfg, now);
	}
	return lb4_xdp_new_flow(ctx, p, &cfg);
}

static __always_inline void lb_xdp_account(struct lb_xdp_stats *st, int verdict, bool ours)
{
	if (!st)
		return;
	st->packets++;
	switch (verdict) {
	case XDP_TX:
		st->tx++;
		break;
	case XDP_REDIRECT:
		st->redirected++;
		break;
	case XDP_DROP:
		st->dropped++;
		break;
	default:
		if (ours)
			st->fallback++;
		else
			st->passed++;
	}
}

/*
 * A packet to an IPv4 frontend address (the entry point, lb_xdp in
 * xdp_lb6.h, looked it up in SLUICE_MAP_XDP_FE4): a subprogram, whose frame
 * the IPv6 path (xdp_lb6.h) does not carry, nor the non-Service exit.
 * *ours: a Service packet (for lb_xdp_count).
 */
static __noinline int lb4_xdp_service(struct xdp_md *ctx, bool *ours)
{
	struct lb4_xdp_packet p = {};
	int verdict = lb4_xdp_flow(ctx, &p);

	*ours = p.service;
	return verdict;
}

/* Count a packet in its device's entry of SLUICE_MAP_XDP_STATS: a
 * subprogram, so the zero value it may insert stays off the other frames
 * (the Service parts' frames are near the 512-byte limit). */
static __noinline int lb_xdp_count(__u32 ifindex, int verdict, bool ours)
{
	lb_xdp_account(lb_xdp_stats_of(ifindex), verdict, ours);
	return verdict;
}

/* Not a Service packet, either family: one per-CPU slot, XDP_PASS (a
 * device past SLUICE_MAP_XDP_NP counts in the hash). */
static __always_inline int lb_xdp_pass(__u32 ifindex)
{
	__u64 *n = bpf_map_lookup_elem(&SLUICE_MAP_XDP_NP, &ifindex);

	if (!n)
		return lb_xdp_count(ifindex, XDP_PASS, false);
	(*n)++;
	return XDP_PASS;
}

#endif /* SLUICE_BPF_XDP_LB_H */
