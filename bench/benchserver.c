// SPDX-License-Identifier: Apache-2.0
/*
 * benchserver: the backends of `make bench`, one epoll loop.
 *
 *   benchserver --port P [--max-s S]
 *
 * Listens on 0.0.0.0:P for TCP: accepts, then waits for the client to close
 * (the load generator resets its connections with SO_LINGER {on, 0}) and
 * closes its side with SO_LINGER {on, 0} too, so the server keeps no
 * TIME_WAIT socket that a later SYN from a reused client port would collide
 * with. Closing right after accept() instead would race the client's connect
 * completion and show up as ECONNRESET on the client. Answers every UDP
 * datagram on 0.0.0.0:P with the same bytes, from the address it was sent to
 * (IP_PKTINFO): a wildcard socket would otherwise answer from the address of
 * the outgoing route, and conntrack and socket-LB reverse translation both
 * need the reply to come from the backend address the request went to. The bench gives the backend namespace ten
 * addresses (198.18.1.1-10); a wildcard bind serves them all from one socket
 * pair so the server never becomes the bottleneck of what it measures.
 * The same on [::]:P (IPV6_V6ONLY, IPV6_RECVPKTINFO) for the IPv6 rows.
 * It exits on SIGTERM/SIGINT or after S seconds (default 1200), whichever is
 * first, so it cannot outlive a bench run that lost track of it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void die(const char *what)
{
	fprintf(stderr, "benchserver: %s: %s\n", what, strerror(errno));
	exit(2);
}

static int make_socket(int family, int type, int port)
{
	int fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
	struct sockaddr_in6 sa6 = { .sin6_family = AF_INET6, .sin6_port = htons((unsigned short)port) };
	if (family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
		die("IPV6_V6ONLY");
	if (family == AF_INET6 ? bind(fd, (struct sockaddr *)&sa6, sizeof(sa6)) : bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		die(type == SOCK_STREAM ? "bind(tcp)" : "bind(udp)");
	if (type == SOCK_STREAM && listen(fd, 4096) < 0)
		die("listen");
	if (type == SOCK_DGRAM && family == AF_INET && setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one)) < 0)
		die("IP_PKTINFO");
	if (type == SOCK_DGRAM && family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one)) < 0)
		die("IPV6_RECVPKTINFO");
	return fd;
}

/* Echo every queued datagram of a UDP socket from the address it was sent to
 * (IP_PKTINFO / IPV6_PKTINFO handed back with the reply). */
static void echo_udp(int udp, char *buf, size_t size)
{
	for (;;) {
		struct sockaddr_storage from;
		char cbuf[CMSG_SPACE(sizeof(struct in6_pktinfo))];
		struct iovec iov = { .iov_base = buf, .iov_len = size };
		struct msghdr msg = {
			.msg_name = &from, .msg_namelen = sizeof(from),
			.msg_iov = &iov, .msg_iovlen = 1,
			.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
		};
		ssize_t r = recvmsg(udp, &msg, 0);
		if (r < 0)
			break;
		/* Reply from the address the request was sent to: the one cmsg
		 * asked for comes first, handed back with the interface cleared. */
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		size_t space = 0;
		if (cm && cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO) {
			struct in_pktinfo *p4 = (struct in_pktinfo *)CMSG_DATA(cm);
			p4->ipi_ifindex = 0;
			p4->ipi_spec_dst = p4->ipi_addr;
			space = CMSG_SPACE(sizeof(struct in_pktinfo));
		} else if (cm && cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_PKTINFO) {
			((struct in6_pktinfo *)CMSG_DATA(cm))->ipi6_ifindex = 0;
			space = CMSG_SPACE(sizeof(struct in6_pktinfo));
		}
		iov.iov_len = (size_t)r;
		msg.msg_control = space ? cbuf : NULL;
		msg.msg_controllen = space;
		sendmsg(udp, &msg, 0);
	}
}

int main(int argc, char **argv)
{
	int port = 0;
	long max_s = 1200;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--max-s"))
			max_s = atol(argv[i + 1]);
	}
	if (port <= 0 || port > 65535) {
		fprintf(stderr, "usage: benchserver --port P [--max-s S]\n");
		return 2;
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGPIPE, SIG_IGN);

	int tcp = make_socket(AF_INET, SOCK_STREAM, port);
	int udp = make_socket(AF_INET, SOCK_DGRAM, port);
	int tcp6 = make_socket(AF_INET6, SOCK_STREAM, port);
	int udp6 = make_socket(AF_INET6, SOCK_DGRAM, port);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	int listeners[] = { tcp, udp, tcp6, udp6 };
	for (int i = 0; i < 4; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = listeners[i] };
		epoll_ctl(ep, EPOLL_CTL_ADD, listeners[i], &ev);
	}
	printf("ready\n");
	fflush(stdout);

	time_t end = time(NULL) + max_s;
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	char buf[2048];
	while (!stop && time(NULL) < end) {
		struct epoll_event evs[64];
		int n = epoll_wait(ep, evs, 64, 500);
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == tcp || fd == tcp6) {
				for (;;) {
					int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
					if (c < 0)
						break;
					setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
					struct epoll_event cev = { .events = EPOLLIN | EPOLLRDHUP, .data.fd = c };
					if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev) < 0)
						close(c);
				}
			} else if (fd == udp || fd == udp6) {
				echo_udp(fd, buf, sizeof(buf));
			} else {
				/* A client connection: its close (RST or FIN) ends ours. */
				char b[256];
				ssize_t r = read(fd, b, sizeof(b));
				if (r <= 0 || (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
					close(fd); /* close() also removes it from the epoll set */
			}
		}
	}
	return 0;
}
