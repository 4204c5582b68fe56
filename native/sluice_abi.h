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
#include <linux/bpf.h> /* struct bpf_spin_lock */
#endif

/* ---- Map names (pinned under <bpffs>/<name>) -------------------------------- */

#define SLUICE_MAP_SERVICES4 sluice_svc4      /* lb4_frontend_key -> lb4_service (master only; layout 2) */
#define SLUICE_MAP_RANGES4   sluice_rng4      /* __u32 index -> __u32 backend id (ARRAY: frontends' backend ranges) */
#define SLUICE_MAP_BACKENDS4 sluice_be4       /* __u32 backend id -> lb4_backend (ARRAY; layout 2) */
#define SLUICE_MAP_REVNAT4   sluice_revnat4   /* __u32 rev-NAT id -> lb4_reverse_nat (ARRAY; layout 2) */
#define SLUICE_MAP_AFFINITY4 sluice_affin4    /* lb4_affinity_key -> lb_affinity (LRU) */
#define SLUICE_MAP_COUNTERS  sluice_cnt_v2    /* LB_CNT_* index -> __u64, per CPU (v2: 128 indices) */
#define SLUICE_MAP_AGENT     sluice_agent     /* 0 -> sluice_agent_status (written by the agent only) */
#define SLUICE_MAP_RR4       sluice_rr4       /* __u32 rev-NAT id -> __u32 round-robin counter (ARRAY; h-alg) */

/* ---- Default capacities (the agent may raise them before load) -------------- */

#define SLUICE_MAX_SERVICE_ENTRIES  524288 /* IPv4: frontends (masters); IPv6: masters + backend slots (no prealloc) */
#define SLUICE_MAX_RANGE4           524288 /* backend ids in all IPv4 frontends' ranges, old ones in their grace period included (ARRAY: 4 MiB, elements padded to 8 B) */
#define SLUICE_MAX_BACKENDS         262144
#define SLUICE_MAX_REVNAT           65536
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
 * at all it rejects: ICMP port unreachable on the TC paths, bpf/lib/reject.h).
 * TC drops silently; a socket cannot drop, so
 * connect()/sendmsg() fail with EHOSTUNREACH instead of ECONNREFUSED. */
#define LB_SVC_FLAG_DROP_NO_BACKEND (1 << 9)

/* Backend selection algorithm (lb4_service.algorithm). sessionAffinity
 * ClientIP is checked first and wins over every algorithm. */
#define LB_ALG_RANDOM      0 /* kube-proxy's: a random slot per new connection or flow */
/* ---- h-alg: load-balancing algorithms (issue 15) ---- */
#define LB_ALG_ROUND_ROBIN 1 /* slots in turn: a per-frontend counter (SLUICE_MAP_RR4) % count + 1 */
#define LB_ALG_SOURCE_HASH 2 /* hash(client) % count + 1: netns cookie on the socket path, client IPv4 on TC */
/* ---- end h-alg ---- */
/* ---- h-maglev: Maglev consistent hashing (issue 15; table in SLUICE_MAP_MAGLEV4) ---- */
#define LB_ALG_MAGLEV      3 /* table[hash % M]: flow 5-tuple on TC, socket cookie on the socket path */
#define SLUICE_MAP_MAGLEV4 sluice_maglev4 /* rev_nat_id * 2 + (scope internal) -> inner ARRAY of lb_maglev_row (ARRAY_OF_MAPS) */
#define SLUICE_MAX_MAGLEV4 131072 /* twice the rev-NAT ids (two scopes each); the agent sizes it to twice sluice_revnat4 */
#define LB_MAGLEV_ROW      8      /* table entries per inner-array element (32 bytes: no per-entry padding) */
/* Row 0 of a table: backend_id[0] = M (entries), [1] = backends; entry e is
 * row 1 + e / LB_MAGLEV_ROW, column e % LB_MAGLEV_ROW, a backend id. */
#define LB_CNT_MAGLEV_PICKED   118 /* a new connection/flow took its backend from a Maglev table */
#define LB_CNT_MAGLEV_FALLBACK 119 /* maglev frontend without a usable table (entry or backend missing): random slot */

/* Indexed by the frontend it serves (rev-NAT id and scope: lb_maglev_index in
 * bpf/lib/maglev.h); scopes and protocols differ in backends, and a rev-NAT id
 * names one address, port and protocol. */
struct lb_maglev_row {
	__u32 backend_id[LB_MAGLEV_ROW];
};
/* ---- end h-maglev ---- */

/* Backend flags (lb4_backend.flags). */
#define LB_BACKEND_FLAG_LOCAL       (1 << 0) /* runs on this node */
#define LB_BACKEND_FLAG_TERMINATING (1 << 1) /* serving but terminating (fallback set) */

/*
 * Counters: SLUICE_MAP_COUNTERS is a plain per-CPU array; each index is one
 * {reason, direction, path} combination. src/datapath/counters.ts maps every
 * index to those labels (sluice_datapath_events_total{reason,direction,path});
 * a new counter is a #define here plus one row there. Index ranges are owned
 * by features, so parallel work never collides:
 *     0-15  socket LB (below)
 *    16-31  per-packet flows on the north-south path (LB_CNT_TC_*, TC section)
 *    32-47  socket LB, per-socket state
 *    48-63  north-south fragments and PMTU (59: pod-veth frontend-address set, issue 12)
 *    64-79  agent-side events
 *    80-95  socket destroy
 *   96-111  per-packet flows on the pod-veth path: LB_CNT_TC_* + LB_CNT_POD_OFFSET
 *  112-113  socket-path loadBalancerSourceRanges (issue 11)
 *  114-117  least-connection (issue 15)
 *  118-121  Maglev (issue 15)
 *  122-123  SNAT port range exhausted (north-south, pod veths)
 *  124-127  IPv6 socket path (issue 14)
 */
#define LB_CNT_MAX               128
#define LB_CNT_SOCK_TRANSLATED   0 /* connect/sendmsg rewritten to a backend */
#define LB_CNT_SOCK_NO_BACKEND   1 /* refused: the frontend has no backends */
#define LB_CNT_SOCK_SLOT_MISSING 2 /* a slot or backend entry was missing (agent mid-update) */
#define LB_CNT_SOCK_REV_XLATED   3 /* recvmsg/getpeername shown the frontend again */

/* ---- Services: frontend -> master entry and backend range -------------------- */

/*
 * IPv4 (SLUICE_MAP_SERVICES4, layout 2, Katran-style): one hash entry per
 * frontend (address, port, protocol, scope), keyed by lb4_frontend_key. Its
 * lb4_service value names a contiguous range of SLUICE_MAP_RANGES4 (an
 * ARRAY): backend_id is the range's first index, count its length; each
 * element is a backend id, an index into SLUICE_MAP_BACKENDS4 (an ARRAY too).
 * A connect is one hash lookup and two array loads. A backend-set change
 * writes a new range, then replaces the master in one update; the old range
 * is reused only after a grace period (src/datapath/ranges.ts), so a program
 * holding a copy of the old master still reads the old, intact range.
 *
 * IPv6 (SLUICE_MAP_SERVICES6, layout 2) is the same table over its own maps:
 * one master per frontend keyed by lb6_frontend_key, naming a range of
 * SLUICE_MAP_RANGES6, whose elements index SLUICE_MAP_BACKENDS6 (ARRAY).
 * The range arrays are one per family (not one shared array, although the
 * ids come from one pool) so that each is allocated by its own allocator
 * and a live upgrade rewrites IPv6 slots into ranges of a new, empty array
 * while the IPv4 array is carried as it is.
 *
 * lb4_service_key is the programs' working copy of a frontend: the map key
 * (its first 8 bytes, laid out as lb4_frontend_key) plus the position in the
 * range the pick came from (backend_slot, 1..count; kept per UDP socket).
 */
struct lb4_frontend_key {
	__be32 address; /* frontend address */
	__be16 port;    /* frontend port */
	__u8   proto;   /* LB_PROTO_TCP or LB_PROTO_UDP */
	__u8   scope;   /* LB_SCOPE_EXTERNAL or LB_SCOPE_INTERNAL */
};

struct lb4_service_key {
	__be32 address;      /* frontend address */
	__be16 port;         /* frontend port */
	__u8   proto;        /* LB_PROTO_TCP or LB_PROTO_UDP */
	__u8   scope;        /* LB_SCOPE_EXTERNAL or LB_SCOPE_INTERNAL */
	__u16  backend_slot; /* programs only: 1..count, the range position picked (0: none) */
	__u8   pad[2];
};

struct lb4_service {
	__u32 backend_id;       /* first index of the frontend's range in SLUICE_MAP_RANGES4 (IPv6: SLUICE_MAP_RANGES6) */
	__u16 count;            /* master: number of backend slots; 0 refuses connections */
	__u16 flags;            /* master: LB_SVC_FLAG_* */
	__u32 rev_nat_id;       /* master: key in the rev-NAT map (what replies show) */
	__u32 affinity_timeout; /* master: ClientIP affinity timeout in seconds (0: none) */
	__u8  algorithm;        /* master: LB_ALG_* */
	__u8  pad[3];
};

/* ---- Backends: id -> address ------------------------------------------------- */

/* IPv4: an ARRAY indexed by the backend id; an entry with proto 0 (all zero)
 * is no backend (ids are dense, from 1). */

struct lb4_backend {
	__be32 address; /* backend (pod) address */
	__be16 port;    /* backend port */
	__u8   proto;   /* LB_PROTO_* */
	__u8   flags;   /* LB_BACKEND_FLAG_* */
	__u32  zone;    /* topology zone id assigned by the agent (0: unknown) */
};

/* ---- Reverse NAT: id -> the frontend replies must come from ------------------ */

/* IPv4: an ARRAY indexed by the rev-NAT id; port 0 is no entry. */

