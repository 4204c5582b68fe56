/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.h: data-path events for `sluice monitor` (drops with their reason,
 * refusals, new flows), written to the SLUICE_MAP_EVENTS ring buffer.
 *
 * Why a listener flag: a ring buffer reservation costs even when nobody
 * reads, so every emit first checks SLUICE_MAP_EVENTS_ON, which
 * `sluice monitor` sets to its pid while it runs. Without a listener an event
 * point costs one array lookup; events are emitted only where something
 * already went off the fast path (a drop, a refusal, a new flow), never per
 * packet of an established flow. A full ring loses the event, never the packet.
 *
 * Call sites are one line each: lb4_event_sock() at a socket refusal,
 * lb4_event_packet() at a TC drop or rejection, lb4_event_flow() at a new flow.
 */
#ifndef SLUICE_BPF_EVENTS_H
#define SLUICE_BPF_EVENTS_H

#include "common.h"
#include "maps.h"
#include "nat.h"

static __always_inline bool lb_events_listened(void)
{
#ifdef SLUICE_NO_EVENTS
	/* bench/eventcost.ts builds this to measure the flag check against nothing. */
	return false;
#endif
	__u32 zero = 0;
	struct lb_events_ctl *ctl = bpf_map_lookup_elem(&SLUICE_MAP_EVENTS_ON, &zero);

	return ctl && ctl->listener_pid;
}

/*
 * Not inlined on purpose: a BPF-to-BPF function's prototype is in the
 * object's BTF, which puts struct lb_event there, and the CLI's codec is
 * generated from that BTF like every other layout. It is called only while a
 * listener runs, so the call costs nothing otherwise.
 */
static __noinline void lb_event_submit(struct lb_event *ev)
{
	bpf_ringbuf_output(&SLUICE_MAP_EVENTS, ev, sizeof(*ev), 0);
}

/* A connect()/sendmsg() to a frontend refused (reason: its LB_CNT_SOCK_* counter). */
static __always_inline void
lb4_event_sock(struct bpf_sock_addr *ctx, __u16 reason, const struct lb4_service_key *frontend, __u32 rev_nat_id)
{
	struct lb_event ev = {};

	if (!lb_events_listened())
		return;
	ev.timestamp_ns = bpf_ktime_get_ns();
	ev.netns_cookie = bpf_get_netns_cookie(ctx);
	ev.pid = bpf_get_current_pid_tgid() >> 32;
	ev.reason = reason;
	ev.type = LB_EVENT_REFUSED;
	ev.proto = frontend->proto;
	ev.daddr = frontend->address;
	ev.dport = frontend->port;
	ev.rev_nat_id = rev_nat_id;
	bpf_get_current_comm(ev.comm, sizeof(ev.comm));
	lb_event_submit(&ev);
}

/* The fields every TC-path event carries: the packet's tuple as it arrived. */
static __always_inline void
lb4_event_fill(struct lb_event *ev, __u8 type, __u16 reason, const struct lb4_tuple *t, __u32 rev_nat_id,
	       __u32 ifindex)
{
	ev->timestamp_ns = bpf_ktime_get_ns();
	ev->reason = reason;
	ev->type = type;
	ev->proto = t->proto;
	ev->saddr = t->saddr;
	ev->daddr = t->daddr;
	ev->sport = t->sport;
	ev->dport = t->dport;
	ev->rev_nat_id = rev_nat_id;
	ev->ifindex = ifindex;
}

/* A packet of a TC path dropped or rejected (reason: its counter index). */
static __always_inline void
lb4_event_packet(__u8 type, __u16 reason, const struct lb4_tuple *t, __u32 rev_nat_id, __u32 ifindex)
{
	struct lb_event ev = {};

	if (!lb_events_listened())
		return;
	lb4_event_fill(&ev, type, reason, t, rev_nat_id, ifindex);
	lb_event_submit(&ev);
}

/* A new flow translated: its original-direction entry has the tuple and the backend. */
static __always_inline void lb4_event_flow(const struct lb4_ct_entry *e)
{
	struct lb_event ev = {};
	struct lb4_tuple t = {};

	if (!lb_events_listened())
		return;
	t.saddr = e->client_address;
	t.daddr = e->frontend_address;
	t.sport = e->client_port;
	t.dport = e->frontend_port;
	t.proto = e->proto;
	lb4_event_fill(&ev, LB_EVENT_NEW_FLOW, lb_cnt_flow(e->flags, LB_CNT_TC_TRANSLATED), &t, e->rev_nat_id,
		       e->ifindex);
	ev.backend_address = e->backend_address;
	ev.backend_port = e->backend_port;
	lb_event_submit(&ev);
}

#endif /* SLUICE_BPF_EVENTS_H */
