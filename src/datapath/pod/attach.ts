// The pod-veth programs (build/pod_lb.bpf.o): pinned once per node, attached
// to each pod's host veth by the CNI plugin (native/sluice-cni.c), which
// follows the same pin layout:
//
//   <bpffs>/progs/sluice_pod_ingress, <bpffs>/progs/sluice_pod_egress
//   <bpffs>/links/pod-<container id>-<ifname>-<ingress|egress>   (tcx links)
//
// The agent calls pinPodPrograms at start-up: it loads the object with the
// node's pinned maps, pins (atomically replaces) both programs and swaps the
// new programs into every pod link already there (bpf_link_update), so an
// upgrade never leaves a pod without translation. attachPodVeth does what the
// plugin's ADD does; tests and the bench use it where no CNI runtime runs.
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as abi from '../../abi/generated';
import { AttachType, LinkType } from '../../bpf/constants';
import { check, libbpf } from '../../bpf/libbpf';
import { BpfLink, unpin } from '../../bpf/link';
import { MapMigration, type MigratedMap } from '../migrate';
import { deviceIndex, type TcDirection } from '../tc/attach';

export const POD_PROGRAMS: Record<TcDirection, string> = {
  ingress: abi.SLUICE_PROG_POD_INGRESS,
  egress: abi.SLUICE_PROG_POD_EGRESS,
};

const DIRECTIONS: TcDirection[] = ['egress', 'ingress'];

export function podProgramPinPath(bpffs: string, direction: TcDirection): string {
  return path.join(bpffs, 'progs', POD_PROGRAMS[direction]);
}

/** Same name as the CNI plugin's pins (native/sluice-cni.c link_pin_path): one pod interface, one direction. */
export function podLinkPinPath(bpffs: string, containerId: string, ifName: string, direction: TcDirection): string {
  if (containerId.includes('/') || ifName.includes('/')) {
    throw new Error(`pod link name for ${containerId}/${ifName}: container id and interface name must not contain '/'`);
  }
  // bpffs refuses names with a dot; container ids and ifnames may have one.
  return path.join(bpffs, 'links', `pod-${containerId}-${ifName}-${direction}`.replace(/\./g, '_'));
}

function openPinned(pin: string, what: string): number {
  return check(libbpf().bpf_obj_get(pin), 'bpf_obj_get', `${what} at ${pin}`);
}

export interface PinnedPodPrograms {
  ingressProgId: number;
  egressProgId: number;
  /** Pod links whose program was swapped for the new one. */
  linksUpdated: number;
}

/**
 * Load build/pod_lb.bpf.o with the maps pinned in `bpffs`, pin both
 * programs (replacing older pins by rename, which is atomic in bpffs) and
 * update every pod link under <bpffs>/links to the new programs.
 */
export function pinPodPrograms(objectPath: string, bpffs: string, maxEntries?: Record<string, number>): PinnedPodPrograms & { migrated: MigratedMap[] } {
  // Maps whose capacity or layout changed are migrated (../migrate.ts); the
  // pod links are switched below, before the old maps are unpinned.
  const migration = MapMigration.plan(objectPath, { bpffs, maxEntries });
  const obj = migration.open();
  try {
    try {
      obj.load();
      migration.fill(obj);
    } catch (err) {
      obj.close();
      migration.abort();
      throw err;
    }
    fs.mkdirSync(path.join(bpffs, 'progs'), { recursive: true });
    const ids: Record<TcDirection, number> = { ingress: 0, egress: 0 };
    for (const direction of DIRECTIONS) {
      const prog = obj.program(POD_PROGRAMS[direction]);
      const pin = podProgramPinPath(bpffs, direction);
      const tmp = `${pin}_new`; // bpffs refuses names with a dot
      unpin(tmp);
      check(libbpf().bpf_obj_pin(prog.fd, tmp), 'bpf_obj_pin', `${POD_PROGRAMS[direction]} at ${tmp}`);
      fs.renameSync(tmp, pin);
      ids[direction] = prog.info().id;
    }
    let linksUpdated = 0;
    const linksDir = path.join(bpffs, 'links');
    const names = fs.existsSync(linksDir) ? fs.readdirSync(linksDir) : [];
    for (const name of names) {
      const m = /^pod-.+-(ingress|egress)$/.exec(name);
      if (!m) continue;
      const link = BpfLink.fromPinned(path.join(linksDir, name));
      try {
        link.update(obj.program(POD_PROGRAMS[m[1] as TcDirection]));
        linksUpdated++;
      } finally {
        link.close();
      }
    }
    const migrated = migration.finish(obj);
    return { ingressProgId: ids.ingress, egressProgId: ids.egress, linksUpdated, migrated };
  } finally {
    obj.close();
  }
}

export interface PodAttachment {
  direction: TcDirection;
  linkId: number;
  programId: number;
  ifindex: number;
  pin: string;
}

/**
 * Attach the pinned pod programs to `hostVeth` (resolved in the calling
 * thread's network namespace) with pinned tcx links, egress first so replies
 * are restored before the first request is translated. A link already pinned
 * for this pod on the same device gets the program swapped in.
 */
export function attachPodVeth(bpffs: string, hostVeth: string, containerId: string, ifName: string): PodAttachment[] {
  const ifindex = deviceIndex(hostVeth);
  fs.mkdirSync(path.join(bpffs, 'links'), { recursive: true });
  const out: PodAttachment[] = [];
  for (const direction of DIRECTIONS) {
    const progPin = podProgramPinPath(bpffs, direction);
    const progFd = openPinned(progPin, `pod program ${POD_PROGRAMS[direction]} (pinPodPrograms pins it)`);
    try {
      const pin = podLinkPinPath(bpffs, containerId, ifName, direction);
      let link: BpfLink | undefined;
      if (fs.existsSync(pin)) {
        const old = BpfLink.fromPinned(pin);
        const info = old.info();
        if (info.type === LinkType.TCX && info.ifindex === ifindex) {
          old.update(progFd);
          link = old;
        } else {
          old.close();
          unpin(pin);
        }
      }
      if (!link) {
        const attachType = direction === 'ingress' ? AttachType.TCX_INGRESS : AttachType.TCX_EGRESS;
        const fd = check(libbpf().bpf_link_create(progFd, ifindex, attachType, null), 'bpf_link_create',
          `tcx ${direction} of pod veth ${hostVeth} (ifindex ${ifindex})`);
        link = new BpfLink(fd, `pod ${direction} link of ${hostVeth}`);
        try {
          link.pin(pin);
        } catch (err) {
          link.close();
          throw err;
        }
      }
      try {
        const info = link.info();
        out.push({ direction, linkId: info.id, programId: info.progId, ifindex: info.ifindex ?? 0, pin });
      } finally {
        link.close();
      }
    } finally {
      fs.closeSync(progFd);
    }
  }
  return out;
}

/** Remove a pod's links (the CNI plugin's DEL); true when something was pinned. */
export function detachPodVeth(bpffs: string, containerId: string, ifName: string): boolean {
  let removed = false;
  for (const direction of DIRECTIONS) removed = unpin(podLinkPinPath(bpffs, containerId, ifName, direction)) || removed;
  return removed;
}