struct lb4_reverse_nat {
	__be32 address; /* frontend address */
	__be16 port;    /* frontend port */
	__u8   pad[2];
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

_Static_assert(sizeof(struct lb4_frontend_key) == 8, "lb4_frontend_key layout");
_Static_assert(sizeof(struct lb4_service_key) == 12, "lb4_service_key layout");
_Static_assert(__builtin_offsetof(struct lb4_service_key, scope) == __builtin_offsetof(struct lb4_frontend_key, scope),
	       "lb4_service_key starts with an lb4_frontend_key");
_Static_assert(sizeof(struct lb4_service) == 20, "lb4_service layout");
_Static_assert(sizeof(struct lb4_backend) == 12, "lb4_backend layout");
_Static_assert(sizeof(struct lb4_reverse_nat) == 8, "lb4_reverse_nat layout");
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

/* Entry points of build/tc_lb.bpf.o besides sluice_tc_ingress/egress. */
#define SLUICE_PROG_CT_GC sluice_ct_gc /* run by the agent (BPF_PROG_TEST_RUN): deletes expired conntrack entries in the kernel */

#define SLUICE_MAX_CT4       262144
#define SLUICE_MAX_SRCRANGE4 16384

/* Conntrack entry direction (lb4_ct_key.dir). */
#define LB_CT_DIR_ORIGINAL 0
#define LB_CT_DIR_REPLY    1

/*
 * Conntrack flags (lb4_ct_entry.flags). Both entries of a flow carry the same
 * flags (a packet through one copies them to the other). TCP state, from
 * the flags, picks the timeout (see bpf/lib/conntrack.h):
 *   new (no ESTABLISHED yet)          -> tcp_syn_timeout
 *   ESTABLISHED, also half-closed     -> tcp_established_timeout
 *   CLOSING (RST, or FIN both ways)   -> tcp_closing_timeout
 */
#define LB_CT_FLAG_SNAT         (1 << 0) /* source rewritten to nat_address:nat_port (a node address) */
#define LB_CT_FLAG_CLOSING      (1 << 1) /* TCP: RST seen, or FIN seen in both directions */
#define LB_CT_FLAG_SEEN_REPLY   (1 << 3) /* a packet went backend -> client */
#define LB_CT_FLAG_ESTABLISHED  (1 << 4) /* TCP: the client sent after a reply (handshake done) */
#define LB_CT_FLAG_FIN_ORIGINAL (1 << 5) /* TCP: the client sent FIN */
#define LB_CT_FLAG_FIN_REPLY    (1 << 6) /* TCP: the backend sent FIN */
#define LB_CT_FLAG_SPORT        (1 << 7) /* client port remapped to nat_port, address kept (the DNATed tuple was in use) */

/*
 * expires_ns of an entry being replaced: whoever swaps an expired (or the
 * same flow's) deadline for this value with compare-and-swap owns the key
 * and deletes it; everyone else sees the entry as absent and leaves it alone.
 */
#define LB_CT_EXPIRES_CLAIMED 1

/* Defaults the data path uses for a zero field of lb4_tc_config. */
#define LB_TC_DEFAULT_TCP_ESTABLISHED_S 21600 /* 6 h */
#define LB_TC_DEFAULT_TCP_SYN_S         60    /* until the handshake completes (Cilium: 60 s) */
#define LB_TC_DEFAULT_TCP_CLOSING_S     10
#define LB_TC_DEFAULT_UDP_S             60
#define LB_TC_DEFAULT_SNAT_PORT_MIN     61000 /* above Linux's default ephemeral range */
#define LB_TC_DEFAULT_SNAT_PORT_MAX     65535
#define LB_TC_SNAT_RETRIES              16    /* random ports tried after the client's own */
/* issue 13 item 5: after the random tries, a linear scan from a hashed start
 * covers the rest of the range (bpf_loop), so a new flow fails only when
 * every port toward its backend:port is held by a live flow. */
#define LB_CNT_TC_SNAT_EXHAUSTED        122   /* original: dropped, every port of the SNAT range in use (north-south) */
#define LB_CNT_POD_SNAT_EXHAUSTED       123   /* original: the same on the pod-veth path (hairpin) */

/*
 * Counters of per-packet flows (SLUICE_MAP_COUNTERS indices 16..31 on the
 * north-south path; the pod-veth path counts the same reasons at
 * index + LB_CNT_POD_OFFSET, 96..111). Direction: of the packet counted.
 */
#define LB_CNT_POD_OFFSET            80
#define LB_CNT_TC_TRANSLATED         16 /* original: new flow, backend picked, DNAT (+SNAT) done */
#define LB_CNT_TC_REV_XLATED         17 /* reply: reply (or ICMP error) restored to frontend -> client */
#define LB_CNT_TC_NO_BACKEND         18 /* original: no endpoint: rejected (ICMP); none usable here (DROP_NO_BACKEND): dropped */
#define LB_CNT_TC_SRC_RANGE_DROP     19 /* original: dropped, source outside loadBalancerSourceRanges */
#define LB_CNT_TC_SNAT_FAILED        20 /* original: dropped, no SNAT address configured or no free port */
#define LB_CNT_TC_BACKEND_GONE       21 /* original: a flow's backend vanished; flow re-balanced */
#define LB_CNT_TC_CT_FAILED          22 /* original: dropped, conntrack entry could not be written */
#define LB_CNT_TC_FIB_FAILED         23 /* none: no route for a packet we forward; left to the stack */
#define LB_CNT_TC_CT_RESTORED_ORIG   24 /* original: a flow's missing original entry put back (LRU took it) */
#define LB_CNT_TC_CT_RESTORED_REPLY  25 /* reply: a flow's missing reply entry (SNAT port) put back */
#define LB_CNT_TC_CT_PEER_LOST       26 /* none: a missing entry's key went to another flow; flow ended */
#define LB_CNT_TC_SPORT_REMAPPED     27 /* original: DNATed tuple in use by another flow; client port remapped */

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
	__u32  tcp_closing_timeout;     /* seconds, after RST or FIN in both directions */
	__u32  udp_timeout;             /* seconds */
	__u32  tcp_syn_timeout;         /* seconds, until the handshake completes (was pad: 0 = default) */
};

_Static_assert(sizeof(struct lb4_ct_key) == 16, "lb4_ct_key layout");
_Static_assert(sizeof(struct lb4_ct_entry) == 64, "lb4_ct_entry layout");
_Static_assert(sizeof(struct lb4_src_range_key) == 12, "lb4_src_range_key layout");
_Static_assert(sizeof(struct lb4_tc_config) == 24, "lb4_tc_config layout");
/* ==== end of TC / north-south ================================================== */

/* ==== TC: fragments, PMTU, multi-homed nodes (issue 10 items 8-10; bpf/lib/frag.h, pmtu.h, egress.h) ==== */
/*
 * Fragments: only the first fragment of a datagram carries the TCP/UDP ports.
 * When the TC path sees a first fragment (MF set, offset 0) it remembers the
 * datagram's ports under (addresses, IP id, protocol); later fragments of the
 * same datagram find them there and are translated like the first
 * (addresses only: the L4 checksum lives in the first fragment).
 *
 * Multi-homed nodes: a flow SNATed to a backend on another node takes the
 * address of the device the FIB sends it out of, as MASQUERADE does, when the
 * agent wrote one for that device here (node-to-node devices other than the
 * external ones); otherwise lb4_tc_config.snat_address.
 */
#define SLUICE_MAP_FRAG4     sluice_frag4    /* lb4_frag_key -> lb4_frag_ports (LRU) */
#define SLUICE_MAP_SNAT_DEV4 sluice_snatdev4 /* __u32 ifindex -> lb4_snat_device (hash, written by the agent) */

#define SLUICE_MAX_FRAG4     8192 /* datagrams in flight in fragments at once */
#define SLUICE_MAX_SNAT_DEV4 256  /* node devices with their own SNAT address */

/* Counters (SLUICE_MAP_COUNTERS indices 48..63, this block's own). */
#define LB_CNT_TC_FRAG_TRACKED     48 /* first fragment of a TCP/UDP datagram: ports remembered */
#define LB_CNT_TC_FRAG_FOUND       49 /* later fragment: ports found, translated like its first */
#define LB_CNT_TC_FRAG_UNKNOWN     50 /* later fragment whose first was not seen here: passed untouched */
#define LB_CNT_TC_FRAG_NEEDED_SENT 51 /* too big for the next hop with DF: ICMP "fragmentation needed" sent back */
#define LB_CNT_TC_TOO_BIG_DROP     52 /* too big for the next hop without DF (TC cannot fragment), or no ICMP could be built: dropped */
#define LB_CNT_TC_SNAT_EGRESS_DEV  53 /* new SNATed flow took the egress device's address (multi-homed node) */

struct lb4_frag_key {
	__be32 saddr; /* source address of the fragments as they arrive */
	__be32 daddr; /* destination address */
	__be16 id;    /* IPv4 identification shared by the datagram's fragments */
	__u8   proto; /* LB_PROTO_TCP or LB_PROTO_UDP */
	__u8   pad;
};

struct lb4_frag_ports {
	__be16 sport; /* the datagram's source port, from its first fragment */
	__be16 dport; /* its destination port */
};

struct lb4_snat_device {
	__be32 address; /* the address SNATed flows leaving through this device take */
};

_Static_assert(sizeof(struct lb4_frag_key) == 12, "lb4_frag_key layout");
_Static_assert(sizeof(struct lb4_frag_ports) == 4, "lb4_frag_ports layout");
_Static_assert(sizeof(struct lb4_snat_device) == 4, "lb4_snat_device layout");
/* ==== end of fragments, PMTU, multi-homed ========================================= */

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

/*
 * SLUICE_MAP_POD_PF4, the pod path's frontend-address bitmap (issue 12): an
 * ARRAY of SLUICE_POD_PF_WORDS u64 words (2^SLUICE_POD_PF_BITS_LOG2 bits, bit
 * b of word w is slot 64 * w + b) with the slot of every IPv4 address a pod
 * can reach a frontend at set (ClusterIPs, ExternalIPs, LoadBalancer IPs, and
 * the node addresses standing for the NodePort wildcard). The slot of an
 * address: sluice_bit_slot(ntohl(daddr), SLUICE_POD_PF_BITS_LOG2). Every
 * packet of a pod flow at ingress is addressed to one of them (a new or known
 * flow to the frontend, a hairpin reply to frontend:nat-port, an ICMP error
 * about a reply the frontend sent), so a packet whose slot is clear leaves
 * after one array load (which the JIT inlines), before any conntrack work. A
 * set bit sends the packet to the full lookups, which are the exact check: a
 * collision costs time, never a verdict. Its writer keeps the bitmap a
 * superset (bits set before a frontend is written, a bit cleared only when
 * the last address on it is gone). The bitmap is used only once its writer
 * has stored a non-zero word at SLUICE_POD_PF_MARKER (the element after the
 * bits): a zeroed or unmaintained bitmap (a CNI plugin that pinned the maps
 * before any agent ran) falls back to the full lookups, never to passing
 * Service traffic untranslated.
 */
