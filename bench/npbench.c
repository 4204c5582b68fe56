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
 *   npbench live --netns NS --dev D --dst-mac M --src A --targets FILE --count N --max-ms MS [--flows F] [--chunk C]
 *       The same frames as flood, generated in the kernel: enters the named
 *       network namespace NS itself (refuses when that is the namespace it
 *       started in, e.g. the root one, and when D is not a veth), loads a
 *       small XDP program (writes the frame from a one-entry map, then
 *       bpf_redirect to the ifindex of D) and runs it with BPF_PROG_TEST_RUN + BPF_F_TEST_XDP_LIVE_FRAMES,
 *       C frames per call (one flow per call, the flows in turn), so each
 *       frame leaves through D to its peer (the node) without a system call
 *       per packet (the way xdp-trafficgen sends). N is capped at 10^9, MS
 *       at 60 000. The peer needs NAPI (an XDP program or GRO) or the frames
 *       are dropped at D. cpu_s is this thread's CPU time
 *       (CLOCK_THREAD_CPUTIME_ID): with the kernel's tick accounting (no
 *       IRQ time accounting) it includes the softirq work that ran on this
 *       thread's CPU while it ran, i.e. the peer's NAPI receive processing.
 *   npbench gro --dev D [--set on|off]
 *       Turns GRO on (or off) for D in the current namespace (ethtool -K D gro on,
 *       without ethtool): a veth with GRO runs NAPI, so it accepts the
 *       XDP_REDIRECT frames of `live` (and of a redirecting XDP program on
 *       its peer) without an XDP program of its own.
 *   npbench sink --netns NS --dev D1,D2,... --pin DIR
 *       The backend's counter of the floods: enters NS (refuses the
 *       namespace it started in and any device but a veth), attaches a
 *       native XDP program to each device by a BPF link that counts and
 *       drops the floods' frames (IPv4, UDP, total length 46, which no other
 *       traffic of the bench has) in a per-CPU array indexed by ifindex and
 *       passes everything else; the links and the map are pinned in DIR
 *       (links DIR/link-D, map DIR/count), so the counter outlives this
 *       process and goes with DIR and NS. The program also gives the veth
 *       NAPI, which XDP_REDIRECT into it needs.
 *   npbench sink-count --pin DIR --ifindex I
 *       The sum over CPUs of the counter of ifindex I.
 *   npbench progcost --pin PROG --targets FILE --repeat N
 *       The XDP program pinned at PROG against a bare XDP_PASS program, on
 *       the flood's frame to the first target: BPF_PROG_TEST_RUN (not live:
 *       nothing is sent) with N repeats each, three times in turn; prints
 *       the kernel's ns per run of both (medians) and their difference,
 *       which is the program's own cost without bpf_stats' clock reads.
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
#include <linux/bpf.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

/* Frame i of a flood: UDP from src:20000+i to target i (mod n), full checksums. */
static void build_frames(uint8_t frames[][FLOOD_LEN], int flows, const struct targets *tp, const uint8_t *dmac, const uint8_t *smac, struct in_addr src)
{
	const struct targets t = *tp;
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
}

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
	build_frames(frames, flows, &t, dmac, smac, src);
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

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

/* Loads a raw-instruction XDP program (sink, live generator, progcost's bare
 * XDP_PASS); on failure says why under `who`, with the verifier's log. */
static int load_xdp_insns(const struct bpf_insn *insns, int n, const char *name, __u32 attach_type,
			  const char *who)
{
	static char license[] = "GPL", log[16384];
	union bpf_attr la;
	int prog;

	memset(&la, 0, sizeof(la));
	la.prog_type = BPF_PROG_TYPE_XDP;
	la.expected_attach_type = attach_type;
	la.insns = (uintptr_t)insns;
	la.insn_cnt = n;
	la.license = (uintptr_t)license;
	la.log_buf = (uintptr_t)log;
	la.log_size = sizeof(log);
	la.log_level = 1;
	strncpy(la.prog_name, name, sizeof(la.prog_name) - 1);
	prog = sys_bpf(BPF_PROG_LOAD, &la);
	if (prog < 0)
		fprintf(stderr, "%s: BPF_PROG_LOAD: %s\n%s\n", who, strerror(errno), log);
	return prog;
}

static int netns_ino(unsigned long *ino)
{
	struct stat st;
	if (stat("/proc/self/ns/net", &st))
		return -1;
	*ino = st.st_ino;
	return 0;
}

