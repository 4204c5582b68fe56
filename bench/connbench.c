// SPDX-License-Identifier: Apache-2.0
/*
 * connbench: new-connection latency load generator for `make bench`.
 *
 * Opens COUNT new connections (TCP) or request/reply exchanges (UDP), one at a
 * time, each to a target picked at random from a list of "address port" lines,
 * and prints one JSON object with latency percentiles and the rate.
 *
 *   connbench --proto tcp|udp --targets FILE --count N --max-ms MS [--seed S]
 *             [--timeout-ms MS] [--warmup N] [--check-peer] [--diag]
 *
 * TCP: the time from connect() to "established" (non-blocking connect, then
 * poll for writability, so a SYN that goes nowhere costs at most timeout-ms
 * instead of the kernel's two-minute retry ladder). Every socket is closed
 * with SO_LINGER {on, 0}: an RST instead of a FIN, so neither side keeps a
 * TIME_WAIT socket. Without that, many VIPs DNAT'ed onto the same ten backend
 * ports collide with old TIME_WAIT sockets and PAWS drops the new SYN (p99 of
 * every NAT mode jumps to ~10 ms; see docs/bench.md).
 *
 * UDP: a fresh socket per exchange (a new source port = a new flow, as a new
 * connection is for TCP), sendto() of a 16-byte request, poll + recvfrom()
 * of the reply; the time from sendto() to the reply. With --check-peer the
 * reply's source (UDP) or getpeername() (TCP) must equal the target the
 * client addressed: a service translation that leaks the backend address is
 * counted as wrong_peer.
 *
 * A target's address is IPv4 or IPv6 ("fd00:19::1 80"); each connection's
 * socket is of the target's family.
 *
 * --diag (TCP; not for the bench's rounds: one more syscall per connect):
 * also prints to stderr how many connects were still in progress when
 * connect() returned (the handshake left to another context) and the p50 of
 * each kind (docs/bench.md, "Why the pairing and the fixed CPUs").
 *
 * Both loops are bounded by COUNT and by MS of wall time.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct target {
	union {
		struct sockaddr sa;
		struct sockaddr_in in4;
		struct sockaddr_in6 in6;
	} u;
	socklen_t len;
};

struct options {
	int udp;
	const char *targets_path;
	long count;
	long max_ms;
	long timeout_ms;
	long warmup;
	uint64_t seed;
	int check_peer;
	int diag;
};

struct counters {
	long attempted;
	long ok;
	long timeouts;
	long refused;
	long other_errors;
	long wrong_peer;
	long waited; /* --diag: connects still in progress when connect() returned */
	int last_errno;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: cheap, good enough to spread picks over the target list. */
static uint64_t rng_state;
static uint64_t rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static void die(const char *what, const char *why)
{
	fprintf(stderr, "connbench: %s: %s\n", what, why);
	exit(2);
}

static struct target *load_targets(const char *path, long *n_out)
{
	FILE *f = fopen(path, "r");
	if (!f)
		die(path, strerror(errno));
	long cap = 1024, n = 0;
	struct target *t = malloc(cap * sizeof(*t));
	char addr[64];
	unsigned port;
	while (fscanf(f, "%63s %u", addr, &port) == 2) {
		if (n == cap) {
			cap *= 2;
			t = realloc(t, cap * sizeof(*t));
			if (!t)
				die("targets", "out of memory");
		}
		memset(&t[n], 0, sizeof(t[n]));
		int ok;
		if (strchr(addr, ':')) {
			t[n].u.in6.sin6_family = AF_INET6;
			t[n].u.in6.sin6_port = htons((uint16_t)port);
			t[n].len = sizeof(t[n].u.in6);
			ok = inet_pton(AF_INET6, addr, &t[n].u.in6.sin6_addr) == 1;
		} else {
			t[n].u.in4.sin_family = AF_INET;
			t[n].u.in4.sin_port = htons((uint16_t)port);
			t[n].len = sizeof(t[n].u.in4);
			ok = inet_pton(AF_INET, addr, &t[n].u.in4.sin_addr) == 1;
		}
		if (!ok || port == 0 || port > 65535)
			die(path, "bad line (want \"address port\", IPv4 or IPv6)");
		n++;
	}
	fclose(f);
	if (n == 0)
		die(path, "no targets");
	*n_out = n;
	return t;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void note_error(struct counters *c, int err)
{
	c->last_errno = err;
	if (err == ETIMEDOUT)
		c->timeouts++;
	else if (err == ECONNREFUSED)
		c->refused++;
	else
		c->other_errors++;
}

static int same_peer(const struct sockaddr_storage *a, const struct target *b)
{
	if (a->ss_family != b->u.sa.sa_family)
		return 0;
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a;
		return !memcmp(&x->sin6_addr, &b->u.in6.sin6_addr, sizeof(x->sin6_addr)) && x->sin6_port == b->u.in6.sin6_port;
	}
	const struct sockaddr_in *x = (const struct sockaddr_in *)a;
	return x->sin_addr.s_addr == b->u.in4.sin_addr.s_addr && x->sin_port == b->u.in4.sin_port;
}

