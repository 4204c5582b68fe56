// What `sluice status` shows about XDP: each device with a pinned XDP link
// (its mode comes from the pin name) and the per-device counters; counters of
// a device whose link is gone (XDP turned off) show as mode "off".
import * as fs from 'node:fs';
import { listXdp, openXdpMaps, readXdpStats, xdpMapsPresent, type XdpDeviceStats } from './xdp';

export interface XdpDeviceStatus {
  device: string;
  mode: 'native' | 'generic' | 'off';
  ifindex: number;
  linkId?: number;
  programId?: number;
  packets: string;
  passed: string;
  tx: string;
  redirected: string;
  dropped: string;
  fallback: string;
}

export function xdpStatus(bpffs: string): XdpDeviceStatus[] {
  if (!fs.existsSync(bpffs)) return [];
  const links = listXdp(bpffs);
  let stats: XdpDeviceStats[] = [];
  if (xdpMapsPresent(bpffs)) {
    const maps = openXdpMaps(bpffs);
    try {
      stats = readXdpStats(maps.stats, maps.passed, links.map((l) => l.ifindex));
    } finally {
      maps.close();
    }
  }
  const counters = (s?: XdpDeviceStats) => ({
    packets: String(s?.packets ?? 0n), passed: String(s?.passed ?? 0n), tx: String(s?.tx ?? 0n),
    redirected: String(s?.redirected ?? 0n), dropped: String(s?.dropped ?? 0n), fallback: String(s?.fallback ?? 0n),
  });
  const rows: XdpDeviceStatus[] = links.map((l) => ({
    device: l.device, mode: l.mode, ifindex: l.ifindex, linkId: l.linkId, programId: l.programId,
    ...counters(stats.find((s) => s.ifindex === l.ifindex)),
  }));
  const linked = new Set(links.map((l) => l.ifindex));
  for (const s of stats) {
    if (!linked.has(s.ifindex)) rows.push({ device: `(ifindex ${s.ifindex})`, mode: 'off', ifindex: s.ifindex, ...counters(s) });
  }
  return rows;
}
