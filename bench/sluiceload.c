// SPDX-License-Identifier: Apache-2.0
/*
 * sluiceload: puts Sluice's socket LB (build/sock_lb.bpf.o) into a bench
 * cgroup and fills its maps with many Services fast.
 *
 *   sluiceload attach --obj OBJ --bpffs DIR --cgroup CG --service-entries N
 *                     --backends N --revnat N [--ranges N]
 *   sluiceload fill --bpffs DIR --services FILE --backends A:P,A:P,... [--algorithm LB_ALG_*]
 *
 * attach: opens the object with libbpf, sizes the services/ranges/backends/
 * rev-NAT maps for the scale being measured (the default range array in
 * sluice_abi.h holds 524 288 backend ids, fewer than 100 000 Services x 2
 * protocols x 10 backends need; --ranges defaults to 10 per service entry), pins every map under DIR by name (the layout the agent and
 * `sluice` CLI read), and attaches each program to CG with BPF_PROG_ATTACH
 * (no link: the attachment outlives this process and goes away with the
 * cgroup). CG must be a child cgroup the bench created.
 *
 * fill: FILE has one "vip port proto" line per service port. Writes, in the
 * agent's make-before-break order, one backend per distinct address:port/proto
 * (ids from 1), one rev-NAT entry per distinct vip:port (ids from 1), each
 * frontend's range of backend ids (contiguous, from index 0) and then the
 * master entries (range start + count), with BPF_MAP_UPDATE_BATCH.
 * Same entries, same semantics as src/datapath/programmer.ts.
 *
 * IPv6 (issue 14): a FILE of IPv6 VIPs ("fd00:19::1 80 tcp") with IPv6
 * backends ("[fd00:18:1::1]:8080,...") fills the IPv6 maps instead, in the
 * same range layout (backends, rev-NAT, ranges, then the masters). Its
 * backend ids start at LOAD6_BE_BASE (above IPv4's, at most 512) and its
 * rev-NAT ids end at the top of the rev-NAT array (IPv4's start at 1), so
 * both families filled into one bpffs directory never share an id (the agent
 * draws both from one pool) and every id indexes its ARRAY. attach sizes the
 * IPv6 service map with --service6-entries (masters), its range array as
 * IPv4's (--ranges; without it 10 per master, at least the default) and its
 * rev-NAT map like IPv4's.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice_abi.h"

#define STR2(x) #x
#define STR(x) STR2(x)

static void die(const char *what, const char *why)
{
	fprintf(stderr, "sluiceload: %s: %s\n", what, why);
	exit(1);
}

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	if (!def)
		die(name, "missing argument");
	return def;
}

static int cmd_attach(int argc, char **argv)
{
	const char *obj_path = arg(argc, argv, "--obj", NULL);
	const char *dir = arg(argc, argv, "--bpffs", NULL);
	const char *cg = arg(argc, argv, "--cgroup", NULL);
	long svc_max = atol(arg(argc, argv, "--service-entries", "262144"));
	long be_max = atol(arg(argc, argv, "--backends", "131072"));
	long rn_max = atol(arg(argc, argv, "--revnat", "65536"));
	long rng_max = atol(arg(argc, argv, "--ranges", "0"));
	long svc6_max = atol(arg(argc, argv, "--service6-entries", "0"));

	struct bpf_object *obj = bpf_object__open_file(obj_path, NULL);
	if (!obj)
		die(obj_path, strerror(errno));
	struct bpf_map *m;
	char pin[4096];
	bpf_object__for_each_map(m, obj) {
		const char *name = bpf_map__name(m);
		if (name[0] == '.')
			continue; /* .rodata/.bss: internal, not pinned */
		snprintf(pin, sizeof(pin), "%s/%s", dir, name);
		if (bpf_map__set_pin_path(m, pin))
			die(pin, "set_pin_path failed");
		long max = 0;
		if (!strcmp(name, STR(SLUICE_MAP_SERVICES4)))
			max = svc_max;
		else if (!strcmp(name, STR(SLUICE_MAP_BACKENDS4)))
			max = be_max;
		else if (!strcmp(name, STR(SLUICE_MAP_REVNAT4)) || !strcmp(name, STR(SLUICE_MAP_REVNAT6)))
			max = rn_max;
		else if (!strcmp(name, STR(SLUICE_MAP_SERVICES6)))
			max = svc6_max;
		else if (!strcmp(name, STR(SLUICE_MAP_RANGES4)))
			max = rng_max > 0 ? rng_max : (svc_max * 10 > SLUICE_MAX_RANGE4 ? svc_max * 10 : SLUICE_MAX_RANGE4);
		else if (!strcmp(name, STR(SLUICE_MAP_RANGES6)))
			/* As IPv4's: the bench's ten backend ids per master (svc6 is masters only since the range layout). */
			max = rng_max > 0 ? rng_max : (svc6_max * 10 > SLUICE_MAX_RANGE6 ? svc6_max * 10 : 0);
		if (max > 0 && bpf_map__set_max_entries(m, (__u32)max))
			die(name, "set_max_entries failed");
	}
	int err = bpf_object__load(obj);
	if (err)
		die(obj_path, strerror(-err));
	int cg_fd = open(cg, O_RDONLY | O_DIRECTORY);
	if (cg_fd < 0)
		die(cg, strerror(errno));
	struct bpf_program *p;
	bpf_object__for_each_program(p, obj) {
		enum bpf_attach_type type = bpf_program__expected_attach_type(p);
		if (bpf_prog_attach(bpf_program__fd(p), cg_fd, type, 0))
			die(bpf_program__name(p), strerror(errno));
		printf("attached %s to %s\n", bpf_program__name(p), cg);
	}
	close(cg_fd);
	bpf_object__close(obj); /* the maps stay pinned, the programs attached */
	return 0;
}

