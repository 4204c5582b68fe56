/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tc_lb.h: north-south load balancing at TC on the node's external devices.
 *
 * Ingress (a packet arriving from outside):
 *   1. a reply of a SNATed flow (backend -> SNAT address:port, a port of
 *      the SNAT range: packets to other ports skip this lookup): restore
 *      frontend -> client and send it back out (redirect);
 *   2. a packet of a known flow (client -> frontend): apply its DNAT (+SNAT);
 *   3. a new flow to a NodePort / ExternalIP / LoadBalancer frontend: source
 *      ranges, pick a backend, write both conntrack entries, translate; a
 *      frontend without any endpoint answers ICMP port unreachable (reject.h).
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

#include "nat_flow.h"
#include "events.h"
#include "reject.h"
#include "nodeport.h"
#include "dsr.h" /* issue 17 item 2: --nodeport-mode dsr|hybrid */

static __always_inline bool lb_svc_is_north_south(const struct lb4_service *svc)
{
	return svc->flags & (LB_SVC_FLAG_NODEPORT | LB_SVC_FLAG_EXTERNAL_IP | LB_SVC_FLAG_LOADBALANCER);
}

/* externalTrafficPolicy: Local: the client's address is kept, no SNAT. */
static __always_inline bool lb_svc_is_ext_local(const struct lb4_service *svc)
{
	return svc->flags & LB_SVC_FLAG_EXT_LOCAL;
}

static __always_inline bool lb4_backend_is_local(const struct lb4_backend *backend)
{
	return backend->flags & LB_BACKEND_FLAG_LOCAL;
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

	svc = lb4_lookup_frontend(&skey, false);
	if (!svc || !lb_svc_is_north_south(svc))
		return TC_ACT_OK;
	if (lb_svc_has_source_ranges(svc) && !lb4_source_allowed(svc->rev_nat_id, t->saddr)) {
		lb_count(LB_CNT_TC_SRC_RANGE_DROP);
		lb4_event_packet(LB_EVENT_DROP, LB_CNT_TC_SRC_RANGE_DROP, t, svc->rev_nat_id, skb->ingress_ifindex);
		return TC_ACT_SHOT;
	}
	/* No endpoint at all: rejected (ICMP port unreachable), as kube-proxy's
	 * KUBE-EXTERNAL-SERVICES REJECT does. Endpoints that may not be used
	 * from here (externalTrafficPolicy: Local without a local one;
	 * LB_SVC_FLAG_DROP_NO_BACKEND): dropped, as kube-proxy does. */
	if (!svc->count) {
		bool drop = svc->flags & LB_SVC_FLAG_DROP_NO_BACKEND;

		lb_count(LB_CNT_TC_NO_BACKEND);
		lb4_event_packet(drop ? LB_EVENT_DROP : LB_EVENT_REFUSED, LB_CNT_TC_NO_BACKEND, t, svc->rev_nat_id,
				 skb->ingress_ifindex);
		return drop ? TC_ACT_SHOT : lb4_icmp_reject(skb, pkt);
	}
	akey.client_id = lb4_maglev_tc_client(svc, t->saddr, t->daddr, t->sport, t->dport, t->proto);
	akey.rev_nat_id = svc->rev_nat_id;
	backend = lb4_pick_backend(&skey, svc, &akey, &backend_id);
	if (!backend) {
		lb_count(LB_CNT_TC_NO_BACKEND);
		return TC_ACT_SHOT;
	}

	lb4_flow_fill(&e, t, svc, backend, backend_id, LB_PATH_NORTH_SOUTH, skb->ingress_ifindex, cfg);

	if (!lb_svc_is_ext_local(svc) || !lb4_backend_is_local(backend) || backend->address == t->saddr) {
		/* externalTrafficPolicy: Cluster masquerades, as kube-proxy does
		 * (the backend sees the node, on this node or another); so does
		 * a pod reaching its own NodePort (hairpin). The reply comes back
		 * to the node address: on the external device from another node,
		 * on the pod's device (where the agent attaches this program
		 * too) from a local pod. Only Local keeps the client's address. */
		/* The egress device's address (egress.h): multi-homed nodes. */
		e.nat_address = lb4_snat_address_for(skb, cfg, backend->address);
		if (!e.nat_address) {
			lb_count(LB_CNT_TC_SNAT_FAILED);
			lb4_event_packet(LB_EVENT_DROP, LB_CNT_TC_SNAT_FAILED, t, svc->rev_nat_id, skb->ingress_ifindex);
			return TC_ACT_SHOT;
		}
		/* DSR (dsr.h): a remote backend gets the client's packet in
		 * IPIP; nat_address is the outer source. No reply comes back
		 * here, so the handshake counts as answered. */
		if (!lb4_backend_is_local(backend) && backend->address != t->saddr && lb_dsr_applies(t->proto))
			e.flags |= LB_CT_FLAG_DSR | LB_CT_FLAG_SEEN_REPLY;
		else
			e.flags |= LB_CT_FLAG_SNAT;
	}
	if (lb4_ct_create_flow(skb, t, &e, cfg) < 0)
		return TC_ACT_SHOT;
	lb4_event_flow(&e);
	if (e.flags & LB_CT_FLAG_DSR)
		return lb4_dsr_forward(skb, pkt, &e);
	return lb4_flow_xlate_original(skb, pkt, &e, LB_PATH_NORTH_SOUTH);
}

