/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * sock_destroy: socket iterators that end the sockets still connected to a
 * deleted backend (the agent runs them; nothing attaches to a hook). Entry
 * points only; the logic is in lib/sock_destroy.h.
 */
/* The TC conntrack map is not used here: do not create it (36 MiB). */
#define SLUICE_NO_CONNTRACK
/* The socket objects create the TCP reverse map (lib/maps.h). */
#define SLUICE_SOCK_OBJECT
#include "lib/sock_destroy.h"

SEC("iter/udp")
int SLUICE_PROG_SOCKTERM_UDP(struct bpf_iter__udp *ctx)
{
	struct udp_sock *udp = ctx->udp_sk;

	if (!udp)
		return 0;
	/* sock_common is the first member of udp_sock: the same trusted pointer. */
	return lb4_sock_term(ctx->meta->seq, (struct sock_common *)udp, LB_PROTO_UDP);
}

SEC("iter/tcp")
int SLUICE_PROG_SOCKTERM_TCP(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;

	if (!skc)
		return 0;
	/* Full sockets only: request and time-wait minisocks have no diag_destroy. */
	if (!bpf_skc_to_tcp_sock(skc))
		return 0;
	return lb4_sock_term(ctx->meta->seq, skc, LB_PROTO_TCP);
}

/* The IPv6 twins: AF_INET6 sockets connected to a backend in SLUICE_MAP_SOCKTERM6. */
SEC("iter/udp")
int SLUICE_PROG_SOCKTERM_UDP6(struct bpf_iter__udp *ctx)
{
	struct udp_sock *udp = ctx->udp_sk;

	if (!udp)
		return 0;
	return lb6_sock_term(ctx->meta->seq, (struct sock_common *)udp, LB_PROTO_UDP);
}

SEC("iter/tcp")
int SLUICE_PROG_SOCKTERM_TCP6(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;

	if (!skc)
		return 0;
	if (!bpf_skc_to_tcp_sock(skc))
		return 0;
	return lb6_sock_term(ctx->meta->seq, skc, LB_PROTO_TCP);
}

/* bpf_sock_destroy() and the socket iterators are GPL-only. */
char LICENSE[] SEC("license") = "GPL";
