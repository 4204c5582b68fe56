// Load the socket-LB object, pin its maps, and attach its programs to a cgroup
// with pinned bpf_links, so the data path outlives the process that set it up.
//
// On a second install (agent restart or upgrade) the pinned maps are reused
// (libbpf re-opens them by pin path) and each pinned link is updated in place
// to the new program (bpf_link_update: an atomic swap, no moment without a
// program), instead of detach-then-attach.
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { BpfObject } from '../bpf/object';
import { BpfLink, linkInfo } from '../bpf/link';
import { attachCgroup, cgroupId, cgroupV2Mount } from '../bpf/cgroup';
import { progInfo } from '../bpf/program';
import { AttachType } from '../bpf/constants';
import { ensureBpffsDir } from '../bpf/bpffs';
import * as abi from '../abi/generated';
import { ownNetnsCookie } from './netnsCookie';
import { MapMigration, type MapPolicy, type MigratedMap } from './migrate';
import { readSocketLbScope, sockConfigMap, writeSocketLbScope, type SocketLbScope } from './sockConfig';

/** Program name in sock_lb.bpf.c -> the cgroup hook it serves. */
export const SOCK_LB_PROGRAMS: Record<string, { attachType: number; hook: string }> = {
  sluice_connect4: { attachType: AttachType.CGROUP_INET4_CONNECT, hook: 'connect4' },
  sluice_sendmsg4: { attachType: AttachType.CGROUP_UDP4_SENDMSG, hook: 'sendmsg4' },
  sluice_recvmsg4: { attachType: AttachType.CGROUP_UDP4_RECVMSG, hook: 'recvmsg4' },
  sluice_getpeer4: { attachType: AttachType.CGROUP_INET4_GETPEERNAME, hook: 'getpeername4' },
  sluice_bind4: { attachType: AttachType.CGROUP_INET4_POST_BIND, hook: 'post_bind4' },
  // least-connection: a socket's count comes back when it is released.
  sluice_release4: { attachType: AttachType.CGROUP_INET_SOCK_RELEASE, hook: 'sock_release' },
  // AF_INET6 sockets: IPv6 Services, and IPv4 ones through ::ffff:a.b.c.d (bpf/lib/sock6.h).
  sluice_connect6: { attachType: AttachType.CGROUP_INET6_CONNECT, hook: 'connect6' },
  sluice_sendmsg6: { attachType: AttachType.CGROUP_UDP6_SENDMSG, hook: 'sendmsg6' },
  sluice_recvmsg6: { attachType: AttachType.CGROUP_UDP6_RECVMSG, hook: 'recvmsg6' },
  sluice_getpeer6: { attachType: AttachType.CGROUP_INET6_GETPEERNAME, hook: 'getpeername6' },
  sluice_bind6: { attachType: AttachType.CGROUP_INET6_POST_BIND, hook: 'post_bind6' },
};

/**
 * Maps older objects pinned that this one no longer has (the socket reverse
 * table and LRU, replaced by socket-local storage in issue 10). Unpinned once
 * the new programs are attached; the kernel frees them when the old programs
 * are gone.
 */
const OBSOLETE_MAPS = ['sluice_sk_rev4', 'sluice_sk_slot4'];

/** Where compiled BPF objects are: SLUICE_BPF_DIR, else the repository's build/. */
export function bpfObjectPath(name: string): string {
  const dir = process.env.SLUICE_BPF_DIR ?? path.resolve(__dirname, '..', '..', '..', 'build');
  const file = path.join(dir, name);
  if (!fs.existsSync(file)) throw new Error(`BPF object ${file} not found: run \`make build\` (or set SLUICE_BPF_DIR)`);
  return file;
}

export const linkDir = (bpffs: string) => path.join(bpffs, 'links');
const linkPin = (bpffs: string, prog: string) => path.join(linkDir(bpffs), prog);

export interface InstallResult {
  attached: string[]; // new links
  replaced: string[]; // pinned links updated in place
  /** Pinned maps replaced because their capacity or layout changed (migrate.ts). */
  migrated: MigratedMap[];
  /** Maps this install created (no pin before it): empty, nothing to adopt from them. */
  created?: string[];
}

