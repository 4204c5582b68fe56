/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sluice_abi.h: the one description of everything the kernel programs (bpf/)
 * and the agent (src/) share: map names, key/value layouts, flags and limits.
 *
 * The TypeScript codecs in src/abi/generated.ts are generated from the BTF of
 * the compiled BPF objects (scripts/gen-abi.js); the build fails when that file
 * no longer matches, so a field moved here cannot silently be misread.
 *
 * Rules for this file:
 *  - Explicit padding; every struct size is a multiple of 4 and asserted below.
 *  - Network byte order (__be32/__be16) wherever the kernel hands us network
 *    order; the generator reads those typedef names to pick the byte order.
 *  - Id 0 is "invalid" for backends and rev-NAT entries (BPF arrays and
 *    zeroed values then never point at a real object by accident).
 *  - A layout change gets a new map name (..._v2), so an old agent and a new
 *    object never misread each other's pinned maps.
 *  - Map names are at most 15 characters (BPF_OBJ_NAME_LEN).
 *
 * This header is included by BPF C (with vmlinux.h types) and by host C (with
 * linux/types.h); it must not depend on either beyond the __u8..__u64/__be types.
 */
#ifndef SLUICE_ABI_H
#define SLUICE_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* ---- Map names (pinned under <bpffs>/<name>) -------------------------------- */

#define SLUICE_MAP_SERVICES4 sluice_svc4      /* lb4_service_key -> lb4_service */
#define SLUICE_MAP_BACKENDS4 sluice_be4       /* __u32 backend id -> lb4_backend */
#define SLUICE_MAP_REVNAT4   sluice_revnat4   /* __u32 rev-NAT id -> lb4_reverse_nat */
#define SLUICE_MAP_SOCKREV4  sluice_sk_rev4   /* lb4_sock_rev_key -> lb4_sock_rev (LRU) */
#define SLUICE_MAP_SOCKSLOT4 sluice_sk_slot4  /* cookie & (SLUICE_SOCK_SLOTS - 1) -> lb4_sock_slot (array) */
#define SLUICE_MAP_AFFINITY4 sluice_affin4    /* lb4_affinity_key -> lb_affinity (LRU) */
#define SLUICE_MAP_COUNTERS  sluice_counters  /* enum lb_counter -> __u64, per CPU */
#define SLUICE_MAP_AGENT     sluice_agent     /* 0 -> sluice_agent_status (written by the agent only) */

/* ---- Default capacities (the agent may raise them before load) -------------- */

#define SLUICE_MAX_SERVICE_ENTRIES  524288 /* master entries + backend slots (no prealloc: memory follows use) */
#define SLUICE_MAX_BACKENDS         262144
#define SLUICE_MAX_REVNAT           65536
#define SLUICE_MAX_SOCKREV          65536  /* UDP sockets' (backend, frontend) pairs (and TCP from an older object) */
#define SLUICE_SOCK_SLOTS           262144 /* power of two; fixed at compile time (the programs mask with it) */
#define SLUICE_MAX_AFFINITY         131072
#define SLUICE_MAX_SLOTS_PER_SERVICE 65535 /* backend_slot is a __u16; slot 0 is the master */

/* ---- Enumerations (the generator reads these #defines through clang -dM) ----- */

/* Protocols, as IPPROTO_* numbers. */
#define LB_PROTO_TCP 6
#define LB_PROTO_UDP 17

/*
 * Frontend scope. A Service whose external frontends have
 * externalTrafficPolicy: Local needs two backend sets for the same frontend:
 * traffic from outside the node (TC) uses only local backends
 * (LB_SCOPE_EXTERNAL), traffic that starts inside the cluster (socket hooks)
 * may use every backend (LB_SCOPE_INTERNAL), as kube-proxy short-circuits
 * in-cluster traffic to external addresses. Only such frontends have
 * LB_SVC_FLAG_TWO_SCOPES and internal-scope entries.
 */
#define LB_SCOPE_EXTERNAL 0
#define LB_SCOPE_INTERNAL 1

