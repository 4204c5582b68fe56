// Cgroup v2 socket hooks: attach through bpf_link (multi-attach by nature:
// coexists with other programs on the same cgroup, e.g. a CNI's), and ask the
// kernel what is attached where.
import fs from 'node:fs';
import os from 'node:os';
import { BpfError, check, libbpf } from './libbpf';
import { BpfLink } from './link';
import type { BpfProgram } from './program';
import { attachTypeName } from './constants';

const { ENOSPC } = os.constants.errno;
const BPF_F_QUERY_EFFECTIVE = 1;

function openCgroup(cgroupPath: string, op: string): number {
  try {
    return fs.openSync(cgroupPath, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new BpfError(op, cgroupPath, -(e.errno ?? -22), { hint: 'cannot open the cgroup directory' });
  }
}

/**
 * Attaches a program to a cgroup v2 directory with bpf_link_create. The link
 * ends with its last fd unless pinned (BpfLink.pin).
 */
export function attachCgroup(prog: BpfProgram | number, cgroupPath: string, attachType: number): BpfLink {
  const progFd = typeof prog === 'number' ? prog : prog.fd;
  const progName = typeof prog === 'number' ? `program fd ${prog}` : prog.name;
  const label = `${progName} on ${cgroupPath} (${attachTypeName(attachType)})`;
  const cgroupFd = openCgroup(cgroupPath, 'bpf_link_create');
  try {
    const linkFd = check(libbpf().bpf_link_create(progFd, cgroupFd, attachType, null), 'bpf_link_create', label);
    return new BpfLink(linkFd, `link ${label}`);
  } finally {
    fs.closeSync(cgroupFd);
  }
}

export interface CgroupQuery {
  /** Program ids, in run order. */
  progIds: number[];
  /** BPF_F_ALLOW_MULTI etc. as attached (0 for links with no legacy attachments). */
  attachFlags: number;
}

/**
 * Program ids attached to a cgroup at a hook (bpf_prog_query). By default the
 * programs attached to this cgroup itself; `effective` lists what runs for its
 * sockets, inherited from ancestors included.
 */
export function queryCgroup(cgroupPath: string, attachType: number, opts: { effective?: boolean } = {}): number[] {
  return queryCgroupDetailed(cgroupPath, attachType, opts).progIds;
}

export function queryCgroupDetailed(cgroupPath: string, attachType: number, opts: { effective?: boolean } = {}): CgroupQuery {
  const fns = libbpf();
  const cgroupFd = openCgroup(cgroupPath, 'bpf_prog_query');
  try {
    let capacity = 64;
    for (;;) {
      const ids = new Uint32Array(capacity);
      const count = new Uint32Array([capacity]);
      const flags = new Uint32Array(1);
      const ret = fns.bpf_prog_query(cgroupFd, attachType, opts.effective ? BPF_F_QUERY_EFFECTIVE : 0, flags, ids, count);
      if (ret === -ENOSPC && (count[0] ?? 0) > capacity) {
        capacity = count[0] ?? capacity * 2;
        continue;
      }
      check(ret, 'bpf_prog_query', `${cgroupPath} (${attachTypeName(attachType)})`);
      return { progIds: Array.from(ids.subarray(0, count[0] ?? 0)), attachFlags: flags[0] ?? 0 };
    }
  } finally {
    fs.closeSync(cgroupFd);
  }
}

/** A cgroup v2 directory's id: its inode number (what LinkInfo.cgroupId reports). */
export function cgroupId(cgroupPath: string): bigint {
  return fs.statSync(cgroupPath, { bigint: true }).ino;
}

/** Where cgroup v2 is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified in the hybrid layout), from /proc/self/mountinfo. */
export function cgroupV2Mount(): string | undefined {
  const text = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  for (const line of text.split('\n')) {
    // "<id> <parent> <maj:min> <root> <mount point> <opts> ... - <fstype> <source> <super opts>"
    const [left, right] = line.split(' - ');
    if (!left || !right) continue;
    if (right.split(' ')[0] === 'cgroup2') return left.split(' ')[4];
  }
  return undefined;
}
