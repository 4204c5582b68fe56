// The SNAT port range must not capture the node's own connections: a local
// socket that picked port P as its source and a SNATed flow on P towards the
// same backend would share a tuple. The agent adds the range to
// net.ipv4.ip_local_reserved_ports, which keeps the kernel from handing out
// those ports for connect()/bind(0). The sysctl is per network namespace:
// the agent writes it in the namespace it runs in (the host's on a real
// node; a test's node namespace in the tests). Ports already listed stay.

import * as fs from 'node:fs';

export const RESERVED_PORTS_SYSCTL = '/proc/sys/net/ipv4/ip_local_reserved_ports';

type PortRange = readonly [number, number];

/** "1000,61000-65535" -> [[1000, 1000], [61000, 65535]] */
export function parsePortRanges(text: string): PortRange[] {
  return text.split(',').map((s) => s.trim()).filter(Boolean).map((part) => {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    const lo = Number(m?.[1]);
    const hi = Number(m?.[2] ?? m?.[1]);
    if (!m || lo < 1 || hi > 65535 || lo > hi) throw new Error(`ip_local_reserved_ports: ${JSON.stringify(part)} is not a port or port range`);
    return [lo, hi] as const;
  });
}

/** Sorted, overlapping and adjacent ranges merged, in the sysctl's own format. */
export function formatPortRanges(ranges: readonly PortRange[]): string {
  const merged: Array<[number, number]> = [];
  for (const [lo, hi] of [...ranges].sort((a, b) => a[0] - b[0])) {
    const last = merged[merged.length - 1];
    if (last && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else merged.push([lo, hi]);
  }
  return merged.map(([lo, hi]) => (lo === hi ? `${lo}` : `${lo}-${hi}`)).join(',');
}

/** The sysctl's value with [min, max] added. */
export function withReservedRange(current: string, min: number, max: number): string {
  return formatPortRanges([...parsePortRanges(current), [min, max]]);
}

/**
 * Reserve [min, max] in this network namespace. Returns the value written
 * (unchanged when the range was already reserved). Throws naming the sysctl
 * when it cannot be read or written.
 */
export function reserveSnatPorts(min: number, max: number): string {
  let current: string;
  try {
    current = fs.readFileSync(RESERVED_PORTS_SYSCTL, 'utf8').trim();
  } catch (err) {
    throw new Error(`reserve SNAT ports ${min}-${max}: cannot read ${RESERVED_PORTS_SYSCTL}: ${(err as Error).message}`);
  }
  const next = withReservedRange(current, min, max);
  if (next === formatPortRanges(parsePortRanges(current))) return current;
  try {
    fs.writeFileSync(RESERVED_PORTS_SYSCTL, next);
  } catch (err) {
    throw new Error(`reserve SNAT ports ${min}-${max}: cannot write ${RESERVED_PORTS_SYSCTL}: ${(err as Error).message}`);
  }
  return next;
}
