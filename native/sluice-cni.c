// SPDX-License-Identifier: Apache-2.0
/*
 * sluice-cni: Sluice's chained CNI plugin (CNI spec 1.0.0; also 0.3.x, 0.4.0).
 *
 * Chained after the plugin that creates the pod's interface (bridge, ptp):
 *   ADD     finds the host side of the pod's veth in prevResult (an
 *           interface without "sandbox" whose driver is veth), attaches
 *           build/pod_lb.bpf.o's programs to its TC ingress and egress with
 *           tcx links pinned at <bpffs>/links/pod-<container id>-<ifname>-<dir>,
 *           and prints prevResult unchanged.
 *           Both modes: records the pod's network namespace cookie -> its
 *           addresses (prevResult.ips) in <bpffs>/sluice_podaddr, so the
 *           socket LB knows an unbound pod socket's source
 *           (loadBalancerSourceRanges; see SLUICE_MAP_POD_ADDR).
 *   DEL     removes those pins (the links end with them) and the pod's
 *           address entry; never fails when they are already gone.
 *   CHECK   verifies that both links exist, are on the host veth and run the
 *           pinned programs.
 *   VERSION prints the supported versions.
 * Errors are the spec's error object on stdout, with exit status 1.
 *
 * Plugin configuration (besides cniVersion, name, type, prevResult):
 *   "mode":  "per-packet" (default) attaches; "socket" does nothing but pass
 *            prevResult through (pods served by the socket LB alone).
 *   "bpffs": the agent's bpffs directory (default /sys/fs/bpf/sluice).
 *
 * Programs: the agent pins the pod-veth programs at <bpffs>/progs/<name>
 * (src/datapath/pod/attach.ts pinPodPrograms) and swaps them in every pod's
 * links on upgrade. If they are not pinned yet (the plugin ran before the
 * agent), the plugin loads the copy of pod_lb.bpf.o embedded in this binary,
 * reusing the agent's pinned maps (or pinning new ones the agent adopts), and
 * pins the programs itself.
 *
 * JSON: a small purpose-built parser (RFC 8259 values, depth-limited) that
 * keeps each value's source span, so prevResult is printed byte for byte.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "sluice_abi.h"

#define STR_(x) #x
#define STR(x) STR_(x)

#define DEFAULT_BPFFS "/sys/fs/bpf/sluice"
/* UAPI numbers newer than this machine's headers (kernel 6.6+). */
#define SLUICE_BPF_TCX_INGRESS   46
#define SLUICE_BPF_TCX_EGRESS    47
#define SLUICE_BPF_LINK_TYPE_TCX 11
#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

/* CNI spec error codes; 100+ are this plugin's. */
#define CNI_ERR_VERSION        1
#define CNI_ERR_ENV            4
#define CNI_ERR_IO             5
#define CNI_ERR_DECODE         6
#define CNI_ERR_CONFIG         7
#define CNI_ERR_TRY_LATER      11
#define SLUICE_ERR_ATTACH      100
#define SLUICE_ERR_CHECK       101

static const char *const supported_versions[] = { "0.3.0", "0.3.1", "0.4.0", "1.0.0" };
static const char *g_version = "1.0.0"; /* the config's cniVersion once known */

/* ---- Output ------------------------------------------------------------------ */

static void print_json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", out);
		else if (c < 0x20)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

/* The spec's error object on stdout, then exit 1. */
static void __attribute__((noreturn, format(printf, 3, 4)))
fail(int code, const char *msg, const char *details_fmt, ...)
{
	char details[1024] = "";
	va_list ap;

	if (details_fmt) {
		va_start(ap, details_fmt);
		vsnprintf(details, sizeof(details), details_fmt, ap);
		va_end(ap);
	}
	printf("{\"cniVersion\":");
	print_json_string(stdout, g_version);
	printf(",\"code\":%d,\"msg\":", code);
	print_json_string(stdout, msg);
	if (details[0]) {
		printf(",\"details\":");
		print_json_string(stdout, details);
	}
	printf("}\n");
	fflush(stdout);
	exit(1);
}

/* ---- JSON -------------------------------------------------------------------- */

enum jtype { J_NULL, J_BOOL, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT };

struct jval {
	enum jtype type;
	const char *start, *end; /* the value's source text */
	char *str;               /* J_STRING: decoded, NUL-terminated */
	char *key;               /* member of an object: its decoded name */
	struct jval *child;      /* J_ARRAY / J_OBJECT: first element or member */
	struct jval *next;       /* next sibling */
};

