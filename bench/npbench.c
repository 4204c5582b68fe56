// SPDX-License-Identifier: Apache-2.0
/*
 * npbench: NodePort throughput for `make bench` (bench/nodeport.ts).
 *
 *   npbench server --port P --udp-bind A1,A2,... --max-s S
 *       TCP on 0.0.0.0:P: read a request, write a 64-byte response, close
 *       (SO_LINGER 0) once the client has closed. UDP: one socket per
 *       backend address (so a reply leaves from the address the request was
 *       sent to, which the NAT needs to recognise it), echoes every datagram.
 *   npbench rr  --targets FILE --max-ms MS [--timeout-ms T] [--seed S]
 *       TCP request/response, a new connection each, one at a time, to a
 *       random target: connect, send 16 bytes, read the response, close with
 *       an RST (SO_LINGER 0: no TIME_WAIT, see docs/bench.md).
 *   npbench pps --targets FILE --max-ms MS [--flows F] [--window W]
 *       UDP: F flows (sockets) to F random targets, each keeping W 64-byte
 *       datagrams in flight; counts echoed replies. Every reply is one packet
 *       forwarded each way through the node.
 *   npbench flood --dev D --dst-mac M --src A --targets FILE --count N --max-ms MS [--flows F]
 *       UDP flood for packets/s (make bench's XDP rows): complete Ethernet
 *       frames through an AF_PACKET socket on D (in the client namespace),
 *       F flows (source ports 20000+i) to the first F targets, 18-byte
 *       payload ("F..."; IP total length 46, which the backend's counter
 *       matches), IPv4 and UDP checksums written in full: no
 *       CHECKSUM_PARTIAL reaches the node, so native XDP on a veth rewrites
 *       correct checksums. Stops after N frames or MS; prints frames sent.
 * Prints one JSON line. Every loop is bounded by --max-ms.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
	for (int i = 2; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	return def;
}

static void rst_close(int fd)
{
	struct linger l = { 1, 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

static int server(int argc, char **argv)
{
	int port = atoi(arg(argc, argv, "--port", "8080"));
	long max_s = atol(arg(argc, argv, "--max-s", "1500"));
	char binds[4096];
	snprintf(binds, sizeof(binds), "%s", arg(argc, argv, "--udp-bind", ""));
	int ep = epoll_create1(0);
	int one = 1;
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 8192)) {
		perror("npbench server: tcp bind/listen");
		return 1;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = ls };
	epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
	int udp[64], nudp = 0;
	for (char *tok = strtok(binds, ","); tok && nudp < 64; tok = strtok(NULL, ",")) {
		int u = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
		struct sockaddr_in ua = { .sin_family = AF_INET, .sin_port = htons(port) };
		if (inet_pton(AF_INET, tok, &ua.sin_addr) != 1 || bind(u, (struct sockaddr *)&ua, sizeof(ua))) {
			fprintf(stderr, "npbench server: udp bind %s: %s\n", tok, strerror(errno));
			return 1;
		}
		udp[nudp++] = u;
		ev.events = EPOLLIN;
		ev.data.fd = u;
		epoll_ctl(ep, EPOLL_CTL_ADD, u, &ev);
	}
	printf("ready\n");
	fflush(stdout);
	char buf[2048], resp[64];
	memset(resp, 'r', sizeof(resp));
	double end = now_us() + max_s * 1e6;
	struct epoll_event evs[256];
	while (now_us() < end) {
		int n = epoll_wait(ep, evs, 256, 1000);
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == ls) {
				for (;;) {
					int c = accept4(ls, NULL, NULL, SOCK_NONBLOCK);
					if (c < 0)
						break;
					ev.events = EPOLLIN;
					ev.data.fd = c;
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
				}
				continue;
			}
			int is_udp = 0;
			for (int u = 0; u < nudp; u++)
				if (udp[u] == fd)
					is_udp = 1;
			if (is_udp) {
				for (int k = 0; k < 64; k++) {
					struct sockaddr_in from;
					socklen_t fl = sizeof(from);
					ssize_t r = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
					if (r < 0)
						break;
					sendto(fd, buf, r, 0, (struct sockaddr *)&from, fl);
				}
				continue;
			}
			ssize_t r = read(fd, buf, sizeof(buf));
			if (r > 0) {
				if (write(fd, resp, sizeof(resp)) < 0) { /* the client's close comes next */ }
			} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				rst_close(fd);
			}
		}
	}
	return 0;
}

struct targets {
	struct sockaddr_in *sa;
	int n;
};

static int load_targets(const char *path, struct targets *t)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		perror(path);
		return -1;
	}
	int cap = 1024;
	t->sa = calloc(cap, sizeof(*t->sa));
	t->n = 0;
	char addr[64];
	int port;
	while (fscanf(f, "%63s %d", addr, &port) == 2) {
		if (t->n == cap)
			t->sa = realloc(t->sa, (cap *= 2) * sizeof(*t->sa));
		struct sockaddr_in *s = &t->sa[t->n];
		memset(s, 0, sizeof(*s));
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		if (inet_pton(AF_INET, addr, &s->sin_addr) == 1)
			t->n++;
	}
	fclose(f);
	return t->n > 0 ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* One request/response on a new connection; latency in us, or < 0 on failure. */
