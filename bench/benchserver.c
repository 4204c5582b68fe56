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

static int make_socket(int type, int port)
{
	int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die(type == SOCK_STREAM ? "bind(tcp)" : "bind(udp)");
	if (type == SOCK_STREAM && listen(fd, 4096) < 0)
		die("listen");
	if (type == SOCK_DGRAM && setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one)) < 0)
		die("IP_PKTINFO");
	return fd;
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

	int tcp = make_socket(SOCK_STREAM, port);
	int udp = make_socket(SOCK_DGRAM, port);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = tcp };
	epoll_ctl(ep, EPOLL_CTL_ADD, tcp, &ev);
	ev.data.fd = udp;
	epoll_ctl(ep, EPOLL_CTL_ADD, udp, &ev);
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
			if (fd == tcp) {
				for (;;) {
					int c = accept4(tcp, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
					if (c < 0)
						break;
					setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
					struct epoll_event cev = { .events = EPOLLIN | EPOLLRDHUP, .data.fd = c };
					if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev) < 0)
						close(c);
				}
			} else if (fd == udp) {
				for (;;) {
					struct sockaddr_in from;
					char cbuf[CMSG_SPACE(sizeof(struct in_pktinfo))];
					struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
					struct msghdr msg = {
						.msg_name = &from, .msg_namelen = sizeof(from),
						.msg_iov = &iov, .msg_iovlen = 1,
						.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
					};
					ssize_t r = recvmsg(udp, &msg, 0);
					if (r < 0)
						break;
					/* Reply from the address the request was sent to. */
					struct in_pktinfo *pi = NULL;
					for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
						if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO)
							pi = (struct in_pktinfo *)CMSG_DATA(cm);
					if (pi) {
						pi->ipi_ifindex = 0;
						pi->ipi_spec_dst = pi->ipi_addr;
					}
					iov.iov_len = (size_t)r;
					msg.msg_controllen = pi ? sizeof(cbuf) : 0;
					if (!pi)
						msg.msg_control = NULL;
					sendmsg(udp, &msg, 0);
				}
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
