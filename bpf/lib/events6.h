/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events6.h: the IPv6 TC paths' events for `sluice monitor` (north-south and
 * pod veth, both in nat_flow6.h): the same record as IPv4's (events.h),
 * family LB_EVENT_FAMILY_IPV6, written in place in the ring like the IPv4
 * TC events. Apart from events.h because only the TC and pod objects parse
 * IPv6 packets.
 */
#ifndef SLUICE_BPF_EVENTS6_H
#define SLUICE_BPF_EVENTS6_H

#include "events.h"
#include "nat6.h"

/* A packet of an IPv6 TC path (north-south or pod veth) dropped or rejected. */
static __always_inline void
lb6_event_packet(__u8 type, __u16 reason, const struct lb6_tuple *t, __u32 rev_nat_id, __u32 ifindex)
{
	struct lb_event *ev;

	if (!lb_events_listened() || !(ev = lb_event_reserve()))
		return;
	ev->timestamp_ns = bpf_ktime_get_ns();
	ev->reason = reason;
	ev->type = type;
	ev->family = LB_EVENT_FAMILY_IPV6;
	ev->proto = t->proto;
	lb6_addr_copy(ev->saddr, t->saddr);
	lb6_addr_copy(ev->daddr, t->daddr);
	ev->sport = t->sport;
	ev->dport = t->dport;
	ev->rev_nat_id = rev_nat_id;
	ev->ifindex = ifindex;
	bpf_ringbuf_submit(ev, 0);
}

/* A new IPv6 flow translated: its original-direction entry has the tuple and the backend. */
static __always_inline void lb6_event_flow(const struct lb6_ct_entry *e)
{
	struct lb_event *ev;

	if (!lb_events_listened() || !(ev = lb_event_reserve()))
		return;
	ev->timestamp_ns = bpf_ktime_get_ns();
	ev->reason = lb_cnt_flow(e->flags, LB_CNT_TC_TRANSLATED);
	ev->type = LB_EVENT_NEW_FLOW;
	ev->family = LB_EVENT_FAMILY_IPV6;
	ev->proto = e->proto;
	lb6_addr_copy(ev->saddr, e->client_address);
	lb6_addr_copy(ev->daddr, e->frontend_address);
	lb6_addr_copy(ev->backend_address, e->backend_address);
	ev->sport = e->client_port;
	ev->dport = e->frontend_port;
	ev->backend_port = e->backend_port;
	ev->rev_nat_id = e->rev_nat_id;
	ev->ifindex = e->ifindex;
	bpf_ringbuf_submit(ev, 0);
}

#endif /* SLUICE_BPF_EVENTS6_H */
