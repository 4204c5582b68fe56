/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * xdp_lb: north-south Service load balancing at XDP on the node's external
 * devices (issue 17), in front of tc_lb, whose maps it shares by pin.
 * Entry points only; the logic is in lib/xdp_lb.h.
 */
#include "lib/xdp_lb.h"
#include "lib/xdp_lb6.h" /* IPv6 frontends, and lb_xdp: the entry for both families */

/*
 * Each family's Service part is a subprogram (lb4_xdp_service,
 * lb6_xdp_service) with its own stack frame, as in tc_lb.bpf.c; the
 * non-Service exit stays in this frame.
 */
SEC("xdp")
int SLUICE_PROG_XDP(struct xdp_md *ctx)
{
	return lb_xdp(ctx);
}

/*
 * XDP_PASS and nothing else. A veth delivers XDP_TX / XDP_REDIRECT frames
 * only to a peer running NAPI, which it does while the peer has an XDP
 * program (or GRO on): the agent's tests put this one on the far side of a
 * veth whose near side runs SLUICE_PROG_XDP.
 */
SEC("xdp")
int SLUICE_PROG_XDP_PASS(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