static int open_pinned(const char *dir, const char *name)
{
	char pin[4096];
	snprintf(pin, sizeof(pin), "%s/%s", dir, name);
	int fd = bpf_obj_get(pin);
	if (fd < 0)
		die(pin, strerror(errno));
	return fd;
}

/* Batch update in chunks; a full map is an error, never a partial state. */
static void update_batch(int fd, const char *what, void *keys, void *vals, size_t n, size_t ksz, size_t vsz)
{
	const size_t chunk = 8192;
	for (size_t i = 0; i < n; i += chunk) {
		__u32 count = (__u32)(n - i < chunk ? n - i : chunk);
		if (bpf_map_update_batch(fd, (char *)keys + i * ksz, (char *)vals + i * vsz, &count, NULL)) {
			char msg[256];
			snprintf(msg, sizeof(msg), "batch update of %u entries at %zu: %s", count, i, strerror(errno));
			die(what, msg);
		}
	}
}

struct svc_line {
	__be32 vip;
	__u8 vip6[16];
	__be16 port;
	__u8 proto;
};

struct be_addr {
	__be32 a;
	__u8 a6[16];
	__be16 p;
};

#define LOAD6_BE_BASE 1024u /* IPv4's backend ids: at most 512 */

/* The IPv6 half of fill: same backends, rev-NAT ids and order, the slot layout. */
/* Each frontend's range: its n_be backend ids (tcp: id_base+1.., udp: after
 * them), frontend after frontend from index 0 of the range array. */
static void fill_ranges(int fd_rng, const char *what, const struct svc_line *svcs, size_t n, int n_be, __u32 id_base)
{
	size_t n_slots = n * (size_t)n_be;
	__u32 *idx = calloc(n_slots ? n_slots : 1, sizeof(__u32));
	__u32 *ids = calloc(n_slots ? n_slots : 1, sizeof(__u32));
	for (size_t i = 0, j = 0; i < n; i++)
		for (int s = 0; s < n_be; s++, j++) {
			idx[j] = (__u32)j;
			ids[j] = id_base + (__u32)((svcs[i].proto == LB_PROTO_UDP ? n_be : 0) + s + 1);
		}
	update_batch(fd_rng, what, idx, ids, n_slots, sizeof(__u32), sizeof(__u32));
	free(idx);
	free(ids);
}

