/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pod_lb.h: per-packet Service translation at TC on the host side of a pod's
 * veth, for pods whose socket LB is bypassed (service meshes that redirect
 * sockets themselves, or socketLB: hostNamespaceOnly). Attached by the Sluice
 * CNI plugin (native/sluice-cni.c).
 *
 * Direction names are the host's: TC *ingress* of the host veth sees packets
 * *from* the pod, TC *egress* sees packets *to* the pod.
 *
 * Ingress (from the pod), in order:
 *   1. a reply of a hairpin flow (the pod answering itself, see below):
 *      restored to frontend -> pod and sent straight back into the pod;
 *   2. a packet of a known flow (pod -> frontend): its DNAT is applied;
 *   3. a new flow to any frontend (ClusterIP, and NodePort / ExternalIP /
 *      LoadBalancer addresses reached from inside the cluster), looked up in
 *      the internal scope as the socket hooks do: pick a backend, write both
 *      conntrack entries, DNAT. A frontend with no backend is rejected with
 *      an ICMP port unreachable sent back into the pod (kube-proxy REJECTs
 *      the same way), so TCP connect() fails at once with ECONNREFUSED.
 *   ICMP errors the pod sends about a translated reply are translated back.
 * Egress (to the pod): a reply (or ICMP error) of a flow this pod started is
 * given the frontend as its source again.
 *
 * Only DNAT: the backend sees the pod's own address, and its reply comes back
 * to the pod through this veth (backends on this node over the bridge,
 * backends elsewhere routed to this node), where egress restores the
 * frontend. The exception is hairpin: when the backend picked is the client
 * pod itself, a packet pod:p -> pod:backend-port would arrive with the pod's
 * own source and be dropped as martian, so, like kube-proxy's hairpin
 * masquerade, the source is rewritten: to the frontend address with a port
 * from the SNAT range. The pod can always answer that address (it has just
 * routed a packet to it), its answer comes back to this ingress hook, and
 * both directions are redirected straight back into the pod without
 * touching the node's stack.
 *
 * The flows live in the north-south conntrack map (SLUICE_MAP_CT4) flagged
 * LB_CT_FLAG_POD; this program acts only on such entries. The flow helpers
 * (filling, storing, translating) are shared with the north-south path in
 * nat_flow.h, told apart by enum lb_path. The counters are
 * the TC path's reasons (LB_CNT_TC_*) at LB_CNT_POD_OFFSET above them.
 */
#ifndef SLUICE_BPF_POD_LB_H
#define SLUICE_BPF_POD_LB_H

#include "nat_flow.h"
#include "events.h"
#include "reject.h"
#include "nodeport.h"

/* The pod path's frontend-address bitmap (native/sluice_abi.h, SLUICE_MAP_POD_PF4). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, SLUICE_POD_PF_ELEMS);
} SLUICE_MAP_POD_PF4 SEC(".maps");

_Static_assert(SLUICE_POD_PF_WORDS * 64 == 1 << SLUICE_POD_PF_BITS_LOG2, "pod bitmap size");
_Static_assert(SLUICE_POD_PF_MARKER == SLUICE_POD_PF_WORDS && SLUICE_POD_PF_ELEMS == SLUICE_POD_PF_WORDS + 1, "pod bitmap marker");

/*
 * False when daddr's bit is clear in a maintained bitmap: the packet is no
 * pod flow's (no new flow, no known flow, no hairpin reply, all addressed to
 * a frontend) and passes after this check. Both are array loads the JIT
 * inlines (no hash, no call); the marker is read only on a clear bit, so a
 * Service packet pays one load, then the full lookups (the exact check).
 */
static __always_inline bool lb4_pod_maybe_frontend(__be32 daddr)
{
	__u32 slot = sluice_bit_slot(bpf_ntohl(daddr), SLUICE_POD_PF_BITS_LOG2);
	__u32 word = slot >> 6, marker = SLUICE_POD_PF_MARKER;
	__u64 *bits = bpf_map_lookup_elem(&SLUICE_MAP_POD_PF4, &word);

	if (bits && ((*bits >> (slot & 63)) & 1))
		return true;
	bits = bpf_map_lookup_elem(&SLUICE_MAP_POD_PF4, &marker);
	return !bits || !*bits;
}

static __always_inline bool lb4_ct_is_pod(const struct lb4_ct_entry *e)
{
	return e->flags & LB_CT_FLAG_POD;
}

static __always_inline bool lb4_ct_is_hairpin(const struct lb4_ct_entry *e)
{
	return (e->flags & (LB_CT_FLAG_POD | LB_CT_FLAG_SNAT)) == (LB_CT_FLAG_POD | LB_CT_FLAG_SNAT);
}

/*
 * False when the packet cannot be the pod's reply in a hairpin flow: such a
 * reply goes to frontend:nat-port, and a hairpin flow's nat port always comes
 * from the SNAT range (lb_maybe_snat_reply, nat_flow.h). Most new flows start
 * from an ephemeral port below the default range (61000-65535), so they skip
 * the reply-key lookup.
 */
static __always_inline bool lb4_pod_maybe_hairpin_reply(const struct lb4_tuple *t, const struct lb4_tc_config *cfg)
{
	return lb_maybe_snat_reply(t->dport, cfg);
}

