// XDP north-south acceleration (issue 17): loading build/xdp_lb.bpf.o next to
// tc_lb (maps shared by pin), attaching it to devices with pinned XDP links,
// the frontend-address set its first check reads, and its per-device counters.
//
// Links are pinned as links/xdp-<mode>-<device>: the kernel's link info has
// the ifindex but not the mode, and `sluice status` shows both.
import * as fs from 'node:fs';
import * as path from 'node:path';
import os from 'node:os';
import { AttachType } from '../../bpf/constants';
import { BpfError, check, libbpf } from '../../bpf/libbpf';
import { BpfLink, unpin } from '../../bpf/link';
import { BpfMap } from '../../bpf/map';
import type { BpfObject } from '../../bpf/object';
import * as abi from '../../abi/generated';
import { bytesToIp6, ip4ToNumber, ip6ToBytes, isIp6 } from '../addr';
import { bitSlot, readWords, writeWords } from '../bitmap';
import { loadMigrated, type MigratedMap } from '../migrate';
import { execFileSync } from 'node:child_process';
import { checkEthernetDevice, deviceIndex } from '../tc/attach';
import { TypedMap, u32Codec, u8Codec } from '../typedMap';
import { nodeIpMap } from '../sockConfig';

const { ENOLINK, EOPNOTSUPP, EINVAL } = os.constants.errno;

export type XdpMode = 'native' | 'generic';
export type XdpModeSetting = XdpMode | 'off' | 'auto';
export const XDP_MODES: readonly XdpModeSetting[] = ['native', 'generic', 'off', 'auto'];

export function parseXdpMode(value: string, what: string): XdpModeSetting {
  if (!(XDP_MODES as readonly string[]).includes(value)) throw new Error(`${what}: ${JSON.stringify(value)} is not one of ${XDP_MODES.join(', ')}`);
  return value as XdpModeSetting;
}

/** UAPI XDP_FLAGS_*: the attach mode. */
const XDP_FLAGS: Record<XdpMode, number> = { generic: 2 /* SKB_MODE */, native: 4 /* DRV_MODE */ };
/** struct bpf_link_create_opts up to and including `flags` (libbpf reads only what sz covers). */
const LINK_CREATE_OPTS_SIZE = 16;

export interface XdpAttachment {
  device: string;
  mode: XdpMode;
  ifindex: number;
  linkId: number;
  programId: number;
}

function linksDir(bpffs: string): string {
  return path.join(bpffs, 'links');
}

/** Where the link of `device` is pinned; another program than the LB one
 * (sluice_xdp_pass on a veth peer) is pinned apart, never swapped or listed. */
export function xdpLinkPinPath(bpffs: string, device: string, mode: XdpMode, program: string = abi.SLUICE_PROG_XDP): string {
  return path.join(linksDir(bpffs), program === abi.SLUICE_PROG_XDP ? `xdp-${mode}-${device}` : `xdpaux-${program}-${mode}-${device}`);
}

/** Pinned XDP links of this bpffs: device and mode from the pin name. */
function pinnedXdpLinks(bpffs: string): Array<{ pin: string; device: string; mode: XdpMode }> {
  const dir = linksDir(bpffs);
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir).flatMap((name) => {
    const m = /^xdp-(native|generic)-(.+)$/.exec(name);
    return m ? [{ pin: path.join(dir, name), mode: m[1] as XdpMode, device: m[2]! }] : [];
  });
}

/**
 * Load xdp_lb with its maps reused from (or pinned to) `bpffs`, migrating
 * pinned maps whose capacity or layout changed like loadTcObject does; pinned
 * XDP links switch to the new program before old maps go.
 */
export function loadXdpObject(objectPath: string, bpffs: string, opts: { maxEntries?: Record<string, number>; onMigrated?: (m: MigratedMap[]) => void } = {}): BpfObject {
  return loadMigrated(objectPath, bpffs, opts, (obj) => {
    // The new program skips every address whose prefilter bit is clear: the
    // bits of the pinned sets first (a prefilter new to these pins starts empty).
    const maps = openXdpMaps(bpffs);
    try {
      refreshPrefilter(maps);
    } finally {
      maps.close();
    }
    for (const { pin } of pinnedXdpLinks(bpffs)) swapLink(pin, obj);
  });
}

function swapLink(pin: string, obj: BpfObject): void {
  const link = BpfLink.fromPinned(pin);
  try {
    link.update(obj.program(abi.SLUICE_PROG_XDP));
  } catch (err) {
    if (!(err instanceof BpfError && err.errno === ENOLINK)) throw err;
    unpin(pin); // its device is gone
  } finally {
    link.close();
  }
}