/* The masters' values naming the ranges fill_ranges wrote (either family). */
static struct lb4_service *master_values(size_t n, int n_be, const __u32 *rn_of, __u8 algorithm)
{
	struct lb4_service *vals = calloc(n ? n : 1, sizeof(*vals));
	for (size_t i = 0; i < n; i++) {
		vals[i].backend_id = (__u32)(i * (size_t)n_be); /* range start */
		vals[i].count = (__u16)n_be;
		vals[i].flags = LB_SVC_FLAG_CLUSTER_IP;
		vals[i].rev_nat_id = rn_of[i];
		vals[i].algorithm = algorithm;
	}
	return vals;
}

static void fill6(const char *dir, const struct svc_line *svcs, size_t n, const struct be_addr *bes, int n_be, __u8 algorithm)
{
	int fd_svc = open_pinned(dir, STR(SLUICE_MAP_SERVICES6));
	int fd_rng = open_pinned(dir, STR(SLUICE_MAP_RANGES6));
	int fd_be = open_pinned(dir, STR(SLUICE_MAP_BACKENDS6));
	int fd_rn = open_pinned(dir, STR(SLUICE_MAP_REVNAT6));
	struct bpf_map_info info = {};
	__u32 info_len = sizeof(info);

	if (bpf_obj_get_info_by_fd(fd_rn, &info, &info_len))
		die(STR(SLUICE_MAP_REVNAT6), strerror(errno));

	__u32 be_keys[512];
	struct lb6_backend be_vals[512];
	memset(be_vals, 0, sizeof(be_vals));
	for (int pr = 0; pr < 2; pr++)
		for (int i = 0; i < n_be; i++) {
			int k = pr * n_be + i;
			be_keys[k] = LOAD6_BE_BASE + (__u32)k + 1;
			memcpy(be_vals[k].address, bes[i].a6, 16);
			be_vals[k].port = bes[i].p;
			be_vals[k].proto = pr ? LB_PROTO_UDP : LB_PROTO_TCP;
		}
	update_batch(fd_be, "backends6", be_keys, be_vals, (size_t)(2 * n_be), sizeof(__u32), sizeof(struct lb6_backend));

	__u32 *rn_keys = calloc(n ? n : 1, sizeof(__u32));
	struct lb6_reverse_nat *rn_vals = calloc(n ? n : 1, sizeof(*rn_vals));
	__u32 *rn_of = calloc(n ? n : 1, sizeof(__u32));
	size_t n_rn = 0;
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && !memcmp(svcs[i].vip6, svcs[i - 1].vip6, 16) && svcs[i].port == svcs[i - 1].port) {
			rn_of[i] = rn_of[i - 1];
			continue;
		}
		if (n_rn + 1 >= info.max_entries)
			die(STR(SLUICE_MAP_REVNAT6), "more service ports than rev-NAT entries (attach --revnat)");
		rn_keys[n_rn] = info.max_entries - 1 - (__u32)n_rn; /* from the top down */
		memcpy(rn_vals[n_rn].address, svcs[i].vip6, 16);
		rn_vals[n_rn].port = svcs[i].port;
		rn_of[i] = rn_keys[n_rn];
		n_rn++;
	}
	update_batch(fd_rn, "rev-NAT6", rn_keys, rn_vals, n_rn, sizeof(__u32), sizeof(struct lb6_reverse_nat));

	/* Ranges first, masters last: a master makes its range visible. */
	fill_ranges(fd_rng, "backend ranges (IPv6)", svcs, n, n_be, LOAD6_BE_BASE);
	struct lb6_frontend_key *keys = calloc(n ? n : 1, sizeof(*keys));
	struct lb4_service *vals = master_values(n, n_be, rn_of, algorithm);
	for (size_t i = 0; i < n; i++) {
		memcpy(keys[i].address, svcs[i].vip6, 16);
		keys[i].port = svcs[i].port;
		keys[i].proto = svcs[i].proto;
		keys[i].scope = LB_SCOPE_EXTERNAL;
	}
	update_batch(fd_svc, "service masters (IPv6)", keys, vals, n, sizeof(*keys), sizeof(*vals));
	printf("{\"family\":6,\"service_ports\":%zu,\"backends\":%d,\"revnat\":%zu,\"service_entries\":%zu}\n", n, 2 * n_be, n_rn,
	       n + n * (size_t)n_be);
}