#define SLUICE_MAP_POD_PF4 sluice_podpf4 /* __u32 word -> __u64 64 bits of the frontend-address bitmap; word SLUICE_POD_PF_MARKER != 0: maintained (array, written by its maintainer) */
#define SLUICE_POD_PF_BITS_LOG2 20
#define SLUICE_POD_PF_WORDS 16384 /* 2^SLUICE_POD_PF_BITS_LOG2 / 64: 128 KiB */
#define SLUICE_POD_PF_MARKER 16384 /* the index of the "this bitmap is complete" word, after the bits */
#define SLUICE_POD_PF_ELEMS 16385 /* SLUICE_POD_PF_WORDS + the marker */
#define LB_CNT_POD_NOT_FRONTEND 59 /* pod ingress: TCP/UDP to an address whose SLUICE_MAP_POD_PF4 bit is clear, passed after one array load */
/* ==== end of pod veth ============================================================ */

/* ==== Socket path: per-socket state, socket-LB scope, bind rules (issue 10) === */
/*
 * Every translated socket carries its own state in socket-local storage
 * (BPF_MAP_TYPE_SK_STORAGE): created on its first translation, freed by the
 * kernel with the socket. Nothing is shared between sockets, so no socket can
 * see another's entry, and nothing is evicted while the socket lives.
 *
 * The state is a small set of (frontend -> backend) pairs, one per frontend
 * the socket was sent to:
 *  - forward: a UDP socket's connect()/sendmsg() to a frontend that has a
 *    pair reuses its backend while the frontend's slot still names it (an
 *    unconnected UDP socket stays on one backend, as conntrack keeps it under
 *    kube-proxy); TCP picks on every connect();
 *  - reverse: recvmsg()/getpeername() from a backend show the frontend of
 *    the pair naming that backend (the last one sent to, when two frontends
 *    share the backend), once its rev-NAT entry is checked.
 * SLUICE_SOCK_PAIRS pairs per socket: a TCP socket needs one; a UDP socket
 * talking to more frontends replaces its oldest pair (FIFO; counted in
 * LB_CNT_SOCK_PAIR_EVICTED): replies from that pair's backend then show the
 * backend, and its next datagram to that frontend picks a backend again.
 * 4 covers a resolver with glibc's 3 name servers plus one.
 */
#define SLUICE_MAP_SOCK4     sluice_sock4    /* socket -> lb4_sock_state (socket-local storage) */
#define SLUICE_MAP_SOCK_CFG  sluice_sock_cfg /* __u32 0 -> lb_sock_config (array of one) */
#define SLUICE_MAP_NODEIP4   sluice_nodeip4  /* __be32 node address -> __u8 1 (hash) */

#define SLUICE_SOCK_PAIRS    4
#define SLUICE_MAX_NODEIP4   256
#define LB_SELECT_ATTEMPTS   3 /* backend selection re-reads the master this many times */

/* lb_sock_config.mode: which sockets the socket LB translates (agent
 * config key socketLB; Cilium's bpf-lb-sock-hostns-only and its inverse). */
#define LB_SOCK_LB_ALL            0 /* every socket in the cgroup */
#define LB_SOCK_LB_HOST_NS_ONLY   1 /* sockets of the host network namespace only */
#define LB_SOCK_LB_POD_NS_ONLY    2 /* sockets of every other network namespace only */

/* Counters of the socket path (SLUICE_MAP_COUNTERS indices 32..47). */
#define LB_CNT_SOCK_STATE_FAILED 32 /* socket storage could not be created: no stickiness or reverse for that socket */
#define LB_CNT_SOCK_PAIR_EVICTED 33 /* a socket sent to more than SLUICE_SOCK_PAIRS frontends: its oldest pair replaced */
#define LB_CNT_SOCK_STICKY       34 /* connect/sendmsg reused the socket's backend for that frontend */
#define LB_CNT_SELECT_RETRY      35 /* a missing slot or backend: master re-read, selection retried (socket and TC paths) */
#define LB_CNT_SOCK_NS_SKIPPED   36 /* not translated: the socket's netns is excluded by the socketLB mode */
#define LB_CNT_SOCK_EXTIP_PASSED 37 /* not translated: ExternalIP that is not this node's address (CVE-2020-8554) */
#define LB_CNT_SOCK_BIND_REFUSED 38 /* bind() to a NodePort/ExternalIP/LoadBalancer address:port refused */
#define LB_CNT_SOCK_UDP_SLOT     39 /* a UDP socket's first frontend pair written into its slot (lb4_sock_uslot, lb6_sock_uslot), no socket storage created */
#define LB_CNT_SOCK_UDP_STORAGE  40 /* a UDP socket's pair went to socket storage: a second frontend, or its slot held by another socket */
#define LB_CNT_SOCK6_SLOT_HELD   41 /* an IPv6 TCP connect's slot (lb6_sock_slot) held by another socket: its pair went to socket storage */

/* One frontend a socket was sent to and the backend it got. */
struct lb4_sock_pair {
	__be32 frontend_address; /* what recvmsg/getpeername show for the backend */
	__be16 frontend_port;
	__u8   scope;            /* LB_SCOPE_* of the frontend entries the backend came from */
	__u8   used;             /* 1: the pair is in use */
	__be32 backend_address;  /* the backend this socket was sent to */
	__be16 backend_port;
	__u16  backend_slot;     /* the frontend's slot it was picked from; must still name backend_id to be reused */
	__u32  backend_id;       /* backends map key */
	__u32  rev_nat_id;       /* the frontend's rev-NAT id; checked before a reverse translation */
};

/* SLUICE_MAP_SOCK4 value: a socket's pairs. Readers and writers on other
 * CPUs (one thread sends while another receives) take the lock, so a pair is
 * never seen half-written. */
struct lb4_sock_state {
	struct bpf_spin_lock lock; /* guards everything below */
	__u8  next;                /* pair replaced when all are in use (oldest first) */
	__u8  last;                /* pair last sent to: wins when two pairs name one backend */
	__u8  pad[2];
	struct lb4_sock_pair pairs[SLUICE_SOCK_PAIRS];
};

/* Written by the agent (or `sluice attach`) at index 0 of SLUICE_MAP_SOCK_CFG. */
struct lb_sock_config {
	__u64 host_netns_cookie; /* SO_NETNS_COOKIE of the host network namespace (0: unknown; bind rules off) */
	__u32 mode;              /* LB_SOCK_LB_* */
	__u32 pad;
};

_Static_assert(sizeof(struct lb4_sock_pair) == 24, "lb4_sock_pair layout");
_Static_assert(sizeof(struct lb4_sock_state) == 8 + 24 * SLUICE_SOCK_PAIRS, "lb4_sock_state layout");
_Static_assert(sizeof(struct lb_sock_config) == 16, "lb_sock_config layout");

/*
 * TCP keeps its one reverse pair out of socket-local storage: creating that
 * storage on every connect() (two allocations, and an RCU free when the
 * socket closes) cost about 4 points of connect latency against direct
 * (docs/bench-results.md). A TCP socket's pair goes into its slot below
 * (lb4_sock_slot), or, when another live socket holds that slot, into this
 * LRU hash keyed by the socket cookie and the backend (Cilium's
 * lb4_reverse_sk shape).
 * Cookies are never reused (64-bit, allocated once per socket), so no socket
 * sees another's entry; an entry outlives its socket until the LRU recycles
 * it. Under pressure (more than SLUICE_MAX_SOCK_TCP4 TCP connects since a
 * live connection last used its entry) the entry of a live connection can be
 * recycled: its getpeername() then shows the backend, and the stale-socket
 * destroy (sock_destroy.bpf.c) no longer recognises it as translated, as for
 * a socket that dialled the backend itself. Traffic is not affected: the
 * connection already talks to the backend.
 */
#define SLUICE_MAP_SOCK_TCP4 sluice_sk_tcp4 /* lb4_sock_tcp_key -> lb4_sock_tcp (LRU hash) */
#define SLUICE_MAX_SOCK_TCP4 131072

/*
 * A TCP socket's reverse pair, first home (docs/socket-path.md, "Where
 * connect time goes"): a preallocated ARRAY of slots, the slot at the socket
 * cookie's low bits (cookie & (SLUICE_SOCK_SLOTS4 - 1)). The LRU write above
 * cost about 400 ns of connect4; a slot costs an array load and an
 * uncontended lock. A connect claims the slot only when it is free (cookie
 * 0) or already its own, under the lock; a reader takes the lock (getpeername4:
 * the socket's own lock, which it holds, bpf/lib/sock_slot.h) and uses
 * the pair only when the slot names its own cookie and its peer; sock_release
 * frees the slot only when it names its own cookie. Cookies are unique and
 * never reused, so a slot never shows one socket another's frontend, and a
 * live socket's slot is never taken over (no wrap-around). A slot held by a
 * live socket (or leaked by a socket whose release was not seen) sends the
 * next socket whose cookie lands there to the LRU above, as before.
 * lc_backend_id (was padding, 0 in every slot an older agent wrote) is a
 * least-connection socket's count, in the slot it already holds instead of
 * a socket storage of its own (SLUICE_MAP_LC_SOCK4, which cost about 0.9 us
 * of connect4 to create); a free slot (cookie 0) always has 0 there, and a
 * slot keeps its cookie while it holds a count, even once its pair is gone.
 */
struct lb4_sock_slot {
	struct bpf_spin_lock lock; /* guards everything below */
	__u32  rev_nat_id;         /* the frontend's rev-NAT id; checked before a reverse translation */
	__u64  cookie;             /* the socket holding the slot (bpf_get_socket_cookie()); 0: free */
	__be32 backend_address;    /* the backend connect() was sent to */
	__be16 backend_port;
	__be16 frontend_port;      /* what getpeername() shows */
	__be32 frontend_address;
	__u32  lc_backend_id;      /* least-connection: the backend this socket holds a count on; 0: none (bpf/lib/lc.h) */
};

_Static_assert(sizeof(struct lb4_sock_slot) == 32, "lb4_sock_slot layout");

#define SLUICE_MAP_SOCK_SLOT4 sluice_sk_pair4 /* cookie & (SLUICE_SOCK_SLOTS4 - 1) -> lb4_sock_slot (ARRAY) */
#define SLUICE_SOCK_SLOTS4 131072 /* a power of two (the index is masked); 4 MiB */

