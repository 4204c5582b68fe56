/* SPDX-License-Identifier: Apache-2.0 */
/*
 * maps.h: every BPF map Sluice owns, in one place. Names, key and value types
 * come from native/sluice_abi.h; each map is BTF-typed (so `bpftool map dump`
 * prints named fields) and pinned by name under the agent's bpffs directory
 * (the loader sets the pin path), so maps outlive the agent.
 */
#ifndef SLUICE_BPF_MAPS_H
#define SLUICE_BPF_MAPS_H

#include "sluice_abi.h"

/* IPv4 frontends (Katran-style, see SLUICE_MAP_SERVICES4 in sluice_abi.h):
 * one master per frontend, keyed without a slot, written only by the agent.
 * No preallocation: memory follows the number of frontends. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb4_frontend_key);
	__type(value, struct lb4_service);
	__uint(max_entries, SLUICE_MAX_SERVICE_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_SERVICES4 SEC(".maps");

/* The frontends' backend ranges, backends and rev-NAT entries: ARRAYs indexed
 * by dense indices and ids, so the JIT inlines each lookup as a bounds check
 * and a load (no hashing, no bucket walk). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, SLUICE_MAX_RANGE4);
} SLUICE_MAP_RANGES4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb4_backend);
	__uint(max_entries, SLUICE_MAX_BACKENDS);
} SLUICE_MAP_BACKENDS4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb4_reverse_nat);
	__uint(max_entries, SLUICE_MAX_REVNAT);
} SLUICE_MAP_REVNAT4 SEC(".maps");

/* Per-socket state (see lb4_sock_state): created on a socket's first
 * translation, freed with the socket. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct lb4_sock_state);
	__uint(max_entries, 0); /* socket-local storage: one value per socket, no capacity */
} SLUICE_MAP_SOCK4 SEC(".maps");

/* A TCP socket's one reverse pair (see lb4_sock_tcp): written on every
 * translated TCP connect, so an LRU (preallocated: no allocation per
 * connect, and no free when the socket closes). Preallocated means memory
 * up front, so only the socket objects (SLUICE_SOCK_OBJECT) create it. */
#ifdef SLUICE_SOCK_OBJECT
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb4_sock_tcp_key);
	__type(value, struct lb4_sock_tcp);
	__uint(max_entries, SLUICE_MAX_SOCK_TCP4);
} SLUICE_MAP_SOCK_TCP4 SEC(".maps");

/* A TCP socket's reverse pair, first home (see lb4_sock_slot): an ARRAY, so
 * a connect writes it without hashing or allocation; the LRU above takes the
 * pairs whose slot is held by another live socket. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb4_sock_slot);
	__uint(max_entries, SLUICE_SOCK_SLOTS4);
} SLUICE_MAP_SOCK_SLOT4 SEC(".maps");

/* A UDP socket's first frontend pair (see lb4_sock_uslot): a slot instead of
 * creating socket storage on every fresh socket's first datagram; storage
 * (SLUICE_MAP_SOCK4) takes a second frontend and pairs whose slot is held. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb4_sock_uslot);
	__uint(max_entries, SLUICE_SOCK_USLOTS4);
} SLUICE_MAP_SOCK_USLOT4 SEC(".maps");

/* The IPv6 twin (see lb6_sock_slot): an AF_INET6 TCP socket's pair when it
 * connected to an IPv6 frontend; its socket storage (SLUICE_MAP_SOCK6) takes
 * the pairs whose slot is held. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_sock_slot);
	__uint(max_entries, SLUICE_SOCK_SLOTS6);
} SLUICE_MAP_SOCK_SLOT6 SEC(".maps");

/* An IPv6 UDP socket's first frontend pair (see lb6_sock_uslot): the twin of
 * SLUICE_MAP_SOCK_USLOT4; storage (SLUICE_MAP_SOCK6) takes the rest. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_sock_uslot);
	__uint(max_entries, SLUICE_SOCK_USLOTS6);
} SLUICE_MAP_SOCK_USLOT6 SEC(".maps");

/* Pod netns cookie -> the pod's addresses (lb_pod_addr): written by the CNI
 * plugin at ADD/DEL, read by connect4/sendmsg4 for loadBalancerSourceRanges. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, struct lb_pod_addr);
	__uint(max_entries, SLUICE_MAX_POD_ADDR);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_POD_ADDR SEC(".maps");
#endif

/* Which sockets the socket LB translates; written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb_sock_config);
	__uint(max_entries, 1);
} SLUICE_MAP_SOCK_CFG SEC(".maps");

/* This node's addresses (written by the agent): ExternalIPs are translated at
 * the socket only when they are one of them; bind() to 0.0.0.0 checks
 * NodePorts on each. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __be32);
	__type(value, __u8);
	__uint(max_entries, SLUICE_MAX_NODEIP4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_NODEIP4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb4_affinity_key);
	__type(value, struct lb_affinity);
	__uint(max_entries, SLUICE_MAX_AFFINITY);
} SLUICE_MAP_AFFINITY4 SEC(".maps");

/* h-alg: round-robin position of each frontend, by rev-NAT id; shared by all
 * CPUs and by the socket and TC paths (an atomic add per pick). An array:
 * one lookup, no allocation, 256 KiB at the default capacity. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, SLUICE_MAX_REVNAT);
} SLUICE_MAP_RR4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LB_CNT_MAX);
} SLUICE_MAP_COUNTERS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct sluice_agent_status);
	__uint(max_entries, 1);
} SLUICE_MAP_AGENT SEC(".maps");

static __always_inline void lb_count(__u32 counter)
{
	__u64 *value = bpf_map_lookup_elem(&SLUICE_MAP_COUNTERS, &counter);

	if (value)
		*value += 1;
}

/* An IPv4 backend by id: NULL for an id outside the array or an empty entry
 * (proto 0: never written, or cleared when the backend went). */
