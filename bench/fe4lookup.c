// SPDX-License-Identifier: Apache-2.0
/*
 * fe4lookup: nanoseconds per IPv4 frontend lookup, the lookup alone, in the
 * layouts of bench/fe4lookup.bpf.c (today's sluice_svc4 hash, the same hash
 * preallocated, the hash sized to the frontends, an open-addressed ARRAY
 * table), through BPF_PROG_TEST_RUN: no sockets, no traffic, nothing
 * attached. Socket-path numbers (bench/sockprogstats.sh) carry the whole
 * connect's cache pressure; this isolates the part a layout changes.
 *
 *   fe4lookup [--obj build/bench/fe4lookup.bpf.o] [--services N] [--rounds R] [--repeat K] [--slots-per-frontend S]
 *
 * Frontends as bench/sockprogstats.sh fills them: Service i is
 * 198.19.(i%65536 / 256).(i%256), port 80 + i/65536, tcp and udp. The table
 * has the next power of two >= S x the frontends (default 4: load <= 0.25;
 * at 0.5 linear probing already made chains longer than 8 at 1 000
 * Services); placement is linear probing, refused beyond FE4L_PROBES. Each round runs every layout
 * once (alternated); per layout: ns per lookup minus the draw's own cost
 * (fe4l_keys_only in the same round). Prints one JSON line.
 */
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice_abi.h"
#include "fe4lookup.h"

static void die(const char *what, const char *why)
{
	fprintf(stderr, "fe4lookup: %s: %s\n", what, why);
	exit(1);
}

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
	for (int i = 2; i < argc; i += 2)
		if (!strcmp(argv[i - 1], name))
			return argv[i];
	return def;
}

static int map_fd(struct bpf_object *obj, const char *name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(obj, name);

	if (!m)
		die(name, "no such map in the object");
	return bpf_map__fd(m);
}

static void put(int fd, const char *what, const void *key, const void *value)
{
	if (bpf_map_update_elem(fd, key, value, BPF_ANY))
		die(what, strerror(errno));
}

/* ns per run of one program (FE4L_LOOKUPS lookups each). */
static double run_ns(struct bpf_object *obj, const char *prog, int repeat)
{
	char pkt[64] = { 0 };
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt, .data_size_in = sizeof(pkt), .repeat = repeat);
	struct bpf_program *p = bpf_object__find_program_by_name(obj, prog);

	if (!p)
		die(prog, "no such program in the object");
	if (bpf_prog_test_run_opts(bpf_program__fd(p), &opts))
		die(prog, strerror(errno));
	return opts.duration; /* the kernel's average per repeat, ns */
}