/*
 * A UDP socket's first frontend pair (docs/socket-path.md, "UDP: slot
 * first"): creating socket storage (SLUICE_MAP_SOCK4) was about 1.2 us of
 * the 1.6 us sendmsg4 cost on a fresh socket (bench/sockprogstats.sh). The
 * slot at cookie & (SLUICE_SOCK_USLOTS4 - 1) holds the socket's pair for its
 * first frontend under sluice_sk_pair4's rules (lb_sock_slot_head: claimed
 * when free or the socket's own, read under the lock against the cookie,
 * freed at sock_release). A socket that sends to a second frontend, or whose
 * slot another live socket holds, keeps its pairs in its storage as before;
 * the slot's pair moves there (storage written first, then the slot freed),
 * so a socket with storage holds no slot and replies never have two places
 * to be looked up in. seq (issue 12): a sequence count around every write
 * (odd while a writer, under the lock, changes cookie or pair; even again
 * after), so recvmsg4 can read the slot without the lock on x86-64
 * (bpf/lib/sock_slot.h, lb4_sock_uslot_read). It took the place of a copy
 * of pair.rev_nat_id; a slot carried from that layout may hold an odd
 * value, which readers treat as "being written" (locked read) until the
 * slot's next write makes it even.
 */
struct lb4_sock_uslot {
	struct bpf_spin_lock lock; /* guards everything below (writers) */
	__u32  seq;                /* odd: a write in progress; see above */
	__u64  cookie;             /* the socket holding the slot; 0: free */
	struct lb4_sock_pair pair; /* sticky backend and reverse pair, as in lb4_sock_state */
};

_Static_assert(sizeof(struct lb4_sock_uslot) == 40, "lb4_sock_uslot layout");

#define SLUICE_MAP_SOCK_USLOT4 sluice_sk_udp4 /* cookie & (SLUICE_SOCK_USLOTS4 - 1) -> lb4_sock_uslot (ARRAY) */
#define SLUICE_SOCK_USLOTS4 65536 /* a power of two (the index is masked); 2.5 MiB */

/*
 * The IPv6 twin (issue 12): an AF_INET6 TCP socket connected to an IPv6
 * frontend keeps its one reverse pair in its slot of this ARRAY, under the
 * same rules as lb4_sock_slot (claimed by cookie under the lock, read only
 * when the slot names the reader's cookie and peer, freed at sock_release).
 * Creating socket-local storage on every connect6 cost about as much as
 * the rest of connect6 together (docs/socket-path.md); when another live
 * socket holds the slot, the pair goes to the socket's storage
 * (SLUICE_MAP_SOCK6, lb6_sock_state) as before, so the IPv6 path needs no
 * LRU of its own. Both slot types start with the same head (lock,
 * rev_nat_id, cookie: bpf/lib/sock_slot.h claims, reads and frees both with
 * one code). Fewer slots than IPv4 (56 bytes each): a node with more live
 * IPv6 TCP connections than that only pays storage for the overflow.
 */
struct lb6_sock_slot {
	struct bpf_spin_lock lock; /* guards everything below */
	__u32  rev_nat_id;         /* the frontend's rev-NAT id; checked before a reverse translation */
	__u64  cookie;             /* the socket holding the slot (bpf_get_socket_cookie()); 0: free */
	__u8   backend_address[16]; /* the backend connect() was sent to */
	__u8   frontend_address[16]; /* what getpeername() shows */
	__be16 backend_port;
	__be16 frontend_port;
	__u32  pad;
};

_Static_assert(sizeof(struct lb6_sock_slot) == 56, "lb6_sock_slot layout");

#define SLUICE_MAP_SOCK_SLOT6 sluice_sk_pair6 /* cookie & (SLUICE_SOCK_SLOTS6 - 1) -> lb6_sock_slot (ARRAY) */
#define SLUICE_SOCK_SLOTS6 32768 /* a power of two (the index is masked); 1.75 MiB */

struct lb4_sock_tcp_key {
	__u64  cookie;           /* bpf_get_socket_cookie() of the socket */
	__be32 backend_address;  /* the backend connect() was sent to */
	__be16 backend_port;
	__u16  pad;
};

struct lb4_sock_tcp {
	__be32 frontend_address; /* what getpeername() shows */
	__be16 frontend_port;
	__u16  pad;
	__u32  rev_nat_id;       /* the frontend's rev-NAT id; checked before a reverse translation */
};

_Static_assert(sizeof(struct lb4_sock_tcp_key) == 16, "lb4_sock_tcp_key layout");
_Static_assert(sizeof(struct lb4_sock_tcp) == 12, "lb4_sock_tcp layout");

/*
 * loadBalancerSourceRanges on the socket path (issue 11 item 1): a connect()
 * or sendmsg() to a frontend with LB_SVC_FLAG_SOURCE_RANGE whose source is
 * outside the ranges (SLUICE_MAP_SRCRANGE4; SLUICE_MAP_SRCRANGE6 for connect6/sendmsg6) fails with EHOSTUNREACH, as a
 * frontend with LB_SVC_FLAG_DROP_NO_BACKEND does (kube-proxy drops; a socket
 * cannot). The source is the socket's bound address; an unbound socket of the
 * host netns is judged by the node's addresses (SLUICE_MAP_NODEIP4/NODEIP6: allowed
 * when a range holds one of them); an unbound socket of another netns (a
 * pod) by the pod address the CNI plugin recorded for that netns
 * (SLUICE_MAP_POD_ADDR below), refused when there is none.
 */
#define LB_CNT_SOCK_SRC_RANGE_DROP    112 /* refused: source outside the LB IP's loadBalancerSourceRanges */
#define LB_CNT_SOCK_SRC_RANGE_UNKNOWN 113 /* refused: unbound pod socket on a ranged LB IP, its netns not in SLUICE_MAP_POD_ADDR */

/*
 * The address an unbound pod socket's packets will carry: the CNI plugin
 * (native/sluice-cni.c) records the pod's network namespace cookie
 * (SO_NETNS_COOKIE) -> the pod's addresses from prevResult.ips at ADD, and
 * deletes the entry at DEL (found by owner, so a DEL after the netns is gone
 * still cleans up). connect4/sendmsg4 judge an unbound socket of that netns
 * by address4 (connect6/sendmsg6 by address6), as kube-proxy's firewall chain judges the packet's source (the
 * pod IP). Netns cookies are never reused. Written by the plugin only, so the
 * agent carries the map across upgrades; a pod started before the plugin
 * recorded addresses has no entry and is refused as before (counter 113).
 * The plugin creates and pins the map when the agent has not yet.
 */
#define SLUICE_MAP_POD_ADDR sluice_podaddr /* __u64 netns cookie -> lb_pod_addr (hash) */
#define SLUICE_MAX_POD_ADDR 16384

#define LB_POD_ADDR_HAS4 (1 << 0) /* address4 is set */
#define LB_POD_ADDR_HAS6 (1 << 1) /* address6 is set */

struct lb_pod_addr {
	__be32 address4;    /* the pod's IPv4 address (first of prevResult.ips) */
	__u32  flags;       /* LB_POD_ADDR_HAS* */
	__u8   address6[16];/* the pod's IPv6 address (first of prevResult.ips) */
	__u64  owner;       /* FNV-1a 64 of "<CNI_CONTAINERID>/<CNI_IFNAME>": DEL deletes its own entry only */
};

_Static_assert(sizeof(struct lb_pod_addr) == 32, "lb_pod_addr layout");
/* ==== end of socket path ======================================================== */
/* ==== Stale socket termination (issue 13.1; bpf/sock_destroy.bpf.c) =========== */
/*
 * A connected socket keeps the backend address connect() gave it. When the
 * agent deletes a backend it writes the backend's (address, port, proto) into
 * SLUICE_MAP_SOCKTERM4 and runs the socket iterators of bpf/sock_destroy.bpf.c
 * in each network namespace it covers; they destroy (bpf_sock_destroy(),
 * ECONNABORTED) the sockets that talk to a listed backend *and* were sent
 * there by the socket LB (their reverse entry names that backend), and report
 * each one as an lb4_sock_term_event through the iterator's seq file. The
 * agent empties the map again afterwards. Needs kernel >= 6.5.
 */
#define SLUICE_MAP_SOCKTERM4 sluice_sk_term4 /* lb4_sock_term_key -> __u8 (1); written by the agent only */
#define SLUICE_MAX_SOCKTERM4 4096            /* backends terminated per iterator pass */
#define SLUICE_PROG_SOCKTERM_UDP sluice_term_udp4 /* iter/udp */
#define SLUICE_PROG_SOCKTERM_TCP sluice_term_tcp4 /* iter/tcp */

struct lb4_sock_term_key {
	__be32 address; /* removed backend address */
	__be16 port;    /* removed backend port */
	__u8   proto;   /* LB_PROTO_TCP or LB_PROTO_UDP */
	__u8   pad;
};

/* One per socket the iterator tried to destroy (bpf_seq_write, host order). */
struct lb4_sock_term_event {
	__u64  cookie;  /* the socket's cookie */
	__be32 address; /* the backend it was connected to */
	__be16 port;    /* the backend's port */
	__u8   proto;   /* LB_PROTO_* */
	__u8   pad;
	__s32  result;  /* bpf_sock_destroy(): 0 or -errno */
	__u32  pad2;
};

_Static_assert(sizeof(struct lb4_sock_term_key) == 8, "lb4_sock_term_key layout");
_Static_assert(sizeof(struct lb4_sock_term_event) == 24, "lb4_sock_term_event layout");

/*
 * IPv6 twins (issue 14). Deleted IPv6 backends go into SLUICE_MAP_SOCKTERM6
 * and the *6 iterators end the AF_INET6 sockets the socket LB sent there (its
 * sluice_sock6 pair names the backend). A dual-stack socket connected to an
 * IPv4 backend (::ffff:a.b.c.d) is an IPv4 case: the IPv4 iterators above
 * handle it (its state is in the IPv4 maps, lib/sock6.h).
 */
#define SLUICE_MAP_SOCKTERM6 sluice_sk_term6 /* lb6_sock_term_key -> __u8 (1); written by the agent only */
#define SLUICE_MAX_SOCKTERM6 4096            /* backends terminated per iterator pass */
#define SLUICE_PROG_SOCKTERM_UDP6 sluice_term_udp6 /* iter/udp */
#define SLUICE_PROG_SOCKTERM_TCP6 sluice_term_tcp6 /* iter/tcp */