/** The device's kind as iproute2 names it (veth, bond, ...; '' for a plain NIC). */
export function deviceKind(device: string): string {
  const [link] = JSON.parse(execFileSync('ip', ['-j', '-d', 'link', 'show', 'dev', device], { encoding: 'utf8' }) || '[]') as Array<{ linkinfo?: { info_kind?: string } }>;
  return link?.linkinfo?.info_kind ?? '';
}

/**
 * The modes 'auto' tries, in order. A veth is the exception to "native
 * first": frames of local sockets reach its peer with their TCP/UDP checksum
 * still to be finished (CHECKSUM_PARTIAL), which native XDP cannot see and so
 * would corrupt when it rewrites them; generic XDP runs on the skb, after the
 * kernel has finished it. (A NIC never receives such frames.)
 */
export function autoModes(device: string): XdpMode[] {
  return deviceKind(device) === 'veth' ? ['generic'] : ['native', 'generic'];
}

function createLink(progFd: number, ifindex: number, mode: XdpMode): number {
  const opts = Buffer.alloc(LINK_CREATE_OPTS_SIZE);
  opts.writeBigUInt64LE(BigInt(LINK_CREATE_OPTS_SIZE), 0);
  opts.writeUInt32LE(XDP_FLAGS[mode], 8);
  return libbpf().bpf_link_create(progFd, ifindex, AttachType.XDP, opts);
}

/**
 * Attach `programName` of `obj` to `device` in `mode` ('auto': native, else
 * generic when the driver has no XDP support), pinned; a pin of the same
 * mode is updated in place, one of the other mode replaced.
 */
export function attachXdp(obj: BpfObject, device: string, setting: XdpMode | 'auto', bpffs: string, programName: string = abi.SLUICE_PROG_XDP): XdpAttachment {
  checkEthernetDevice(device);
  const ifindex = deviceIndex(device);
  const prog = obj.program(programName);
  const modes: XdpMode[] = setting === 'auto' ? autoModes(device) : [setting];
  const main = programName === abi.SLUICE_PROG_XDP;
  if (!main) for (const mode of modes) detachPinned(xdpLinkPinPath(bpffs, device, mode, programName));
  for (const p of main ? pinnedXdpLinks(bpffs).filter((l) => l.device === device) : []) {
    const link = BpfLink.fromPinned(p.pin);
    try {
      if (modes.includes(p.mode) && link.info().ifindex === ifindex) {
        link.update(prog);
        return describe(link, device, p.mode);
      }
    } finally {
      link.close();
    }
    detachPinned(p.pin); // another mode, or a stale pin of a re-created device
  }
  let lastErr = 0;
  for (const mode of modes) {
    const fd = createLink(prog.fd, ifindex, mode);
    if (fd < 0) {
      lastErr = -fd;
      if (setting === 'auto' && (lastErr === EOPNOTSUPP || lastErr === EINVAL)) continue;
      break;
    }
    const link = new BpfLink(fd, `xdp ${mode} link of ${device}`);
    try {
      fs.mkdirSync(linksDir(bpffs), { recursive: true });
      link.pin(xdpLinkPinPath(bpffs, device, mode, programName));
      return describe(link, device, mode);
    } finally {
      link.close();
    }
  }
  return check(-lastErr, 'bpf_link_create', `xdp ${setting} on ${device} (ifindex ${ifindex})`) as never;
}

function describe(link: BpfLink, device: string, mode: XdpMode): XdpAttachment {
  const info = link.info();
  return { device, mode, ifindex: info.ifindex ?? 0, linkId: info.id, programId: info.progId };
}

/**
 * Detach a pinned link now and remove its pin. Unpinning alone ends the link
 * only once the kernel releases its last reference, which may come later:
 * an attach of another mode right after would still find the device busy
 * (EEXIST), and "off" would not be off yet.
 */
function detachPinned(pin: string): boolean {
  if (!fs.existsSync(pin)) return false;
  const link = BpfLink.fromPinned(pin);
  try {
    link.detach();
  } catch (err) {
    if (!(err instanceof BpfError && err.errno === ENOLINK)) throw err; // its device is gone
  } finally {
    link.close();
  }
  return unpin(pin);
}

/** Detach XDP from `device` (any mode): the links end, their pins go. */
export function detachXdp(bpffs: string, device: string): boolean {
  let any = false;
  for (const p of pinnedXdpLinks(bpffs)) if (p.device === device) any = detachPinned(p.pin) || any;
  return any;
}

/** The XDP links of this bpffs, as pinned (a link whose device vanished shows ifindex 0). */
export function listXdp(bpffs: string): XdpAttachment[] {
  return pinnedXdpLinks(bpffs).map((p) => {
    const link = BpfLink.fromPinned(p.pin);
    try {
      return describe(link, p.device, p.mode);
    } finally {
      link.close();
    }
  });
}

// ---- maps ----