/* Master-entry flags (lb4_service.flags). */
#define LB_SVC_FLAG_CLUSTER_IP   (1 << 0) /* a ClusterIP frontend */
#define LB_SVC_FLAG_NODEPORT     (1 << 1) /* a node address + nodePort frontend */
#define LB_SVC_FLAG_EXTERNAL_IP  (1 << 2) /* a spec.externalIPs frontend */
#define LB_SVC_FLAG_LOADBALANCER (1 << 3) /* a status.loadBalancer.ingress frontend */
#define LB_SVC_FLAG_EXT_LOCAL    (1 << 4) /* externalTrafficPolicy: Local */
#define LB_SVC_FLAG_INT_LOCAL    (1 << 5) /* internalTrafficPolicy: Local */
#define LB_SVC_FLAG_TWO_SCOPES   (1 << 6) /* internal-scope entries exist, see LB_SCOPE_* */
#define LB_SVC_FLAG_AFFINITY     (1 << 7) /* sessionAffinity: ClientIP */
#define LB_SVC_FLAG_SOURCE_RANGE (1 << 8) /* loadBalancerSourceRanges apply */
/* count 0 means "drop", not "reject": endpoints exist but a Local traffic
 * policy forbids all of them from here (kube-proxy drops; with no endpoint
 * at all it rejects). TC drops silently; a socket cannot drop, so
 * connect()/sendmsg() fail with EHOSTUNREACH instead of ECONNREFUSED. */
#define LB_SVC_FLAG_DROP_NO_BACKEND (1 << 9)

/* Backend selection algorithm (lb4_service.algorithm). */
#define LB_ALG_RANDOM 0

/* Backend flags (lb4_backend.flags). */
#define LB_BACKEND_FLAG_LOCAL       (1 << 0) /* runs on this node */
#define LB_BACKEND_FLAG_TERMINATING (1 << 1) /* serving but terminating (fallback set) */

/* Counters (index into SLUICE_MAP_COUNTERS), read by the agent for metrics. */
#define LB_CNT_SOCK_TRANSLATED   0 /* connect/sendmsg rewritten to a backend */
#define LB_CNT_SOCK_NO_BACKEND   1 /* refused: the frontend has no backends */
#define LB_CNT_SOCK_SLOT_MISSING 2 /* a slot or backend entry was missing (agent mid-update) */
#define LB_CNT_SOCK_REV_XLATED   3 /* recvmsg/getpeername shown the frontend again */
#define LB_CNT_SOCK_REV_FAILED   4 /* sock reverse entry could not be stored */
#define LB_CNT_MAX               16

/* ---- Services: frontend -> master entry and backend slots -------------------- */

/*
 * One frontend (address, port, protocol, scope) owns slots 0..count:
 * slot 0 is the master entry (count, flags, rev-NAT id, affinity), slots
 * 1..count each name one backend id. The agent writes backends, then slots,
 * then the master (make-before-break), so a program that finds the master
 * always finds its slots.
 */
struct lb4_service_key {
	__be32 address;      /* frontend address */
	__be16 port;         /* frontend port */
	__u8   proto;        /* LB_PROTO_TCP or LB_PROTO_UDP */
	__u8   scope;        /* LB_SCOPE_EXTERNAL or LB_SCOPE_INTERNAL */
	__u16  backend_slot; /* 0: master entry; 1..count: one backend each */
	__u8   pad[2];
};

struct lb4_service {
	__u32 backend_id;       /* slots > 0: key in the backends map; master: 0 */
	__u16 count;            /* master: number of backend slots; 0 refuses connections */
	__u16 flags;            /* master: LB_SVC_FLAG_* */
	__u32 rev_nat_id;       /* master: key in the rev-NAT map (what replies show) */
	__u32 affinity_timeout; /* master: ClientIP affinity timeout in seconds (0: none) */
	__u8  algorithm;        /* master: LB_ALG_* */
	__u8  pad[3];
};

/* ---- Backends: id -> address ------------------------------------------------- */

struct lb4_backend {
	__be32 address; /* backend (pod) address */
	__be16 port;    /* backend port */
	__u8   proto;   /* LB_PROTO_* */
	__u8   flags;   /* LB_BACKEND_FLAG_* */
	__u32  zone;    /* topology zone id assigned by the agent (0: unknown) */
};

/* ---- Reverse NAT: id -> the frontend replies must come from ------------------ */