/* One TCP connection; returns latency in ns, or 0 on failure (counted). */
static uint64_t tcp_once(const struct target *t, const struct options *o, struct counters *c, int *waited)
{
	int fd = socket(t->u.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket(tcp)", strerror(errno));
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	uint64_t lat = 0;
	uint64_t t0 = now_ns();
	int rc = connect(fd, &t->u.sa, t->len);
	if (rc < 0 && errno != EINPROGRESS) {
		note_error(c, errno);
		goto out;
	}
	if (rc < 0) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		if (o->diag) {
			/* Off the bench's path: one more syscall per connect. Was
			 * the handshake done inside connect() (the SYN, the SYN-ACK
			 * and the ACK all processed in this thread's softirq), or
			 * must the client wait for another context to run it? */
			struct pollfd q = p;
			if (poll(&q, 1, 0) == 0) {
				c->waited++;
				*waited = 1;
			}
		}
		int pr = poll(&p, 1, (int)o->timeout_ms);
		if (pr == 0) {
			note_error(c, ETIMEDOUT);
			goto out;
		}
		int err = 0;
		socklen_t len = sizeof(err);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
		if (err) {
			note_error(c, err);
			goto out;
		}
	}
	lat = now_ns() - t0;
	if (lat == 0)
		lat = 1;
	if (o->check_peer) {
		struct sockaddr_storage peer;
		socklen_t len = sizeof(peer);
		if (getpeername(fd, (struct sockaddr *)&peer, &len) == 0 && !same_peer(&peer, t))
			c->wrong_peer++;
	}
out:
	close(fd);
	return lat;
}

/* One UDP request/reply on a fresh socket; latency in ns, or 0 on failure. */
static uint64_t udp_once(const struct target *t, const struct options *o, struct counters *c)
{
	int fd = socket(t->u.sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket(udp)", strerror(errno));
	char req[16] = "connbench-ping!";
	char buf[64];
	uint64_t lat = 0;
	uint64_t t0 = now_ns();
	if (sendto(fd, req, sizeof(req), 0, &t->u.sa, t->len) < 0) {
		note_error(c, errno);
		goto out;
	}
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int pr = poll(&p, 1, (int)o->timeout_ms);
	if (pr == 0) {
		note_error(c, ETIMEDOUT);
		goto out;
	}
	struct sockaddr_storage from;
	socklen_t flen = sizeof(from);
	ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
	if (n < 0) {
		note_error(c, errno);
		goto out;
	}
	lat = now_ns() - t0;
	if (lat == 0)
		lat = 1;
	if (o->check_peer && !same_peer(&from, t))
		c->wrong_peer++;
out:
	close(fd);
	return lat;
}

static double cpu_between(const struct rusage *a, const struct rusage *b)
{
	return (double)(b->ru_utime.tv_sec - a->ru_utime.tv_sec) +
	       (double)(b->ru_utime.tv_usec - a->ru_utime.tv_usec) / 1e6 +
	       (double)(b->ru_stime.tv_sec - a->ru_stime.tv_sec) +
	       (double)(b->ru_stime.tv_usec - a->ru_stime.tv_usec) / 1e6;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: connbench --proto tcp|udp --targets FILE --count N --max-ms MS\n"
		"                 [--seed S] [--timeout-ms MS] [--warmup N] [--check-peer] [--diag]\n");
	exit(2);
}

static void parse(int argc, char **argv, struct options *o)
{
	memset(o, 0, sizeof(*o));
	o->count = 1000;
	o->max_ms = 10000;
	o->timeout_ms = 1000;
	o->seed = (uint64_t)now_ns() ^ (uint64_t)getpid();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--check-peer")) {
			o->check_peer = 1;
			continue;
		}
		if (!strcmp(a, "--diag")) {
			o->diag = 1;
			continue;
		}
		if (!v)
			usage();
		if (!strcmp(a, "--proto")) {
			if (!strcmp(v, "udp"))
				o->udp = 1;
			else if (strcmp(v, "tcp"))
				usage();
		} else if (!strcmp(a, "--targets"))
			o->targets_path = v;
		else if (!strcmp(a, "--count"))
			o->count = atol(v);
		else if (!strcmp(a, "--max-ms"))
			o->max_ms = atol(v);
		else if (!strcmp(a, "--timeout-ms"))
			o->timeout_ms = atol(v);
		else if (!strcmp(a, "--warmup"))
			o->warmup = atol(v);
		else if (!strcmp(a, "--seed"))
			o->seed = strtoull(v, NULL, 0);
		else
			usage();
		i++;
	}
	if (!o->targets_path || o->count <= 0 || o->max_ms <= 0 || o->timeout_ms <= 0)
		usage();
}

