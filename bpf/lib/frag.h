/* SPDX-License-Identifier: Apache-2.0 */
/*
 * frag.h: IPv4 fragments on the north-south TC path.
 *
 * Only the first fragment of a datagram carries the TCP/UDP header, so only
 * it can be matched to a flow by its ports. Without help the later fragments
 * of a NodePort datagram (or of a large reply to the SNAT address) would pass
 * untranslated and be lost: the backend never sees them, the node reassembles
 * them for a socket that does not exist. As Cilium's fragment map does, the
 * first fragment's ports are remembered under (addresses, IP id, protocol)
 * and later fragments take them from there; the translation then treats them
 * like the first (addresses only, see lb4_rewrite). Fragments are not
 * reassembled and each one is forwarded as it is.
 *
 * A later fragment that arrives before its first (reordering) is not found
 * and passes untouched (LB_CNT_TC_FRAG_UNKNOWN), as in Cilium.
 */
#ifndef SLUICE_BPF_FRAG_H
#define SLUICE_BPF_FRAG_H

#include "maps.h"
#include "nat.h"

static __always_inline void
lb4_frag_key_of(struct lb4_frag_key *key, __be32 saddr, __be32 daddr, __be16 id, __u8 proto)
{
	key->saddr = saddr;
	key->daddr = daddr;
	key->id = id;
	key->proto = proto;
	key->pad = 0;
}

/* A first fragment: remember its ports for the rest of its datagram. */
static __always_inline void lb4_frag_remember(const struct lb4_packet *pkt)
{
	struct lb4_frag_ports ports = { .sport = pkt->tuple.sport, .dport = pkt->tuple.dport };
	struct lb4_frag_key key;

	if (pkt->tuple.proto != LB_PROTO_TCP && pkt->tuple.proto != LB_PROTO_UDP)
		return;
	lb4_frag_key_of(&key, pkt->tuple.saddr, pkt->tuple.daddr, pkt->ip_id, pkt->tuple.proto);
	if (bpf_map_update_elem(&SLUICE_MAP_FRAG4, &key, &ports, BPF_ANY) == 0)
		lb_count(LB_CNT_TC_FRAG_TRACKED);
}

/* A later fragment (offset > 0) of a TCP/UDP datagram whose first fragment
 * was seen: its tuple with the first fragment's ports. -1 otherwise. */
static __always_inline int lb4_frag_parse_later(struct __sk_buff *skb, struct lb4_packet *pkt)
{
	struct lb4_frag_ports *ports;
	struct lb4_frag_key key;
	struct iphdr ip;

	if (skb->protocol != bpf_htons(LB_ETH_P_IP))
		return -1;
	if (bpf_skb_load_bytes(skb, LB_ETH_HLEN, &ip, sizeof(ip)) < 0)
		return -1;
	if (ip.version != 4 || ip.ihl < 5 || !(ip.frag_off & bpf_htons(LB_IP_OFFSET)))
		return -1;
	if (ip.protocol != LB_PROTO_TCP && ip.protocol != LB_PROTO_UDP)
		return -1;
	lb4_frag_key_of(&key, ip.saddr, ip.daddr, ip.id, ip.protocol);
	ports = bpf_map_lookup_elem(&SLUICE_MAP_FRAG4, &key);
	if (!ports) {
		lb_count(LB_CNT_TC_FRAG_UNKNOWN);
		return -1;
	}
	pkt->tuple.saddr = ip.saddr;
	pkt->tuple.daddr = ip.daddr;
	pkt->tuple.sport = ports->sport;
	pkt->tuple.dport = ports->dport;
	pkt->tuple.proto = ip.protocol;
	pkt->tuple.tcp_flags = 0;
	pkt->icmp_type = 0;
	pkt->l4_off = LB_ETH_HLEN + ip.ihl * 4;
	pkt->frag = LB_FRAG_LATER;
	pkt->ip_id = ip.id;
	lb_count(LB_CNT_TC_FRAG_FOUND);
	return 0;
}

/* lb4_parse for the TC path: first fragments are remembered, later ones get
 * their datagram's ports. */
static __always_inline int lb4_tc_parse(struct __sk_buff *skb, struct lb4_packet *pkt)
{
	if (lb4_parse(skb, pkt) == 0) {
		if (pkt->frag == LB_FRAG_FIRST)
			lb4_frag_remember(pkt);
		return 0;
	}
	return lb4_frag_parse_later(skb, pkt);
}

#endif /* SLUICE_BPF_FRAG_H */
