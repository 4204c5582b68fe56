// The data-path modes the bench compares. Each owns one client namespace (and
// for Sluice a cgroup and bpffs directory), loads S Services into it within a
// time budget, says where a client sends its traffic, and unloads.
import { inNetns, RunError } from './exec';
import type { ClientNs } from './harness';
import { IPTABLES_EMPTY, iptablesRestoreInput } from './kube-iptables';
import { NFT_TABLE, nftBaseRuleset, nftFamily, nftServicesChunk } from './kube-nftables';
import { backends, Family, familyOf, Proto, ServicePort } from './services';

export interface Target {
  address: string;
  port: number;
}

export interface LoadOutcome {
  loaded: boolean;
  ms: number;
  /** Why the mode is not measured at this scale (when !loaded). */
  reason?: string;
}

export interface Mode {
  readonly id: string;
  readonly label: string;
  readonly client: ClientNs;
  /** cgroup the client process must join before entering the netns. */
  readonly cgroup?: string;
  /** Set when the mode cannot run at all on this build/machine. */
  unavailable?: string;
  /** Whether this mode sends Service traffic to VIPs (false: direct). */
  readonly usesVips: boolean;
  /** The address families it is measured with (issue 14: IPv6 rows beside IPv4). */
  readonly families: readonly Family[];
  /** Loads the ports of one family (all of `ports` share it), next to what the other family loaded. */
  load(ports: ServicePort[], budgetMs: number): Promise<LoadOutcome>;
  /** Unloads one family, or every family. */
  unload(family?: Family): Promise<void>;
  /** Extra facts for the report (e.g. BPF map memory). */
  facts?(): Promise<Record<string, number | string>>;
}

export function serviceTargets(ports: ServicePort[], proto: Proto): Target[] {
  return ports.filter((p) => p.proto === proto).map((p) => ({ address: p.vip, port: p.port }));
}

export function backendTargets(family: Family = 4): Target[] {
  return backends(family);
}

const BOTH: readonly Family[] = [4, 6];

/** Direct to the backends, no rules at all: the reference every ratio uses. */
export class DirectMode implements Mode {
  readonly id = 'direct';
  readonly label = 'direct (no rules)';
  readonly usesVips = false;
  readonly families = BOTH;
  constructor(readonly client: ClientNs) {}
  async load(): Promise<LoadOutcome> {
    return { loaded: true, ms: 0 };
  }
  async unload(): Promise<void> {}
}

/** kube-proxy iptables mode, legacy (x_tables) or nft (iptables-nft) backend. */
export class IptablesMode implements Mode {
  readonly usesVips = true;
  readonly families = BOTH;
  readonly id: string;
  readonly label: string;
  constructor(readonly client: ClientNs, private readonly flavor: 'legacy' | 'nft') {
    this.id = `iptables-${flavor}`;
    this.label = `kube-proxy iptables (${flavor})`;
  }
  /** iptables-restore or ip6tables-restore of the flavor: each family has its own tables. */
  private restore(family: Family): string {
    return `${family === 6 ? 'ip6tables' : 'iptables'}-${this.flavor}-restore`;
  }
  async load(ports: ServicePort[], budgetMs: number): Promise<LoadOutcome> {
    const input = iptablesRestoreInput(ports);
    const t0 = Date.now();
    try {
      await inNetns(this.client.netns, [this.restore(familyOf(ports)), '-w', '5'], { timeoutMs: budgetMs, input });
    } catch (e) {
      if (e instanceof RunError && e.result.timedOut) {
        await this.unload(familyOf(ports));
        return { loaded: false, ms: Date.now() - t0, reason: `not loadable within the budget (${Math.round(budgetMs / 1000)} s)` };
      }
      throw e;
    }
    return { loaded: true, ms: Date.now() - t0 };
  }
  async unload(family?: Family): Promise<void> {
    for (const f of family ? [family] : this.families) await inNetns(this.client.netns, [this.restore(f), '-w', '5'], { timeoutMs: 180000, input: IPTABLES_EMPTY });
  }
}

/** kube-proxy nftables mode, loaded in transactions of ~1000 service ports. */
export class NftablesMode implements Mode {
  readonly id = 'nftables';
  readonly label = 'kube-proxy nftables';
  readonly usesVips = true;
  readonly families = BOTH;
  static readonly CHUNK = 1000;
  constructor(readonly client: ClientNs) {}
  async load(ports: ServicePort[], budgetMs: number): Promise<LoadOutcome> {
    const t0 = Date.now();
    const left = () => budgetMs - (Date.now() - t0);
    const family = familyOf(ports);
    try {
      const nodeIp = family === 6 ? this.client.address6 : this.client.address;
      await inNetns(this.client.netns, ['nft', '-f', '-'], { timeoutMs: Math.max(1000, left()), input: nftBaseRuleset(nodeIp, family) });
      for (let i = 0; i < ports.length; i += NftablesMode.CHUNK) {
        if (left() <= 0) throw new BudgetExceeded();
        await inNetns(this.client.netns, ['nft', '-f', '-'], { timeoutMs: left(), input: nftServicesChunk(ports.slice(i, i + NftablesMode.CHUNK)) });
      }
    } catch (e) {
      if (e instanceof BudgetExceeded || (e instanceof RunError && e.result.timedOut)) {
        await this.unload(family);
        return { loaded: false, ms: Date.now() - t0, reason: `not loadable within the budget (${Math.round(budgetMs / 1000)} s)` };
      }
      throw e;
    }
    return { loaded: true, ms: Date.now() - t0 };
  }
  async unload(family?: Family): Promise<void> {
    for (const f of (family ? [family] : this.families).map((x) => nftFamily(x).ip)) await inNetns(this.client.netns, ['nft', 'delete', 'table', f, NFT_TABLE], { timeoutMs: 300000, allowFailure: true });
  }
}

class BudgetExceeded extends Error {}

export function makeBaselineModes(clients: { legacy: ClientNs; nft: ClientNs; nftables: ClientNs }): Mode[] {
  return [new IptablesMode(clients.legacy, 'legacy'), new IptablesMode(clients.nft, 'nft'), new NftablesMode(clients.nftables)];
}