/* 1 when dev (in the current netns) is a veth (ethtool driver name). */
static int is_veth(const char *dev)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct ethtool_drvinfo di = { .cmd = ETHTOOL_GDRVINFO };
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", dev);
	ifr.ifr_data = (void *)&di;
	int ok = fd >= 0 && ioctl(fd, SIOCETHTOOL, &ifr) == 0 && !strcmp(di.driver, "veth");
	if (fd >= 0)
		close(fd);
	return ok;
}

static int possible_cpus(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
	int lo = 0, hi = 0;
	if (!f)
		return -1;
	int n = fscanf(f, "%d-%d", &lo, &hi);
	fclose(f);
	return n == 2 ? hi + 1 : n == 1 ? lo + 1 : -1;
}

/* Enters /run/netns/NAME; -1 unless that is another namespace than ours. */
static int enter_netns(const char *ns, const char *who)
{
	unsigned long ino0, ino1;
	char nspath[300];
	if (!*ns || strchr(ns, '/')) {
		fprintf(stderr, "%s: --netns NAME is required\n", who);
		return -1;
	}
	snprintf(nspath, sizeof(nspath), "/run/netns/%s", ns);
	int nsfd = open(nspath, O_RDONLY | O_CLOEXEC);
	if (netns_ino(&ino0) || nsfd < 0 || setns(nsfd, CLONE_NEWNET) || netns_ino(&ino1)) {
		fprintf(stderr, "%s: entering the namespace %s: %s\n", who, ns, strerror(errno));
		return -1;
	}
	close(nsfd);
	if (ino0 == ino1) {
		fprintf(stderr, "%s: %s is the namespace this process started in: refusing\n", who, ns);
		return -1;
	}
	return 0;
}

static int obj_pin(int fd, const char *path)
{
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.pathname = (uintptr_t)path;
	a.bpf_fd = fd;
	return sys_bpf(BPF_OBJ_PIN, &a);
}

#define SINK_SLOTS 1024

