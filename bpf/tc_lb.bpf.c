/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * tc_lb: north-south Service load balancing (NodePort, ExternalIP,
 * LoadBalancer) on the node's external devices, attached at TC ingress and
 * egress (tcx links). Entry points only; the logic is in lib/tc_lb.h.
 */
#include "lib/tc_lb.h"
#include "lib/tc_lb6.h" /* issue 14: IPv6 frontends */

/*
 * Each family's path is a subprogram with its own stack frame: the verifier
 * adds up the frames along a call chain (at most 512 bytes), and the IPv4
 * and IPv6 paths are never on one chain.
 */
static __noinline int tc_ingress4(struct __sk_buff *skb)
{
	return lb4_tc_ingress(skb);
}

/* IPIP (DSR, issue 17 item 2): a frame of its own, next to tc_ingress4's. */
static __noinline int tc_dsr_receive4(struct __sk_buff *skb)
{
	return lb4_dsr_receive(skb);
}

static __noinline int tc_egress4(struct __sk_buff *skb)
{
	return lb4_tc_egress(skb);
}

SEC("tc")
int sluice_tc_ingress(struct __sk_buff *skb)
{
	int rc;

	if (skb->protocol == bpf_htons(LB_ETH_P_IPV6)) {
		rc = lb6_tc_ingress(skb);
		return rc == LB_TC_DSR6_RECEIVE ? lb6_dsr_receive(skb) : rc; /* ip6ip6: DSR (dsr6.h), a frame of its own */
	}
	rc = tc_ingress4(skb);
	return rc == LB_TC_DSR_RECEIVE ? tc_dsr_receive4(skb) : rc;
}

SEC("tc")
int sluice_tc_egress(struct __sk_buff *skb)
{
	if (skb->protocol == bpf_htons(LB_ETH_P_IPV6))
		return lb6_tc_egress(skb);
	return tc_egress4(skb);
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
	int deleted = lb4_ct_gc() + lb6_ct_gc();

	lc4_gc(); /* least-connection: counts of flows that are gone */
	return deleted;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