static double one_rr(const struct sockaddr_in *sa, int timeout_ms)
{
	double t0 = now_us();
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	struct pollfd p = { .fd = fd };
	char req[16], resp[64];
	memset(req, 'q', sizeof(req));
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) && errno != EINPROGRESS)
		goto fail;
	p.events = POLLOUT;
	if (poll(&p, 1, timeout_ms) != 1)
		goto fail;
	int err = 0;
	socklen_t el = sizeof(err);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
	if (err || write(fd, req, sizeof(req)) != sizeof(req))
		goto fail;
	size_t got = 0;
	while (got < sizeof(resp)) {
		p.events = POLLIN;
		if (poll(&p, 1, timeout_ms) != 1)
			goto fail;
		ssize_t r = read(fd, resp + got, sizeof(resp) - got);
		if (r <= 0)
			goto fail;
		got += r;
	}
	rst_close(fd);
	return now_us() - t0;
fail:
	rst_close(fd);
	return -1;
}

static int rr(int argc, char **argv)
{
	struct targets t;
	if (load_targets(arg(argc, argv, "--targets", ""), &t))
		return 1;
	long max_ms = atol(arg(argc, argv, "--max-ms", "2000"));
	int timeout_ms = atoi(arg(argc, argv, "--timeout-ms", "1000"));
	srand(atoi(arg(argc, argv, "--seed", "1")));
	long cap = 1 << 20, ok = 0, failed = 0;
	double *lat = malloc(cap * sizeof(double));
	double start = now_us(), end = start + max_ms * 1e3;
	while (now_us() < end && ok < cap) {
		double l = one_rr(&t.sa[rand() % t.n], timeout_ms);
		if (l < 0)
			failed++;
		else
			lat[ok++] = l;
	}
	double el = (now_us() - start) / 1e6;
	qsort(lat, ok, sizeof(double), cmp_double);
	printf("{\"ok\":%ld,\"failed\":%ld,\"elapsed_s\":%.3f,\"per_s\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f}\n", ok, failed, el,
	       ok / el, ok ? lat[ok / 2] : -1.0, ok ? lat[(long)(ok * 0.99)] : -1.0);
	return 0;
}

static int pps(int argc, char **argv)
{
	struct targets t;
	if (load_targets(arg(argc, argv, "--targets", ""), &t))
		return 1;
	long max_ms = atol(arg(argc, argv, "--max-ms", "2000"));
	int flows = atoi(arg(argc, argv, "--flows", "8"));
	int window = atoi(arg(argc, argv, "--window", "16"));
	srand(atoi(arg(argc, argv, "--seed", "1")));
	if (flows > 256)
		flows = 256;
	struct pollfd p[256];
	long sent = 0, received = 0;
	char buf[64];
	memset(buf, 'u', sizeof(buf));
	for (int i = 0; i < flows; i++) {
		p[i].fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
		p[i].events = POLLIN;
		if (connect(p[i].fd, (struct sockaddr *)&t.sa[rand() % t.n], sizeof(struct sockaddr_in)))
			return 1;
		for (int w = 0; w < window; w++)
			if (send(p[i].fd, buf, sizeof(buf), 0) == sizeof(buf))
				sent++;
	}
	double start = now_us(), end = start + max_ms * 1e3;
	double last_rx = start;
	while (now_us() < end) {
		int n = poll(p, flows, 100);
		if (n <= 0) {
			/* Lost datagrams shrink the window: refill a stalled flow. */
			if (now_us() - last_rx > 200e3)
				for (int i = 0; i < flows; i++)
					for (int w = 0; w < window; w++)
						if (send(p[i].fd, buf, sizeof(buf), 0) == sizeof(buf))
							sent++;
			continue;
		}
		for (int i = 0; i < flows; i++) {
			if (!(p[i].revents & POLLIN))
				continue;
			while (recv(p[i].fd, buf, sizeof(buf), 0) > 0) {
				received++;
				last_rx = now_us();
				if (send(p[i].fd, buf, sizeof(buf), 0) == sizeof(buf))
					sent++;
			}
		}
	}
	double el = (now_us() - start) / 1e6;
	printf("{\"sent\":%ld,\"received\":%ld,\"elapsed_s\":%.3f,\"per_s\":%.1f}\n", sent, received, el, received / el);
	return 0;
}

static uint32_t csum_add(uint32_t sum, const void *data, size_t len)
{
	const uint8_t *p = data;
	for (size_t i = 0; i + 1 < len; i += 2)
		sum += (p[i] << 8) | p[i + 1];
	if (len & 1)
		sum += p[len - 1] << 8;
	return sum;
}