static __always_inline struct lb4_backend *lb4_backend_by_id(__u32 backend_id)
{
	struct lb4_backend *backend = bpf_map_lookup_elem(&SLUICE_MAP_BACKENDS4, &backend_id);

	return backend && backend->proto ? backend : NULL;
}

/* The backend id at position pos (0-based, < svc->count) of the range a
 * master (svc->backend_id: first index) names in a family's range array
 * (SLUICE_MAP_RANGES4 or SLUICE_MAP_RANGES6); 0 when out of the array. */
static __always_inline __u32 lb_range_backend_id(void *ranges, const struct lb4_service *svc, __u32 pos)
{
	__u32 index = svc->backend_id + pos;
	__u32 *id = bpf_map_lookup_elem(ranges, &index);

	return id ? *id : 0;
}

static __always_inline __u32 lb4_range_backend_id(const struct lb4_service *svc, __u32 pos)
{
	return lb_range_backend_id(&SLUICE_MAP_RANGES4, svc, pos);
}

/* A per-packet flow counter (LB_CNT_TC_*) on the path of a conntrack entry
 * with these flags: pod-veth flows count at LB_CNT_POD_OFFSET above. */
static __always_inline __u32 lb_cnt_flow(__u16 ct_flags, __u32 counter)
{
	return ct_flags & LB_CT_FLAG_POD ? counter + LB_CNT_POD_OFFSET : counter;
}

/* ==== TC / north-south (issue 4) =============================================== */

/* Written per new external flow by the data path: LRU, so a flood of flows
 * recycles the oldest entries instead of failing new ones. Preallocated
 * (36 MiB at the default size), so an object that never uses it (sock_lb,
 * SLUICE_NO_CONNTRACK) does not create it; the TC objects share it by pin. */
#ifndef SLUICE_NO_CONNTRACK
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb4_ct_key);
	__type(value, struct lb4_ct_entry);
	__uint(max_entries, SLUICE_MAX_CT4);
} SLUICE_MAP_CT4 SEC(".maps");
#endif

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lb4_src_range_key);
	__type(value, __u8);
	__uint(max_entries, SLUICE_MAX_SRCRANGE4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_SRCRANGE4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb4_tc_config);
	__uint(max_entries, 1);
} SLUICE_MAP_TC_CONFIG SEC(".maps");

/* ==== end of TC / north-south ================================================== */

/* ==== TC: fragments and multi-homed nodes (issue 10 items 8-9) ==================== */

/* Ports of datagrams in fragments, written by the TC path per first fragment:
 * LRU, a fragment stream recycles the oldest entries. Not in objects without
 * conntrack (sock_lb). */
#ifndef SLUICE_NO_CONNTRACK
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb4_frag_key);
	__type(value, struct lb4_frag_ports);
	__uint(max_entries, SLUICE_MAX_FRAG4);
} SLUICE_MAP_FRAG4 SEC(".maps");
#endif

