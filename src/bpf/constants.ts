// Kernel ABI numbers from <linux/bpf.h> (enum bpf_attach_type, bpf_map_type,
// bpf_prog_type, bpf_link_type) that Sluice uses. They are UAPI: stable forever.

/** enum bpf_attach_type: the hooks Sluice attaches to. */
export const AttachType = {
  CGROUP_INET_INGRESS: 0,
  CGROUP_INET_EGRESS: 1,
  CGROUP_INET_SOCK_CREATE: 2,
  CGROUP_INET4_BIND: 8,
  CGROUP_INET6_BIND: 9,
  CGROUP_INET4_CONNECT: 10,
  CGROUP_INET6_CONNECT: 11,
  CGROUP_INET4_POST_BIND: 12,
  CGROUP_INET6_POST_BIND: 13,
  CGROUP_UDP4_SENDMSG: 14,
  CGROUP_UDP6_SENDMSG: 15,
  CGROUP_UDP4_RECVMSG: 19,
  CGROUP_UDP6_RECVMSG: 20,
  CGROUP_INET4_GETPEERNAME: 29,
  CGROUP_INET6_GETPEERNAME: 30,
  CGROUP_INET4_GETSOCKNAME: 31,
  CGROUP_INET6_GETSOCKNAME: 32,
  /** BPF iterators (iter/udp, iter/tcp): a link, then an fd per run (bpf_iter_create). */
  TRACE_ITER: 28,
  CGROUP_INET_SOCK_RELEASE: 34,
  XDP: 37,
  /** tcx (kernel 6.6+); newer than libbpf 1.1.2's headers, the number is UAPI. */
  TCX_INGRESS: 46,
  TCX_EGRESS: 47,
} as const;
export type AttachType = (typeof AttachType)[keyof typeof AttachType];

/** enum bpf_map_type. */
export const MapType = {
  UNSPEC: 0,
  HASH: 1,
  ARRAY: 2,
  PROG_ARRAY: 3,
  PERF_EVENT_ARRAY: 4,
  PERCPU_HASH: 5,
  PERCPU_ARRAY: 6,
  STACK_TRACE: 7,
  CGROUP_ARRAY: 8,
  LRU_HASH: 9,
  LRU_PERCPU_HASH: 10,
  LPM_TRIE: 11,
  ARRAY_OF_MAPS: 12,
  HASH_OF_MAPS: 13,
  DEVMAP: 14,
  SOCKMAP: 15,
  CPUMAP: 16,
  XSKMAP: 17,
  SOCKHASH: 18,
  CGROUP_STORAGE: 19,
  REUSEPORT_SOCKARRAY: 20,
  PERCPU_CGROUP_STORAGE: 21,
  QUEUE: 22,
  STACK: 23,
  SK_STORAGE: 24,
  DEVMAP_HASH: 25,
  STRUCT_OPS: 26,
  RINGBUF: 27,
} as const;
export type MapType = (typeof MapType)[keyof typeof MapType];

/** Map types whose values are one slot per possible CPU in user space. */
export function isPerCpuMapType(type: number): boolean {
  return (
    type === MapType.PERCPU_HASH ||
    type === MapType.PERCPU_ARRAY ||
    type === MapType.LRU_PERCPU_HASH ||
    type === MapType.PERCPU_CGROUP_STORAGE
  );
}

/** enum bpf_prog_type (the ones we load). */
export const ProgType = {
  UNSPEC: 0,
  SOCKET_FILTER: 1,
  SCHED_CLS: 3,
  SCHED_ACT: 4,
  XDP: 6,
  CGROUP_SKB: 8,
  CGROUP_SOCK: 9,
  SOCK_OPS: 13,
  CGROUP_SOCK_ADDR: 18,
} as const;
export type ProgType = (typeof ProgType)[keyof typeof ProgType];

/** enum bpf_link_type. */
export const LinkType = {
  UNSPEC: 0,
  RAW_TRACEPOINT: 1,
  TRACING: 2,
  CGROUP: 3,
  ITER: 4,
  NETNS: 5,
  XDP: 6,
  PERF_EVENT: 7,
  KPROBE_MULTI: 8,
  STRUCT_OPS: 9,
  NETFILTER: 10,
  TCX: 11,
  UPROBE_MULTI: 12,
  NETKIT: 13,
} as const;
export type LinkType = (typeof LinkType)[keyof typeof LinkType];

/** Update flags for bpf_map_update_elem / batch elem_flags. */
export const BPF_ANY = 0; // create or update
export const BPF_NOEXIST = 1; // create only
export const BPF_EXIST = 2; // update only
export const BPF_F_LOCK = 4;

/** Map creation flags (map_flags). */
export const MapFlags = {
  NO_PREALLOC: 1 << 0,
  NO_COMMON_LRU: 1 << 1,
  NUMA_NODE: 1 << 2,
  RDONLY: 1 << 3,
  WRONLY: 1 << 4,
  RDONLY_PROG: 1 << 7,
  WRONLY_PROG: 1 << 8,
  MMAPABLE: 1 << 10,
} as const;

/** Attach flags reported by bpf_prog_query for cgroups. */
export const AttachFlags = {
  ALLOW_OVERRIDE: 1 << 0,
  ALLOW_MULTI: 1 << 1,
  REPLACE: 1 << 2,
} as const;

/** Human names for the CLI (`sluice status`). */
export function attachTypeName(type: number): string {
  for (const [name, value] of Object.entries(AttachType)) if (value === type) return name.toLowerCase();
  return `attach_type_${type}`;
}

export function mapTypeName(type: number): string {
  for (const [name, value] of Object.entries(MapType)) if (value === type) return name.toLowerCase();
  return `map_type_${type}`;
}

export function linkTypeName(type: number): string {
  for (const [name, value] of Object.entries(LinkType)) if (value === type) return name.toLowerCase();
  return `link_type_${type}`;
}

export function progTypeName(type: number): string {
  for (const [name, value] of Object.entries(ProgType)) if (value === type) return name.toLowerCase();
  return `prog_type_${type}`;
}