const be32Codec = {
  size: 4,
  encode(value: number, buf = Buffer.alloc(4), off = 0) {
    buf.writeUInt32BE(value >>> 0, off);
    return buf;
  },
  decode: (buf: Buffer, off = 0) => buf.readUInt32BE(off),
};

export interface XdpMaps {
  /** North-south frontend addresses (the program's first check). */
  frontends: TypedMap<number, number>;
  /** The IPv6 ones (absent in pins of builds before XDP served IPv6). */
  frontends6?: TypedMap<abi.Lb6NodeIp, number>;
  /** Devices XDP may redirect to (DEVMAP_HASH: ifindex -> ifindex). */
  targets: TypedMap<number, number>;
  /** The node's NodePort addresses (sluice_nodeip4, shared with the socket and TC objects). */
  nodeIps: TypedMap<number, number>;
  stats: BpfMap;
  /** The prefilter bitmap in front of both sets (u64 words; absent in pins of builds before it). */
  prefilter?: BpfMap;
  /** Non-Service packets passed, per-CPU array by ifindex (absent in pins of builds before it). */
  passed?: BpfMap;
  close(): void;
}

export function xdpMapsPresent(bpffs: string): boolean {
  return fs.existsSync(path.join(bpffs, abi.SLUICE_MAP_XDP_STATS));
}

export function openXdpMaps(bpffs: string): XdpMaps {
  const opened: BpfMap[] = [];
  const open = (name: string) => {
    const m = BpfMap.fromPinned(path.join(bpffs, name));
    opened.push(m);
    return m;
  };
  try {
    return {
      frontends: new TypedMap(open(abi.SLUICE_MAP_XDP_FE4), be32Codec, u8Codec),
      ...(fs.existsSync(path.join(bpffs, abi.SLUICE_MAP_XDP_FE6))
        ? { frontends6: new TypedMap(open(abi.SLUICE_MAP_XDP_FE6), abi.lb6_node_ipCodec, u8Codec) } : {}),
      targets: new TypedMap(open(abi.SLUICE_MAP_XDP_TX), u32Codec, u32Codec),
      nodeIps: nodeIpMap(open(abi.SLUICE_MAP_NODEIP4)),
      stats: open(abi.SLUICE_MAP_XDP_STATS),
      ...(fs.existsSync(path.join(bpffs, abi.SLUICE_MAP_XDP_NP)) ? { passed: open(abi.SLUICE_MAP_XDP_NP) } : {}),
      ...(fs.existsSync(path.join(bpffs, abi.SLUICE_MAP_XDP_PF)) ? { prefilter: open(abi.SLUICE_MAP_XDP_PF) } : {}),
      close: () => opened.forEach((m) => m.close()),
    };
  } catch (err) {
    for (const m of opened) m.close();
    throw err;
  }
}

const NORTH_SOUTH = abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXTERNAL_IP | abi.LB_SVC_FLAG_LOADBALANCER;

/** The maps a frontend-address sync writes: the two sets and the prefilter in front of them. */
export type XdpFrontendMaps = Pick<XdpMaps, 'frontends' | 'frontends6' | 'prefilter'>;

/**
 * The frontend-address set XDP checks first (after the prefilter). An IPv4
 * NodePort is one wildcard frontend, 0.0.0.0:<port> (bpf/lib/nodeport.h):
 * the node's NodePort addresses stand for it. Returns what changed.
 */
export function syncFrontendAddresses(maps: XdpFrontendMaps, frontends: Iterable<{ address: string; flags: number }>, nodePortAddresses: Iterable<number> = []): { added: number; removed: number } {
  const wanted = new Set<number>();
  for (const f of frontends) {
    if (!(f.flags & NORTH_SOUTH) || f.address.includes(':')) continue;
    const a = ip4ToNumber(f.address);
    if (a !== 0) wanted.add(a);
    else for (const n of nodePortAddresses) wanted.add(n);
  }
  const map = maps.frontends;
  const present = new Set([...map.entries()].map(([k]) => k));
  const added = [...wanted].filter((a) => !present.has(a));
  const removed = [...present].filter((a) => !wanted.has(a));
  if (maps.prefilter) setPrefilterBits(maps.prefilter, added); // make
  for (const a of added) map.set(a, 1);
  for (const a of removed) map.delete(a);
  if (maps.prefilter) refreshPrefilter(maps); // ... before break
  return { added: added.length, removed: removed.length };
}

/**
 * The IPv6 frontend-address set (sluice_xdp_fe6): the addresses of the IPv6
 * north-south frontends given. IPv6 NodePorts are programmed per node
 * address (no wildcard), so they are listed as they are.
 */
