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
 * DSR (--nodeport-mode dsr|hybrid): ip6ip6 to a remote backend
 * (nat_flow6.h lb6_dsr_forward), opened on the backend's node (dsr6.h).
 */
#ifndef SLUICE_BPF_TC_LB6_H
#define SLUICE_BPF_TC_LB6_H

#include "nat_flow6.h"
#include "dsr6.h" /* issue 17 item 2 for IPv6: --nodeport-mode dsr|hybrid */

/* The steps are nat_flow6.h's, shared with the pod-veth path (bpf/pod_lb.bpf.c). */
static __always_inline int lb6_tc_ingress(struct __sk_buff *skb)
{
	return lb6_flow_ingress(skb, LB_PATH_NORTH_SOUTH);
}

static __always_inline int lb6_tc_egress(struct __sk_buff *skb)
{
	return lb6_flow_egress(skb, LB_PATH_NORTH_SOUTH);
}

#endif /* SLUICE_BPF_TC_LB6_H */