struct jparser {
	const char *p, *end;
	const char *error;
	int depth;
};

#define JSON_MAX_DEPTH 64

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (!p)
		fail(CNI_ERR_IO, "out of memory", NULL);
	return p;
}

static void jskip(struct jparser *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static long jhex4(struct jparser *j)
{
	long v = 0;

	if (j->end - j->p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		int h = hexval(j->p[i]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	j->p += 4;
	return v;
}

static size_t utf8_put(char *out, unsigned long cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* A string at j->p (the opening quote); returns it decoded or NULL. */
static char *jstring(struct jparser *j)
{
	const char *s = j->p + 1;
	char *out, *o;

	/* Decoded text is never longer than its source. */
	out = o = xcalloc((size_t)(j->end - s) + 1, 1);
	j->p = s;
	while (j->p < j->end && *j->p != '"') {
		unsigned char c = (unsigned char)*j->p;

		if (c < 0x20) {
			j->error = "control character in a string";
			goto bad;
		}
		if (c != '\\') {
			*o++ = (char)c;
			j->p++;
			continue;
		}
		if (++j->p >= j->end) {
			j->error = "unterminated escape";
			goto bad;
		}
		c = (unsigned char)*j->p++;
		switch (c) {
		case '"': *o++ = '"'; break;
		case '\\': *o++ = '\\'; break;
		case '/': *o++ = '/'; break;
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'n': *o++ = '\n'; break;
		case 'r': *o++ = '\r'; break;
		case 't': *o++ = '\t'; break;
		case 'u': {
			long cp = jhex4(j);

			if (cp < 0) {
				j->error = "bad \\u escape";
				goto bad;
			}
			if (cp >= 0xd800 && cp <= 0xdbff && j->end - j->p >= 6 && j->p[0] == '\\' &&
			    j->p[1] == 'u') {
				long lo;

				j->p += 2;
				lo = jhex4(j);
				if (lo < 0xdc00 || lo > 0xdfff) {
					j->error = "bad surrogate pair";
					goto bad;
				}
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			if (cp == 0) {
				j->error = "NUL character in a string";
				goto bad;
			}
			o += utf8_put(o, (unsigned long)cp);
			break;
		}
		default:
			j->error = "unknown escape";
			goto bad;
		}
	}
	if (j->p >= j->end) {
		j->error = "unterminated string";
		goto bad;
	}
	j->p++;
	*o = '\0';
	return out;
bad:
	free(out);
	return NULL;
}

static bool jliteral(struct jparser *j, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(j->end - j->p) < n || strncmp(j->p, word, n) != 0)
		return false;
	j->p += n;
	return true;
}

static bool jdigits(struct jparser *j)
{
	const char *start = j->p;

	while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
		j->p++;
	return j->p > start;
}

static bool jnumber(struct jparser *j)
{
	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p < j->end && *j->p == '0')
		j->p++;
	else if (!jdigits(j))
		return false;
	if (j->p < j->end && *j->p == '.') {
		j->p++;
		if (!jdigits(j))
			return false;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (!jdigits(j))
			return false;
	}
	return true;
}

static struct jval *jvalue(struct jparser *j);

/* Elements of an array or members of an object, after the opening bracket. */
static bool jcontainer(struct jparser *j, struct jval *v, char close)
{
	struct jval **tail = &v->child;

	jskip(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return true;
	}
	for (;;) {
		char *key = NULL;
		struct jval *item;

		jskip(j);
		if (close == '}') {
			if (j->p >= j->end || *j->p != '"') {
				j->error = "expected a member name";
				return false;
			}
			key = jstring(j);
			if (!key)
				return false;
			jskip(j);
			if (j->p >= j->end || *j->p != ':') {
				free(key);
				j->error = "expected ':'";
				return false;
			}
			j->p++;
		}
		item = jvalue(j);
		if (!item) {
			free(key);
			return false;
		}
		item->key = key;
		*tail = item;
		tail = &item->next;
		jskip(j);
		if (j->p < j->end && *j->p == ',') {
			j->p++;
			continue;
		}
		if (j->p < j->end && *j->p == close) {
			j->p++;
			return true;
		}
		j->error = close == '}' ? "expected ',' or '}'" : "expected ',' or ']'";
		return false;
	}
}

static struct jval *jvalue(struct jparser *j)
{
	struct jval *v;
	bool ok = true;

	jskip(j);
	if (j->p >= j->end) {
		j->error = "unexpected end of input";
		return NULL;
	}
	v = xcalloc(1, sizeof(*v));
	v->start = j->p;
	switch (*j->p) {
	case '{':
	case '[':
		if (++j->depth > JSON_MAX_DEPTH) {
			j->error = "nested too deeply";
			return NULL;
		}
		v->type = *j->p == '{' ? J_OBJECT : J_ARRAY;
		j->p++;
		ok = jcontainer(j, v, v->type == J_OBJECT ? '}' : ']');
		j->depth--;
		break;
	case '"':
		v->type = J_STRING;
		v->str = jstring(j);
		ok = v->str != NULL;
		break;
	case 't':
		v->type = J_BOOL;
		ok = jliteral(j, "true");
		break;
	case 'f':
		v->type = J_BOOL;
		ok = jliteral(j, "false");
		break;
	case 'n':
		v->type = J_NULL;
		ok = jliteral(j, "null");
		break;
	default:
		v->type = J_NUMBER;
		ok = jnumber(j);
		break;
	}
	if (!ok) {
		if (!j->error)
			j->error = "invalid value";
		return NULL;
	}
	v->end = j->p;
	return v;
}

/* The whole document, or NULL with *error and *offset set. */
static struct jval *json_parse(const char *text, size_t len, const char **error, size_t *offset)
{
	struct jparser j = { .p = text, .end = text + len };
	struct jval *v = jvalue(&j);

	if (v) {
		jskip(&j);
		if (j.p != j.end) {
			j.error = "trailing characters after the configuration";
			v = NULL;
		}
	}
	if (!v) {
		*error = j.error;
		*offset = (size_t)(j.p - text);
	}
	return v;
}

static struct jval *jget(const struct jval *obj, const char *key)
{
	if (!obj || obj->type != J_OBJECT)
		return NULL;
	for (struct jval *m = obj->child; m; m = m->next)
		if (strcmp(m->key, key) == 0)
			return m;
	return NULL;
}

/* A string member; NULL if absent. A member of another type is a config error. */
static const char *jget_string(const struct jval *obj, const char *key, const char *where)
{
	struct jval *v = jget(obj, key);

	if (!v || v->type == J_NULL)
		return NULL;
	if (v->type != J_STRING)
		fail(CNI_ERR_CONFIG, "invalid network configuration", "%s.%s must be a string", where, key);
	return v->str;
}

/* ---- Configuration ------------------------------------------------------------- */

struct plugin_conf {
	const char *cni_version;
	const char *name;
	bool per_packet;
	const char *bpffs;
	struct jval *prev_result; /* NULL when absent */
};

static char *read_stdin(size_t *len)
{
	size_t cap = 65536, n = 0;
	char *buf = xcalloc(cap + 1, 1);
	size_t got;

	while ((got = fread(buf + n, 1, cap - n, stdin)) > 0) {
		n += got;
		if (n == cap) {
			if (cap >= (64u << 20))
				fail(CNI_ERR_DECODE, "network configuration too large", "over %zu bytes", cap);
			buf = realloc(buf, cap * 2 + 1);
			if (!buf)
				fail(CNI_ERR_IO, "out of memory", NULL);
			cap *= 2;
		}
	}
	if (ferror(stdin))
		fail(CNI_ERR_IO, "cannot read the network configuration from stdin", "%s", strerror(errno));
	buf[n] = '\0';
	*len = n;
	return buf;
}

static bool version_supported(const char *v)
{
	for (size_t i = 0; i < sizeof(supported_versions) / sizeof(supported_versions[0]); i++)
		if (strcmp(v, supported_versions[i]) == 0)
			return true;
	return false;
}

static struct plugin_conf parse_conf(const char *command)
{
	struct plugin_conf c = { .per_packet = true, .bpffs = DEFAULT_BPFFS };
	const char *error = NULL, *mode, *bpffs;
	size_t len, offset = 0;
	char *text = read_stdin(&len);
	struct jval *root = json_parse(text, len, &error, &offset);

	if (!root)
		fail(CNI_ERR_DECODE, "cannot decode the network configuration",
		     "%s at byte %zu of stdin", error ? error : "invalid JSON", offset);
	if (root->type != J_OBJECT)
		fail(CNI_ERR_DECODE, "cannot decode the network configuration", "stdin is not a JSON object");
	c.cni_version = jget_string(root, "cniVersion", "config");
	if (!c.cni_version)
		fail(CNI_ERR_CONFIG, "invalid network configuration", "cniVersion is missing");
	if (version_supported(c.cni_version))
		g_version = c.cni_version;
	if (strcmp(command, "VERSION") == 0)
		return c;
	if (!version_supported(c.cni_version))
		fail(CNI_ERR_VERSION, "incompatible CNI version",
		     "cniVersion %s; sluice supports 0.3.0, 0.3.1, 0.4.0, 1.0.0", c.cni_version);
	c.name = jget_string(root, "name", "config");
	mode = jget_string(root, "mode", "config");
	if (mode && strcmp(mode, "socket") == 0)
		c.per_packet = false;
	else if (mode && strcmp(mode, "per-packet") != 0)
		fail(CNI_ERR_CONFIG, "invalid network configuration",
		     "mode is \"%s\"; expected \"per-packet\" or \"socket\"", mode);
	bpffs = jget_string(root, "bpffs", "config");
	if (bpffs) {
		if (bpffs[0] != '/' || strlen(bpffs) > 200)
			fail(CNI_ERR_CONFIG, "invalid network configuration",
			     "bpffs must be an absolute path of at most 200 characters, got \"%s\"", bpffs);
		c.bpffs = bpffs;
	}
	c.prev_result = jget(root, "prevResult");
	if (c.prev_result && c.prev_result->type == J_NULL)
		c.prev_result = NULL;
	if (c.prev_result && c.prev_result->type != J_OBJECT)
		fail(CNI_ERR_CONFIG, "invalid network configuration", "prevResult must be an object");
	return c;
}

static const char *require_env(const char *name)
{
	const char *v = getenv(name);

	if (!v || !v[0])
		fail(CNI_ERR_ENV, "missing environment variable", "%s is not set", name);
	return v;
}

/* ---- Finding the host veth ----------------------------------------------------- */

/* The kernel driver of a device in this network namespace ("veth", "bridge"). */
static bool device_driver(const char *ifname, char *driver, size_t size)
{
	struct ethtool_drvinfo info = { .cmd = ETHTOOL_GDRVINFO };
	struct ifreq ifr = {};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	ifr.ifr_data = (void *)&info;
	ok = ioctl(fd, SIOCETHTOOL, &ifr) == 0;
	close(fd);
	if (ok)
		snprintf(driver, size, "%s", info.driver);
	return ok;
}

/*
 * The host side of the pod's veth: an interface of prevResult without a
 * sandbox (so in this namespace) whose driver is veth. The bridge plugin
 * lists the bridge too, which also has no sandbox; its driver is "bridge".
 */
static const char *find_host_veth(const struct jval *prev, unsigned int *ifindex)
{
	struct jval *ifaces = jget(prev, "interfaces");
	char driver[64];

	if (!ifaces || ifaces->type != J_ARRAY)
		fail(CNI_ERR_CONFIG, "invalid network configuration", "prevResult has no interfaces list");
	for (struct jval *i = ifaces->child; i; i = i->next) {
		const char *name = jget_string(i, "name", "prevResult.interfaces[]");
		const char *sandbox = jget_string(i, "sandbox", "prevResult.interfaces[]");

		if (!name || (sandbox && sandbox[0]))
			continue;
		if (!device_driver(name, driver, sizeof(driver)) || strcmp(driver, "veth") != 0)
			continue;
		*ifindex = if_nametoindex(name);
		if (*ifindex)
			return name;
	}
	fail(CNI_ERR_CONFIG, "no host-side veth for the pod",
	     "prevResult.interfaces has no interface without a sandbox whose driver is veth in this "
	     "network namespace: chain sluice after a plugin that creates a veth pair (bridge, ptp)");
}

/* ---- Programs -------------------------------------------------------------------- */

/* build/pod_lb.bpf.o, embedded at build time (Makefile: SLUICE_POD_LB_OBJECT). */
extern const unsigned char sluice_pod_lb_obj[], sluice_pod_lb_obj_end[];
__asm__(".section .rodata\n"
	".balign 8\n"
	".global sluice_pod_lb_obj\n"
	"sluice_pod_lb_obj:\n"
	".incbin \"" SLUICE_POD_LB_OBJECT "\"\n"
	".global sluice_pod_lb_obj_end\n"
	"sluice_pod_lb_obj_end:\n"
	".previous\n");

static const char *const prog_names[2] = { STR(SLUICE_PROG_POD_INGRESS), STR(SLUICE_PROG_POD_EGRESS) };
static const char *const directions[2] = { "ingress", "egress" };

static void path_of(char *out, size_t size, const char *bpffs, const char *sub, const char *name)
{
	if ((size_t)snprintf(out, size, "%s/%s/%s", bpffs, sub, name) >= size)
		fail(CNI_ERR_CONFIG, "invalid network configuration", "path %s/%s/%s is too long", bpffs, sub, name);
}

static void mkdir_in_bpffs(const char *bpffs, const char *sub)
{
	char dir[512];

	snprintf(dir, sizeof(dir), "%s", bpffs);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		fail(CNI_ERR_IO, "cannot create the bpffs directory",
		     "mkdir %s: %s (is bpffs mounted at /sys/fs/bpf?)", dir, strerror(errno));
	snprintf(dir, sizeof(dir), "%s/%s", bpffs, sub);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		fail(CNI_ERR_IO, "cannot create the bpffs directory", "mkdir %s: %s", dir, strerror(errno));
}

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, args);
}

/*
 * Load the embedded object: maps reused from <bpffs>/<name> when pinned there
 * (whatever size the agent gave them), else created and pinned there; then
 * pin both programs, keeping a program someone else pinned meanwhile.
 */
static void load_embedded_programs(const struct plugin_conf *c, int prog_fds[2])
{
	LIBBPF_OPTS(bpf_object_open_opts, opts, .object_name = "pod_lb");
	struct bpf_object *obj;
	struct bpf_map *map;
	char pin[512];
	int err;

	libbpf_set_print(libbpf_quiet);
	mkdir_in_bpffs(c->bpffs, "progs");
	obj = bpf_object__open_mem(sluice_pod_lb_obj, (size_t)(sluice_pod_lb_obj_end - sluice_pod_lb_obj), &opts);
	if (!obj)
		fail(SLUICE_ERR_ATTACH, "cannot open the embedded pod_lb object", "%s", strerror(errno));
	bpf_object__for_each_map(map, obj) {
		int fd;

		if (bpf_map__is_internal(map))
			continue;
		if ((size_t)snprintf(pin, sizeof(pin), "%s/%s", c->bpffs, bpf_map__name(map)) >= sizeof(pin))
			fail(CNI_ERR_CONFIG, "invalid network configuration", "bpffs path too long");
		fd = bpf_obj_get(pin);
		if (fd >= 0) {
			err = bpf_map__reuse_fd(map, fd);
			close(fd);
			if (err)
				fail(SLUICE_ERR_ATTACH, "cannot reuse a pinned map",
				     "%s: %s", pin, strerror(-err));
		} else if (bpf_map__set_pin_path(map, pin)) {
			fail(SLUICE_ERR_ATTACH, "cannot set a map pin path", "%s", pin);
		}
	}
	err = bpf_object__load(obj);
	if (err)
		fail(SLUICE_ERR_ATTACH, "cannot load the pod_lb programs",
		     "bpf_object__load: %s (run as root; kernel with BTF and tcx, 6.6+)", strerror(-err));
	for (int d = 0; d < 2; d++) {
		struct bpf_program *prog = bpf_object__find_program_by_name(obj, prog_names[d]);

		if (!prog)
			fail(SLUICE_ERR_ATTACH, "embedded object lacks a program", "%s", prog_names[d]);
		path_of(pin, sizeof(pin), c->bpffs, "progs", prog_names[d]);
		if (bpf_obj_pin(bpf_program__fd(prog), pin) == 0 || errno == EEXIST)
			prog_fds[d] = bpf_obj_get(pin);
		else
			prog_fds[d] = -1;
		if (prog_fds[d] < 0)
			fail(SLUICE_ERR_ATTACH, "cannot pin the pod_lb program", "%s: %s", pin, strerror(errno));
	}
	bpf_object__close(obj);
}

/* Both programs: the pinned ones, loaded from the embedded object if needed. */
static void pod_programs(const struct plugin_conf *c, int prog_fds[2])
{
	char pin[512];

	for (int d = 0; d < 2; d++) {
		path_of(pin, sizeof(pin), c->bpffs, "progs", prog_names[d]);
		prog_fds[d] = bpf_obj_get(pin);
		if (prog_fds[d] >= 0)
			continue;
		if (errno != ENOENT)
			fail(SLUICE_ERR_ATTACH, "cannot open a pinned pod_lb program", "%s: %s", pin, strerror(errno));
		for (int k = 0; k < d; k++)
			close(prog_fds[k]);
		load_embedded_programs(c, prog_fds);
		return;
	}
}

/* ---- Links -------------------------------------------------------------------------- */

static void link_pin_path(char *out, size_t size, const struct plugin_conf *c, const char *container,
			  const char *ifname, int d)
{
	char name[384];

	if (strchr(container, '/') || strchr(ifname, '/'))
		fail(CNI_ERR_ENV, "invalid environment", "CNI_CONTAINERID and CNI_IFNAME must not contain '/'");
	if ((size_t)snprintf(name, sizeof(name), "pod-%s-%s-%s", container, ifname, directions[d]) >= sizeof(name))
		fail(CNI_ERR_ENV, "invalid environment", "CNI_CONTAINERID and CNI_IFNAME are too long");
	/* bpffs refuses names with a dot; container ids and ifnames may have one. */
	for (char *p = name; *p; p++)
		if (*p == '.')
			*p = '_';
	path_of(out, size, c->bpffs, "links", name);
}

static bool link_info(int fd, struct bpf_link_info *info)
{
	__u32 len = sizeof(*info);

	memset(info, 0, sizeof(*info));
	return bpf_obj_get_info_by_fd(fd, info, &len) == 0;
}

static __u32 prog_id(int fd)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);

	return bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
}

