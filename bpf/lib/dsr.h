/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dsr.h: Direct Server Return for IPv4 north-south flows (issue 17 item 2;
 * docs/dsr.md; the mode is SLUICE_MAP_DSR_CFG, see sluice_abi.h).
 *
 * Ingress node (lb4_dsr_forward): an externalTrafficPolicy: Cluster flow
 * whose backend is on another node is not SNATed. The client's packet is
 * kept as it arrived (client -> frontend) and put in IPIP: outer source = the
 * node's SNAT address, outer destination = the backend (pod) address, routed
 * by the FIB like a SNATed packet (pod routes lead to the backend's node).
 * The outer destination names the backend, the inner destination the
 * Service: nothing else has to travel. IPIP costs LB_DSR_ENCAP_LEN (20)
 * bytes: a packet that no longer fits the route's MTU is answered with ICMP
 * "fragmentation needed" carrying MTU - 20 (pmtu.h), so the client's PMTU
 * discovery (and its MSS) shrinks; without DF it is dropped (TC cannot
 * fragment). A GSO packet's segments are made 20 bytes smaller by
 * bpf_skb_adjust_room instead.
 *
 * Backend node (lb4_dsr_receive, any mode): an IPIP packet whose inner
 * destination is a north-south frontend and whose outer destination is one
 * of that frontend's local backends is taken off its outer header and
 * DNATed to that backend, with a conntrack flow without SNAT
 * (LB_CT_FLAG_DSR_RX). Its replies leave through the node's TC egress,
 * which restores the frontend as source (as for externalTrafficPolicy:
 * Local), and go to the client directly. Any other IPIP packet (a CNI's
 * tunnel) is not touched.
 */
#ifndef SLUICE_BPF_DSR_H
#define SLUICE_BPF_DSR_H

#include "nat_flow.h"
#include "events.h"
#include "nodeport.h"

#define LB_IPPROTO_IPIP 4
/* lb4_tc_ingress: "an IPIP packet, give it to lb4_dsr_receive" (the entry
 * point calls it, so its stack frame is not added to the IPv4 path's). */
#define LB_TC_DSR_RECEIVE 0x7ffe

/* Ingress node: the packet of a DSR flow (LB_CT_FLAG_DSR), in IPIP to its backend. */
static __always_inline int
lb4_dsr_forward(struct __sk_buff *skb, const struct lb4_packet *pkt, const struct lb4_ct_entry *e)
{
	struct bpf_fib_lookup fib = {};
	struct iphdr inner, outer = {};
	int rc;

	if (bpf_skb_load_bytes(skb, LB_ETH_HLEN, &inner, sizeof(inner)) < 0)
		return TC_ACT_SHOT;
	fib.family = AF_INET;
	fib.ipv4_src = e->nat_address;
	fib.ipv4_dst = e->backend_address;
	fib.ifindex = skb->ingress_ifindex;
	/* The length once encapsulated, so the FIB checks the route's MTU. */
	fib.tot_len = skb->gso_size ? 0 : bpf_ntohs(inner.tot_len) + LB_DSR_ENCAP_LEN;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return lb4_pmtu_too_big(skb, pkt, &pkt->tuple, fib.mtu_result - LB_DSR_ENCAP_LEN);

	if (bpf_skb_adjust_room(skb, LB_DSR_ENCAP_LEN, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4) < 0)
		return TC_ACT_SHOT;
	outer.version = 4;
	outer.ihl = 5;
	outer.tos = inner.tos;
	outer.tot_len = bpf_htons((__u16)(bpf_ntohs(inner.tot_len) + LB_DSR_ENCAP_LEN));
	outer.frag_off = bpf_htons(LB_IP_DF);
	outer.ttl = 64;
	outer.protocol = LB_IPPROTO_IPIP;
	outer.saddr = e->nat_address;
	outer.daddr = e->backend_address;
	outer.check = lb_csum_fold(bpf_csum_diff(NULL, 0, (__be32 *)&outer, sizeof(outer), 0));
	if (bpf_skb_store_bytes(skb, LB_ETH_HLEN, &outer, sizeof(outer), BPF_F_INVALIDATE_HASH) < 0)
		return TC_ACT_SHOT;
	lb_count(LB_CNT_TC_DSR_ENCAP);

	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) {
		lb_count(LB_CNT_TC_FIB_FAILED);
		return TC_ACT_OK;
	}
	return lb_fib_redirect(skb, &fib, rc);
}

/* The frontend's backends, searched for the local one the outer header names. */
struct lb4_dsr_scan {
	__u32  first;   /* the master's first index in the ranges map */
	__be32 address; /* outer destination */
	__u32  found;   /* backend id, 0: none */
};

static long lb4_dsr_scan_one(__u32 i, void *ctx)
{
	struct lb4_dsr_scan *scan = ctx;
	__u32 index = scan->first + i;
	__u32 *id = bpf_map_lookup_elem(&SLUICE_MAP_RANGES4, &index);
	struct lb4_backend *backend;

	if (!id || !*id)
		return 0;
	backend = lb4_backend_by_id(*id);
	if (backend && backend->address == scan->address && (backend->flags & LB_BACKEND_FLAG_LOCAL)) {
		scan->found = *id;
		return 1;
	}
	return 0;
}

