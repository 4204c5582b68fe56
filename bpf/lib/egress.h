/* SPDX-License-Identifier: Apache-2.0 */
/*
 * egress.h: the SNAT address of a flow on a multi-homed node.
 *
 * kube-proxy's MASQUERADE takes the address of the device a packet leaves
 * by. A node with a public device for clients and a private one towards the
 * other nodes sends a NodePort flow to a remote backend out of the private
 * device; SNATed to the public address, the backend's reply may come back on
 * a device whose address the other node cannot reach, or on one without our
 * programs. So a new SNATed flow asks the FIB for its egress device and takes
 * that device's SNAT address when the agent wrote one (SLUICE_MAP_SNAT_DEV4:
 * node-to-node devices, where it also attaches the TC programs for the
 * reply); else lb4_tc_config.snat_address. One FIB lookup per new flow.
 */
#ifndef SLUICE_BPF_EGRESS_H
#define SLUICE_BPF_EGRESS_H

#include "maps.h"
#include "nat.h"

/* ctx: the program's context (__sk_buff or xdp_md: bpf_fib_lookup takes
 * either); arrived: the device the flow arrived on. */
static __always_inline __be32
lb4_snat_address_ctx(void *ctx, __u32 arrived, const struct lb4_tc_config *cfg, __be32 backend)
{
	struct bpf_fib_lookup fib = {};
	struct lb4_snat_device *dev;
	__u32 ifindex;
	int rc;

	fib.family = AF_INET;
	fib.ipv4_dst = backend;
	fib.ifindex = arrived;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	/* FRAG_NEEDED still names the egress device (pmtu.h answers later). */
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH &&
	    rc != BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return cfg->snat_address;
	ifindex = fib.ifindex;
	dev = bpf_map_lookup_elem(&SLUICE_MAP_SNAT_DEV4, &ifindex);
	if (!dev || !dev->address)
		return cfg->snat_address;
	lb_count(LB_CNT_TC_SNAT_EGRESS_DEV);
	return dev->address;
}

static __always_inline __be32
lb4_snat_address_for(struct __sk_buff *skb, const struct lb4_tc_config *cfg, __be32 backend)
{
	return lb4_snat_address_ctx(skb, skb->ingress_ifindex, cfg, backend);
}

#endif /* SLUICE_BPF_EGRESS_H */
