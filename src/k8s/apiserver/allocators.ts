// ClusterIP and NodePort allocators. Each allocation records its owner
// ("namespace/name") so that an update of the same Service can keep what it
// holds, and a port may serve TCP and UDP of one Service (as the real
// allocator allows). Allocation is next-fit: a freed value is not handed out
// again until the range wraps, so a deleted Service's VIP is not immediately
// reused by the next one.

import { ApiError } from './status';
import { Cidr, cidrContains, formatIp, IpFamily, parseCidr, parseIp } from './ip';

export class ServiceIpAllocator {
  readonly cidr: Cidr;
  private readonly owners = new Map<bigint, string>();
  private cursor = 2n;

  constructor(cidrText: string) {
    this.cidr = parseCidr(cidrText);
    if (this.cidr.size < 4n) throw new Error(`service CIDR "${cidrText}": too small to allocate from`);
  }

  get family(): IpFamily {
    return this.cidr.family;
  }

  /** Offsets 0 and size-1 (network, broadcast) are never allocated. */
  contains(ip: string): boolean {
    const parsed = parseIp(ip);
    if (!parsed || !cidrContains(this.cidr, parsed)) return false;
    const offset = parsed.value - this.cidr.base;
    return offset > 0n && offset < this.cidr.size - 1n;
  }

  /** The first usable address, reserved by convention for default/kubernetes. */
  get kubernetesServiceIp(): string {
    return formatIp({ family: this.cidr.family, value: this.cidr.base + 1n });
  }

  ownerOf(ip: string): string | undefined {
    const parsed = parseIp(ip);
    return parsed ? this.owners.get(parsed.value) : undefined;
  }

  /** Claims a specific in-range address; false when another owner holds it. */
  claim(ip: string, owner: string): boolean {
    const parsed = parseIp(ip);
    if (!parsed || !this.contains(ip)) throw new Error(`service IP ${ip} is not in ${this.cidr.text}`);
    const current = this.owners.get(parsed.value);
    if (current !== undefined && current !== owner) return false;
    this.owners.set(parsed.value, owner);
    return true;
  }

  /** Next free address after the cursor, skipping offset 1 (the kubernetes Service's). */
  allocate(owner: string): string {
    const usable = this.cidr.size - 3n; // minus network, broadcast, .1
    if (BigInt(this.owners.size) >= usable) {
      throw new ApiError(500, 'InternalError', `failed to allocate a service IP for ${owner}: range ${this.cidr.text} is full`);
    }
    for (let tries = 0n; tries <= usable; tries++) {
      const offset = this.cursor;
      this.cursor = this.cursor + 1n >= this.cidr.size - 1n ? 2n : this.cursor + 1n;
      const value = this.cidr.base + offset;
      if (!this.owners.has(value)) {
        this.owners.set(value, owner);
        return formatIp({ family: this.cidr.family, value });
      }
    }
    throw new ApiError(500, 'InternalError', `failed to allocate a service IP for ${owner}: range ${this.cidr.text} is full`);
  }

  release(ip: string, owner: string): void {
    const parsed = parseIp(ip);
    if (parsed && this.owners.get(parsed.value) === owner) this.owners.delete(parsed.value);
  }
}

export class NodePortAllocator {
  readonly min: number;
  readonly max: number;
  private readonly owners = new Map<number, string>();
  private cursor: number;

  constructor(range: string) {
    const m = /^(\d+)-(\d+)$/.exec(range.trim());
    const min = Number(m?.[1]);
    const max = Number(m?.[2]);
    if (!m || min < 1 || max > 65535 || min > max) throw new Error(`node port range "${range}": expected "min-max" within 1-65535`);
    this.min = min;
    this.max = max;
    this.cursor = min;
  }

  contains(port: number): boolean {
    return Number.isInteger(port) && port >= this.min && port <= this.max;
  }

  ownerOf(port: number): string | undefined {
    return this.owners.get(port);
  }

  claim(port: number, owner: string): boolean {
    const current = this.owners.get(port);
    if (current !== undefined && current !== owner) return false;
    this.owners.set(port, owner);
    return true;
  }

  allocate(owner: string): number {
    const size = this.max - this.min + 1;
    for (let tries = 0; tries < size; tries++) {
      const port = this.cursor;
      this.cursor = port >= this.max ? this.min : port + 1;
      if (!this.owners.has(port)) {
        this.owners.set(port, owner);
        return port;
      }
    }
    throw new ApiError(500, 'InternalError', `failed to allocate a node port for ${owner}: range ${this.min}-${this.max} is full`);
  }

  release(port: number, owner: string): void {
    if (this.owners.get(port) === owner) this.owners.delete(port);
  }
}
