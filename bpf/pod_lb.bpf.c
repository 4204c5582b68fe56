/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * pod_lb: per-packet Service translation at TC on the host side of pod veths,
 * for pods whose socket LB is bypassed. Attached by the Sluice CNI plugin.
 * Entry points only; the logic is in lib/pod_lb.h.
 */
#include "lib/pod_lb.h"

/* Host veth ingress: packets from the pod. */
SEC("tc")
int SLUICE_PROG_POD_INGRESS(struct __sk_buff *skb)
{
	return lb4_pod_ingress(skb);
}

/* Host veth egress: packets to the pod. */
SEC("tc")
int SLUICE_PROG_POD_EGRESS(struct __sk_buff *skb)
{
	return lb4_pod_egress(skb);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