static __always_inline int lb4_tc_ingress(struct __sk_buff *skb)
{
	struct lb4_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb4_ct_entry *e;
	struct lb4_ct_key key;

	if (lb4_tc_parse(skb, &pkt) < 0) /* later fragments too (frag.h); IPIP: DSR (dsr.h) */
		return pkt.tuple.proto == LB_IPPROTO_IPIP ? LB_TC_DSR_RECEIVE : TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMP)
		return lb4_icmp_is_error(pkt.icmp_type) ? lb4_flow_icmp_error(skb, &pkt, LB_PATH_NORTH_SOUTH, LB_HOOK_INGRESS) : TC_ACT_OK;
	cfg = lb4_tc_config_get();

	/* A reply of a SNATed flow: only to a port of the SNAT range
	 * (lb_maybe_snat_reply, nat_flow.h). A client's packet to a NodePort
	 * (30000-32767) or another Service port outside it, new flow or known,
	 * skips this lookup's miss. */
	if (lb_maybe_snat_reply(pkt.tuple.dport, &cfg)) {
		lb4_ct_key_of(&key, &pkt.tuple, LB_CT_DIR_REPLY);
		e = lb4_ct_lookup(&key);
		if (e && (e->flags & LB_CT_FLAG_SNAT)) {
			(void)lb4_ct_touch(e, &cfg, &pkt.tuple, skb->len);
			return lb4_flow_xlate_reply(skb, &pkt, e, LB_PATH_NORTH_SOUTH, LB_HOOK_INGRESS);
		}
	}

	e = lb4_ct_live_original(skb, &pkt.tuple, &cfg, LB_PATH_NORTH_SOUTH);
	if (e)
		return (e->flags & LB_CT_FLAG_DSR) ? lb4_dsr_forward(skb, &pkt, e)
						   : lb4_flow_xlate_original(skb, &pkt, e, LB_PATH_NORTH_SOUTH);
	if (pkt.frag == LB_FRAG_LATER) /* only a first fragment opens a flow */
		return TC_ACT_OK;
	return lb4_tc_new_flow(skb, &pkt, &cfg);
}

static __always_inline int lb4_tc_egress(struct __sk_buff *skb)
{
	struct lb4_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb4_ct_entry *e;
	struct lb4_ct_key key;

	if (lb4_tc_parse(skb, &pkt) < 0) /* later fragments too (frag.h) */
		return TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMP)
		return lb4_icmp_is_error(pkt.icmp_type) ? lb4_flow_icmp_error(skb, &pkt, LB_PATH_NORTH_SOUTH, LB_HOOK_EGRESS) : TC_ACT_OK;
	lb4_ct_key_of(&key, &pkt.tuple, LB_CT_DIR_REPLY);
	e = lb4_ct_lookup(&key);
	if (!e || (e->flags & LB_CT_FLAG_SNAT))
		return TC_ACT_OK;
	cfg = lb4_tc_config_get();
	(void)lb4_ct_touch(e, &cfg, &pkt.tuple, skb->len);
	return lb4_flow_xlate_reply(skb, &pkt, e, LB_PATH_NORTH_SOUTH, LB_HOOK_EGRESS);
}

#endif /* SLUICE_BPF_TC_LB_H */