/*
 * The pod path's frontend-address bitmap (SLUICE_MAP_POD_PF4), when the pod
 * programs pinned it: every VIP's bit, then the "maintained" marker word, as
 * its writer must (a frontend's bit is set before the marker says the bitmap
 * is complete). Absent (socket LB only): nothing to do.
 */
static void fill_pod_frontends(const char *dir, const struct svc_line *svcs, size_t n)
{
	char pin[4096];
	snprintf(pin, sizeof(pin), "%s/%s", dir, STR(SLUICE_MAP_POD_PF4));
	int fd = bpf_obj_get(pin);
	if (fd < 0)
		return;
	__u32 *keys = calloc(SLUICE_POD_PF_WORDS, sizeof(__u32));
	__u64 *words = calloc(SLUICE_POD_PF_WORDS, sizeof(__u64));
	for (__u32 w = 0; w < SLUICE_POD_PF_WORDS; w++)
		keys[w] = w;
	for (size_t i = 0; i < n; i++) {
		__u32 slot = sluice_bit_slot(ntohl(svcs[i].vip), SLUICE_POD_PF_BITS_LOG2);
		words[slot >> 6] |= 1ULL << (slot & 63);
	}
	update_batch(fd, "pod frontend bitmap", keys, words, SLUICE_POD_PF_WORDS, sizeof(__u32), sizeof(__u64));
	__u32 marker = SLUICE_POD_PF_MARKER;
	__u64 one = 1;
	if (bpf_map_update_elem(fd, &marker, &one, BPF_ANY) < 0)
		die(pin, strerror(errno));
	free(keys);
	free(words);
	close(fd);
}