struct lb4_reverse_nat {
	__be32 address; /* frontend address */
	__be16 port;    /* frontend port */
	__u8   pad[2];
};

/*
 * Socket reverse translation: after connect()/sendmsg() sent a socket to a
 * backend, recvmsg() and getpeername() must show the frontend again. Keyed by
 * the socket cookie and the backend the socket talks to.
 */
struct lb4_sock_rev_key {
	__u64  cookie;  /* bpf_get_socket_cookie() */
	__be32 address; /* backend address */
	__be16 port;    /* backend port */
	__u8   proto;   /* LB_PROTO_* */
	__u8   pad;
};

struct lb4_sock_rev {
	__be32 address;    /* frontend address */
	__be16 port;       /* frontend port */
	__u8   pad[2];
	__u32  rev_nat_id; /* rev-NAT id the entry was made for; checked before use */
};

/* ---- Session affinity (sessionAffinity: ClientIP) ----------------------------- */

/*
 * The socket hooks see no client address before connect() binds one, so, as
 * Cilium does, they key affinity by the network namespace cookie (one pod =
 * one client). TC keys it by the client's IPv4 address.
 */
struct lb4_affinity_key {
	__u64 client_id;    /* netns cookie (socket hooks) or client IPv4 (TC) */
	__u32 rev_nat_id;   /* the frontend's rev-NAT id */
	__u8  netns_cookie; /* 1: client_id is a netns cookie */
	__u8  pad[3];
};

struct lb_affinity {
	__u64 last_used_ns; /* bpf_ktime_get_ns() of the last use */
	__u32 backend_id;   /* backend chosen for this client */
	__u32 pad;
};

/* ---- What the agent last did (for `sluice status` without the agent) --------- */

/*
 * One entry, written by the agent after every sync; the programs never read
 * it. Pinned like every map, so an operator sees when the maps were last
 * programmed even while no agent runs.
 */
struct sluice_agent_status {
	__u64 last_sync_unix_ms;      /* end of the last successful sync */
	__u64 last_full_sync_unix_ms; /* end of the last full resync */
	__u64 syncs;                  /* syncs since the agent started */
	__u32 agent_pid;              /* process that wrote this */
	__u32 services;               /* Services with frontends */
	__u32 frontends;              /* frontends programmed */
	__u32 backends;               /* backends programmed */
	__u32 last_sync_failures;     /* frontends the last sync could not program */
	__u32 pad;
};

/*
 * A TCP socket's (backend, frontend) pair, in a direct-mapped table indexed by
 * the socket cookie's low bits. Socket cookies are handed out sequentially
 * (per-CPU batches), so consecutive connects write neighbouring slots: the
 * write costs no cache miss, unlike an LRU hash insert (~0.5 us at every
 * scale, measured). A slot is reused by the socket SLUICE_SOCK_SLOTS cookies
 * later; only getpeername() reads it, so a very old connection then shows its
 * backend (never a wrong frontend). UDP sockets use SLUICE_MAP_SOCKREV4,
 * which recvmsg() keeps fresh for as long as replies arrive.
 */
struct lb4_sock_slot {
	struct lb4_sock_rev_key key; /* key.cookie 0: free (cookies start at 1) */
	struct lb4_sock_rev     rev; /* what recvmsg/getpeername show instead */
	__u32                   pad;
};

_Static_assert(sizeof(struct lb4_service_key) == 12, "lb4_service_key layout");
_Static_assert(sizeof(struct lb4_service) == 20, "lb4_service layout");
_Static_assert(sizeof(struct lb4_backend) == 12, "lb4_backend layout");
_Static_assert(sizeof(struct lb4_reverse_nat) == 8, "lb4_reverse_nat layout");
_Static_assert(sizeof(struct lb4_sock_rev_key) == 16, "lb4_sock_rev_key layout");
_Static_assert(sizeof(struct lb4_sock_rev) == 12, "lb4_sock_rev layout");
_Static_assert(sizeof(struct lb4_sock_slot) == 32, "lb4_sock_slot layout");
_Static_assert((SLUICE_SOCK_SLOTS & (SLUICE_SOCK_SLOTS - 1)) == 0, "SLUICE_SOCK_SLOTS is a power of two");
_Static_assert(sizeof(struct lb4_affinity_key) == 16, "lb4_affinity_key layout");
_Static_assert(sizeof(struct lb_affinity) == 16, "lb_affinity layout");
_Static_assert(sizeof(struct sluice_agent_status) == 48, "sluice_agent_status layout");

