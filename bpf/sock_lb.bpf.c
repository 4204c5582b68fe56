/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * sock_lb: Service load balancing at the socket layer (cgroup v2 hooks),
 * and the bind rule that keeps a local socket from shadowing a Service.
 * Entry points only; the logic is in lib/sock.h and lib/lb.h.
 */
/* The TC conntrack map is not used here: do not create it (36 MiB). */
#define SLUICE_NO_CONNTRACK
/* The socket objects create the TCP reverse map (lib/maps.h). */
#define SLUICE_SOCK_OBJECT
#include "lib/sock.h"
#include "lib/sock6.h"

SEC("cgroup/connect4")
int sluice_connect4(struct bpf_sock_addr *ctx)
{
	return lb4_sock_forward(ctx);
}

SEC("cgroup/sendmsg4")
int sluice_sendmsg4(struct bpf_sock_addr *ctx)
{
	return lb4_sock_forward(ctx);
}

SEC("cgroup/recvmsg4")
int sluice_recvmsg4(struct bpf_sock_addr *ctx)
{
	lb4_sock_xlate_rev(ctx);
	return SYS_PROCEED;
}

SEC("cgroup/getpeername4")
int sluice_getpeer4(struct bpf_sock_addr *ctx)
{
	lb4_sock_xlate_rev(ctx);
	return SYS_PROCEED;
}

SEC("cgroup/post_bind4")
int sluice_bind4(struct bpf_sock *ctx)
{
	int err = lb4_sock_post_bind(ctx);

	if (err < 0) {
		bpf_set_retval(err);
		return SYS_REJECT;
	}
	return SYS_PROCEED;
}

/* A released socket: a least-connection count comes back (lib/lc.h) and a
 * TCP or UDP socket's reverse pair is deleted (lib/sock.h; an AF_INET6 UDP
 * socket may hold an IPv6 slot, lib/sock6.h, and an IPv4 one: both freed). */
SEC("cgroup/sock_release")
int sluice_release4(struct bpf_sock *ctx)
{
	lc4_sock_release(ctx);
	lb4_sock_tcp_forget(ctx);
	lb6_sock_udp_forget(ctx);
	lb4_sock_udp_forget(ctx);
	return SYS_PROCEED;
}

/* ---- AF_INET6 sockets (lib/sock6.h): IPv6, and IPv4 through ::ffff:a.b.c.d ---- */

SEC("cgroup/connect6")
int sluice_connect6(struct bpf_sock_addr *ctx)
{
	return lb6_sock_forward(ctx);
}

SEC("cgroup/sendmsg6")
int sluice_sendmsg6(struct bpf_sock_addr *ctx)
{
	return lb6_sock_forward(ctx);
}

SEC("cgroup/recvmsg6")
int sluice_recvmsg6(struct bpf_sock_addr *ctx)
{
	lb6_sock_xlate_rev(ctx);
	return SYS_PROCEED;
}

SEC("cgroup/getpeername6")
int sluice_getpeer6(struct bpf_sock_addr *ctx)
{
	lb6_sock_xlate_rev(ctx);
	return SYS_PROCEED;
}

SEC("cgroup/post_bind6")
int sluice_bind6(struct bpf_sock *ctx)
{
	int err = lb6_sock_post_bind(ctx);

	if (err < 0) {
		bpf_set_retval(err);
		return SYS_REJECT;
	}
	return SYS_PROCEED;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
