/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dsr6.h: Direct Server Return for IPv6 north-south flows, backend node
 * (issue 17 item 2; docs/dsr.md). The ingress node's half is in
 * nat_flow6.h (lb6_dsr_forward): an externalTrafficPolicy: Cluster flow to
 * a backend on another node, in --nodeport-mode dsr (hybrid: TCP only),
 * leaves as the client's packet (client -> frontend) in an outer IPv6
 * header (ip6ip6, RFC 2473), node address -> backend (pod) address.
 *
 * Here (lb6_dsr_receive, any mode): an ip6ip6 packet whose inner
 * destination is a north-south frontend and whose outer destination is one
 * of that frontend's local backends is taken off its outer header and DNATed
 * to that backend, with a conntrack flow without SNAT (LB_CT_FLAG_DSR_RX).
 * The frontend is the inner destination as it is (ExternalIP, LoadBalancer
 * IP), or, for a NodePort of the ingress node (IPv6 NodePorts are one
 * frontend per node address, not a wildcard), the same port on one of this
 * node's addresses (SLUICE_MAP_NODEIP6). The replies leave through the
 * node's TC egress, which restores the frontend (the inner destination) as
 * source, as for externalTrafficPolicy: Local, and go to the client directly.
 * Any other ip6ip6 packet (a tunnel of someone else's) is not touched.
 */
#ifndef SLUICE_BPF_DSR6_H
#define SLUICE_BPF_DSR6_H

#include "nat_flow6.h"

/* What lb6_dsr_find looks for: the frontend of the inner packet, then the
 * local backend the outer destination names (bpf_loop's context). */
struct dsr6_rx_match {
	struct lb6_service_key skey;
	struct lb4_service svc;
	__u8  outer_daddr[16];
	__u32 found; /* backend id, 0: none */
};

/* What lb6_dsr_receive keeps of it (its frame is on the chain that ends in
 * lb6_icmp_error_reply: kept small). */
struct dsr6_rx {
	__u8  outer_daddr[16];
	__u32 found;      /* backend id */
	__u32 rev_nat_id; /* the frontend's */
};

static long lb6_dsr_scan_one(__u32 i, void *ctx)
{
	struct dsr6_rx_match *m = ctx;
	struct lb6_backend *backend;
	__u32 id = lb6_range_backend_id(&m->svc, i);

	if (!id)
		return 0;
	backend = lb6_lookup_backend(id);
	if (backend && lb6_addr_equal(backend->address, m->outer_daddr) && (backend->flags & LB_BACKEND_FLAG_LOCAL)) {
		m->found = id;
		return 1;
	}
	return 0;
}

/* A NodePort of the ingress node: the same port on one of this node's
 * addresses (bounded by SLUICE_MAX_NODEIP6). */
static long lb6_dsr_nodeport_one(struct bpf_map *map, const void *key, void *value, void *ctx)
{
	struct dsr6_rx_match *m = ctx;
	struct lb4_service *svc;

	lb6_addr_copy(m->skey.address, ((const struct lb6_node_ip *)key)->address);
	svc = lb6_lookup_service(&m->skey, false);
	if (svc && (svc->flags & LB_SVC_FLAG_NODEPORT)) {
		m->svc = *svc;
		return 1;
	}
	return 0;
}

/*
 * Is this ip6ip6 packet ours? Its inner packet (TCP or UDP, behind extension
 * headers walked as nat6.h does; a later fragment by its first's ports) goes
 * to a north-south frontend one of whose local backends is the outer
 * destination. 0 with *rx filled, else -1.
 */
static __noinline int lb6_dsr_find(struct __sk_buff *skb, struct dsr6_rx *rx)
{
	__u32 off = LB_ETH_HLEN + 2 * LB_IP6_HLEN;
	struct dsr6_rx_match m = {};
	struct lb6_frag_info frag;
	struct lb4_service *svc;
	struct ipv6hdr ip;
	__be16 ports[2];
	__u8 nexthdr;
	int rc;

	if (bpf_skb_load_bytes(skb, LB_ETH_HLEN, &ip, sizeof(ip)) < 0 || ip.version != 6 ||
	    ip.nexthdr != LB_IPPROTO_IPV6)
		return -1;
	__builtin_memcpy(m.outer_daddr, &ip.daddr, 16);
	if (bpf_skb_load_bytes(skb, LB_ETH_HLEN + LB_IP6_HLEN, &ip, sizeof(ip)) < 0 || ip.version != 6)
		return -1;
	/* The inner extension headers: a fragment's ports are those its first
	 * fragment left in SLUICE_MAP_FRAG6 once opened here (frag6.h). */
	nexthdr = ip.nexthdr;
	rc = lb6_walk_exthdrs(skb, &off, &nexthdr, &frag);
	if (nexthdr != LB_PROTO_TCP && nexthdr != LB_PROTO_UDP)
		return -1;
	if (rc == LB6_PARSE_FRAG && frag.kind == LB_FRAG_LATER) {
		struct lb4_frag_ports *fp;
		struct lb6_frag_key fkey = { .id = frag.id, .proto = nexthdr };

		__builtin_memcpy(fkey.saddr, &ip.saddr, 16);
		__builtin_memcpy(fkey.daddr, &ip.daddr, 16);
		fp = bpf_map_lookup_elem(&SLUICE_MAP_FRAG6, &fkey);
		if (!fp)
			return -1;
		ports[1] = fp->dport;
	} else if (rc < 0 || bpf_skb_load_bytes(skb, off, ports, sizeof(ports)) < 0) {
		return -1;
	}
	__builtin_memcpy(m.skey.address, &ip.daddr, 16);
	m.skey.port = ports[1];
	m.skey.proto = nexthdr;
	svc = lb6_lookup_service(&m.skey, false);
	if (svc)
		m.svc = *svc;
	else
		bpf_for_each_map_elem(&SLUICE_MAP_NODEIP6, lb6_dsr_nodeport_one, &m, 0);
	if (!(m.svc.flags & (LB_SVC_FLAG_NODEPORT | LB_SVC_FLAG_EXTERNAL_IP | LB_SVC_FLAG_LOADBALANCER)))
		return -1;
	m.skey.scope = LB_SCOPE_EXTERNAL;
	bpf_loop(m.svc.count, lb6_dsr_scan_one, &m, 0);
	if (!m.found)
		return -1;
	__builtin_memcpy(rx->outer_daddr, m.outer_daddr, 16);
	rx->found = m.found;
	rx->rev_nat_id = m.svc.rev_nat_id;
	return 0;
}

/* The conntrack value of the received flow, in the scratch entry (the
 * caller stores it with lb6_ct_create_flow). */
static __always_inline struct lb6_ct_entry *
lb6_dsr_flow_fill(struct __sk_buff *skb, const struct lb6_tuple *t, const struct dsr6_rx *rx,
		  const struct lb4_tc_config *cfg)
{
	struct lb6_backend *backend = lb6_lookup_backend(rx->found);
	struct lb6_ct_entry *e = lb6_ct_scratch();

	if (!backend || !e)
		return NULL;
	lb6_ct_fill(e, t, backend, rx->found, rx->rev_nat_id, lb_path_ct_flags(LB_PATH_NORTH_SOUTH) | LB_CT_FLAG_DSR_RX,
		    skb->ingress_ifindex, cfg);
	return e;
}

/* lb6_ct_delete_flow in a frame of its own (its two keys stay off the
 * receive step's frame, which lb6_ct_create_flow's chain adds to). */
static __noinline int lb6_dsr_forget(const struct lb6_ct_entry *e)
{
	lb6_ct_delete_flow(e);
	return 0;
}

/*
 * Backend node: an ip6ip6 packet lb6_tc_parse passed. Ours (lb6_dsr_find):
 * the outer header comes off, and the inner packet is DNATed to the backend
 * as a flow of its own; TC_ACT_OK untouched otherwise.
 */
static __noinline int lb6_dsr_receive(struct __sk_buff *skb)
{
	struct lb6_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb6_ct_entry *e;
	struct lb6_tuple to;
	struct dsr6_rx rx;

	if (lb6_dsr_find(skb, &rx) < 0)
		return TC_ACT_OK;
	if (bpf_skb_adjust_room(skb, -LB_DSR6_ENCAP_LEN, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_DECAP_L3_IPV6) < 0)
		return TC_ACT_SHOT;
	if (lb6_tc_parse(skb, &pkt) < 0)
		return TC_ACT_SHOT;
	lb_count(LB_CNT_TC_DSR_DECAP);
	cfg = lb4_tc_config_get();
	e = lb6_ct_live_original(skb, &pkt.tuple, &cfg, LB_PATH_NORTH_SOUTH);
	if (e && !lb6_addr_equal(e->backend_address, rx.outer_daddr)) {
		lb6_dsr_forget(e); /* the ingress node balanced the flow again: its choice counts */
		e = NULL;
	}
	if (!e) {
		e = lb6_dsr_flow_fill(skb, &pkt.tuple, &rx, &cfg);
		if (!e || lb6_ct_create_flow(&pkt.tuple, e, &cfg) < 0)
			return TC_ACT_SHOT;
		/* Its entries are written: touched (counted) as a known flow's. */
		e = lb6_ct_live_original(skb, &pkt.tuple, &cfg, LB_PATH_NORTH_SOUTH);
		if (!e)
			return TC_ACT_SHOT;
	}
	/* DNAT only (never SNAT here; the client's port when it was remapped):
	 * the stack delivers it to the pod. Not lb6_flow_ingress_known, whose
	 * forwarding steps this packet never takes (fewer paths to verify). */
	to = pkt.tuple;
	lb6_addr_copy(to.daddr, e->backend_address);
	to.dport = e->backend_port;
	if (lb6_ct_has_nat(e)) {
		lb6_addr_copy(to.saddr, e->nat_address);
		to.sport = e->nat_port;
	}
	return lb6_rewrite(skb, &pkt, &to) < 0 ? TC_ACT_SHOT : TC_ACT_OK;
}

#endif /* SLUICE_BPF_DSR6_H */
