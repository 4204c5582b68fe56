/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * pod_lb: per-packet Service translation at TC on the host side of pod veths,
 * for pods whose socket LB is bypassed. Attached by the Sluice CNI plugin.
 * Entry points only; the logic is in lib/pod_lb.h (IPv4) and, for IPv6
 * (issue 14), lib/nat_flow6.h with LB_PATH_POD (see docs/pod-veth.md).
 */
#include "lib/pod_lb.h"
#include "lib/nat_flow6.h" /* IPv6: the pipeline shared with TC north-south, LB_PATH_POD */

/*
 * Each family's path is a subprogram with its own stack frame: the verifier
 * adds up the frames along a call chain (at most 512 bytes), and the IPv4
 * and IPv6 paths are never on one chain.
 */
static __noinline int pod_ingress4(struct __sk_buff *skb)
{
	return lb4_pod_ingress(skb);
}

static __noinline int pod_egress4(struct __sk_buff *skb)
{
	return lb4_pod_egress(skb);
}

/* Host veth ingress: packets from the pod. */
SEC("tc")
int SLUICE_PROG_POD_INGRESS(struct __sk_buff *skb)
{
	if (skb->protocol == bpf_htons(LB_ETH_P_IPV6))
		return lb6_flow_ingress(skb, LB_PATH_POD);
	return pod_ingress4(skb);
}

/* Host veth egress: packets to the pod. */
SEC("tc")
int SLUICE_PROG_POD_EGRESS(struct __sk_buff *skb)
{
	if (skb->protocol == bpf_htons(LB_ETH_P_IPV6))
		return lb6_flow_egress(skb, LB_PATH_POD);
	return pod_egress4(skb);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
