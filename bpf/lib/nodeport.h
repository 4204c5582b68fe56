/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nodeport.h: the frontend of a destination, NodePorts included.
 *
 * An IPv4 NodePort is one wildcard frontend per port and protocol (address
 * 0.0.0.0, LB_SVC_FLAG_NODEPORT) instead of one per node address, so a node
 * with many addresses does not multiply the entries (each frontend is a
 * master plus one slot per backend). A destination that has no frontend of
 * its own is looked up again as the wildcard when it is one of the addresses
 * NodePorts listen on (SLUICE_MAP_NODEIP4, written by the agent from
 * nodePortAddresses). An exact frontend wins (an ExternalIP that is a node
 * address), as kube-proxy's KUBE-NODEPORTS is the last rule of
 * KUBE-SERVICES. The wildcard's rev-NAT entry has address 0: reverse
 * translations keep the address the client used (conntrack, socket pairs).
 */
#ifndef SLUICE_BPF_NODEPORT_H
#define SLUICE_BPF_NODEPORT_H

#include "lb.h"

/* NodePorts listen on this address. */
static __always_inline bool lb4_is_nodeport_address(__be32 address)
{
	return address && bpf_map_lookup_elem(&SLUICE_MAP_NODEIP4, &address);
}

/*
 * lb4_lookup_service, then the NodePort wildcard. When the wildcard is
 * found key->address is 0 (the key of its slots, for the selection); the
 * address the client used is the caller's.
 */
static __always_inline struct lb4_service *lb4_lookup_frontend(struct lb4_service_key *key, bool internal)
{
	struct lb4_service *svc = lb4_lookup_service(key, internal);
	__be32 address = key->address;

	if (svc || !lb4_is_nodeport_address(address))
		return svc;
	key->address = 0;
	svc = lb4_lookup_service(key, internal);
	if (svc && (svc->flags & LB_SVC_FLAG_NODEPORT))
		return svc;
	key->address = address;
	return NULL;
}

/* lb4_lookup_frontend, copied once (see lb4_lookup_service_copy). */
static __always_inline bool lb4_lookup_frontend_copy(struct lb4_service_key *key, bool internal, struct lb4_service *out)
{
	struct lb4_service *svc = lb4_lookup_frontend(key, internal);

	if (!svc)
		return false;
	*out = *svc;
	return true;
}

/* A rev-NAT entry names this frontend address: its own, or the wildcard's
 * 0 for any NodePort address. */
static __always_inline bool lb4_rev_nat_address_matches(__be32 rev_nat_address, __be32 address)
{
	return rev_nat_address == address || (!rev_nat_address && lb4_is_nodeport_address(address));
}

#endif /* SLUICE_BPF_NODEPORT_H */
