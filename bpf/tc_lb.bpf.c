/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * tc_lb: north-south Service load balancing (NodePort, ExternalIP,
 * LoadBalancer) on the node's external devices, attached at TC ingress and
 * egress (tcx links). Entry points only; the logic is in lib/tc_lb.h.
 */
#include "lib/tc_lb.h"

SEC("tc")
int sluice_tc_ingress(struct __sk_buff *skb)
{
	return lb4_tc_ingress(skb);
}

SEC("tc")
int sluice_tc_egress(struct __sk_buff *skb)
{
	return lb4_tc_egress(skb);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