/*
 * Backend node: an IPIP packet that lb4_tc_parse could not read. Ours when
 * the inner packet goes to a north-south frontend with the outer
 * destination as a local backend; TC_ACT_OK untouched otherwise.
 */
static __always_inline int lb4_dsr_receive(struct __sk_buff *skb)
{
	struct lb4_service_key skey = {};
	struct lb4_dsr_scan scan = {};
	struct lb4_packet pkt = {};
	struct lb4_ct_entry e = {};
	struct lb4_tc_config cfg;
	struct lb4_backend *backend;
	struct lb4_ct_entry *known;
	struct lb4_service svc;
	struct iphdr ip;
	__be16 ports[2];
	__u32 ihl;

	if (skb->protocol != bpf_htons(LB_ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, LB_ETH_HLEN, &ip, sizeof(ip)) < 0 || ip.protocol != LB_IPPROTO_IPIP ||
	    ip.version != 4 || ip.ihl != 5 || (ip.frag_off & bpf_htons(LB_IP_MF | LB_IP_OFFSET)))
		return TC_ACT_OK;
	scan.address = ip.daddr;
	if (bpf_skb_load_bytes(skb, LB_ETH_HLEN + sizeof(ip), &ip, sizeof(ip)) < 0 || ip.version != 4 ||
	    ip.ihl < 5 || (ip.protocol != LB_PROTO_TCP && ip.protocol != LB_PROTO_UDP))
		return TC_ACT_OK;
	if (ip.frag_off & bpf_htons(LB_IP_OFFSET)) {
		/* A later fragment: its ports are those its first fragment left
		 * in SLUICE_MAP_FRAG4 once opened here (frag.h). */
		struct lb4_frag_ports *fp;
		struct lb4_frag_key fkey;

		lb4_frag_key_of(&fkey, ip.saddr, ip.daddr, ip.id, ip.protocol);
		fp = bpf_map_lookup_elem(&SLUICE_MAP_FRAG4, &fkey);
		if (!fp)
			return TC_ACT_OK;
		ports[0] = fp->sport;
		ports[1] = fp->dport;
	} else {
		ihl = ip.ihl * 4;
		if (bpf_skb_load_bytes(skb, LB_ETH_HLEN + sizeof(ip) + ihl, ports, sizeof(ports)) < 0)
			return TC_ACT_OK;
	}

	skey.address = ip.daddr;
	skey.port = ports[1];
	skey.proto = ip.protocol;
	if (!lb4_lookup_service_copy(&skey, false, &svc)) {
		/* A NodePort of the ingress node: this node's wildcard (nodeport.h). */
		skey.address = 0;
		if (!lb4_lookup_service_copy(&skey, false, &svc) || !(svc.flags & LB_SVC_FLAG_NODEPORT))
			return TC_ACT_OK;
	}
	if (!(svc.flags & (LB_SVC_FLAG_NODEPORT | LB_SVC_FLAG_EXTERNAL_IP | LB_SVC_FLAG_LOADBALANCER)))
		return TC_ACT_OK;
	scan.first = svc.backend_id;
	bpf_loop(svc.count, lb4_dsr_scan_one, &scan, 0);
	if (!scan.found)
		return TC_ACT_OK;

	if (bpf_skb_adjust_room(skb, -LB_DSR_ENCAP_LEN, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_DECAP_L3_IPV4) < 0)
		return TC_ACT_SHOT;
	if (lb4_tc_parse(skb, &pkt) < 0)
		return TC_ACT_SHOT;
	lb_count(LB_CNT_TC_DSR_DECAP);
	cfg = lb4_tc_config_get();
	known = lb4_ct_live_original(skb, &pkt.tuple, &cfg, LB_PATH_NORTH_SOUTH);
	if (known && known->backend_address == scan.address)
		return lb4_flow_xlate_original(skb, &pkt, known, LB_PATH_NORTH_SOUTH);
	if (known) /* the ingress node balanced the flow again: its choice counts */
		lb4_ct_delete_flow(known);

	backend = lb4_backend_by_id(scan.found);
	if (!backend)
		return TC_ACT_SHOT;
	lb4_flow_fill(&e, &pkt.tuple, &svc, backend, scan.found, LB_PATH_NORTH_SOUTH, skb->ingress_ifindex, &cfg);
	e.flags |= LB_CT_FLAG_DSR_RX;
	if (lb4_ct_create_flow(skb, &pkt.tuple, &e, &cfg) < 0)
		return TC_ACT_SHOT;
	lb4_event_flow(&e);
	return lb4_flow_xlate_original(skb, &pkt, &e, LB_PATH_NORTH_SOUTH);
}

#endif /* SLUICE_BPF_DSR_H */