/* ==== TC / north-south (issue 4; bpf/tc_lb.bpf.c) ============================= */
/*
 * Packets that reach a NodePort, ExternalIP or LoadBalancer frontend from
 * outside the node are translated per packet at TC on the node's external
 * devices. Each translated flow owns two conntrack entries with the same value:
 *  - LB_CT_DIR_ORIGINAL, keyed by the tuple as it arrives from the client
 *    (client -> frontend): found on ingress, applies DNAT (+ SNAT).
 *  - LB_CT_DIR_REPLY, keyed by the tuple the backend's reply carries
 *    (backend -> client, or backend -> SNAT address:port): found on ingress
 *    (SNATed flows, the reply comes back to this node) or on egress
 *    (DNAT-only flows, the reply is routed out through this node); restores
 *    frontend -> client.
 * A backend on this node is only DNATed (the client address is kept, as
 * Cilium does); a backend elsewhere is also SNATed to lb4_tc_config.snat_address
 * so its reply comes back through this node.
 */
#define SLUICE_MAP_CT4       sluice_ct4     /* lb4_ct_key -> lb4_ct_entry (LRU) */
#define SLUICE_MAP_SRCRANGE4 sluice_srcrng4 /* lb4_src_range_key -> __u8 (LPM trie) */
#define SLUICE_MAP_TC_CONFIG sluice_tc_cfg  /* __u32 0 -> lb4_tc_config (array of one) */

#define SLUICE_MAX_CT4       262144
#define SLUICE_MAX_SRCRANGE4 16384

/* Conntrack entry direction (lb4_ct_key.dir). */
#define LB_CT_DIR_ORIGINAL 0
#define LB_CT_DIR_REPLY    1

/* Conntrack flags (lb4_ct_entry.flags). */
#define LB_CT_FLAG_SNAT    (1 << 0) /* source rewritten to nat_address:nat_port */
#define LB_CT_FLAG_CLOSING (1 << 1) /* TCP FIN or RST seen in this direction */

/* Defaults the data path uses for a zero field of lb4_tc_config. */
#define LB_TC_DEFAULT_TCP_ESTABLISHED_S 21600 /* 6 h */
#define LB_TC_DEFAULT_TCP_CLOSING_S     10
#define LB_TC_DEFAULT_UDP_S             60
#define LB_TC_DEFAULT_SNAT_PORT_MIN     61000 /* above Linux's default ephemeral range */
#define LB_TC_DEFAULT_SNAT_PORT_MAX     65535
#define LB_TC_SNAT_RETRIES              16    /* random ports tried after the client's own */

/* Counters of the TC path (SLUICE_MAP_COUNTERS indices 8..15; 5..7 are free). */
#define LB_CNT_TC_TRANSLATED     8  /* new flow: backend picked, DNAT (+SNAT) done */
#define LB_CNT_TC_REV_XLATED     9  /* reply (or ICMP error) restored to frontend -> client */
#define LB_CNT_TC_NO_BACKEND     10 /* dropped: frontend has no (local) backend */
#define LB_CNT_TC_SRC_RANGE_DROP 11 /* dropped: source outside loadBalancerSourceRanges */
#define LB_CNT_TC_SNAT_FAILED    12 /* dropped: no SNAT address configured or no free port */
#define LB_CNT_TC_BACKEND_GONE   13 /* a flow's backend vanished; flow re-balanced */
#define LB_CNT_TC_CT_FAILED      14 /* conntrack entry could not be written */
#define LB_CNT_TC_FIB_FAILED     15 /* no route for a redirected packet; left to the stack */

struct lb4_ct_key {
	__be32 saddr; /* source address as the packet carries it */
	__be32 daddr; /* destination address */
	__be16 sport; /* source port */
	__be16 dport; /* destination port */
	__u8   proto; /* LB_PROTO_* */
	__u8   dir;   /* LB_CT_DIR_* */
	__u8   pad[2];
};

