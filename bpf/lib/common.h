/* SPDX-License-Identifier: Apache-2.0 */
/* common.h: the includes and small definitions every Sluice program needs. */
#ifndef SLUICE_BPF_COMMON_H
#define SLUICE_BPF_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Return codes of cgroup sock_addr programs. */
#define SYS_PROCEED 1
#define SYS_REJECT  0

#ifndef ECONNREFUSED
#define ECONNREFUSED 111
#endif
#ifndef EHOSTUNREACH
#define EHOSTUNREACH 113
#endif
#ifndef ENOENT
#define ENOENT 2
#endif
#ifndef ENXIO
#define ENXIO 6
#endif

#define NSEC_PER_SEC 1000000000ULL

/* Address families (socket hooks, the destroy iterator, FIB lookups). */
#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

#endif /* SLUICE_BPF_COMMON_H */