int cmd_fill(int argc, char **argv)
{
	const char *dir = arg(argc, argv, "--bpffs", NULL);
	const char *path = arg(argc, argv, "--services", NULL);
	char *be_list = strdup(arg(argc, argv, "--backends", NULL));
	/* The master entries' algorithm (LB_ALG_* number; random by default). */
	__u8 algorithm = (__u8)atoi(arg(argc, argv, "--algorithm", "0"));

	/* The backends: address:port or [address]:port, the same set for every service. */
	struct be_addr bes[256];
	int n_be = 0, be6 = 0;
	for (char *tok = strtok(be_list, ","); tok && n_be < 256; tok = strtok(NULL, ",")) {
		char *colon = strrchr(tok, ':');
		if (!colon)
			die(tok, "backend must be address:port or [address]:port");
		*colon = 0;
		int ok;
		if (tok[0] == '[' && colon[-1] == ']') {
			colon[-1] = 0;
			ok = inet_pton(AF_INET6, tok + 1, bes[n_be].a6) == 1;
			be6 = 1;
		} else {
			ok = inet_pton(AF_INET, tok, &bes[n_be].a) == 1;
		}
		if (!ok)
			die(tok, "bad backend address");
		bes[n_be].p = htons((unsigned short)atoi(colon + 1));
		n_be++;
	}

	FILE *f = fopen(path, "r");
	if (!f)
		die(path, strerror(errno));
	size_t cap = 1024, n = 0;
	struct svc_line *svcs = malloc(cap * sizeof(*svcs));
	char addr[64], proto[8];
	unsigned port;
	while (fscanf(f, "%63s %u %7s", addr, &port, proto) == 3) {
		if (n == cap)
			svcs = realloc(svcs, (cap *= 2) * sizeof(*svcs));
		memset(&svcs[n], 0, sizeof(svcs[n]));
		if ((strchr(addr, ':') ? inet_pton(AF_INET6, addr, svcs[n].vip6) : inet_pton(AF_INET, addr, &svcs[n].vip)) != 1)
			die(addr, "bad VIP");
		if (!!strchr(addr, ':') != be6)
			die(addr, "VIPs and backends must be of one family");
		svcs[n].port = htons((unsigned short)port);
		svcs[n].proto = strcmp(proto, "udp") ? LB_PROTO_TCP : LB_PROTO_UDP;
		n++;
	}
	fclose(f);
	if (be6) {
		fill6(dir, svcs, n, bes, n_be, algorithm);
		return 0;
	}

	int fd_svc = open_pinned(dir, STR(SLUICE_MAP_SERVICES4));
	int fd_be = open_pinned(dir, STR(SLUICE_MAP_BACKENDS4));
	int fd_rn = open_pinned(dir, STR(SLUICE_MAP_REVNAT4));

	/* Backends: ids 1..n_be for tcp, n_be+1..2*n_be for udp. */
	__u32 be_keys[512];
	struct lb4_backend be_vals[512];
	memset(be_vals, 0, sizeof(be_vals));
	for (int pr = 0; pr < 2; pr++)
		for (int i = 0; i < n_be; i++) {
			int k = pr * n_be + i;
			be_keys[k] = (__u32)k + 1;
			be_vals[k].address = bes[i].a;
			be_vals[k].port = bes[i].p;
			be_vals[k].proto = pr ? LB_PROTO_UDP : LB_PROTO_TCP;
		}
	update_batch(fd_be, "backends", be_keys, be_vals, (size_t)(2 * n_be), sizeof(__u32), sizeof(struct lb4_backend));

	/* Rev-NAT: one id per distinct vip:port; tcp and udp lines of one
	 * service port come next to each other in FILE, so compare with the
	 * previous line. */
	__u32 *rn_keys = calloc(n, sizeof(__u32));
	struct lb4_reverse_nat *rn_vals = calloc(n, sizeof(*rn_vals));
	__u32 *rn_of = calloc(n, sizeof(__u32));
	size_t n_rn = 0;
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && svcs[i].vip == svcs[i - 1].vip && svcs[i].port == svcs[i - 1].port) {
			rn_of[i] = rn_of[i - 1];
			continue;
		}
		rn_keys[n_rn] = (__u32)n_rn + 1;
		rn_vals[n_rn].address = svcs[i].vip;
		rn_vals[n_rn].port = svcs[i].port;
		rn_of[i] = rn_keys[n_rn];
		n_rn++;
	}
	update_batch(fd_rn, "rev-NAT", rn_keys, rn_vals, n_rn, sizeof(__u32), sizeof(struct lb4_reverse_nat));

	/* Ranges first, masters last: a master makes its range visible. */
	size_t n_slots = n * (size_t)n_be;
	fill_ranges(open_pinned(dir, STR(SLUICE_MAP_RANGES4)), "backend ranges", svcs, n, n_be, 0);
	struct lb4_frontend_key *keys = calloc(n ? n : 1, sizeof(*keys));
	struct lb4_service *vals = master_values(n, n_be, rn_of, algorithm);
	for (size_t i = 0; i < n; i++) {
		keys[i].address = svcs[i].vip;
		keys[i].port = svcs[i].port;
		keys[i].proto = svcs[i].proto;
		keys[i].scope = LB_SCOPE_EXTERNAL;
	}
	update_batch(fd_svc, "service masters", keys, vals, n, sizeof(*keys), sizeof(*vals));
	fill_pod_frontends(dir, svcs, n);
	printf("{\"service_ports\":%zu,\"backends\":%d,\"revnat\":%zu,\"service_entries\":%zu}\n", n, 2 * n_be, n_rn,
	       n + n_slots);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		die("usage", "sluiceload attach|fill ...");
	if (!strcmp(argv[1], "attach"))
		return cmd_attach(argc, argv);
	if (!strcmp(argv[1], "fill"))
		return cmd_fill(argc, argv);
	die(argv[1], "unknown command (attach, fill)");
	return 2;
}