export interface InstallOptions {
  bpffs: string;
  cgroupPath: string;
  maxEntries?: Record<string, number>;
  /**
   * Which sockets to translate. Absent: keep what the pinned config says, or
   * on a first install translate every socket, with this process's network
   * namespace as the host's.
   */
  socketLb?: SocketLbScope;
  /** Tests: migration policies replacing MAP_POLICIES entries. */
  policies?: Record<string, MapPolicy>;
}

/** Load, pin maps, attach (or swap) every socket-LB program. Idempotent. */
export function installSockLb(opts: InstallOptions): InstallResult {
  const steps = installSteps(opts);
  const obj = steps.next().value as BpfObject;
  try {
    obj.load();
  } catch (err) {
    return installed(steps.throw(err));
  }
  return installed(steps.next());
}

/**
 * installSockLb with the programs verified on a thread-pool thread: the
 * agent lists the API meanwhile. Nothing else may use libbpf until it ends.
 * A failed load is tried once more synchronously: that error carries
 * libbpf's own explanation (loadAsync's does not), and a transient failure
 * (EAGAIN) gets its retry.
 */
export async function installSockLbAsync(opts: InstallOptions): Promise<InstallResult> {
  const steps = installSteps(opts);
  const obj = steps.next().value as BpfObject;
  let loadError: unknown;
  try {
    await obj.loadAsync();
  } catch (err) {
    loadError = err ?? new Error('bpf_object__load failed');
  }
  if (loadError === undefined) return installed(steps.next());
  try {
    steps.throw(loadError);
  } catch {
    // The install's own clean-up ran: old pins back, object closed.
  }
  return installSockLb(opts);
}

function installed(step: IteratorResult<BpfObject, InstallResult>): InstallResult {
  if (!step.done) throw new Error('installSockLb: the object was yielded twice');
  return step.value;
}

/** The install, yielding the opened object once for its caller to load (sync or async). */
function* installSteps(opts: InstallOptions): Generator<BpfObject, InstallResult, void> {
  ensureBpffsDir(opts.bpffs);
  fs.mkdirSync(linkDir(opts.bpffs), { recursive: true });
  const target = cgroupIdOf(opts.cgroupPath);
  // Pinned maps whose capacity or layout changed are replaced here (see
  // migrate.ts); a refusal throws before anything is touched.
  const migration = MapMigration.plan(bpfObjectPath('sock_lb.bpf.o'), { bpffs: opts.bpffs, maxEntries: opts.maxEntries, policies: opts.policies });
  const created = migration.unpinnedMaps();
  const obj = migration.open();
  const result: InstallResult = { attached: [], replaced: [], migrated: [], created };
  let swapped = false;
  try {
    try {
      yield obj; // loaded by the caller; a failed load is thrown in here
      migration.fill(obj);
      applySocketLbScope(obj, opts.socketLb);
      checkLinkTargets(opts.bpffs, target);
    } catch (err) {
      // No program runs on the new maps yet: the old pins go back.
      obj.close();
      migration.abort();
      throw err;
    }
    for (const [name, { attachType, hook }] of Object.entries(SOCK_LB_PROGRAMS)) {
      const prog = obj.program(name);
      const pin = linkPin(opts.bpffs, name);
      swapped = true; // from here a program may run on the new maps
      if (fs.existsSync(pin)) {
        const link = BpfLink.fromPinned(pin);
        try {
          link.update(prog.fd);
          result.replaced.push(hook);
        } finally {
          link.close();
        }
      } else {
        const link = attachCgroup(prog, opts.cgroupPath, attachType);
        try {
          link.pin(pin);
          result.attached.push(hook);
        } finally {
          link.close();
        }
      }
    }
    for (const name of OBSOLETE_MAPS) fs.rmSync(path.join(opts.bpffs, name), { force: true });
    // Every hook runs the new programs: the old maps can go.
    result.migrated = migration.finish(obj);
  } catch (err) {
    // A failure after some link was swapped leaves the old maps pinned as
    // <name>_migrating: the next install finishes the migration.
    if (!swapped) migration.abort();
    throw err;
  } finally {
    // Maps and links are pinned: closing our descriptors detaches nothing.
    obj.close();
  }
  return result;
}