/*
 * Attach one direction. A link already pinned for this pod (an ADD retried)
 * on the same device gets the program swapped in atomically; one on another
 * device (the veth was re-created) is replaced.
 */
static void attach_link(const char *pin, int prog_fd, unsigned int ifindex, int d, const char *veth)
{
	struct bpf_link_info info;
	int fd = bpf_obj_get(pin);

	if (fd >= 0) {
		bool same = link_info(fd, &info) && info.type == SLUICE_BPF_LINK_TYPE_TCX &&
			    info.xdp.ifindex == ifindex;

		if (same && bpf_link_update(fd, prog_fd, NULL) == 0) {
			close(fd);
			return;
		}
		close(fd);
		if (unlink(pin) < 0 && errno != ENOENT)
			fail(SLUICE_ERR_ATTACH, "cannot replace a stale link pin", "unlink %s: %s", pin, strerror(errno));
	}
	fd = bpf_link_create(prog_fd, (int)ifindex,
			     d == 0 ? SLUICE_BPF_TCX_INGRESS : SLUICE_BPF_TCX_EGRESS, NULL);
	if (fd < 0)
		fail(SLUICE_ERR_ATTACH, "cannot attach the pod_lb program",
		     "tcx %s of %s (ifindex %u): %s", directions[d], veth, ifindex, strerror(errno));
	if (bpf_obj_pin(fd, pin) < 0) {
		int e = errno;

		close(fd);
		fail(SLUICE_ERR_ATTACH, "cannot pin the tcx link", "%s: %s", pin, strerror(e));
	}
	close(fd);
}

