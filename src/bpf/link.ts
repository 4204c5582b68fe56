// BpfLink: a kernel bpf_link (program ↔ hook). A link lives as long as its
// last reference: an fd or a pin in bpffs. Pinned links are how attachments
// outlive the agent; `update()` swaps the program atomically (no window with
// no program attached), which is how a new agent version takes over.
import fs from 'node:fs';
import { LINK_UPDATE_OPTS_SIZE, check, libbpf, objInfo } from './libbpf';
import type { BpfProgram } from './program';

/** What the kernel says about a link (struct bpf_link_info). */
export interface LinkInfo {
  /** enum bpf_link_type (LinkType.CGROUP, ...). */
  type: number;
  id: number;
  /** Id of the program the link runs now. */
  progId: number;
  /** Cgroup links: the cgroup's id (a u64: its kernfs inode number, see cgroupId()). */
  cgroupId?: bigint;
  /** Cgroup, netns and tcx links: enum bpf_attach_type. */
  attachType?: number;
  /** XDP and tcx links. */
  ifindex?: number;
  /** Netns links. */
  netnsIno?: number;
}

// struct bpf_link_info in libbpf 1.1.2's <linux/bpf.h>: 48 bytes (the union starts at 16).
const LINK_INFO_SIZE = 48;
const LINK_TYPE_CGROUP = 3;
const LINK_TYPE_NETNS = 5;
const LINK_TYPE_XDP = 6;
const LINK_TYPE_TCX = 11;

/** bpf_obj_get_info_by_fd on a link fd. */
export function linkInfo(fd: number): LinkInfo {
  const b = objInfo(fd, LINK_INFO_SIZE, 'bpf_obj_get_info_by_fd', `link fd ${fd}`);
  const info: LinkInfo = { type: b.readUInt32LE(0), id: b.readUInt32LE(4), progId: b.readUInt32LE(8) };
  switch (info.type) {
    case LINK_TYPE_CGROUP:
      info.cgroupId = b.readBigUInt64LE(16);
      info.attachType = b.readUInt32LE(24);
      break;
    case LINK_TYPE_NETNS:
      info.netnsIno = b.readUInt32LE(16);
      info.attachType = b.readUInt32LE(20);
      break;
    case LINK_TYPE_XDP:
      info.ifindex = b.readUInt32LE(16);
      break;
    case LINK_TYPE_TCX:
      info.ifindex = b.readUInt32LE(16);
      info.attachType = b.readUInt32LE(20);
      break;
  }
  return info;
}

export class BpfLink {
  private fdValue: number;
  /** Where this link was described from, for error messages. */
  readonly label: string;

  /** Takes ownership of a link fd (from attachCgroup, bpf_link_create, ...). */
  constructor(fd: number, label = `link fd ${fd}`) {
    this.fdValue = fd;
    this.label = label;
  }

  /** Opens a pinned link (bpf_obj_get); closing it leaves the pin, and so the attachment, in place. */
  static fromPinned(path: string): BpfLink {
    return new BpfLink(check(libbpf().bpf_obj_get(path), 'bpf_obj_get', path), `link ${path}`);
  }

  /** Opens a link by kernel id (e.g. from `bpftool link`). */
  static fromId(id: number): BpfLink {
    return new BpfLink(check(libbpf().bpf_link_get_fd_by_id(id), 'bpf_link_get_fd_by_id', `link id ${id}`), `link id ${id}`);
  }

  get fd(): number {
    return this.fdValue;
  }

  info(): LinkInfo {
    return linkInfo(this.fdValue);
  }

  /** Pins the link in bpffs: the attachment then survives this process. */
  pin(path: string): void {
    check(libbpf().bpf_obj_pin(this.fdValue, path), 'bpf_obj_pin', `${this.label} at ${path}`);
  }

  /**
   * Atomically replaces the link's program (bpf_link_update). With
   * `expectedOldProgFd`, fails with EPERM unless that program is the one
   * attached (guards against two agents racing).
   */
  update(newProg: BpfProgram | number, expectedOldProgFd?: number): void {
    const progFd = typeof newProg === 'number' ? newProg : newProg.fd;
    const opts =
      expectedOldProgFd === undefined
        ? null
        : { sz: LINK_UPDATE_OPTS_SIZE, flags: 4 /* BPF_F_REPLACE */, old_prog_fd: expectedOldProgFd };
    check(libbpf().bpf_link_update(this.fdValue, progFd, opts), 'bpf_link_update', this.label);
  }

  /** Detaches the link from its hook now, even if pinned elsewhere (bpf_link_detach); the fd stays open. */
  detach(): void {
    check(libbpf().bpf_link_detach(this.fdValue), 'bpf_link_detach', this.label);
  }

  /** Closes this fd; the attachment ends only if no pin or other fd holds the link. Idempotent. */
  close(): void {
    if (this.fdValue >= 0) fs.closeSync(this.fdValue);
    this.fdValue = -1;
  }
}

/**
 * Removes a pinned link (or any bpffs object) by unlinking its file. The
 * attachment ends when the last reference goes. Returns false when nothing was
 * pinned there.
 */
export function unpin(path: string): boolean {
  try {
    fs.unlinkSync(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}


// Callers find the attach side next to BpfLink.
export { attachCgroup, queryCgroup } from './cgroup';
export { progInfo } from './program';