int main(int argc, char **argv)
{
	struct options o;
	parse(argc, argv, &o);
	rng_state = o.seed ? o.seed : 0x9e3779b97f4a7c15ull;
	long n_targets;
	struct target *targets = load_targets(o.targets_path, &n_targets);
	uint64_t *lat = calloc((size_t)o.count, sizeof(*lat));
	uint64_t *lat_w = calloc((size_t)o.count, sizeof(*lat_w)); /* --diag: waited */
	uint64_t *lat_i = calloc((size_t)o.count, sizeof(*lat_i)); /* --diag: inline */
	long n_w = 0, n_i = 0;
	if (!lat || !lat_w || !lat_i)
		die("samples", "out of memory");
	struct counters c = { 0 }, warm = { 0 };
	struct rusage ru_start;
	getrusage(RUSAGE_SELF, &ru_start);

	/* Warm-up: fill caches, ARP/neighbour entries and the listen queues. */
	for (long i = 0; i < o.warmup; i++) {
		const struct target *t = &targets[rng_next() % (uint64_t)n_targets];
		int w = 0;
		(void)(o.udp ? udp_once(t, &o, &warm) : tcp_once(t, &o, &warm, &w));
	}

	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
	uint64_t start = now_ns();
	uint64_t deadline = start + (uint64_t)o.max_ms * 1000000ull;
	long n_ok = 0;
	for (long i = 0; i < o.count; i++) {
		if (now_ns() >= deadline)
			break;
		const struct target *t = &targets[rng_next() % (uint64_t)n_targets];
		c.attempted++;
		int w = 0;
		uint64_t l = o.udp ? udp_once(t, &o, &c) : tcp_once(t, &o, &c, &w);
		if (l) {
			lat[n_ok++] = l;
			c.ok++;
			if (w)
				lat_w[n_w++] = l;
			else
				lat_i[n_i++] = l;
		}
	}
	uint64_t elapsed = now_ns() - start;
	getrusage(RUSAGE_SELF, &ru1);

	qsort(lat, (size_t)n_ok, sizeof(*lat), cmp_u64);
	qsort(lat_w, (size_t)n_w, sizeof(*lat_w), cmp_u64);
	qsort(lat_i, (size_t)n_i, sizeof(*lat_i), cmp_u64);
	double sum = 0;
	for (long i = 0; i < n_ok; i++)
		sum += (double)lat[i];
#define PCT(p) (n_ok ? (double)lat[(long)((double)(n_ok - 1) * (p))] / 1000.0 : 0.0)
	double secs = (double)elapsed / 1e9;
	double cpu_s = cpu_between(&ru0, &ru1);
	double cpu_total_s = cpu_between(&ru_start, &ru1);
	printf("{\"proto\":\"%s\",\"targets\":%ld,\"attempted\":%ld,\"ok\":%ld,"
	       "\"timeouts\":%ld,\"refused\":%ld,\"other_errors\":%ld,\"last_errno\":%d,"
	       "\"wrong_peer\":%ld,\"warmup_failed\":%ld,\"elapsed_s\":%.6f,\"per_s\":%.1f,"
	       "\"p50_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f,\"max_us\":%.2f,\"mean_us\":%.2f,"
	       "\"client_cpu_s\":%.6f,\"ops_total\":%ld,\"client_cpu_total_s\":%.6f}\n",
	       o.udp ? "udp" : "tcp", n_targets, c.attempted, c.ok, c.timeouts, c.refused,
	       c.other_errors, c.last_errno, c.wrong_peer,
	       warm.timeouts + warm.refused + warm.other_errors, secs,
	       secs > 0 ? (double)c.ok / secs : 0.0, PCT(0.50), PCT(0.90), PCT(0.99),
	       n_ok ? (double)lat[n_ok - 1] / 1000.0 : 0.0, n_ok ? sum / (double)n_ok / 1000.0 : 0.0,
	       cpu_s, c.attempted + o.warmup, cpu_total_s);
	if (o.diag && !o.udp)
		fprintf(stderr, "{\"waited\":%ld,\"inline\":%ld,\"p50_waited_us\":%.2f,\"p50_inline_us\":%.2f}\n",
			n_w, n_i, n_w ? (double)lat_w[n_w / 2] / 1000.0 : 0.0, n_i ? (double)lat_i[n_i / 2] / 1000.0 : 0.0);
	free(lat_w);
	free(lat_i);
	free(lat);
	free(targets);
	return 0;
}