struct lb6_sock_term_key {
	__u8   address[16]; /* removed backend address */
	__be16 port;        /* removed backend port */
	__u8   proto;       /* LB_PROTO_TCP or LB_PROTO_UDP */
	__u8   pad;
} __attribute__((aligned(4)));

struct lb6_sock_term_event {
	__u64  cookie;      /* the socket's cookie */
	__u8   address[16]; /* the backend it was connected to */
	__be16 port;        /* the backend's port */
	__u8   proto;       /* LB_PROTO_* */
	__u8   pad;
	__s32  result;      /* bpf_sock_destroy(): 0 or -errno */
};

_Static_assert(sizeof(struct lb6_sock_term_key) == 20, "lb6_sock_term_key layout");
_Static_assert(sizeof(struct lb6_sock_term_event) == 32, "lb6_sock_term_event layout");
/* ==== end of stale socket termination ============================================ */
/* ==== Operator CLI: Service names and data-path events (issue 11 item 12) ===== */
/*
 * sluice_svcname tells `sluice services` which Service owns a frontend without
 * the agent: written by the agent next to the frontends, never read by the
 * programs. Keyed by rev-NAT id and protocol, as a TCP and a UDP port on one
 * address:port share a rev-NAT id but can carry different port names.
 *
 * sluice_ev_v2 is a ring buffer of lb_event records (drops with their reason,
 * refusals, new flows) of both address families that `sluice monitor` reads.
 * The programs write to it only while sluice_ev_on names a listener, so a
 * node where nobody listens pays one array lookup at those (rare) points.
 *
 * A ring's record layout is not in any BTF the agent or the ABI check can
 * compare (a RINGBUF map has no key or value type), so a new record layout
 * gets a new map name: the first layout (IPv4 only, 72 bytes) was written to
 * sluice_events, which an upgraded agent unpins (RETIRED_MAPS in
 * src/datapath/migrate.ts). An older `sluice monitor` then finds no ring and
 * says so instead of misreading records; the monitor also skips, and counts,
 * records whose size is not sizeof(struct lb_event).
 */
#define SLUICE_MAP_SVC_NAMES sluice_svcname /* lb_svc_name_key -> lb_svc_name (written by the agent only) */
#define SLUICE_MAP_EVENTS    sluice_ev_v2   /* ring buffer of struct lb_event (layout 2: both families) */
#define SLUICE_MAP_EVENTS_ON sluice_ev_on   /* __u32 0 -> lb_events_ctl (array of one, written by `sluice monitor`) */

#define SLUICE_MAX_SVC_NAMES     131072   /* two protocols per rev-NAT id */
#define SLUICE_EVENTS_RING_BYTES 262144   /* power of two, a multiple of the page size */

/* lb_event.type */
#define LB_EVENT_DROP     1 /* a packet dropped (TC paths) */
#define LB_EVENT_REFUSED  2 /* a connect()/sendmsg() refused, or a TC packet rejected with ICMP (reject.h) */
#define LB_EVENT_NEW_FLOW 3 /* a new flow translated (north-south and pod-veth paths) */

struct lb_svc_name_key {
	__u32 rev_nat_id; /* the frontend's rev-NAT id */
	__u8  proto;      /* LB_PROTO_* */
	__u8  pad[3];
};

/* NUL-terminated unless the name fills the array (Kubernetes caps all three below these sizes). */
struct lb_svc_name {
	char namespace[64]; /* metadata.namespace (a DNS label, <= 63) */
	char name[64];      /* metadata.name (a DNS-1035 label, <= 63) */
	char port_name[16]; /* spec.ports[].name (<= 15; empty for an unnamed port) */
};

struct lb_events_ctl {
	__u32 listener_pid; /* pid of the `sluice monitor` reading the ring; 0: nobody, emit nothing */
};

/* lb_event.family */
#define LB_EVENT_FAMILY_IPV4 4
#define LB_EVENT_FAMILY_IPV6 6

/*
 * Addresses are 16 bytes for both families: an IPv6 address as it is; an
 * IPv4 address in the first 4 bytes (network order), the other 12 zero
 * (family says which; a v4-mapped form would cost two more stores on the
 * IPv4 paths for nothing the reader needs).
 */
struct lb_event {
	__u64  timestamp_ns;        /* bpf_ktime_get_ns() */
	__u64  netns_cookie;        /* socket path: the client's network namespace; 0 on TC */
	__u32  pid;                 /* socket path: the calling process (tgid); 0 on TC */
	__u16  reason;              /* the SLUICE_MAP_COUNTERS index counted with it: names reason, direction, path */
	__u8   type;                /* LB_EVENT_* */
	__u8   proto;               /* LB_PROTO_* */
	__u8   saddr[16];           /* client address (zero on the socket path: not bound yet at connect) */
	__u8   daddr[16];           /* frontend address */
	__u8   backend_address[16]; /* new flows: the backend picked; else zero */
	__be16 sport;               /* client port (0 on the socket path) */
	__be16 dport;               /* frontend port */
	__be16 backend_port;
	__u8   family;              /* LB_EVENT_FAMILY_IPV4 or _IPV6: how to read the addresses */
	__u8   pad;
	__u32  rev_nat_id;          /* the frontend's rev-NAT id (0: not a frontend) */
	__u32  ifindex;             /* TC: the device; 0 on the socket path */
	char   comm[16];            /* socket path: the calling task's name */
};

_Static_assert(sizeof(struct lb_svc_name_key) == 8, "lb_svc_name_key layout");
_Static_assert(sizeof(struct lb_maglev_row) == 32, "lb_maglev_row layout");
_Static_assert(sizeof(struct lb_svc_name) == 144, "lb_svc_name layout");
_Static_assert(sizeof(struct lb_events_ctl) == 4, "lb_events_ctl layout");
_Static_assert(sizeof(struct lb_event) == 104, "lb_event layout");
/* ==== end of operator CLI ======================================================== */

/* ==== least-connection (issue 15; bpf/lib/lc.h, docs/algorithms.md) =============
 * An active-connection count per backend id, shared by every CPU, both paths
 * and every Service (atomic adds on one array: the pick compares global
 * values, which per-CPU slots would need summing for on every connect).
 * A count is held by a socket (marker in SLUICE_MAP_LC_SOCK4, released at
 * the socket's sock_release) or by a north-south flow (marker in
 * SLUICE_MAP_LC_FLOW4 keyed by the flow's original conntrack key, released
 * at the TCP close or by the conntrack GC). A marker is released exactly
 * once: the decrement belongs to whoever changes it from held to released.
 */
#define LB_ALG_LEAST_CONN 4 /* fewest active connections among the frontend's slots (bounded scan) */
#define SLUICE_MAP_LC_COUNT4 sluice_lc_cnt4  /* __u32 backend id -> __u32 active connections (ARRAY) */
#define SLUICE_MAP_LC_SOCK4  sluice_lc_sock4 /* socket -> lb_lc_sock (socket-local storage) */
#define SLUICE_MAP_LC_FLOW4  sluice_lc_flow4 /* lb4_ct_key (original direction) -> lb_lc_flow (hash) */
#define SLUICE_MAX_LC_COUNT4 262145 /* SLUICE_MAX_BACKENDS + 1: backend ids 1..SLUICE_MAX_BACKENDS */
#define SLUICE_MAX_LC_FLOW4  131072 /* SLUICE_MAX_CT4 / 2: one per flow; a flow has two conntrack entries */
#define SLUICE_MAP_LC_FLOW6  sluice_lc_flow6 /* lb6_ct_key (original direction) -> lb_lc_flow (hash): IPv6 TC flows */
#define SLUICE_MAX_LC_FLOW6  32768  /* SLUICE_MAX_CT6 / 2 */
#define LB_LC_SCAN           16 /* slots compared per pick: all of a frontend with <= 16, else 16 from a random start */
#define LB_CT_FLAG_LC        (1 << 14) /* conntrack: the flow holds a least-connection count (marker in SLUICE_MAP_LC_FLOW4) */

/* lb_lc_flow.word: backend id << 32 | generation << 2 | state. The whole
 * word is compare-and-swapped, so a marker released and re-used for a new
 * flow of the same tuple (a new generation) is never released twice. */
#define LB_LC_FLOW_REVIVING 0 /* being re-used by a new flow of the same tuple */
#define LB_LC_FLOW_HELD     1 /* the flow holds a count on the backend */
#define LB_LC_FLOW_RELEASED 2 /* count given back; the GC deletes it */
#define LB_LC_FLOW_CLAIMED  3 /* the GC is deleting it */

/* Counters (SLUICE_MAP_COUNTERS indices 114..117, this block's own). */
#define LB_CNT_LC_HELD        114 /* a connection or flow took a count on its backend */
#define LB_CNT_LC_RELEASED    115 /* socket released or TCP flow closed: count given back */
#define LB_CNT_LC_GC_RELEASED 116 /* flow expired, evicted or replaced: count given back by the conntrack GC */
#define LB_CNT_LC_UNTRACKED   117 /* could not record the marker (map full, or raced with the GC): not counted */

struct lb_lc_sock {
	struct bpf_spin_lock lock; /* guards backend_id */
	__u32 backend_id;          /* the backend this socket holds a count on; 0: none */
};

struct lb_lc_flow {
	__u64 word; /* see LB_LC_FLOW_* */
};

_Static_assert(sizeof(struct lb_lc_sock) == 8, "lb_lc_sock layout");
_Static_assert(sizeof(struct lb_lc_flow) == 8, "lb_lc_flow layout");
/* ==== end of least-connection ==================================================== */
/* ==== IPv6 and dual-stack, socket path (issue 14; bpf/lib/lb6.h, sock6.h) ===== */
/*
 * One map family per address family, as Cilium does (docs/design-ipv6.md):
 * the IPv4 maps and their 12-byte keys stay as they are, so the IPv4 hot
 * path hashes no more bytes than before; IPv6 frontends live in their own
 * maps with 16-byte addresses. Shared between the families:
 *  - the master/slot value (struct lb4_service: it holds no address) and
 *    struct lb_affinity;
 *  - the id spaces: backend ids and rev-NAT ids are allocated by the agent
 *    from one pool for both families, so every map keyed by rev-NAT id
 *    (SLUICE_MAP_RR4, SLUICE_MAP_SVC_NAMES) serves both without a family field;
 *  - the counters: an IPv6 event counts at the same LB_CNT_* row as its IPv4
 *    twin (same reason, direction and path); the ip_family split is not a
 *    data-path label. Rows 124..127 are this block's for IPv6-only reasons.
 * IPv4 reached through an AF_INET6 socket (::ffff:a.b.c.d) is balanced by the
 * IPv4 maps: connect6/recvmsg6/getpeername6 see the mapped address and use
 * the IPv4 table and the socket's IPv4 state (sendmsg of such a socket runs
 * the sendmsg4 hook, so both must agree).
 * Addresses are 16 bytes in network order; the structs are 4-byte aligned so
 * the programs move them as four 32-bit words.
 */
