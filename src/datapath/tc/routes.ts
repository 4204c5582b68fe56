// The node's IPv4 routes (main table), read once with `ip -j -4 route show`,
// and the longest-prefix match the kernel would make for an address. The
// agent uses it to find the device each backend is reached through without
// one `ip route get` per backend (thousands of processes at scale). Policy
// routing rules are not considered: the main table decides.
import { execFileSync } from 'node:child_process';
import { ip4ToNumber } from '../addr';

export interface Route {
  /** Network number and prefix length ("default" is 0/0). */
  network: number;
  prefix: number;
  /** '' for routes without a device (blackhole, unreachable, prohibit). */
  dev: string;
  /** The source address the kernel prefers on this route (`src`), if set. */
  prefsrc?: string;
  /** "unicast", "local", "blackhole", ... */
  type: string;
}

interface IpRoute { dst?: string; dev?: string; prefsrc?: string; type?: string }

/** Parse `ip -j -4 route show` output. */
export function parseRoutes(json: string): Route[] {
  const out: Route[] = [];
  for (const r of JSON.parse(json || '[]') as IpRoute[]) {
    if (!r.dst) continue;
    const [address, len] = r.dst === 'default' ? ['0.0.0.0', '0'] : r.dst.split('/');
    const prefix = len === undefined ? 32 : Number(len);
    const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
    out.push({ network: (ip4ToNumber(address!) & mask) >>> 0, prefix, dev: r.dev ?? '', prefsrc: r.prefsrc, type: r.type ?? 'unicast' });
  }
  return out;
}

export function readRoutes(): Route[] {
  return parseRoutes(execFileSync('ip', ['-j', '-4', 'route', 'show', 'table', 'main'], { encoding: 'utf8' }));
}

/** The most specific route to `address`, or undefined. */
export function routeFor(routes: Route[], address: string): Route | undefined {
  const a = ip4ToNumber(address);
  let best: Route | undefined;
  for (const r of routes) {
    const mask = r.prefix === 0 ? 0 : (0xffffffff << (32 - r.prefix)) >>> 0;
    if (((a & mask) >>> 0) === r.network && (!best || r.prefix > best.prefix)) best = r;
  }
  return best;
}
