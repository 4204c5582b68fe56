// The node's routes (main table), read once with `ip -j -4 route show` and
// `ip -j -6 route show`, and the longest-prefix match the kernel would make
// for an address. The agent uses it to find the device each backend is
// reached through without one `ip route get` per backend (thousands of
// processes at scale). Policy routing rules are not considered: the main
// table decides.
import { execFileSync } from 'node:child_process';
import { ip4ToNumber, ip6ToBytes } from '../addr';

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

/** An IPv6 route: the network as a 128-bit number; among routes of one prefix the lowest metric wins. */
export interface Route6 extends Omit<Route, 'network'> {
  network: bigint;
  metric: number;
}

interface IpRoute6 extends IpRoute { metric?: number }

const ALL128 = (1n << 128n) - 1n;
const mask6 = (prefix: number): bigint => (prefix === 0 ? 0n : (ALL128 << BigInt(128 - prefix)) & ALL128);
const ip6ToBig = (address: string): bigint => BigInt(`0x${ip6ToBytes(address).toString('hex')}`);

/** Parse `ip -j -6 route show` output (multipath routes, without one device, are skipped). */
export function parseRoutes6(json: string): Route6[] {
  const out: Route6[] = [];
  for (const r of JSON.parse(json || '[]') as IpRoute6[]) {
    if (!r.dst) continue;
    const [address, len] = r.dst === 'default' ? ['::', '0'] : r.dst.split('/');
    const prefix = len === undefined ? 128 : Number(len);
    const type = r.type ?? 'unicast';
    if (type === 'unicast' && !r.dev) continue;
    out.push({ network: ip6ToBig(address!) & mask6(prefix), prefix, dev: r.dev ?? '', prefsrc: r.prefsrc, type, metric: r.metric ?? 0 });
  }
  return out;
}

export function readRoutes6(): Route6[] {
  return parseRoutes6(execFileSync('ip', ['-j', '-6', 'route', 'show', 'table', 'main'], { encoding: 'utf8' }));
}

/** The most specific IPv6 route to `address` (lowest metric among equals), or undefined. */
export function routeFor6(routes: Route6[], address: string): Route6 | undefined {
  const a = ip6ToBig(address);
  let best: Route6 | undefined;
  for (const r of routes) {
    if ((a & mask6(r.prefix)) !== r.network) continue;
    if (!best || r.prefix > best.prefix || (r.prefix === best.prefix && r.metric < best.metric)) best = r;
  }
  return best;
}
