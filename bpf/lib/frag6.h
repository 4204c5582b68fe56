/* SPDX-License-Identifier: Apache-2.0 */
/*
 * frag6.h: IPv6 fragments on the TC paths (the twin of frag.h; issue 14
 * item 3, issue 10 item 8).
 *
 * An IPv6 datagram in fragments carries a Fragment header (RFC 8200 section
 * 4.5) in every fragment; only the first (offset 0, M set) carries the
 * TCP/UDP header. Its ports are remembered in SLUICE_MAP_FRAG6 under
 * (addresses, 32-bit identification, protocol); a later fragment (offset >
 * 0) takes them from there and is translated like the first, addresses only
 * (nat6.h's lb6_rewrite_tuple; the L4 checksum lives in the first fragment
 * and covers the new pseudo-header once the first is translated). Fragments
 * are not reassembled and each one is forwarded as it is. Both TC paths
 * parse through lb6_tc_parse (nat_flow6.h), so the pod-veth path gets it too.
 *
 * Passed untouched: a later fragment whose first was not seen here
 * (reordering; LB_CNT_TC6_FRAG_UNKNOWN, as for IPv4), a later fragment whose
 * Fragment header is not followed by TCP or UDP (another extension header in
 * the fragmentable part) and a packet with two Fragment headers
 * (LB_CNT_TC6_FRAG_PASSED).
 */
#ifndef SLUICE_BPF_FRAG6_H
#define SLUICE_BPF_FRAG6_H

#include "maps.h"
#include "nat6.h"

static __always_inline void lb6_frag_key_of(struct lb6_frag_key *key, const struct lb6_packet *pkt, __be32 id)
{
	__builtin_memcpy(key->saddr, pkt->tuple.saddr, 16);
	__builtin_memcpy(key->daddr, pkt->tuple.daddr, 16);
	key->id = id;
	key->proto = pkt->tuple.proto;
	key->pad[0] = key->pad[1] = key->pad[2] = 0;
}

static __always_inline bool lb6_frag_proto_ok(__u8 proto)
{
	return proto == LB_PROTO_TCP || proto == LB_PROTO_UDP;
}

/* A first fragment: remember its ports for the rest of its datagram (the
 * two steps are subprograms: their keys stay off the path's deepest chain). */
static __noinline void lb6_frag_remember(const struct lb6_packet *pkt, __be32 id)
{
	struct lb4_frag_ports ports = { .sport = pkt->tuple.sport, .dport = pkt->tuple.dport };
	struct lb6_frag_key key;

	if (!lb6_frag_proto_ok(pkt->tuple.proto))
		return;
	lb6_frag_key_of(&key, pkt, id);
	if (bpf_map_update_elem(&SLUICE_MAP_FRAG6, &key, &ports, BPF_ANY) == 0)
		lb_count(LB_CNT_TC6_FRAG_TRACKED);
}

/* A later fragment (lb6_parse said LB6_PARSE_FRAG, pkt->frag LATER): its
 * datagram's ports from its first fragment, 0; else -1 (passes untouched). */
static __noinline int lb6_frag_later(struct lb6_packet *pkt, __be32 id)
{
	struct lb4_frag_ports *ports;
	struct lb6_frag_key key;

	if (pkt->frag != LB_FRAG_LATER || !lb6_frag_proto_ok(pkt->tuple.proto)) {
		lb_count(LB_CNT_TC6_FRAG_PASSED);
		return -1;
	}
	lb6_frag_key_of(&key, pkt, id);
	ports = bpf_map_lookup_elem(&SLUICE_MAP_FRAG6, &key);
	if (!ports) {
		lb_count(LB_CNT_TC6_FRAG_UNKNOWN);
		return -1;
	}
	pkt->tuple.sport = ports->sport;
	pkt->tuple.dport = ports->dport;
	lb_count(LB_CNT_TC6_FRAG_FOUND);
	return 0;
}

/* lb6_parse for the TC paths: first fragments are remembered, later ones
 * get their datagram's ports. A subprogram: the parse's buffers stay off
 * the frames of the deepest call chains (ICMPv6 errors forwarded by us). */
static __noinline int lb6_tc_parse(struct __sk_buff *skb, struct lb6_packet *pkt)
{
	struct lb6_frag_info frag;
	int rc = lb6_parse(skb, pkt, &frag);

	if (rc == 0) {
		if (pkt->frag == LB_FRAG_FIRST)
			lb6_frag_remember(pkt, frag.id);
		return 0;
	}
	if (rc != LB6_PARSE_FRAG)
		return rc;
	return lb6_frag_later(pkt, frag.id);
}

#endif /* SLUICE_BPF_FRAG6_H */
