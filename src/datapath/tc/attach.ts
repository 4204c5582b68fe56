// Attaching the TC programs to a device with tcx links (kernel 6.6+).
//
// Why tcx and not netlink clsact: a tcx attachment is a bpf_link, so it can be
// pinned in bpffs and outlive the agent (like the cgroup links), it is
// replaced atomically with bpf_link_update on upgrade, and it cannot be
// clobbered by another tool's `tc filter` on the same device. libbpf 1.1.2
// predates tcx (no bpf_tcx_opts), but bpf_link_create with target = ifindex
// and attach type BPF_TCX_INGRESS/EGRESS is the same syscall: the numbers are
// UAPI (AttachType.TCX_*).
//
// The device's ifindex is resolved in the calling thread's network namespace,
// so run this inside the node's netns (tests: `nsenter --net=...`).
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import koffi from 'koffi';
import { AttachType } from '../../bpf/constants';
import { check, libbpf } from '../../bpf/libbpf';
import { BpfLink, unpin } from '../../bpf/link';
import type { BpfProgram } from '../../bpf/program';

export type TcDirection = 'ingress' | 'egress';

export const TC_PROGRAMS: Record<TcDirection, string> = {
  ingress: 'sluice_tc_ingress',
  egress: 'sluice_tc_egress',
};

let ifNameToIndex: ((name: string) => number) | undefined;

/** if_nametoindex(3) in the current network namespace; throws when there is no such device. */
export function deviceIndex(name: string): number {
  ifNameToIndex ??= koffi.load('libc.so.6').func('unsigned int if_nametoindex(const char *ifname)') as (name: string) => number;
  const index = ifNameToIndex(name);
  if (!index) throw new Error(`attach TC to device ${name}: no such device in this network namespace`);
  return index;
}

/**
 * A device whose frames do not start with an Ethernet header (WireGuard, tun,
 * IPIP, GRE: packets start at the IP header). The TC programs read IPv4 at
 * offset 14, so they would misparse every packet there: such devices are
 * refused at attach instead.
 */
export class UnsupportedDeviceError extends Error {
  constructor(readonly device: string, readonly linkType: string) {
    super(`attach TC to device ${device}: link type "${linkType}" is not Ethernet; the TC programs parse an Ethernet header and would misread its packets (WireGuard, tun and IPIP devices carry bare IP): not attached`);
  }
}

/** The device's link type as iproute2 names it ("ether", "none" for tun/WireGuard, "ipip", ...), in this network namespace. */
export function deviceLinkType(device: string): string {
  let out: string;
  try {
    out = execFileSync('ip', ['-j', 'link', 'show', 'dev', device], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch {
    throw new Error(`attach TC to device ${device}: no such device in this network namespace`);
  }
  const [link] = JSON.parse(out || '[]') as Array<{ link_type?: string }>;
  return link?.link_type ?? 'unknown';
}

/** Throws UnsupportedDeviceError unless the device carries Ethernet frames. */
export function checkEthernetDevice(device: string): void {
  const linkType = deviceLinkType(device);
  if (linkType !== 'ether') throw new UnsupportedDeviceError(device, linkType);
}

/** Where the link of one device and direction is pinned. */
export function tcLinkPinPath(bpffs: string, device: string, direction: TcDirection): string {
  return path.join(bpffs, 'links', `tc-${device}-${direction}`);
}

/**
 * Attach (or, when a link is already pinned for this device and direction,
 * atomically switch to) `prog`; the link is pinned so the attachment outlives
 * this process. Returns the link, which the caller closes (the pin stays).
 */
export function attachTc(prog: BpfProgram, device: string, direction: TcDirection, bpffs: string): BpfLink {
  checkEthernetDevice(device);
  const pin = tcLinkPinPath(bpffs, device, direction);
  if (fs.existsSync(pin)) {
    const link = BpfLink.fromPinned(pin);
    try {
      if (link.info().ifindex === deviceIndex(device)) {
        link.update(prog);
        return link;
      }
    } catch (err) {
      link.close();
      throw err;
    }
    // A stale pin (the device was re-created with another ifindex): replace it.
    link.close();
    unpin(pin);
  }
  const ifindex = deviceIndex(device);
  const attachType = direction === 'ingress' ? AttachType.TCX_INGRESS : AttachType.TCX_EGRESS;
  const fd = check(libbpf().bpf_link_create(prog.fd, ifindex, attachType, null), 'bpf_link_create', `tcx ${direction} of ${device} (ifindex ${ifindex})`);
  const link = new BpfLink(fd, `tcx ${direction} link of ${device}`);
  try {
    fs.mkdirSync(path.dirname(pin), { recursive: true });
    link.pin(pin);
  } catch (err) {
    link.close();
    throw err;
  }
  return link;
}

/** Detach by removing the pin (the link ends with its last reference). */
export function detachTc(bpffs: string, device: string, direction: TcDirection): boolean {
  return unpin(tcLinkPinPath(bpffs, device, direction));
}