/* Per-device SNAT addresses, written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lb4_snat_device);
	__uint(max_entries, SLUICE_MAX_SNAT_DEV4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_SNAT_DEV4 SEC(".maps");

/* ==== end of fragments and multi-homed nodes ====================================== */
/* ==== Operator CLI: Service names and data-path events (issue 11 item 12) ===== */

/* Written by the agent only (the programs never read it); here so that every
 * object creates it with BTF and `bpftool map dump` shows named fields. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb_svc_name_key);
	__type(value, struct lb_svc_name);
	__uint(max_entries, SLUICE_MAX_SVC_NAMES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_SVC_NAMES SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SLUICE_EVENTS_RING_BYTES);
} SLUICE_MAP_EVENTS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb_events_ctl);
	__uint(max_entries, 1);
} SLUICE_MAP_EVENTS_ON SEC(".maps");

/* ==== end of operator CLI ======================================================== */

/* ==== IPv6 and dual-stack, socket path (issue 14) ================================ */
/* The IPv6 twins of the maps above (see sluice_abi.h): same types and flags,
 * 16-byte addresses. Written by the agent, except the socket state. The
 * frontends are the IPv4 table's layout: one master per frontend naming a
 * range of SLUICE_MAP_RANGES6; ranges, backends and rev-NAT entries are
 * ARRAYs indexed by dense indices and ids. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb6_frontend_key);
	__type(value, struct lb4_service);
	__uint(max_entries, SLUICE_MAX_SERVICE_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_SERVICES6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, SLUICE_MAX_RANGE6);
} SLUICE_MAP_RANGES6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_backend);
	__uint(max_entries, SLUICE_MAX_BACKENDS);
} SLUICE_MAP_BACKENDS6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_reverse_nat);
	__uint(max_entries, SLUICE_MAX_REVNAT);
} SLUICE_MAP_REVNAT6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb6_affinity_key);
	__type(value, struct lb_affinity);
	__uint(max_entries, SLUICE_MAX_AFFINITY);
} SLUICE_MAP_AFFINITY6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lb6_src_range_key);
	__type(value, __u8);
	__uint(max_entries, SLUICE_MAX_SRCRANGE6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_SRCRANGE6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct lb6_sock_state);
	__uint(max_entries, 0);
} SLUICE_MAP_SOCK6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb6_node_ip);
	__type(value, __u8);
	__uint(max_entries, SLUICE_MAX_NODEIP6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_NODEIP6 SEC(".maps");

/* ==== end of IPv6, socket path ==================================================== */

/* ==== IPv6, TC north-south (issue 14 item 3) ======================================= */
/* The twins of sluice_ct4 and sluice_tc_cfg (see sluice_abi.h): a smaller
 * preallocated LRU, only in the objects with conntrack. */
#ifndef SLUICE_NO_CONNTRACK
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb6_ct_key);
	__type(value, struct lb6_ct_entry);
	__uint(max_entries, SLUICE_MAX_CT6);
} SLUICE_MAP_CT6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_ct_entry);
	__uint(max_entries, 1);
} SLUICE_MAP_CT6_TMP SEC(".maps");

/* IPv6 fragments' ports and the ICMPv6 error scratch (frag6.h, nat_flow6.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb6_frag_key);
	__type(value, struct lb4_frag_ports);
	__uint(max_entries, SLUICE_MAX_FRAG6);
} SLUICE_MAP_FRAG6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_icmp_scratch);
	__uint(max_entries, 1);
} SLUICE_MAP_ICMP6_TMP SEC(".maps");
#endif

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_tc_config);
	__uint(max_entries, 1);
} SLUICE_MAP_TC_CONFIG6 SEC(".maps");

/* Per-device IPv6 SNAT addresses (multi-homed nodes), written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lb6_snat_device);
	__uint(max_entries, SLUICE_MAX_SNAT_DEV6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} SLUICE_MAP_SNAT_DEV6 SEC(".maps");

/* ==== end of IPv6, TC north-south ================================================== */

/* DSR (issue 17 item 2): the node's --nodeport-mode. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lb_dsr_config);
	__uint(max_entries, 1);
} SLUICE_MAP_DSR_CFG SEC(".maps");

#endif /* SLUICE_BPF_MAPS_H */