#define SLUICE_MAP_SERVICES6 sluice_svc6     /* lb6_frontend_key -> lb4_service (master only, same value as IPv4; layout 2) */
#define SLUICE_MAP_RANGES6   sluice_rng6     /* __u32 index -> __u32 backend id (ARRAY: IPv6 frontends' backend ranges) */
#define SLUICE_MAP_BACKENDS6 sluice_be6      /* __u32 backend id -> lb6_backend (ARRAY; layout 2) */
#define SLUICE_MAP_REVNAT6   sluice_revnat6  /* __u32 rev-NAT id -> lb6_reverse_nat (ARRAY; layout 2) */
#define SLUICE_MAP_AFFINITY6 sluice_affin6   /* lb6_affinity_key -> lb_affinity (LRU) */
#define SLUICE_MAP_SRCRANGE6 sluice_srcrng6  /* lb6_src_range_key -> __u8 (LPM trie; read by the TC and socket paths) */
#define SLUICE_MAP_SOCK6     sluice_sock6    /* socket -> lb6_sock_state (socket-local storage) */
#define SLUICE_MAP_NODEIP6   sluice_nodeip6  /* lb6_node_ip -> __u8 1 (hash) */

#define SLUICE_MAX_NODEIP6   256
#define SLUICE_MAX_RANGE6    524288 /* backend ids in all IPv6 frontends' ranges, as SLUICE_MAX_RANGE4 */
#define SLUICE_MAX_SRCRANGE6 16384

/* Counters of IPv6-only reasons (SLUICE_MAP_COUNTERS indices 124..127). */
#define LB_CNT_SOCK6_V4MAPPED 124 /* connect6/recvmsg6/getpeername6 on ::ffff:a.b.c.d handled by the IPv4 table */

/* The key of SLUICE_MAP_SERVICES6 (layout 2: one master per frontend). */
struct lb6_frontend_key {
	__u8   address[16]; /* frontend address */
	__be16 port;        /* frontend port */
	__u8   proto;       /* LB_PROTO_TCP or LB_PROTO_UDP */
	__u8   scope;       /* LB_SCOPE_EXTERNAL or LB_SCOPE_INTERNAL */
} __attribute__((aligned(4)));

/* The programs' working copy of an IPv6 frontend (lb4_service_key's twin):
 * the map key (its first 20 bytes) plus the range position picked. */
struct lb6_service_key {
	__u8   address[16];  /* frontend address */
	__be16 port;         /* frontend port */
	__u8   proto;        /* LB_PROTO_TCP or LB_PROTO_UDP */
	__u8   scope;        /* LB_SCOPE_EXTERNAL or LB_SCOPE_INTERNAL */
	__u16  backend_slot; /* programs only: 1..count, the range position picked (0: none) */
	__u8   pad[2];
} __attribute__((aligned(4)));

struct lb6_backend {
	__u8   address[16]; /* backend (pod) address */
	__be16 port;        /* backend port */
	__u8   proto;       /* LB_PROTO_* */
	__u8   flags;       /* LB_BACKEND_FLAG_* */
	__u32  zone;        /* topology zone id assigned by the agent (0: unknown) */
};

struct lb6_reverse_nat {
	__u8   address[16]; /* frontend address */
	__be16 port;        /* frontend port */
	__u8   pad[2];
} __attribute__((aligned(4)));

/* Socket hooks: client[0..7] hold the netns cookie (host order), netns_cookie = 1;
 * TC (later): the client's IPv6 address. */
struct lb6_affinity_key {
	__u8  client[16];   /* client IPv6 address, or the netns cookie in the first 8 bytes */
	__u32 rev_nat_id;   /* the frontend's rev-NAT id */
	__u8  netns_cookie; /* 1: client holds a netns cookie */
	__u8  pad[3];
};

/* loadBalancerSourceRanges for IPv6 frontends (LPM; prefixlen = 32 + CIDR length). */
struct lb6_src_range_key {
	__u32 prefixlen;   /* 32 + CIDR prefix length */
	__u32 rev_nat_id;  /* the frontend's rev-NAT id (host order, matched whole) */
	__u8  address[16]; /* CIDR network address */
};

/* SLUICE_MAP_NODEIP6 key: one of this node's IPv6 addresses. */
struct lb6_node_ip {
	__u8 address[16];
} __attribute__((aligned(4)));

/* One frontend an IPv6 socket was sent to and the backend it got (lb4_sock_pair's twin). */
struct lb6_sock_pair {
	__u8   frontend_address[16]; /* what recvmsg/getpeername show for the backend */
	__u8   backend_address[16];  /* the backend this socket was sent to */
	__be16 frontend_port;
	__be16 backend_port;
	__u8   scope;                /* LB_SCOPE_* of the frontend entries the backend came from */
	__u8   used;                 /* 1: the pair is in use */
	__u16  backend_slot;         /* the frontend's slot it was picked from */
	__u32  backend_id;           /* backends map key */
	__u32  rev_nat_id;           /* the frontend's rev-NAT id; checked before a reverse translation */
};

/* SLUICE_MAP_SOCK6 value: an IPv6 socket's pairs (same rules as lb4_sock_state). */
struct lb6_sock_state {
	struct bpf_spin_lock lock; /* guards everything below */
	__u8  next;                /* pair replaced when all are in use (oldest first) */
	__u8  last;                /* pair last sent to */
	__u8  pad[2];
	struct lb6_sock_pair pairs[SLUICE_SOCK_PAIRS];
};

_Static_assert(sizeof(struct lb6_frontend_key) == 20, "lb6_frontend_key layout");
_Static_assert(sizeof(struct lb6_service_key) == 24, "lb6_service_key layout");
_Static_assert(__builtin_offsetof(struct lb6_service_key, scope) == __builtin_offsetof(struct lb6_frontend_key, scope),
	       "lb6_service_key starts with an lb6_frontend_key");
_Static_assert(sizeof(struct lb6_backend) == 24, "lb6_backend layout");
_Static_assert(sizeof(struct lb6_reverse_nat) == 20, "lb6_reverse_nat layout");
_Static_assert(sizeof(struct lb6_affinity_key) == 24, "lb6_affinity_key layout");
_Static_assert(sizeof(struct lb6_src_range_key) == 24, "lb6_src_range_key layout");
_Static_assert(sizeof(struct lb6_node_ip) == 16, "lb6_node_ip layout");
_Static_assert(sizeof(struct lb6_sock_pair) == 48, "lb6_sock_pair layout");
_Static_assert(sizeof(struct lb6_sock_state) == 8 + 48 * SLUICE_SOCK_PAIRS, "lb6_sock_state layout");

/*
 * An IPv6 UDP socket's first frontend pair (issue 12), lb4_sock_uslot's
 * twin: creating socket storage (SLUICE_MAP_SOCK6) was most of sendmsg6's
 * cost on a fresh socket (bench/sockprogstats.sh --ipv6). Same rules
 * (bpf/lib/sock_slot6.h): the slot at cookie & (SLUICE_SOCK_USLOTS6 - 1) is
 * claimed when free or the socket's own, read under the lock against the
 * cookie, freed at sock_release; a second frontend, or a slot another live
 * socket holds, moves the socket to its storage (storage written first, then
 * the slot freed). Counted with IPv4's (LB_CNT_SOCK_UDP_SLOT/_STORAGE).
 * Fewer slots than IPv4 (64 bytes each, as sluice_sk_pair6): a node with more
 * live IPv6 UDP sockets than that pays storage for the overflow only.
 * seq: lb4_sock_uslot's sequence count (odd while a writer, under the lock,
 * changes cookie or pair; even after), so recvmsg6 reads the slot without
 * the lock on x86-64 (bpf/lib/sock_slot6.h, lb6_sock_uslot_read). It took
 * the place of a copy of pair.rev_nat_id; a slot carried from that layout
 * may hold an odd value, read under the lock until its next write.
 */
struct lb6_sock_uslot {
	struct bpf_spin_lock lock; /* guards everything below (writers) */
	__u32  seq;                /* odd: a write in progress; see above */
	__u64  cookie;             /* the socket holding the slot; 0: free */
	struct lb6_sock_pair pair; /* sticky backend and reverse pair, as in lb6_sock_state */
};

_Static_assert(sizeof(struct lb6_sock_uslot) == 64, "lb6_sock_uslot layout");

#define SLUICE_MAP_SOCK_USLOT6 sluice_sk_udp6 /* cookie & (SLUICE_SOCK_USLOTS6 - 1) -> lb6_sock_uslot (ARRAY) */
#define SLUICE_SOCK_USLOTS6 32768 /* a power of two (the index is masked); 2 MiB */
/* ==== end of IPv6, socket path =================================================== */

/* ==== XDP north-south acceleration (issue 17, helper xdp) ======================== */
/*
 * bpf/xdp_lb.bpf.c runs before TC on the external devices (opt-in,
 * --xdp-mode). It shares SLUICE_MAP_CT4 and the SNAT port space with the TC
 * path (same entries), so a flow moves between the two freely.
 */