/** Refuse, before anything changes, links of this bpffs attached to another cgroup. */
function checkLinkTargets(bpffs: string, target: bigint): void {
  for (const [name, { hook }] of Object.entries(SOCK_LB_PROGRAMS)) {
    const pin = linkPin(bpffs, name);
    if (!fs.existsSync(pin)) continue;
    const link = BpfLink.fromPinned(pin);
    try {
      const info = linkInfo(link.fd);
      if (info.cgroupId !== undefined && info.cgroupId !== target) {
        throw new Error(
          `${hook} is already attached to another cgroup (id ${info.cgroupId}) from ${bpffs}: ` +
            `run \`sluice detach --bpffs ${bpffs}\` first, or use another --bpffs`,
        );
      }
    } finally {
      link.close();
    }
  }
}

function applySocketLbScope(obj: BpfObject, scope: SocketLbScope | undefined): void {
  const map = sockConfigMap(obj.map(abi.SLUICE_MAP_SOCK_CFG));
  if (scope) writeSocketLbScope(map, scope);
  else if (!readSocketLbScope(map)) writeSocketLbScope(map, { mode: 'all', hostNetnsCookie: ownNetnsCookie() });
}

/** Remove the pinned links: the programs detach once no one holds them. */
export function detachSockLb(bpffs: string): string[] {
  const removed: string[] = [];
  for (const name of Object.keys(SOCK_LB_PROGRAMS)) {
    const pin = linkPin(bpffs, name);
    if (fs.existsSync(pin)) {
      fs.unlinkSync(pin);
      removed.push(SOCK_LB_PROGRAMS[name]!.hook);
    }
  }
  return removed;
}

/** Detach and remove every pinned map and the directory itself. */
export function uninstall(bpffs: string): void {
  detachSockLb(bpffs);
  if (!fs.existsSync(bpffs)) return;
  fs.rmSync(bpffs, { recursive: true, force: true });
}

export interface AttachmentStatus {
  hook: string;
  program: string;
  programId?: number;
  linkId?: number;
  cgroupId?: string;
  cgroupPath?: string;
  attached: boolean;
}

/** What is attached where, read from the pinned links alone. */
export function sockLbStatus(bpffs: string, cgroupRoot?: string): AttachmentStatus[] {
  return Object.entries(SOCK_LB_PROGRAMS).map(([name, { hook }]): AttachmentStatus => {
    const pin = linkPin(bpffs, name);
    if (!fs.existsSync(pin)) return { hook, program: name, attached: false };
    const link = BpfLink.fromPinned(pin);
    try {
      const info = linkInfo(link.fd);
      // Program details need CAP_SYS_ADMIN (bpf_prog_get_fd_by_id); without
      // it the status still says what is attached, by the name we know.
      let prog: { name: string } | undefined;
      try {
        prog = info.progId ? progInfo(info.progId) : undefined;
      } catch {
        prog = undefined;
      }
      return {
        hook,
        program: prog?.name ?? name,
        programId: info.progId,
        linkId: info.id,
        cgroupId: info.cgroupId?.toString(),
        cgroupPath: info.cgroupId !== undefined ? findCgroupById(info.cgroupId, cgroupRoot) : undefined,
        attached: true,
      };
    } finally {
      link.close();
    }
  });
}

/** A cgroup v2 id is the inode number of its directory. */
export function cgroupIdOf(cgroupPath: string): bigint {
  if (!fs.existsSync(cgroupPath) || !fs.statSync(cgroupPath).isDirectory()) {
    throw new Error(`cgroup ${cgroupPath} does not exist (a cgroup v2 directory is needed)`);
  }
  return cgroupId(cgroupPath);
}

export function cgroup2Mount(): string {
  const m = cgroupV2Mount();
  if (!m) throw new Error('no cgroup v2 mount found in /proc/self/mountinfo');
  return m;
}

/** Bounded walk of the cgroup v2 tree to turn a cgroup id back into a path. */
function findCgroupById(id: bigint, root = cgroup2Mount(), budget = { dirs: 5000 }): string | undefined {
  let st: fs.BigIntStats;
  try {
    st = fs.statSync(root, { bigint: true });
  } catch {
    return undefined;
  }
  if (st.ino === id) return root;
  if (--budget.dirs <= 0) return undefined;
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(root, { withFileTypes: true });
  } catch {
    return undefined;
  }
  for (const e of entries) {
    if (!e.isDirectory()) continue;
    const found = findCgroupById(id, path.join(root, e.name), budget);
    if (found) return found;
  }
  return undefined;
}
