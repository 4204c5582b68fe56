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
 * Call sites are one line each: lb4_event_sock() / lb6_event_sock() at a
 * socket refusal, lb4_event_packet() / lb6_event_packet() at a TC drop or
 * rejection, lb4_event_flow() / lb6_event_flow() at a new flow (the IPv6 TC ones in
 * events6.h). Both
 * families write the same record (struct lb_event: 16-byte addresses and a
 * family field, sluice_abi.h).
 */
#ifndef SLUICE_BPF_EVENTS_H
#define SLUICE_BPF_EVENTS_H

#include "common.h"
#include "maps.h"
#include "nat.h"
#include "lb6.h"

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
 * listener runs, so the call costs nothing otherwise. The socket events use
 * it (their programs have stack to spare); the TC events write their record
 * in place (lb_event_reserve below), so objects without socket events leave
 * it out.
 */
static __noinline __attribute__((unused)) void lb_event_submit(struct lb_event *ev)
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
	ev.family = LB_EVENT_FAMILY_IPV4;
	ev.proto = frontend->proto;
	*(__be32 *)ev.daddr = frontend->address;
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
	ev->family = LB_EVENT_FAMILY_IPV4;
	ev->proto = t->proto;
	*(__be32 *)ev->saddr = t->saddr;
	*(__be32 *)ev->daddr = t->daddr;
	ev->sport = t->sport;
	ev->dport = t->dport;
	ev->rev_nat_id = rev_nat_id;
	ev->ifindex = ifindex;
}

/*
 * A TC event's record is written in place in the ring (reserved, zeroed,
 * submitted), never on the stack: the TC programs' call chains are near the
 * 512-byte limit and the record is 104 bytes. NULL: the ring is full and the
 * event is lost (never the packet).
 */
static __always_inline struct lb_event *lb_event_reserve(void)
{
	struct lb_event *ev = bpf_ringbuf_reserve(&SLUICE_MAP_EVENTS, sizeof(*ev), 0);

	if (ev)
		__builtin_memset(ev, 0, sizeof(*ev));
	return ev;
}

/* A packet of a TC path dropped or rejected (reason: its counter index). */
static __always_inline void
lb4_event_packet(__u8 type, __u16 reason, const struct lb4_tuple *t, __u32 rev_nat_id, __u32 ifindex)
{
	struct lb_event *ev;

	if (!lb_events_listened() || !(ev = lb_event_reserve()))
		return;
	lb4_event_fill(ev, type, reason, t, rev_nat_id, ifindex);
	bpf_ringbuf_submit(ev, 0);
}

/* A new flow translated: its original-direction entry has the tuple and the backend. */
static __always_inline void lb4_event_flow(const struct lb4_ct_entry *e)
{
	struct lb4_tuple t = {};
	struct lb_event *ev;

	if (!lb_events_listened() || !(ev = lb_event_reserve()))
		return;
	t.saddr = e->client_address;
	t.daddr = e->frontend_address;
	t.sport = e->client_port;
	t.dport = e->frontend_port;
	t.proto = e->proto;
	lb4_event_fill(ev, LB_EVENT_NEW_FLOW, lb_cnt_flow(e->flags, LB_CNT_TC_TRANSLATED), &t, e->rev_nat_id,
		       e->ifindex);
	*(__be32 *)ev->backend_address = e->backend_address;
	ev->backend_port = e->backend_port;
	bpf_ringbuf_submit(ev, 0);
}

/* ---- IPv6: the same events, the same record ------------------------------ */

/* A connect6()/sendmsg6() to an IPv6 frontend refused (reason: its LB_CNT_SOCK_* counter). */
static __always_inline void
lb6_event_sock(struct bpf_sock_addr *ctx, __u16 reason, const struct lb6_service_key *frontend, __u32 rev_nat_id)
{
	struct lb_event ev = {};

	if (!lb_events_listened())
		return;
	ev.timestamp_ns = bpf_ktime_get_ns();
	ev.netns_cookie = bpf_get_netns_cookie(ctx);
	ev.pid = bpf_get_current_pid_tgid() >> 32;
	ev.reason = reason;
	ev.type = LB_EVENT_REFUSED;
	ev.family = LB_EVENT_FAMILY_IPV6;
	ev.proto = frontend->proto;
	lb6_addr_copy(ev.daddr, frontend->address);
	ev.dport = frontend->port;
	ev.rev_nat_id = rev_nat_id;
	bpf_get_current_comm(ev.comm, sizeof(ev.comm));
	lb_event_submit(&ev);
}

#endif /* SLUICE_BPF_EVENTS_H */