#define SLUICE_MAP_XDP_FE4   sluice_xdp_fe4  /* __be32 north-south frontend address -> __u8 1 (hash, written by the agent) */
#define SLUICE_MAP_XDP_STATS sluice_xdp_st   /* __u32 ifindex -> lb_xdp_stats (per-CPU hash) */
#define SLUICE_MAP_XDP_TX    sluice_xdp_tx   /* __u32 ifindex -> __u32 ifindex (DEVMAP_HASH: devices XDP may redirect to) */
#define SLUICE_MAP_XDP_FIB   sluice_xdp_fib  /* __u32 0 -> lb_xdp_fib_scratch (per-CPU scratch, off the stack) */
#define SLUICE_MAP_XDP_NP    sluice_xdp_np   /* __u32 ifindex -> __u64 non-Service packets passed (per-CPU array; ifindex < SLUICE_MAX_XDP_IFINDEX) */
#define SLUICE_MAP_XDP_FE6   sluice_xdp_fe6  /* lb6_node_ip north-south IPv6 frontend address -> __u8 1 (hash, written by the agent; bpf/lib/xdp_lb6.h) */
#define SLUICE_MAP_XDP_S6    sluice_xdp_s6   /* __u32 0 -> lb6_xdp_scratch (per-CPU scratch of the IPv6 path, off the stack) */
#define SLUICE_MAP_XDP_PF    sluice_xdp_pf   /* __u32 word -> __u64 64 bits of the frontend-address prefilter (array, written by the agent; see below) */
#define SLUICE_MAP_XDP_FC    sluice_xdp_fc   /* __u32 slot -> lb4_xdp_fib_cache (per-CPU array: FIB results of known IPv4 flows; see below) */
#define SLUICE_MAP_XDP_FC6   sluice_xdp_fc6  /* __u32 slot -> lb6_xdp_fib_cache (per-CPU array: FIB results of known IPv6 flows; see below) */
#define SLUICE_MAP_TC_FC     sluice_tc_fc    /* __u32 slot -> lb4_xdp_fib_cache (per-CPU array: FIB results of TC's IPv4 redirects; see below) */

#define SLUICE_PROG_XDP      sluice_xdp      /* the XDP entry point on the external devices */
#define SLUICE_PROG_XDP_PASS sluice_xdp_pass /* XDP_PASS only: on a veth peer it enables the NAPI XDP_TX/REDIRECT need */

#define SLUICE_MAX_XDP_FE4   65536
#define SLUICE_MAX_XDP_FE6   16384
#define SLUICE_MAX_XDP_DEVS  256
#define SLUICE_MAX_XDP_IFINDEX 4096 /* SLUICE_MAP_XDP_NP slots; a device of a higher ifindex counts in SLUICE_MAP_XDP_STATS */

/*
 * SLUICE_MAP_XDP_PF, the prefilter in front of SLUICE_MAP_XDP_FE4/FE6: a
 * bitmap of 2^SLUICE_XDP_PF_BITS_LOG2 bits (u64 words, bit b of word w is
 * slot 64 * w + b) with the slot of every frontend address set, so a packet
 * whose destination's slot is clear is no Service packet (XDP_PASS after one
 * array load, which the JIT inlines). The slot of an address:
 *   IPv4: h = the address as a host-order number (ntohl of daddr)
 *   IPv6: h = ntohl(w0 ^ w1 ^ w2 ^ w3), wi the four 32-bit words of daddr
 *   slot = (h * SLUICE_XDP_PF_MULT mod 2^32) >> (32 - SLUICE_XDP_PF_BITS_LOG2)
 * Both families share the bitmap. The agent keeps it a superset of the two
 * sets (bits set before an address is added, cleared only after it is gone):
 * a stale bit costs one hash lookup, never a missed frontend.
 */
#define SLUICE_XDP_PF_BITS_LOG2 16
#define SLUICE_XDP_PF_WORDS  1024 /* 2^SLUICE_XDP_PF_BITS_LOG2 / 64 */
#define SLUICE_XDP_PF_MULT   0x9E3779B1 /* 2^32 / golden ratio (Fibonacci hashing) */

/*
 * The slot of a 32-bit fold `h` in a bitmap of 2^log2 bits (Fibonacci
 * hashing: the top bits of h * SLUICE_XDP_PF_MULT), shared by the BPF
 * programs, the host C tools and, spelled once more in TypeScript,
 * src/datapath/bitmap.ts: SLUICE_MAP_XDP_PF and SLUICE_MAP_POD_PF4.
 */
static inline __u32 sluice_bit_slot(__u32 h, __u32 log2)
{
	return (h * (__u32)SLUICE_XDP_PF_MULT) >> (32 - log2);
}

/*
 * SLUICE_MAP_XDP_FC, the FIB cache of the known-flow path (bpf/lib/xdp_fc.h):
 * per CPU, direct-mapped, SLUICE_XDP_FC_SLOTS slots. A slot holds the answer
 * of one bpf_fib_lookup (out device, MACs, XDP_TX or XDP_REDIRECT) tagged
 * with every input of that lookup (arrival device, addresses, ports,
 * protocol, TOS) and the largest IPv4 total length it accepted (the MTU
 * check). It answers for SLUICE_XDP_FC_TTL_NS after the lookup; a stale,
 * empty or other-tagged slot, or a longer packet, makes a full lookup.
 * The agent does not read it (a changed layout is dropped at reload, src/datapath/migrate.ts).
 *   slot = ((saddr ^ daddr ^ ports ^ ifindex) * SLUICE_XDP_PF_MULT mod 2^32) >> (32 - SLUICE_XDP_FC_SLOTS_LOG2)
 *
 * SLUICE_MAP_XDP_FC6 is its IPv6 twin (same slot count, same TTL, its own
 * map: an IPv4 slot stays 48 bytes, and the families do not evict each
 * other). Its tag: both 16-byte addresses, ports, protocol, the flow info
 * (traffic class and flow label, what the lookup got in fib.flowinfo), the
 * arrival device, and the largest IPv6 packet length (40 + payload) the MTU
 * check passed. wi: the four 32-bit words of an address, as loaded:
 *   slot = ((s0 ^ s1 ^ s2 ^ s3 ^ d0 ^ d1 ^ d2 ^ d3 ^ ports ^ ifindex) * SLUICE_XDP_PF_MULT mod 2^32) >> (32 - SLUICE_XDP_FC_SLOTS_LOG2)
 *
 * SLUICE_MAP_TC_FC is the same cache for TC's redirect of a packet it
 * rewrote to a local source (bpf/lib/tc_fc.h: SNATed original packets,
 * replies at ingress): same layout, slot function, slot count and TTL; its
 * lookup has no TOS (tos 0 in the tag) and `action` is TC_ACT_REDIRECT.
 * Its own map: an XDP slot's answer was judged for XDP (lb_xdp_fib_action).
 */
#define SLUICE_XDP_FC_SLOTS_LOG2 8
#define SLUICE_XDP_FC_SLOTS  256 /* 2^SLUICE_XDP_FC_SLOTS_LOG2 */
#define SLUICE_XDP_FC_TTL_NS 50000000 /* 50 ms: how long a route or neighbour change may go unseen */

/* Counters of the known-flow path's sending (rows 57-58). */
#define LB_CNT_XDP_FIB_LOOKUP 57 /* known flow at XDP, either family: full bpf_fib_lookup (no fresh SLUICE_MAP_XDP_FC/FC6 slot for it) */
#define LB_CNT_XDP_FIB_CACHED 58 /* known flow at XDP, either family: sent with the cached FIB answer */

/* Counters of TC's IPv4 redirect (rows 60-61, SLUICE_MAP_TC_FC). */
#define LB_CNT_TC_FIB_LOOKUP 60 /* TC, IPv4: a rewritten packet routed by a full bpf_fib_lookup (no fresh SLUICE_MAP_TC_FC slot for it) */
#define LB_CNT_TC_FIB_CACHED 61 /* TC, IPv4: a rewritten packet redirected with the cached FIB answer */

/* SLUICE_MAP_XDP_STATS value: what XDP did with the packets of one device. */
struct lb_xdp_stats {
	__u64 packets;    /* every packet the program saw */
	__u64 passed;     /* XDP_PASS: not a Service packet (or a reply, ICMP, fragment) */
	__u64 tx;         /* XDP_TX: translated, out of the same device */
	__u64 redirected; /* XDP_REDIRECT: translated, out of another XDP device */
	__u64 dropped;    /* XDP_DROP: loadBalancerSourceRanges, no backend, TTL */
	__u64 fallback;   /* XDP_PASS of a Service packet TC must handle (no neighbour, no route, SNAT ports) */
};

/* SLUICE_MAP_XDP_FIB value: room for one struct bpf_fib_lookup (64 bytes,
 * <linux/bpf.h>); bytes here so the ABI does not depend on that header. */
struct lb_xdp_fib_scratch {
	__u8 bytes[64];
};

/* SLUICE_MAP_XDP_FC value: one cached FIB answer and the inputs it is for. */
struct lb4_xdp_fib_cache {
	__u64  expires_ns; /* bpf_ktime_get_ns() after which the slot is stale (0: empty) */
	__be32 saddr;      /* the lookup's inputs: the packet as it is sent */
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u32  in_ifindex; /* the arrival device the lookup was made from */
	__u32  out_ifindex; /* the answer */
	__u16  max_len;    /* largest IPv4 total length the lookup passed (MTU) */
	__u8   proto;
	__u8   tos;
	__u8   smac[6];
	__u8   dmac[6];
	__u8   action;     /* XDP_TX or XDP_REDIRECT */
	__u8   pad[3];
};

/* SLUICE_MAP_XDP_FC6 value: lb4_xdp_fib_cache for an IPv6 lookup. */
struct lb6_xdp_fib_cache {
	__u64  expires_ns; /* bpf_ktime_get_ns() after which the slot is stale (0: empty) */
	__u8   saddr[16];  /* the lookup's inputs: the packet as it is sent */
	__u8   daddr[16];
	__be32 flowinfo;   /* traffic class and flow label (the IPv6 header's first word without the version) */
	__be16 sport;
	__be16 dport;
	__u32  in_ifindex; /* the arrival device the lookup was made from */
	__u32  out_ifindex; /* the answer */
	__u16  max_len;    /* largest IPv6 packet length (40 + payload length) the lookup passed (MTU) */
	__u8   proto;
	__u8   action;     /* XDP_TX or XDP_REDIRECT */
	__u8   smac[6];
	__u8   dmac[6];
};

/* SLUICE_MAP_XDP_S6 value: the IPv6 path's tuples, conntrack key and TC
 * configuration of one packet (struct lb6_xdp_work, bpf/lib/xdp_lb6.h): the
 * conntrack steps it calls take most of the 512-byte stack. */
struct lb6_xdp_scratch {
	__u8 bytes[144];
};