/* A packet to a frontend without backends: an ICMP port unreachable sent
 * back into the pod (reject.h), counted on the pod path. */
static __always_inline int lb4_pod_reject(struct __sk_buff *skb, const struct lb4_packet *pkt)
{
	lb_path_count(LB_PATH_POD, LB_CNT_TC_NO_BACKEND);
	lb4_event_packet(LB_EVENT_REFUSED, LB_CNT_TC_NO_BACKEND + LB_CNT_POD_OFFSET, &pkt->tuple, 0, skb->ifindex);
	return lb4_icmp_reject(skb, pkt);
}

/* A new flow from the pod to a frontend; anything else passes untouched. */
static __always_inline int
lb4_pod_new_flow(struct __sk_buff *skb, const struct lb4_packet *pkt, const struct lb4_tc_config *cfg)
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

	svc = lb4_lookup_frontend(&skey, true);
	if (!svc)
		return TC_ACT_OK;
	if (!svc->count && (svc->flags & LB_SVC_FLAG_DROP_NO_BACKEND)) {
		lb_count(LB_CNT_TC_NO_BACKEND); /* kube-proxy drops: no ICMP */
		return TC_ACT_SHOT;
	}
	if (!svc->count)
		return lb4_pod_reject(skb, pkt);
	akey.client_id = lb4_maglev_tc_client(svc, t->saddr, t->daddr, t->sport, t->dport, t->proto);
	akey.rev_nat_id = svc->rev_nat_id;
	backend = lb4_pick_backend(&skey, svc, &akey, &backend_id);
	if (!backend)
		return lb4_pod_reject(skb, pkt);

	lb4_flow_fill(&e, t, svc, backend, backend_id, LB_PATH_POD, skb->ifindex, cfg);

	if (backend->address == t->saddr) {
		/* Hairpin: source becomes frontend:port-from-the-SNAT-range. */
		e.flags |= LB_CT_FLAG_SNAT;
		e.nat_address = t->daddr;
	}
	if (lb4_ct_create_flow(skb, t, &e, cfg) < 0)
		return TC_ACT_SHOT;
	lb4_event_flow(&e);
	return lb4_flow_xlate_original(skb, pkt, &e, LB_PATH_POD);
}

static __always_inline int lb4_pod_ingress(struct __sk_buff *skb)
{
	struct lb4_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb4_ct_entry *e;
	struct lb4_ct_key key;

	if (lb4_parse(skb, &pkt) < 0)
		return TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMP)
		return lb4_icmp_is_error(pkt.icmp_type) ? lb4_flow_icmp_error(skb, &pkt, LB_PATH_POD, LB_HOOK_INGRESS) : TC_ACT_OK;
	if (!lb4_pod_maybe_frontend(pkt.tuple.daddr)) {
		lb_count(LB_CNT_POD_NOT_FRONTEND);
		return TC_ACT_OK;
	}
	cfg = lb4_tc_config_get();

	/* A known flow first (its one lookup, then the rewrite): a packet
	 * cannot be both a flow's original and a hairpin reply, which would
	 * be two sockets of the pod with one 4-tuple. */
	e = lb4_ct_live_original(skb, &pkt.tuple, &cfg, LB_PATH_POD);
	if (e)
		return lb4_flow_xlate_original(skb, &pkt, e, LB_PATH_POD);

	/* The pod answering itself through a hairpin flow: only to a port
	 * of the SNAT range (the check saves a new flow its second conntrack
	 * miss, ~10 %, bench/podprogtime.ts). */
	if (lb4_pod_maybe_hairpin_reply(&pkt.tuple, &cfg)) {
		lb4_ct_key_of(&key, &pkt.tuple, LB_CT_DIR_REPLY);
		e = lb4_ct_lookup(&key);
		if (e && lb4_ct_is_hairpin(e)) {
			(void)lb4_ct_touch(e, &cfg, &pkt.tuple, skb->len);
			return lb4_flow_xlate_reply(skb, &pkt, e, LB_PATH_POD, LB_HOOK_INGRESS);
		}
	}
	return lb4_pod_new_flow(skb, &pkt, &cfg);
}

static __always_inline int lb4_pod_egress(struct __sk_buff *skb)
{
	struct lb4_packet pkt = {};
	struct lb4_tc_config cfg;
	struct lb4_ct_entry *e;
	struct lb4_ct_key key;

	if (lb4_parse(skb, &pkt) < 0)
		return TC_ACT_OK;
	if (pkt.tuple.proto == LB_IPPROTO_ICMP)
		return lb4_icmp_is_error(pkt.icmp_type) ? lb4_flow_icmp_error(skb, &pkt, LB_PATH_POD, LB_HOOK_EGRESS) : TC_ACT_OK;
	lb4_ct_key_of(&key, &pkt.tuple, LB_CT_DIR_REPLY);
	e = lb4_ct_lookup(&key);
	if (!e || !lb4_ct_is_pod(e) || (e->flags & LB_CT_FLAG_SNAT))
		return TC_ACT_OK;
	cfg = lb4_tc_config_get();
	(void)lb4_ct_touch(e, &cfg, &pkt.tuple, skb->len);
	return lb4_flow_xlate_reply(skb, &pkt, e, LB_PATH_POD, LB_HOOK_EGRESS);
}

#endif /* SLUICE_BPF_POD_LB_H */
