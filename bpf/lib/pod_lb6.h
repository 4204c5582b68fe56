/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pod_lb6.h: the pod-veth per-packet path (pod_lb.h) for IPv6 Services.
 * Same steps, same rules, on the IPv6 tables (lb6.h) and the IPv6 conntrack
 * map (SLUICE_MAP_CT6, entries flagged LB_CT_FLAG_POD); the flow helpers
 * are the north-south path's (nat_flow6.h), told apart by enum lb_path.
 *
 * Ingress (from the pod), in order:
 *   1. a reply of a hairpin flow (the pod answering itself): restored to
 *      frontend -> pod and sent straight back into the pod;
 *   2. a packet of a known flow (pod -> frontend): its DNAT is applied;
 *   3. a new flow to an IPv6 frontend in the internal scope (ClusterIP, and
 *      NodePort / ExternalIP / LoadBalancer addresses reached from inside the
 *      cluster): pick a backend, write both conntrack entries, DNAT. A
 *      frontend without any endpoint is answered with an ICMPv6 port
 *      unreachable sent back into the pod (ip6tables' REJECT), so TCP
 *      connect() fails at once with ECONNREFUSED.
 *   ICMPv6 errors the pod sends about a translated reply are translated back.
 * Egress (to the pod): a reply (or ICMPv6 error) of a flow this pod started
 * is given the frontend as its source again.
 * Neighbor Discovery and every other informational ICMPv6 message, non-Service
 * traffic, fragments and packets whose extension headers are not walked
 * (nat6.h) pass untouched.
 *
 * Each step is a subprogram (__noinline): IPv6 tuples and keys are large,
 * and each frame is checked against the 512-byte stack on its own chain.
 */
#ifndef SLUICE_BPF_POD_LB6_H
#define SLUICE_BPF_POD_LB6_H

#include "nat_flow6.h"

/* Our answer to the packet, see LB6_FLOW_NEW in tc_lb6.h. */
#define LB6_POD_FLOW_NEW     (-1)
#define LB6_POD_FLOW_UNKNOWN (-2)

static __always_inline bool lb6_ct_is_hairpin(const struct lb6_ct_entry *e)
{
	return (e->flags & (LB_CT_FLAG_POD | LB_CT_FLAG_SNAT)) == (LB_CT_FLAG_POD | LB_CT_FLAG_SNAT);
}

static __always_inline int lb6_pod_reject(struct __sk_buff *skb, const struct lb6_packet *pkt)
{
	lb_path_count(LB_PATH_POD, LB_CNT_TC_NO_BACKEND);
	return lb6_icmp_reject(skb, pkt);
}

/* A new flow from the pod to an IPv6 frontend; anything else passes. On
 * LB6_POD_FLOW_NEW the scratch entry holds the flow, to be stored. */
static __noinline int
lb6_pod_new_flow(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb4_tc_config *cfg)
{
	const struct lb6_tuple *t = &pkt->tuple;
	struct lb6_service_key skey = {};
	struct lb4_service *found, svc;
	struct lb6_ct_entry *e;
	int rc;

	lb6_addr_copy(skey.address, t->daddr);
	skey.port = t->dport;
	skey.proto = t->proto;
	found = lb6_lookup_service(&skey, true);
	if (!found)
		return TC_ACT_OK;
	svc = *found; /* selection may re-read the master into it */
	if (!svc.count && (svc.flags & LB_SVC_FLAG_DROP_NO_BACKEND)) {
		lb_path_count(LB_PATH_POD, LB_CNT_TC_NO_BACKEND); /* kube-proxy drops: no ICMPv6 */
		return TC_ACT_SHOT;
	}
	if (!svc.count)
		return lb6_pod_reject(skb, pkt);
	rc = lb6_flow_start(t, &skey, &svc, LB_PATH_POD, skb->ifindex, cfg);
	if (rc == LB6_START_NO_BACKEND)
		return lb6_pod_reject(skb, pkt);
	e = lb6_ct_scratch();
	if (rc < 0 || !e)
		return TC_ACT_SHOT;
	if (lb6_addr_equal(e->backend_address, t->saddr)) {
		/* Hairpin: source becomes frontend:port-from-the-SNAT-range. */
		e->flags |= LB_CT_FLAG_SNAT;
		lb6_addr_copy(e->nat_address, t->daddr);
	}
	return LB6_POD_FLOW_NEW;
}

/* A hairpin reply or a known flow's packet from the pod; LB6_POD_FLOW_UNKNOWN
 * when neither. */
static __noinline int
lb6_pod_ingress_known(struct __sk_buff *skb, const struct lb6_packet *pkt, const struct lb4_tc_config *cfg)
{
	struct lb6_ct_entry *e;
	struct lb6_ct_key key;

	lb6_ct_key_of(&key, &pkt->tuple, LB_CT_DIR_REPLY);
	e = lb6_ct_lookup(&key);
	if (e && lb6_ct_is_hairpin(e)) {
		(void)lb6_ct_touch(e, cfg, &pkt->tuple, skb->len);
		return lb6_flow_xlate_reply(skb, pkt, e, LB_PATH_POD, LB_HOOK_INGRESS);
	}
	e = lb6_ct_live_original(skb, &pkt->tuple, cfg, LB_PATH_POD);
	if (!e)
		return LB6_POD_FLOW_UNKNOWN;
	return lb6_flow_xlate_original(skb, pkt, e, LB_PATH_POD);
}

static __noinline int lb6_pod_ingress(struct __sk_buff *skb)
{
	struct lb6_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb6_ct_entry *e;
	int rc;

	if (lb6_parse(skb, &pkt) < 0)
		return TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMPV6)
		return lb6_icmp_is_error(pkt.icmp_type) ? lb6_flow_icmp_error(skb, &pkt, LB_PATH_POD, LB_HOOK_INGRESS)
							: TC_ACT_OK;
	cfg = lb4_tc_config_get();
	rc = lb6_pod_ingress_known(skb, &pkt, &cfg);
	if (rc != LB6_POD_FLOW_UNKNOWN)
		return rc;
	rc = lb6_pod_new_flow(skb, &pkt, &cfg);
	if (rc != LB6_POD_FLOW_NEW)
		return rc;
	e = lb6_ct_scratch();
	if (!e || lb6_ct_create_flow(skb, &pkt.tuple, e, &cfg) < 0)
		return TC_ACT_SHOT;
	/* Its entries are written: translated as a known flow. */
	rc = lb6_pod_ingress_known(skb, &pkt, &cfg);
	return rc == LB6_POD_FLOW_UNKNOWN ? TC_ACT_SHOT : rc;
}

static __noinline int lb6_pod_egress(struct __sk_buff *skb)
{
	struct lb6_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb6_ct_entry *e;
	struct lb6_ct_key key;

	if (lb6_parse(skb, &pkt) < 0)
		return TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMPV6)
		return lb6_icmp_is_error(pkt.icmp_type) ? lb6_flow_icmp_error(skb, &pkt, LB_PATH_POD, LB_HOOK_EGRESS)
							: TC_ACT_OK;
	lb6_ct_key_of(&key, &pkt.tuple, LB_CT_DIR_REPLY);
	e = lb6_ct_lookup(&key);
	if (!e || !lb6_ct_on_path(e, LB_PATH_POD) || (e->flags & LB_CT_FLAG_SNAT))
		return TC_ACT_OK;
	cfg = lb4_tc_config_get();
	(void)lb6_ct_touch(e, &cfg, &pkt.tuple, skb->len);
	return lb6_flow_xlate_reply(skb, &pkt, e, LB_PATH_POD, LB_HOOK_EGRESS);
}

#endif /* SLUICE_BPF_POD_LB6_H */
