// The data-path modes the bench compares. Each owns one client namespace (and
// for Sluice a cgroup and bpffs directory), loads S Services into it within a
// time budget, says where a client sends its traffic, and unloads.
import { inNetns, RunError } from './exec';
import type { ClientNs } from './harness';
import { IPTABLES_EMPTY, iptablesRestoreInput } from './kube-iptables';
import { NFT_TABLE, nftBaseRuleset, nftServicesChunk } from './kube-nftables';
import { backends, Proto, ServicePort } from './services';

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
  load(ports: ServicePort[], budgetMs: number): Promise<LoadOutcome>;
  unload(): Promise<void>;
  /** Extra facts for the report (e.g. BPF map memory). */
  facts?(): Promise<Record<string, number | string>>;
}

export function serviceTargets(ports: ServicePort[], proto: Proto): Target[] {
  return ports.filter((p) => p.proto === proto).map((p) => ({ address: p.vip, port: p.port }));
}

export function backendTargets(): Target[] {
  return backends();
}

/** Direct to the backends, no rules at all: the reference every ratio uses. */
export class DirectMode implements Mode {
  readonly id = 'direct';
  readonly label = 'direct (no rules)';
  readonly usesVips = false;
  constructor(readonly client: ClientNs) {}
  async load(): Promise<LoadOutcome> {
    return { loaded: true, ms: 0 };
  }
  async unload(): Promise<void> {}
}

/** kube-proxy iptables mode, legacy (x_tables) or nft (iptables-nft) backend. */
export class IptablesMode implements Mode {
  readonly usesVips = true;
  readonly id: string;
  readonly label: string;
  constructor(readonly client: ClientNs, private readonly flavor: 'legacy' | 'nft') {
    this.id = `iptables-${flavor}`;
    this.label = `kube-proxy iptables (${flavor})`;
  }
  private get restore(): string {
    return this.flavor === 'legacy' ? 'iptables-legacy-restore' : 'iptables-nft-restore';
  }
  async load(ports: ServicePort[], budgetMs: number): Promise<LoadOutcome> {
    const input = iptablesRestoreInput(ports);
    const t0 = Date.now();
    try {
      await inNetns(this.client.netns, [this.restore, '-w', '5'], { timeoutMs: budgetMs, input });
    } catch (e) {
      if (e instanceof RunError && e.result.timedOut) {
        await this.unload();
        return { loaded: false, ms: Date.now() - t0, reason: `not loadable within the budget (${Math.round(budgetMs / 1000)} s)` };
      }
      throw e;
    }
    return { loaded: true, ms: Date.now() - t0 };
  }
  async unload(): Promise<void> {
    await inNetns(this.client.netns, [this.restore, '-w', '5'], { timeoutMs: 180000, input: IPTABLES_EMPTY });
  }
}

/** kube-proxy nftables mode, loaded in transactions of ~1000 service ports. */
export class NftablesMode implements Mode {
  readonly id = 'nftables';
  readonly label = 'kube-proxy nftables';
  readonly usesVips = true;
  static readonly CHUNK = 1000;
  constructor(readonly client: ClientNs) {}
  async load(ports: ServicePort[], budgetMs: number): Promise<LoadOutcome> {
    const t0 = Date.now();
    const left = () => budgetMs - (Date.now() - t0);
    try {
      await inNetns(this.client.netns, ['nft', '-f', '-'], { timeoutMs: Math.max(1000, left()), input: nftBaseRuleset(this.client.address) });
      for (let i = 0; i < ports.length; i += NftablesMode.CHUNK) {
        if (left() <= 0) throw new BudgetExceeded();
        await inNetns(this.client.netns, ['nft', '-f', '-'], { timeoutMs: left(), input: nftServicesChunk(ports.slice(i, i + NftablesMode.CHUNK)) });
      }
    } catch (e) {
      if (e instanceof BudgetExceeded || (e instanceof RunError && e.result.timedOut)) {
        await this.unload();
        return { loaded: false, ms: Date.now() - t0, reason: `not loadable within the budget (${Math.round(budgetMs / 1000)} s)` };
      }
      throw e;
    }
    return { loaded: true, ms: Date.now() - t0 };
  }
  async unload(): Promise<void> {
    await inNetns(this.client.netns, ['nft', 'delete', 'table', 'ip', NFT_TABLE], { timeoutMs: 300000, allowFailure: true });
  }
}

class BudgetExceeded extends Error {}

export function makeBaselineModes(clients: { legacy: ClientNs; nft: ClientNs; nftables: ClientNs }): Mode[] {
  return [new IptablesMode(clients.legacy, 'legacy'), new IptablesMode(clients.nft, 'nft'), new NftablesMode(clients.nftables)];
}