static uint16_t csum_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static int parse_mac(const char *s, uint8_t *mac)
{
	return sscanf(s, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4], &mac[5]) == 6 ? 0 : -1;
}

#define FLOOD_LEN 60 /* 14 Ethernet + 20 IPv4 + 8 UDP + 18 payload */

static int flood(int argc, char **argv)
{
	struct targets t;
	if (load_targets(arg(argc, argv, "--targets", ""), &t))
		return 1;
	const char *dev = arg(argc, argv, "--dev", "eth0");
	long count = atol(arg(argc, argv, "--count", "100000"));
	long max_ms = atol(arg(argc, argv, "--max-ms", "2000"));
	int flows = atoi(arg(argc, argv, "--flows", "8"));
	uint8_t dmac[6], smac[6];
	struct in_addr src;
	if (parse_mac(arg(argc, argv, "--dst-mac", ""), dmac) || inet_pton(AF_INET, arg(argc, argv, "--src", ""), &src) != 1) {
		fprintf(stderr, "npbench flood: --dst-mac and --src are required\n");
		return 2;
	}
	if (flows < 1)
		flows = 1;
	if (flows > 64)
		flows = 64;
	int fd = socket(AF_PACKET, SOCK_RAW, 0);
	unsigned ifindex = if_nametoindex(dev);
	if (fd < 0 || !ifindex) {
		perror("npbench flood: AF_PACKET socket / device");
		return 1;
	}
	int one = 1;
	setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one));
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", dev);
	if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0) {
		perror("npbench flood: SIOCGIFHWADDR");
		return 1;
	}
	memcpy(smac, ifr.ifr_hwaddr.sa_data, 6);
	struct sockaddr_ll ll = { .sll_family = AF_PACKET, .sll_ifindex = ifindex, .sll_halen = 6 };
	memcpy(ll.sll_addr, dmac, 6);
	if (bind(fd, (struct sockaddr *)&ll, sizeof(ll)) < 0) {
		perror("npbench flood: bind");
		return 1;
	}
	static uint8_t frames[64][FLOOD_LEN];
	for (int i = 0; i < flows; i++) {
		const struct sockaddr_in *dst = &t.sa[i % t.n];
		uint8_t *f = frames[i];
		memset(f, 0, FLOOD_LEN);
		memcpy(f, dmac, 6);
		memcpy(f + 6, smac, 6);
		f[12] = 0x08;
		uint8_t *ip = f + 14, *udp = ip + 20, *pl = udp + 8;
		ip[0] = 0x45;
		ip[3] = 46; /* total length */
		ip[6] = 0x40; /* DF */
		ip[8] = 64;
		ip[9] = 17;
		memcpy(ip + 12, &src, 4);
		memcpy(ip + 16, &dst->sin_addr, 4);
		uint16_t c = csum_fold(csum_add(0, ip, 20));
		ip[10] = c >> 8;
		ip[11] = c & 0xff;
		uint16_t sport = 20000 + i, dport = ntohs(dst->sin_port);
		udp[0] = sport >> 8;
		udp[1] = sport & 0xff;
		udp[2] = dport >> 8;
		udp[3] = dport & 0xff;
		udp[5] = 26; /* UDP length */
		memset(pl, 'F', 18);
		uint8_t pseudo[12] = { 0 };
		memcpy(pseudo, ip + 12, 8);
		pseudo[9] = 17;
		pseudo[11] = 26;
		c = csum_fold(csum_add(csum_add(0, pseudo, 12), udp, 26));
		if (!c)
			c = 0xffff;
		udp[6] = c >> 8;
		udp[7] = c & 0xff;
	}
	enum { BATCH = 64 };
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	long sent = 0, errors = 0, k = 0;
	double start = now_us(), end = start + max_ms * 1e3;
	while (sent < count && now_us() < end) {
		int n = count - sent < BATCH ? (int)(count - sent) : BATCH;
		for (int i = 0; i < n; i++, k++) {
			iov[i].iov_base = frames[k % flows];
			iov[i].iov_len = FLOOD_LEN;
			memset(&msgs[i], 0, sizeof(msgs[i]));
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
		}
		int r = sendmmsg(fd, msgs, n, 0);
		if (r < 0) {
			errors++;
			if (errors > 1000000)
				break;
			continue;
		}
		sent += r;
	}
	double el = (now_us() - start) / 1e6;
	close(fd);
	printf("{\"sent\":%ld,\"errors\":%ld,\"elapsed_s\":%.3f,\"per_s\":%.1f}\n", sent, errors, el, sent / el);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2 && !strcmp(argv[1], "server"))
		return server(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "rr"))
		return rr(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "pps"))
		return pps(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "flood"))
		return flood(argc, argv);
	fprintf(stderr, "usage: npbench server|rr|pps|flood ...\n");
	return 2;
}