struct lb4_ct_entry {
	__u64  expires_ns;       /* bpf_ktime_get_ns() deadline; later packets push it out */
	__u64  packets;          /* packets seen through this entry */
	__u64  bytes;            /* bytes seen through this entry */
	__be32 client_address;   /* the external client */
	__be32 frontend_address; /* NodePort node address, ExternalIP or LB IP */
	__be32 backend_address;  /* the chosen backend */
	__be32 nat_address;      /* SNAT source address (0: no SNAT) */
	__be16 client_port;
	__be16 frontend_port;
	__be16 backend_port;
	__be16 nat_port;         /* SNAT source port (0: no SNAT) */
	__u32  backend_id;       /* backends map key; checked on every original-direction packet */
	__u32  rev_nat_id;       /* the frontend's rev-NAT id */
	__u16  flags;            /* LB_CT_FLAG_* */
	__u8   proto;            /* LB_PROTO_* */
	__u8   dir;              /* LB_CT_DIR_* of the key this value is stored under */
	__u32  ifindex;          /* device the flow arrived on */
};

/*
 * loadBalancerSourceRanges: an LPM trie keyed by frontend then client prefix.
 * prefixlen counts bits after the prefixlen field: 32 (rev_nat_id, always
 * whole) + the CIDR length. A frontend with LB_SVC_FLAG_SOURCE_RANGE accepts
 * only clients that match one of its entries.
 */
struct lb4_src_range_key {
	__u32  prefixlen;  /* 32 + CIDR prefix length */
	__u32  rev_nat_id; /* the frontend's rev-NAT id (host order, matched whole) */
	__be32 address;    /* CIDR network address */
};

/* Written by the agent at index 0 of SLUICE_MAP_TC_CONFIG. Zero fields take
 * the LB_TC_DEFAULT_* values. Ports and timeouts in host order. */
struct lb4_tc_config {
	__be32 snat_address;            /* node address remote-backend flows are SNATed to (0: drop them) */
	__u16  snat_port_min;           /* SNAT source port range, inclusive */
	__u16  snat_port_max;
	__u32  tcp_established_timeout; /* seconds */
	__u32  tcp_closing_timeout;     /* seconds, after FIN or RST */
	__u32  udp_timeout;             /* seconds */
	__u32  pad;
};

_Static_assert(sizeof(struct lb4_ct_key) == 16, "lb4_ct_key layout");
_Static_assert(sizeof(struct lb4_ct_entry) == 64, "lb4_ct_entry layout");
_Static_assert(sizeof(struct lb4_src_range_key) == 12, "lb4_src_range_key layout");
_Static_assert(sizeof(struct lb4_tc_config) == 24, "lb4_tc_config layout");
/* ==== end of TC / north-south ================================================== */

/* ==== Pod veth / per-packet ClusterIP (issue 5 part 3; bpf/pod_lb.bpf.c) ====== */
/*
 * Pods whose socket LB is bypassed get their Service traffic translated per
 * packet at TC on the host side of their veth (attached by the Sluice CNI
 * plugin, native/sluice-cni.c). The flows share SLUICE_MAP_CT4 and the TC
 * counters with the north-south path; their entries carry LB_CT_FLAG_POD and
 * the pod-veth programs act only on such entries. A pod that reaches
 * itself through a Service (hairpin) is SNATed to the frontend address with a
 * port from the SNAT range (LB_CT_FLAG_SNAT | LB_CT_FLAG_POD).
 */
#define LB_CT_FLAG_POD (1 << 2) /* flow translated at a pod veth, not on an external device */

/* Entry points of build/pod_lb.bpf.o, pinned by the agent or the CNI plugin as
 * <bpffs>/progs/<name> and attached with tcx links <bpffs>/links/pod-<container id>-<ifname>-<ingress|egress>. */
#define SLUICE_PROG_POD_INGRESS sluice_pod_ingress /* host veth ingress: packets from the pod */
#define SLUICE_PROG_POD_EGRESS  sluice_pod_egress  /* host veth egress: packets to the pod */
/* ==== end of pod veth ============================================================ */

#endif /* SLUICE_ABI_H */