/* ---- The pod's addresses, by netns cookie (SLUICE_MAP_POD_ADDR) --------------------- */

#define POD_ADDR_PIN STR(SLUICE_MAP_POD_ADDR)

/* FNV-1a 64 of "<container id>/<ifname>": which ADD an entry came from. */
static __u64 pod_addr_owner(const char *container, const char *ifname)
{
	__u64 h = 0xcbf29ce484222325ULL;

	for (const char *p = container; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	h = (h ^ '/') * 0x100000001b3ULL;
	for (const char *p = ifname; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	return h;
}

/* The pinned map; created and pinned (as sock_lb.bpf.o declares it) when the
 * agent has not pinned it yet and create is set. -1 when absent. */
static int pod_addr_map(const struct plugin_conf *c, bool create)
{
	LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_NO_PREALLOC);
	char pin[512];
	int fd;

	if ((size_t)snprintf(pin, sizeof(pin), "%s/%s", c->bpffs, POD_ADDR_PIN) >= sizeof(pin))
		fail(CNI_ERR_CONFIG, "invalid network configuration", "bpffs path too long");
	fd = bpf_obj_get(pin);
	if (fd >= 0 || !create)
		return fd;
	mkdir_in_bpffs(c->bpffs, "links");
	fd = bpf_map_create(BPF_MAP_TYPE_HASH, POD_ADDR_PIN, sizeof(__u64), sizeof(struct lb_pod_addr),
			    SLUICE_MAX_POD_ADDR, &opts);
	if (fd < 0)
		fail(SLUICE_ERR_ATTACH, "cannot create the pod address map", "%s: %s", pin, strerror(errno));
	if (bpf_obj_pin(fd, pin) < 0) {
		int e = errno;

		close(fd);
		fd = e == EEXIST ? bpf_obj_get(pin) : -1; /* another ADD pinned it meanwhile */
		if (fd < 0)
			fail(SLUICE_ERR_ATTACH, "cannot pin the pod address map", "%s: %s", pin, strerror(e));
	}
	return fd;
}

/* SO_NETNS_COOKIE of the network namespace at path. */
static __u64 netns_cookie(const char *path)
{
	int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	int target = open(path, O_RDONLY | O_CLOEXEC);
	__u64 cookie = 0;
	socklen_t len = sizeof(cookie);
	int sock = -1, e = 0;

	if (self < 0 || target < 0 || setns(target, CLONE_NEWNET) < 0) {
		e = errno;
	} else {
		sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (sock < 0 || getsockopt(sock, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) < 0)
			e = errno;
		if (setns(self, CLONE_NEWNET) < 0)
			fail(CNI_ERR_IO, "cannot return to the runtime's network namespace", "setns: %s", strerror(errno));
	}
	if (sock >= 0)
		close(sock);
	if (self >= 0)
		close(self);
	if (target >= 0)
		close(target);
	if (e || !cookie)
		fail(CNI_ERR_IO, "cannot read the pod's network namespace cookie", "%s: %s", path, strerror(e));
	return cookie;
}

/* The first IPv4 and the first IPv6 address of prevResult.ips ("a.b.c.d/len"). */
static bool pod_addresses(const struct jval *prev, struct lb_pod_addr *out)
{
	struct jval *ips = jget(prev, "ips");
	char text[64];

	if (!ips || ips->type != J_ARRAY)
		return false;
	for (struct jval *i = ips->child; i; i = i->next) {
		const char *cidr = jget_string(i, "address", "prevResult.ips[]");
		const char *slash;

		if (!cidr)
			continue;
		slash = strchr(cidr, '/');
		snprintf(text, sizeof(text), "%.*s", slash ? (int)(slash - cidr) : (int)strlen(cidr), cidr);
		if (!(out->flags & LB_POD_ADDR_HAS4) && inet_pton(AF_INET, text, &out->address4) == 1)
			out->flags |= LB_POD_ADDR_HAS4;
		else if (!(out->flags & LB_POD_ADDR_HAS6) && inet_pton(AF_INET6, text, out->address6) == 1)
			out->flags |= LB_POD_ADDR_HAS6;
	}
	return out->flags != 0;
}

/* ADD: netns cookie -> the pod's addresses. A netns already recorded by
 * another interface's ADD (a second network) keeps its first entry. */
static void record_pod_addr(const struct plugin_conf *c, const char *container, const char *ifname, const char *netns)
{
	struct lb_pod_addr value = { .owner = pod_addr_owner(container, ifname) }, old;
	__u64 cookie;
	int fd;

	if (!c->prev_result || !pod_addresses(c->prev_result, &value))
		return;
	cookie = netns_cookie(netns);
	fd = pod_addr_map(c, true);
	if (bpf_map_lookup_elem(fd, &cookie, &old) == 0 && old.owner != value.owner) {
		close(fd);
		return;
	}
	if (bpf_map_update_elem(fd, &cookie, &value, BPF_ANY) < 0) {
		int e = errno;

		close(fd);
		fail(SLUICE_ERR_ATTACH, "cannot record the pod's address", "%s/%s: %s", c->bpffs, POD_ADDR_PIN, strerror(e));
	}
	close(fd);
}

/* DEL: the entries this ADD wrote, found by owner (the netns may be gone). */
static void forget_pod_addr(const struct plugin_conf *c, const char *container, const char *ifname)
{
	__u64 owner = pod_addr_owner(container, ifname), key, next, doomed[16];
	struct lb_pod_addr value;
	int fd = pod_addr_map(c, false), n = 0;
	bool more;

	if (fd < 0)
		return;
	for (more = bpf_map_get_next_key(fd, NULL, &next) == 0; more; more = bpf_map_get_next_key(fd, &key, &next) == 0) {
		key = next;
		if (n < 16 && bpf_map_lookup_elem(fd, &key, &value) == 0 && value.owner == owner)
			doomed[n++] = key;
	}
	for (int i = 0; i < n; i++)
		bpf_map_delete_elem(fd, &doomed[i]);
	close(fd);
}

/* ---- Commands ------------------------------------------------------------------------ */

static void print_prev_result(const struct plugin_conf *c)
{
	if (c->prev_result)
		printf("%.*s\n", (int)(c->prev_result->end - c->prev_result->start), c->prev_result->start);
	else
		printf("{\"cniVersion\":\"%s\"}\n", c->cni_version);
}

static int cmd_add(const struct plugin_conf *c)
{
	const char *container = require_env("CNI_CONTAINERID");
	const char *ifname = require_env("CNI_IFNAME");
	unsigned int ifindex = 0;
	const char *veth;
	char pins[2][512];
	int prog_fds[2];
	const char *netns = require_env("CNI_NETNS");

	record_pod_addr(c, container, ifname, netns);
	if (!c->per_packet) {
		print_prev_result(c);
		return 0;
	}
	if (!c->prev_result)
		fail(CNI_ERR_CONFIG, "sluice must be chained",
		     "no prevResult: put sluice after the plugin that creates the pod's interface");
	veth = find_host_veth(c->prev_result, &ifindex);
	for (int d = 0; d < 2; d++)
		link_pin_path(pins[d], sizeof(pins[d]), c, container, ifname, d);
	pod_programs(c, prog_fds);
	mkdir_in_bpffs(c->bpffs, "links");
	/* Egress first: replies are restored before the first request is translated. */
	attach_link(pins[1], prog_fds[1], ifindex, 1, veth);
	attach_link(pins[0], prog_fds[0], ifindex, 0, veth);
	print_prev_result(c);
	return 0;
}

static int cmd_del(const struct plugin_conf *c)
{
	const char *container = require_env("CNI_CONTAINERID");
	const char *ifname = require_env("CNI_IFNAME");
	char pin[512];

	/* Both modes: the mode may have changed since the pod's ADD. */
	for (int d = 0; d < 2; d++) {
		link_pin_path(pin, sizeof(pin), c, container, ifname, d);
		if (unlink(pin) < 0 && errno != ENOENT)
			fail(CNI_ERR_IO, "cannot remove the pod's tcx link", "unlink %s: %s", pin, strerror(errno));
	}
	forget_pod_addr(c, container, ifname);
	return 0;
}

static int cmd_check(const struct plugin_conf *c)
{
	const char *container = require_env("CNI_CONTAINERID");
	const char *ifname = require_env("CNI_IFNAME");
	unsigned int ifindex = 0;
	const char *veth;
	char pin[512];

	require_env("CNI_NETNS");
	if (strncmp(c->cni_version, "0.3.", 4) == 0)
		fail(CNI_ERR_VERSION, "incompatible CNI version", "CHECK needs cniVersion 0.4.0 or later");
	if (!c->per_packet)
		return 0;
	if (!c->prev_result)
		fail(CNI_ERR_CONFIG, "sluice must be chained", "CHECK without prevResult");
	veth = find_host_veth(c->prev_result, &ifindex);
	for (int d = 0; d < 2; d++) {
		struct bpf_link_info info;
		__u32 want = 0;
		int fd, prog;

		link_pin_path(pin, sizeof(pin), c, container, ifname, d);
		fd = bpf_obj_get(pin);
		if (fd < 0)
			fail(SLUICE_ERR_CHECK, "pod_lb is not attached", "%s: %s", pin, strerror(errno));
		if (!link_info(fd, &info) || info.type != SLUICE_BPF_LINK_TYPE_TCX || info.xdp.ifindex != ifindex) {
			close(fd);
			fail(SLUICE_ERR_CHECK, "pod_lb link is not on the pod's veth",
			     "%s: want a tcx link on %s (ifindex %u), found link type %u on ifindex %u",
			     pin, veth, ifindex, info.type, info.xdp.ifindex);
		}
		close(fd);
		path_of(pin, sizeof(pin), c->bpffs, "progs", prog_names[d]);
		prog = bpf_obj_get(pin);
		if (prog >= 0) {
			want = prog_id(prog);
			close(prog);
		}
		if (want && info.prog_id != want)
			fail(SLUICE_ERR_CHECK, "pod_lb link runs another program",
			     "%s of %s runs program %u, the pinned %s is %u", directions[d], veth,
			     info.prog_id, prog_names[d], want);
	}
	return 0;
}

int main(void)
{
	const char *command = getenv("CNI_COMMAND");
	struct plugin_conf c;

	if (!command || !command[0])
		fail(CNI_ERR_ENV, "missing environment variable", "CNI_COMMAND is not set");
	if (strcmp(command, "VERSION") == 0) {
		/* The configuration is optional for VERSION. */
		printf("{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\"]}\n");
		return 0;
	}
	if (strcmp(command, "ADD") && strcmp(command, "DEL") && strcmp(command, "CHECK"))
		fail(CNI_ERR_ENV, "unknown CNI_COMMAND", "\"%s\"; expected ADD, DEL, CHECK or VERSION", command);
	c = parse_conf(command);
	if (strcmp(command, "ADD") == 0)
		return cmd_add(&c);
	if (strcmp(command, "DEL") == 0)
		return cmd_del(&c);
	return cmd_check(&c);
}