_Static_assert(sizeof(struct lb_xdp_stats) == 48, "lb_xdp_stats layout");
_Static_assert(sizeof(struct lb4_xdp_fib_cache) == 48, "lb4_xdp_fib_cache layout");
_Static_assert(sizeof(struct lb6_xdp_fib_cache) == 72, "lb6_xdp_fib_cache layout");
/* ==== end of XDP ================================================================= */
/* ==== IPv6, TC north-south (issue 14 item 3; bpf/lib/nat6.h, conntrack6.h, tc_lb6.h) ==== */
/*
 * The IPv6 twin of the TC section: the same two conntrack entries per flow
 * (LB_CT_DIR_*, LB_CT_FLAG_*, timeouts and SNAT port range of lb4_tc_config),
 * with 16-byte addresses. The node's IPv6 SNAT address is its own one-entry
 * array (lb4_tc_config keeps its layout). Counters: the same LB_CNT_TC_* rows
 * as IPv4 (and 51/52 for Packet Too Big sent / too big dropped); rows 125-126
 * for what only IPv6 has.
 */
#define SLUICE_MAP_CT6        sluice_ct6     /* lb6_ct_key -> lb6_ct_entry (LRU) */
#define SLUICE_MAP_TC_CONFIG6 sluice_tc_cfg6 /* __u32 0 -> lb6_tc_config (array of one) */
#define SLUICE_MAP_CT6_TMP    sluice_ct6_tmp /* __u32 0 -> lb6_ct_entry (per-CPU array of one): a new or restored entry being built (keeps 112 bytes off the 512-byte stack) */

#define SLUICE_MAX_CT6 65536 /* 32768 IPv6 flows; preallocated LRU (about 12 MiB) */

/*
 * Multi-homed nodes, IPv6 (issue 14 item 3 with issue 10 item 9): the twin of
 * SLUICE_MAP_SNAT_DEV4. A new IPv6 flow SNATed to a backend on another node
 * takes the IPv6 address the agent wrote here for the device the FIB sends
 * it out of (node-to-node devices other than the external ones); otherwise
 * lb6_tc_config.snat_address. Counted at LB_CNT_TC_SNAT_EGRESS_DEV, as IPv6
 * events count at their IPv4 twins' rows.
 */
#define SLUICE_MAP_SNAT_DEV6 sluice_snatdev6 /* __u32 ifindex -> lb6_snat_device (hash, written by the agent) */
#define SLUICE_MAX_SNAT_DEV6 256 /* node devices with their own IPv6 SNAT address */

#define LB_CNT_TC6_FRAG_PASSED   125 /* IPv6 later fragment the TC paths cannot track (not TCP/UDP right after the Fragment header, or two Fragment headers): passed untouched */
#define LB_CNT_TC6_EXTHDR_PASSED 126 /* IPv6 packet passed untouched: routing header with segments left, or more extension headers than the walk reads */

struct lb6_ct_key {
	__u8   saddr[16]; /* source address as the packet carries it */
	__u8   daddr[16]; /* destination address */
	__be16 sport;     /* source port */
	__be16 dport;     /* destination port */
	__u8   proto;     /* LB_PROTO_* */
	__u8   dir;       /* LB_CT_DIR_* */
	__u8   pad[2];
};

struct lb6_ct_entry {
	__u64  expires_ns;           /* bpf_ktime_get_ns() deadline; later packets push it out */
	__u64  packets;              /* packets seen through this entry */
	__u64  bytes;                /* bytes seen through this entry */
	__u8   client_address[16];   /* the external client */
	__u8   frontend_address[16]; /* NodePort node address, ExternalIP or LB IP */
	__u8   backend_address[16];  /* the chosen backend */
	__u8   nat_address[16];      /* SNAT source address (zero: no SNAT) */
	__be16 client_port;
	__be16 frontend_port;
	__be16 backend_port;
	__be16 nat_port;             /* SNAT source port (0: no SNAT) */
	__u32  backend_id;           /* SLUICE_MAP_BACKENDS6 key; checked on every original-direction packet */
	__u32  rev_nat_id;           /* the frontend's rev-NAT id */
	__u16  flags;                /* LB_CT_FLAG_* */
	__u8   proto;                /* LB_PROTO_* */
	__u8   dir;                  /* LB_CT_DIR_* of the key this value is stored under */
	__u32  ifindex;              /* device the flow arrived on */
};

/* Written by the agent at index 0 of SLUICE_MAP_TC_CONFIG6. */
struct lb6_tc_config {
	__u8 snat_address[16]; /* node IPv6 address remote-backend flows are SNATed to (zero: drop them) */
} __attribute__((aligned(4)));

_Static_assert(sizeof(struct lb6_ct_key) == 40, "lb6_ct_key layout");
_Static_assert(sizeof(struct lb6_ct_entry) == 112, "lb6_ct_entry layout");
struct lb6_snat_device {
	__u8 address[16]; /* the IPv6 address SNATed flows leaving through this device take */
} __attribute__((aligned(4)));

_Static_assert(sizeof(struct lb6_tc_config) == 16, "lb6_tc_config layout");
_Static_assert(sizeof(struct lb6_snat_device) == 16, "lb6_snat_device layout");
/* ==== end of IPv6, TC north-south ================================================= */

/* ==== IPv6 fragments and ICMPv6 quotes on the TC paths (issue 14 item 3, issue 10 item 8; bpf/lib/frag6.h) ==== */
/*
 * sluice_frag4's twin: the first fragment (offset 0, M set) of a TCP/UDP
 * datagram leaves its ports under (addresses, 32-bit fragment
 * identification, protocol); its later fragments (offset > 0, no L4 header)
 * take them from there and are translated like the first, addresses only
 * (the L4 checksum lives in the first fragment). Shared by the north-south
 * and pod-veth paths (nat_flow6.h). An atomic fragment (offset 0, M clear,
 * RFC 6946) is a whole packet and is translated as one.
 *
 * sluice_icmp6_tmp: scratch for an ICMPv6 error built by the TC paths
 * (port unreachable, Packet Too Big): the bytes of the quoted packet while
 * their checksum is summed (RFC 4443 section 2.4 (c): as much of the
 * invoking packet as fits in the minimum IPv6 MTU, 1 232 bytes).
 */
#define SLUICE_MAP_FRAG6     sluice_frag6     /* lb6_frag_key -> lb4_frag_ports (LRU) */
#define SLUICE_MAP_ICMP6_TMP sluice_icmp6_tmp /* __u32 0 -> lb6_icmp_scratch (per-CPU array of one) */

#define SLUICE_MAX_FRAG6     8192 /* IPv6 datagrams in flight in fragments at once (as SLUICE_MAX_FRAG4) */

/* Counters (rows 54-56 of the fragments/PMTU range; 57-58: XDP's FIB cache). */
#define LB_CNT_TC6_FRAG_TRACKED 54 /* first fragment of an IPv6 TCP/UDP datagram: ports remembered */
#define LB_CNT_TC6_FRAG_FOUND   55 /* later IPv6 fragment: ports found, translated like its first */
#define LB_CNT_TC6_FRAG_UNKNOWN 56 /* later IPv6 fragment whose first was not seen here: passed untouched */

struct lb6_frag_key {
	__u8   saddr[16]; /* source address of the fragments as they arrive */
	__u8   daddr[16]; /* destination address */
	__be32 id;        /* Fragment header identification shared by the datagram's fragments */
	__u8   proto;     /* LB_PROTO_TCP or LB_PROTO_UDP (the Fragment header's next header) */
	__u8   pad[3];
};

struct lb6_icmp_scratch {
	__u8 bytes[1536]; /* 3 x 512-byte checksum chunks >= the 1 232-byte quote */
};

_Static_assert(sizeof(struct lb6_frag_key) == 40, "lb6_frag_key layout");
_Static_assert(sizeof(struct lb6_icmp_scratch) == 1536, "lb6_icmp_scratch layout");
/* ==== end of IPv6 fragments and ICMPv6 quotes ===================================== */

/* ==== Direct Server Return, IPv4 north-south (issue 17 item 2; bpf/lib/dsr.h, docs/dsr.md) ==== */
/*
 * --nodeport-mode snat|dsr|hybrid (one entry of SLUICE_MAP_DSR_CFG). In dsr
 * (hybrid: TCP only) a new externalTrafficPolicy: Cluster flow whose backend
 * is on another node is not SNATed: the ingress node encapsulates the
 * client's packet unchanged (client -> frontend) in IPIP, outer source = the
 * node's SNAT address, outer destination = the backend (pod) address, and
 * forwards it; the backend node's TC ingress (any mode) takes off the outer
 * header, DNATs frontend -> that backend and keeps the flow (no SNAT) like
 * externalTrafficPolicy: Local, so the backend's reply leaves through its
 * TC egress with the frontend as source, straight to the client.
 * Ingress-node entries carry LB_CT_FLAG_DSR (nat_address: outer source);
 * backend-node entries LB_CT_FLAG_DSR_RX.
 */
#define SLUICE_MAP_DSR_CFG sluice_dsr_cfg /* __u32 0 -> lb_dsr_config (array of one, written by the agent) */

#define LB_NODEPORT_MODE_SNAT   0 /* every remote-backend Cluster flow SNATed (default) */
#define LB_NODEPORT_MODE_DSR    1 /* TCP and UDP by DSR */
#define LB_NODEPORT_MODE_HYBRID 2 /* TCP by DSR, UDP SNATed */

#define LB_DSR_ENCAP_LEN 20 /* the outer IPv4 header: the path MTU toward the backend is 20 bytes smaller */
#define LB_DSR6_ENCAP_LEN 40 /* IPv6 (ip6ip6, RFC 2473): the outer IPv6 header, 40 bytes off the path MTU */

#define LB_CT_FLAG_DSR    (1 << 8) /* ingress node: the flow is forwarded in IPIP (IPv6: ip6ip6) to its backend (DSR) */
#define LB_CT_FLAG_DSR_RX (1 << 9) /* backend node: the flow arrived in IPIP (DSR); replies go to the client directly */

/* Counters (TC flow range; north-south only, rows +80 unused). */
#define LB_CNT_TC_DSR_ENCAP 28 /* original: packet sent in IPIP or ip6ip6 to the backend's node (DSR) */
#define LB_CNT_TC_DSR_DECAP 29 /* original: IPIP/ip6ip6 DSR packet taken off its outer header and DNATed to a local backend */

struct lb_dsr_config {
	__u32 mode; /* LB_NODEPORT_MODE_* */
	__u32 pad;
};

_Static_assert(sizeof(struct lb_dsr_config) == 8, "lb_dsr_config layout");
/* ==== end of DSR ================================================================ */

#endif /* SLUICE_ABI_H */