static int sink(int argc, char **argv)
{
	char devs[1024];
	const char *pin = arg(argc, argv, "--pin", "");
	snprintf(devs, sizeof(devs), "%s", arg(argc, argv, "--dev", ""));
	if (!*pin || !*devs) {
		fprintf(stderr, "npbench sink: --dev and --pin are required\n");
		return 2;
	}
	if (enter_netns(arg(argc, argv, "--netns", ""), "npbench sink"))
		return 1;
	union bpf_attr ma;
	memset(&ma, 0, sizeof(ma));
	ma.map_type = BPF_MAP_TYPE_PERCPU_ARRAY;
	ma.key_size = 4;
	ma.value_size = 8;
	ma.max_entries = SINK_SLOTS;
	int map = sys_bpf(BPF_MAP_CREATE, &ma);
	if (map < 0) {
		perror("npbench sink: BPF_MAP_CREATE");
		return 1;
	}
	/*
	 * if (data + 34 > data_end) pass; if (eth proto != IPv4 || ip proto != UDP
	 * || ip total length != 46) pass; k = ingress_ifindex; if (k >= SLOTS) pass;
	 * v = map[k]; if (v) *v += 1 (per-CPU); return XDP_DROP; pass: XDP_PASS
	 */
	struct bpf_insn insns[48];
	int n = 0, jp[8], np_ = 0;
#define I(c, d, s_, o, i_) (insns[n++] = (struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s_), .off = (o), .imm = (i_) })
#define JPASS(c, d, s_, i_) (jp[np_++] = n, I((c), (d), (s_), 0, (i_)))
	I(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_6, BPF_REG_1, 0, 0);
	I(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_6, 0, 0);
	I(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_3, BPF_REG_6, 4, 0);
	I(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_2, 0, 0);
	I(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_1, 0, 0, 34);
	JPASS(BPF_JMP | BPF_JGT | BPF_X, BPF_REG_1, BPF_REG_3, 0);
	I(BPF_LDX | BPF_MEM | BPF_H, BPF_REG_4, BPF_REG_2, 12, 0);
	JPASS(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_4, 0, htons(0x0800));
	I(BPF_LDX | BPF_MEM | BPF_B, BPF_REG_4, BPF_REG_2, 23, 0);
	JPASS(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_4, 0, 17);
	I(BPF_LDX | BPF_MEM | BPF_H, BPF_REG_4, BPF_REG_2, 16, 0);
	JPASS(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_4, 0, htons(46));
	I(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_4, BPF_REG_6, 12, 0); /* ingress_ifindex */
	JPASS(BPF_JMP | BPF_JGE | BPF_K, BPF_REG_4, 0, SINK_SLOTS);
	I(BPF_STX | BPF_MEM | BPF_W, BPF_REG_10, BPF_REG_4, -4, 0);
	I(BPF_LD | BPF_DW | BPF_IMM, BPF_REG_1, BPF_PSEUDO_MAP_FD, 0, map);
	I(0, 0, 0, 0, 0);
	I(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_10, 0, 0);
	I(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, -4);
	I(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_map_lookup_elem);
	I(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_0, 0, 3, 0); /* to the drop */
	I(BPF_LDX | BPF_MEM | BPF_DW, BPF_REG_1, BPF_REG_0, 0, 0);
	I(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_1, 0, 0, 1);
	I(BPF_STX | BPF_MEM | BPF_DW, BPF_REG_0, BPF_REG_1, 0, 0);
	I(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, XDP_DROP);
	I(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
	for (int k = 0; k < np_; k++)
		insns[jp[k]].off = n - jp[k] - 1;
	I(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, XDP_PASS);
	I(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
#undef JPASS
#undef I
	int prog = load_xdp_insns(insns, n, "npbench_sink", BPF_XDP, "npbench sink");
	if (prog < 0)
		return 1;
	char path[512];
	snprintf(path, sizeof(path), "%s/count", pin);
	if (obj_pin(map, path)) {
		fprintf(stderr, "npbench sink: pin %s: %s\n", path, strerror(errno));
		return 1;
	}
	printf("{\"ifindex\":{");
	int first = 1;
	for (char *dev = strtok(devs, ","); dev; dev = strtok(NULL, ",")) {
		unsigned ifindex = if_nametoindex(dev);
		if (!ifindex || ifindex >= SINK_SLOTS || !is_veth(dev)) {
			fprintf(stderr, "npbench sink: %s is not a veth (ifindex < %d) here: refusing\n", dev, SINK_SLOTS);
			return 1;
		}
		union bpf_attr ka;
		memset(&ka, 0, sizeof(ka));
		ka.link_create.prog_fd = prog;
		ka.link_create.target_ifindex = ifindex;
		ka.link_create.attach_type = BPF_XDP;
		ka.link_create.flags = XDP_FLAGS_DRV_MODE;
		int link = sys_bpf(BPF_LINK_CREATE, &ka);
		snprintf(path, sizeof(path), "%s/link-%s", pin, dev);
		if (link < 0 || obj_pin(link, path)) {
			fprintf(stderr, "npbench sink: attach/pin %s: %s\n", dev, strerror(errno));
			return 1;
		}
		close(link);
		printf("%s\"%s\":%u", first ? "" : ",", dev, ifindex);
		first = 0;
	}
	printf("}}\n");
	return 0;
}

static int sink_count(int argc, char **argv)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/count", arg(argc, argv, "--pin", ""));
	uint32_t key = atoi(arg(argc, argv, "--ifindex", "0"));
	int ncpu = possible_cpus();
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.pathname = (uintptr_t)path;
	int map = sys_bpf(BPF_OBJ_GET, &a);
	if (map < 0 || ncpu < 1 || ncpu > 4096) {
		fprintf(stderr, "npbench sink-count: %s: %s\n", path, strerror(errno));
		return 1;
	}
	static uint64_t vals[4096];
	memset(&a, 0, sizeof(a));
	a.map_fd = map;
	a.key = (uintptr_t)&key;
	a.value = (uintptr_t)vals;
	if (sys_bpf(BPF_MAP_LOOKUP_ELEM, &a)) {
		perror("npbench sink-count: lookup");
		return 1;
	}
	uint64_t sum = 0;
	for (int c = 0; c < ncpu; c++)
		sum += vals[c];
	close(map);
	printf("{\"count\":%llu}\n", (unsigned long long)sum);
	return 0;
}

static int test_run_ns(int prog, const uint8_t *frame, long repeat, double *ns)
{
	union bpf_attr ta;
	memset(&ta, 0, sizeof(ta));
	ta.test.prog_fd = prog;
	ta.test.data_in = (uintptr_t)frame;
	ta.test.data_size_in = FLOOD_LEN;
	ta.test.repeat = repeat;
	if (sys_bpf(BPF_PROG_TEST_RUN, &ta))
		return -1;
	*ns = ta.test.duration;
	return (int)ta.test.retval;
}

static int cmp_dbl3(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int progcost(int argc, char **argv)
{
	struct targets t;
	if (load_targets(arg(argc, argv, "--targets", ""), &t))
		return 1;
	long repeat = atol(arg(argc, argv, "--repeat", "1000000"));
	if (repeat < 1 || repeat > 100000000L) {
		fprintf(stderr, "npbench progcost: --repeat 1..1e8\n");
		return 2;
	}
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.pathname = (uintptr_t)arg(argc, argv, "--pin", "");
	int prog = sys_bpf(BPF_OBJ_GET, &a);
	struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = XDP_PASS },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	int pass = load_xdp_insns(insns, 2, "npbench_pass", 0, "npbench progcost");
	if (prog < 0 || pass < 0) {
		perror("npbench progcost: program");
		return 1;
	}
	static uint8_t frames[1][FLOOD_LEN];
	uint8_t mac[6] = { 0x02, 0, 0, 0, 0, 1 };
	struct in_addr src;
	inet_pton(AF_INET, "198.18.64.1", &src);
	build_frames(frames, 1, &t, mac, mac, src);
	double p[3], b[3];
	int rv = 0;
	for (int i = 0; i < 3; i++) {
		if ((rv = test_run_ns(prog, frames[0], repeat, &p[i])) < 0 || test_run_ns(pass, frames[0], repeat, &b[i]) < 0) {
			perror("npbench progcost: BPF_PROG_TEST_RUN");
			return 1;
		}
	}
	qsort(p, 3, sizeof(double), cmp_dbl3);
	qsort(b, 3, sizeof(double), cmp_dbl3);
	printf("{\"prog_ns\":%.2f,\"pass_ns\":%.2f,\"cost_ns\":%.2f,\"retval\":%d,\"repeat\":%ld}\n", p[1], b[1], p[1] - b[1], rv, repeat);
	return 0;
}

static int gro(int argc, char **argv)
{
	const char *dev = arg(argc, argv, "--dev", "");
	struct ethtool_value v = { .cmd = ETHTOOL_SGRO, .data = strcmp(arg(argc, argv, "--set", "on"), "off") != 0 };
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", dev);
	ifr.ifr_data = (void *)&v;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (!*dev || fd < 0 || ioctl(fd, SIOCETHTOOL, &ifr) < 0) {
		perror("npbench gro: SIOCETHTOOL ETHTOOL_SGRO");
		return 1;
	}
	close(fd);
	printf("{\"gro\":%d}\n", (int)v.data);
	return 0;
}

static int live(int argc, char **argv)
{
	struct targets t;
	if (load_targets(arg(argc, argv, "--targets", ""), &t))
		return 1;
	const char *ns = arg(argc, argv, "--netns", "");
	const char *dev = arg(argc, argv, "--dev", "eth0");
	long count = atol(arg(argc, argv, "--count", "1000000"));
	long max_ms = atol(arg(argc, argv, "--max-ms", "2000"));
	int flows = atoi(arg(argc, argv, "--flows", "8"));
	long chunk = atol(arg(argc, argv, "--chunk", "4096"));
	uint8_t dmac[6], smac[6];
	struct in_addr src;
	if (parse_mac(arg(argc, argv, "--dst-mac", ""), dmac) || inet_pton(AF_INET, arg(argc, argv, "--src", ""), &src) != 1 || !*ns || strchr(ns, '/')) {
		fprintf(stderr, "npbench live: --netns NAME, --dst-mac and --src are required\n");
		return 2;
	}
	if (count < 1 || count > 1000000000L || max_ms < 1 || max_ms > 60000 || chunk < 1 || chunk > 1 << 20) {
		fprintf(stderr, "npbench live: --count 1..1e9, --max-ms 1..60000, --chunk 1..2^20\n");
		return 2;
	}
	flows = flows < 1 ? 1 : flows > 64 ? 64 : flows;
	/* Safety: only ever from a namespace entered here, never the one we started in. */
	if (enter_netns(ns, "npbench live"))
		return 1;
	unsigned ifindex = if_nametoindex(dev);
	if (!ifindex || !is_veth(dev)) {
		fprintf(stderr, "npbench live: %s is not a veth in %s: refusing\n", dev, ns);
		return 1;
	}
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", dev);
	if (fd < 0 || ioctl(fd, SIOCGIFHWADDR, &ifr) < 0) {
		perror("npbench live: SIOCGIFHWADDR");
		return 1;
	}
	close(fd);
	memcpy(smac, ifr.ifr_hwaddr.sa_data, 6);
	static uint8_t frames[64][FLOOD_LEN];
	build_frames(frames, flows, &t, dmac, smac, src);
	/*
	 * Pages of the live-frames page pool come back with whatever the node
	 * wrote into them (its NAT rewrites the frame in place) and the kernel
	 * resets only the pointers, not the bytes. So the program writes the
	 * frame again from a one-entry array map (this call's flow) every
	 * time, then redirects it out of D:
	 *   if (data + 60 > data_end) return XDP_DROP;
	 *   v = map[0]; if (!v) return XDP_DROP;
	 *   memcpy(data, v, 60); return bpf_redirect(ifindex, 0);
	 */
	union bpf_attr ma;
	memset(&ma, 0, sizeof(ma));
	ma.map_type = BPF_MAP_TYPE_ARRAY;
	ma.key_size = 4;
	ma.value_size = 64;
	ma.max_entries = 1;
	int map = sys_bpf(BPF_MAP_CREATE, &ma);
	if (map < 0) {
		perror("npbench live: BPF_MAP_CREATE");
		return 1;
	}
	struct bpf_insn insns[48];
	int n = 0, j_short, j_null;
#define I(c, d, s_, o, i_) (insns[n++] = (struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s_), .off = (o), .imm = (i_) })
	I(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_6, BPF_REG_1, 0, 0);
	I(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_7, BPF_REG_6, 0, 0); /* data */
	I(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_8, BPF_REG_6, 4, 0); /* data_end */
	I(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_7, 0, 0);
	I(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_1, 0, 0, FLOOD_LEN);
	j_short = n;
	I(BPF_JMP | BPF_JGT | BPF_X, BPF_REG_1, BPF_REG_8, 0, 0);
	I(BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, -4, 0);
	I(BPF_LD | BPF_DW | BPF_IMM, BPF_REG_1, BPF_PSEUDO_MAP_FD, 0, map);
	I(0, 0, 0, 0, 0);
	I(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_10, 0, 0);
	I(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, -4);
	I(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_map_lookup_elem);
	j_null = n;
	I(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_0, 0, 0, 0);
	for (int w = 0; w < 56; w += 8) {
		I(BPF_LDX | BPF_MEM | BPF_DW, BPF_REG_1, BPF_REG_0, w, 0);
		I(BPF_STX | BPF_MEM | BPF_DW, BPF_REG_7, BPF_REG_1, w, 0);
	}
	I(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_1, BPF_REG_0, 56, 0);
	I(BPF_STX | BPF_MEM | BPF_W, BPF_REG_7, BPF_REG_1, 56, 0);
	I(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_1, 0, 0, (int)ifindex);
	I(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_2, 0, 0, 0);
	I(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_redirect);
	I(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
	insns[j_short].off = n - j_short - 1;
	insns[j_null].off = n - j_null - 1;
	I(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, XDP_DROP);
	I(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
#undef I
	int prog = load_xdp_insns(insns, n, "npbench_live", 0, "npbench live");
	if (prog < 0)
		return 1;
	long sent = 0, calls = 0;
	struct timespec c0, c1;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	double start = now_us(), end = start + max_ms * 1e3;
	while (sent < count && now_us() < end) {
		long n = count - sent < chunk ? count - sent : chunk;
		uint32_t key = 0;
		uint8_t value[64] = { 0 };
		memcpy(value, frames[calls % flows], FLOOD_LEN);
		union bpf_attr ua;
		memset(&ua, 0, sizeof(ua));
		ua.map_fd = map;
		ua.key = (uintptr_t)&key;
		ua.value = (uintptr_t)value;
		if (sys_bpf(BPF_MAP_UPDATE_ELEM, &ua)) {
			perror("npbench live: BPF_MAP_UPDATE_ELEM");
			return 1;
		}
		union bpf_attr ta;
		memset(&ta, 0, sizeof(ta));
		ta.test.prog_fd = prog;
		ta.test.data_in = (uintptr_t)frames[calls % flows];
		ta.test.data_size_in = FLOOD_LEN;
		ta.test.repeat = n;
		ta.test.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
		if (sys_bpf(BPF_PROG_TEST_RUN, &ta)) {
			fprintf(stderr, "npbench live: BPF_PROG_TEST_RUN: %s\n", strerror(errno));
			return 1;
		}
		sent += n;
		calls++;
	}
	double el = (now_us() - start) / 1e6;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	double cpu = (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) / 1e9;
	close(prog);
	close(map);
	printf("{\"sent\":%ld,\"calls\":%ld,\"elapsed_s\":%.3f,\"cpu_s\":%.4f,\"per_s\":%.1f}\n", sent, calls, el, cpu, sent / el);
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
	if (argc >= 2 && !strcmp(argv[1], "live"))
		return live(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "sink"))
		return sink(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "sink-count"))
		return sink_count(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "progcost"))
		return progcost(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "gro"))
		return gro(argc, argv);
	fprintf(stderr, "usage: npbench server|rr|pps|flood|live|gro|sink|sink-count|progcost ...\n");
	return 2;
}