int main(int argc, char **argv)
{
	const char *obj_path = arg(argc, argv, "--obj", "build/bench/fe4lookup.bpf.o");
	long services = atol(arg(argc, argv, "--services", "10000"));
	int rounds = atoi(arg(argc, argv, "--rounds", "3"));
	int repeat = atoi(arg(argc, argv, "--repeat", "20000"));
	long spread = atol(arg(argc, argv, "--slots-per-frontend", "4"));
	__u32 frontends = (__u32)(2 * services), slots = 2;

	if (services < 1 || services > FE4L_MAX_KEYS / 2) {
		char why[96];
		snprintf(why, sizeof(why), "%ld is out of range: 1 .. %d (two frontends each, tcp and udp)", services, FE4L_MAX_KEYS / 2);
		die("--services", why);
	}
	if (rounds < 1 || repeat < 1 || spread < 1 || spread > 16)
		die("--rounds/--repeat/--slots-per-frontend", "must be >= 1 (slots per frontend <= 16)");
	while (slots < spread * frontends)
		slots <<= 1;

	struct bpf_object *obj = bpf_object__open_file(obj_path, NULL);
	if (!obj)
		die(obj_path, strerror(errno));
	if (bpf_map__set_max_entries(bpf_object__find_map_by_name(obj, "fe4l_table"), slots) ||
	    bpf_map__set_max_entries(bpf_object__find_map_by_name(obj, "fe4l_hash_fit"), slots))
		die(obj_path, "cannot size fe4l_table / fe4l_hash_fit");
	int err = bpf_object__load(obj);
	if (err)
		die(obj_path, strerror(-err));
	int fd_keys = map_fd(obj, "fe4l_keys"), fd_cfg = map_fd(obj, "fe4l_cfg");
	int fd_hash[3] = { map_fd(obj, "fe4l_hash"), map_fd(obj, "fe4l_hash_pre"), map_fd(obj, "fe4l_hash_fit") };
	int fd_table = map_fd(obj, "fe4l_table");

	struct fe4l_slot *table = calloc(slots, sizeof(*table));
	if (!table)
		die("table", "out of memory");
	int longest = 0;
	__u32 n = 0;
	for (long i = 0; i < services; i++) {
		long h = i % 65536;
		for (int udp = 0; udp < 2; udp++, n++) {
			struct lb4_frontend_key k = {
				.address = htonl((198u << 24) | (19u << 16) | (__u32)h),
				.port = htons((unsigned short)(80 + i / 65536)),
				.proto = udp ? LB_PROTO_UDP : LB_PROTO_TCP,
				.scope = LB_SCOPE_EXTERNAL,
			};
			struct lb4_service v = { .backend_id = n * 10, .count = 10, .flags = LB_SVC_FLAG_CLUSTER_IP, .rev_nat_id = (__u32)i + 1 };
			__u64 k64;
			memcpy(&k64, &k, sizeof(k64));
			put(fd_keys, "fe4l_keys", &n, &k64);
			for (int m = 0; m < 3; m++)
				put(fd_hash[m], "fe4l_hash*", &k, &v);
			__u32 home = (__u32)lb_hash64(k64);
			int p;
			for (p = 0; p < FE4L_PROBES; p++) {
				struct fe4l_slot *s = &table[(home + p) & (slots - 1)];
				if (!s->key.proto) {
					*s = (struct fe4l_slot){ .key = k, .seq = 2, .svc = v };
					break;
				}
			}
			if (p == FE4L_PROBES) {
				char why[128];
				snprintf(why, sizeof(why), "a probe chain is longer than %d slots at %u slots for %ld frontends: raise --slots-per-frontend",
					 FE4L_PROBES, slots, 2 * services);
				die("fe4l_table", why);
			}
			if (p + 1 > longest)
				longest = p + 1;
		}
	}
	for (__u32 i = 0; i < slots; i++)
		if (table[i].key.proto)
			put(fd_table, "fe4l_table", &i, &table[i]);
	__u32 cfg_keys = FE4L_CFG_KEYS, cfg_mask = FE4L_CFG_MASK, mask = slots - 1;
	put(fd_cfg, "fe4l_cfg", &cfg_keys, &n);
	put(fd_cfg, "fe4l_cfg", &cfg_mask, &mask);

	static const char *const progs[] = { "fe4l_hash_np", "fe4l_hash_prealloc", "fe4l_hash_sized", "fe4l_table_run" };
	static const char *const names[] = { "hash", "hash_prealloc", "hash_sized", "table" };
	enum { LAYOUTS = 4 };
	double *ns = calloc((size_t)rounds * LAYOUTS, sizeof(double));
	double *draw = calloc((size_t)rounds, sizeof(double));
	for (int r = 0; r < rounds; r++) {
		draw[r] = run_ns(obj, "fe4l_keys_only", repeat) / FE4L_LOOKUPS;
		for (int l = 0; l < LAYOUTS; l++) {
			int at = (l + r) % LAYOUTS; /* rotate the order every round */
			ns[r * LAYOUTS + at] = run_ns(obj, progs[at], repeat) / FE4L_LOOKUPS - draw[r];
		}
	}
	printf("{\"services\":%ld,\"frontends\":%u,\"table_slots\":%u,\"longest_probe\":%d,\"draw_ns\":[", services, n, slots, longest);
	for (int r = 0; r < rounds; r++)
		printf("%s%.1f", r ? "," : "", draw[r]);
	printf("],\"ns_per_lookup\":{");
	for (int l = 0; l < LAYOUTS; l++) {
		printf("%s\"%s\":[", l ? "," : "", names[l]);
		for (int r = 0; r < rounds; r++)
			printf("%s%.1f", r ? "," : "", ns[r * LAYOUTS + l]);
		printf("]");
	}
	printf("}}\n");
	bpf_object__close(obj);
	return 0;
}
