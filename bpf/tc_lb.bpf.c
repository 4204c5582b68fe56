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

/*
 * Conntrack garbage collection, run by the agent through BPF_PROG_TEST_RUN
 * with a dummy packet (src/datapath/tc/conntrack.ts): deletes expired
 * entries in the kernel, race-free against the data path. Returns the
 * number deleted. Never attached to a device.
 */
SEC("tc")
int SLUICE_PROG_CT_GC(struct __sk_buff *skb)
{
	int deleted = lb4_ct_gc();

	lc4_gc(); /* least-connection: counts of flows that are gone */
	return deleted;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