export function syncFrontendAddresses6(maps: XdpFrontendMaps, frontends: Iterable<{ address: string; flags: number }>): { added: number; removed: number } {
  const map = maps.frontends6;
  if (!map) return { added: 0, removed: 0 };
  const wanted = new Set([...frontends].filter((f) => (f.flags & NORTH_SOUTH) && isIp6(f.address)).map((f) => bytesToIp6(ip6ToBytes(f.address))));
  const present = new Set([...map.entries()].map(([k]) => bytesToIp6(k.address)));
  const added = [...wanted].filter((a) => !present.has(a));
  const removed = [...present].filter((a) => !wanted.has(a));
  if (maps.prefilter) setPrefilterBits(maps.prefilter, added); // make
  for (const a of added) map.set({ address: ip6ToBytes(a) }, 1);
  for (const a of removed) map.delete({ address: ip6ToBytes(a) });
  if (maps.prefilter) refreshPrefilter(maps); // ... before break
  return { added: added.length, removed: removed.length };
}

/**
 * The prefilter slot of a frontend address (native/sluice_abi.h, as
 * lb_xdp_prefilter computes it): IPv4 as ip4ToNumber gives it, IPv6 as text.
 */
export function prefilterSlot(address: number | string): number {
  let h: number;
  if (typeof address === 'number') {
    h = address >>> 0;
  } else {
    const b = ip6ToBytes(address); // ntohl(w0 ^ w1 ^ w2 ^ w3): the big-endian words' XOR
    h = (b.readUInt32BE(0) ^ b.readUInt32BE(4) ^ b.readUInt32BE(8) ^ b.readUInt32BE(12)) >>> 0;
  }
  return bitSlot(h, abi.SLUICE_XDP_PF_BITS_LOG2);
}

/** The prefilter's words as the kernel holds them. */
export function readPrefilter(m: BpfMap): BigUint64Array {
  return readWords(m, abi.SLUICE_XDP_PF_WORDS);
}

function withSlot(words: BigUint64Array, slot: number): void {
  words[slot >>> 6]! |= 1n << BigInt(slot & 63);
}

/** Make: set the bits of `addresses`, keeping every bit already set (a word only gains bits). */
function setPrefilterBits(m: BpfMap, addresses: Array<number | string>): void {
  if (addresses.length === 0) return;
  const current = readPrefilter(m);
  const next = current.slice();
  for (const a of addresses) withSlot(next, prefilterSlot(a));
  writeWords(m, current, next);
}

/**
 * Break (and repair): the prefilter holds exactly the bits of the addresses
 * the two sets hold now. Called after removals, so a cleared bit belongs to
 * no address left in either set (a word only loses bits of removed ones).
 */
export function refreshPrefilter(maps: XdpFrontendMaps): void {
  if (!maps.prefilter) return;
  const next = new BigUint64Array(abi.SLUICE_XDP_PF_WORDS);
  for (const [a] of maps.frontends.entries()) withSlot(next, prefilterSlot(a));
  for (const [k] of maps.frontends6?.entries() ?? []) withSlot(next, prefilterSlot(bytesToIp6(k.address)));
  writeWords(maps.prefilter, readPrefilter(maps.prefilter), next);
}

export type XdpDeviceStats = { ifindex: number } & abi.LbXdpStats;

/**
 * Per-device counters, summed over CPUs: the hash (Service packets, and
 * devices of an ifindex beyond the array) plus, for the devices of the hash
 * and those in `ifindexes`, the non-Service packets of the per-CPU array
 * (in `passed` and `packets`). A device with no packet at all is left out.
 */
export function readXdpStats(stats: BpfMap, passed?: BpfMap, ifindexes: Iterable<number> = []): XdpDeviceStats[] {
  const byIfindex = new Map<number, XdpDeviceStats>();
  const zero = (ifindex: number): XdpDeviceStats => ({ ifindex, packets: 0n, passed: 0n, tx: 0n, redirected: 0n, dropped: 0n, fallback: 0n });
  for (const key of stats.keys()) {
    const sum = zero(key.readUInt32LE(0));
    for (const v of stats.lookupPerCpu(key) ?? []) {
      const s = abi.lb_xdp_statsCodec.decode(v);
      for (const k of Object.keys(s) as Array<keyof abi.LbXdpStats>) sum[k] += s[k];
    }
    byIfindex.set(sum.ifindex, sum);
  }
  if (passed) {
    for (const ifindex of new Set([...byIfindex.keys(), ...ifindexes])) {
      if (ifindex <= 0 || ifindex >= passed.maxEntries) continue;
      const key = Buffer.alloc(4);
      key.writeUInt32LE(ifindex);
      let n = 0n;
      for (const v of passed.lookupPerCpu(key) ?? []) n += v.readBigUInt64LE(0);
      if (n === 0n) continue;
      const sum = byIfindex.get(ifindex) ?? zero(ifindex);
      sum.passed += n;
      sum.packets += n;
      byIfindex.set(ifindex, sum);
    }
  }
  return [...byIfindex.values()].sort((a, b) => a.ifindex - b.ifindex);
}
