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
 * Not (yet) for IPv6: fragments (passed untouched, nat6.h), least-connection
 * counts (IPv6 flows do not hold them), per-device SNAT addresses (egress.h:
 * IPv6 flows take the one address of SLUICE_MAP_TC_CONFIG6).
 */
#ifndef SLUICE_BPF_TC_LB6_H
#define SLUICE_BPF_TC_LB6_H

#include "nat_flow6.h"

/* ---- the north-south steps (tc_lb.h) ---- */

static __always_inline bool lb6_backend_is_local(__u32 backend_id)
{
	struct lb6_backend *backend = lb6_lookup_backend(backend_id);

	return backend && (backend->flags & LB_BACKEND_FLAG_LOCAL);
}

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
	struct lb6_service_key skey = {};
	struct lb6_ct_entry *e;
	struct lb4_service *found, svc;

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
	if (!svc.count || lb6_flow_start(t, &skey, &svc, LB_PATH_NORTH_SOUTH, skb->ingress_ifindex, cfg) < 0) {
		lb_count(LB_CNT_TC_NO_BACKEND);
		return TC_ACT_SHOT;
	}
	e = lb6_ct_scratch();
	if (!e)
		return TC_ACT_SHOT;

	/* As tc_lb.h: only externalTrafficPolicy Local to a local backend (not
	 * the client itself: hairpin) keeps the client's address. */
	if (!(svc.flags & LB_SVC_FLAG_EXT_LOCAL) || !lb6_backend_is_local(e->backend_id) ||
	    lb6_addr_equal(e->backend_address, t->saddr)) {
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
	if (e && (e->flags & LB_CT_FLAG_SNAT) && lb6_ct_on_path(e, LB_PATH_NORTH_SOUTH)) {
		(void)lb6_ct_touch(e, cfg, &pkt->tuple, skb->len);
		return lb6_flow_xlate_reply(skb, pkt, e, LB_PATH_NORTH_SOUTH, LB_HOOK_INGRESS);
	}
	e = lb6_ct_live_original(skb, &pkt->tuple, cfg, LB_PATH_NORTH_SOUTH);
	if (!e)
		return LB6_FLOW_UNKNOWN;
	return lb6_flow_xlate_original(skb, pkt, e, LB_PATH_NORTH_SOUTH);
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
		return lb6_icmp_is_error(pkt.icmp_type) ? lb6_flow_icmp_error(skb, &pkt, LB_PATH_NORTH_SOUTH, LB_HOOK_INGRESS) : TC_ACT_OK;
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
		return lb6_icmp_is_error(pkt.icmp_type) ? lb6_flow_icmp_error(skb, &pkt, LB_PATH_NORTH_SOUTH, LB_HOOK_EGRESS) : TC_ACT_OK;
	lb6_ct_key_of(&key, &pkt.tuple, LB_CT_DIR_REPLY);
	e = lb6_ct_lookup(&key);
	if (!e || (e->flags & LB_CT_FLAG_SNAT) || !lb6_ct_on_path(e, LB_PATH_NORTH_SOUTH))
		return TC_ACT_OK;
	cfg = lb4_tc_config_get();
	(void)lb6_ct_touch(e, &cfg, &pkt.tuple, skb->len);
	return lb6_flow_xlate_reply(skb, &pkt, e, LB_PATH_NORTH_SOUTH, LB_HOOK_EGRESS);
}

#endif /* SLUICE_BPF_TC_LB6_H */
