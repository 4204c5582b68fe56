// IPv6 additions to TcHarness (issue 14): the IPv6 service, backend,
// rev-NAT, source-range and conntrack maps of the loaded tc_lb object, and a
// writer for one IPv6 frontend (same order as TcHarness.upsertFrontend).
import { after, before, beforeEach } from 'node:test';
import * as abi from '../../src/abi/generated';
import { bytesToIp6, ip6ToBytes } from '../../src/datapath/addr';
import { idTable, TypedMap, u32Codec, u8Codec } from '../../src/datapath/typedMap';
import { writeTcConfig, writeTcConfig6 } from '../../src/datapath/tc/config';
import { TcHarness, type TcFrontend } from './tc_harness';

export class Tc6Maps {
  readonly services: TypedMap<abi.Lb6FrontendKey, abi.Lb4Service>;
  readonly ranges: TypedMap<number, number>;
  /** Next free index of the range array: each upsert writes a new range (as the agent does). */
  private nextRange = 0;
  readonly backends: TypedMap<number, abi.Lb6Backend>;
  readonly revNat: TypedMap<number, abi.Lb6ReverseNat>;
  readonly sourceRanges: TypedMap<abi.Lb6SrcRangeKey, number>;
  // Absent in an object older than the IPv6 TC path (the fail-first runs
  // load one: IPv6 frontends are then in the maps but never translated).
  private readonly ct?: TypedMap<abi.Lb6CtKey, abi.Lb6CtEntry>;
  readonly config?: TypedMap<number, abi.Lb6TcConfig>;

  constructor(readonly h: TcHarness) {
    const m = (name: string) => h.obj.map(name);
    this.services = new TypedMap(m(abi.SLUICE_MAP_SERVICES6), abi.lb6_frontend_keyCodec, abi.lb4_serviceCodec);
    this.ranges = new TypedMap(m(abi.SLUICE_MAP_RANGES6), u32Codec, u32Codec);
    this.backends = idTable(m(abi.SLUICE_MAP_BACKENDS6), abi.lb6_backendCodec);
    this.revNat = idTable(m(abi.SLUICE_MAP_REVNAT6), abi.lb6_reverse_natCodec);
    this.sourceRanges = new TypedMap(m(abi.SLUICE_MAP_SRCRANGE6), abi.lb6_src_range_keyCodec, u8Codec);
    const has = (name: string) => { try { m(name); return true; } catch { return false; } };
    if (has(abi.SLUICE_MAP_CT6)) this.ct = new TypedMap(m(abi.SLUICE_MAP_CT6), abi.lb6_ct_keyCodec, abi.lb6_ct_entryCodec);
    if (has(abi.SLUICE_MAP_TC_CONFIG6)) this.config = new TypedMap(m(abi.SLUICE_MAP_TC_CONFIG6), u32Codec, abi.lb6_tc_configCodec);
  }

  /** sluice_ct6 (an error when the object has no IPv6 TC path). */
  get conntrack(): TypedMap<abi.Lb6CtKey, abi.Lb6CtEntry> {
    if (!this.ct) throw new Error(`${abi.SLUICE_MAP_CT6}: not in this object (older than the IPv6 TC path)`);
    return this.ct;
  }

  /** sluice_ct6's entries, readable: "[address]:port" per role. */
  rows(): Array<{ dir: number; client: string; frontend: string; backend: string; nat: string; flags: number }> {
    return [...this.conntrack.entries()].map(([k, e]) => ({
      dir: k.dir,
      client: `[${bytesToIp6(e.client_address)}]:${e.client_port}`,
      frontend: `[${bytesToIp6(e.frontend_address)}]:${e.frontend_port}`,
      backend: `[${bytesToIp6(e.backend_address)}]:${e.backend_port}`,
      nat: `[${bytesToIp6(e.nat_address)}]:${e.nat_port}`,
      flags: e.flags,
    }));
  }

  /** The node's IPv6 SNAT address (sluice_tc_cfg6), when the object has it. */
  setSnat(address?: string): void {
    if (this.config) writeTcConfig6(this.config, address);
  }

  reset(): void {
    for (const m of [this.services, this.backends, this.revNat, this.sourceRanges, this.ct] as Array<TypedMap<unknown, unknown> | undefined>) {
      for (const [k] of [...m?.entries() ?? []]) m!.delete(k);
    }
    this.setSnat(undefined);
  }

  upsertFrontend(f: TcFrontend, scope = abi.LB_SCOPE_EXTERNAL): void {
    const proto = f.proto === 'tcp' ? abi.LB_PROTO_TCP : abi.LB_PROTO_UDP;
    const key: abi.Lb6FrontendKey = { address: ip6ToBytes(f.address), port: f.port, proto, scope };
    for (const b of f.backends) {
      this.backends.set(b.id, { address: ip6ToBytes(b.address), port: b.port, proto, flags: b.local ? abi.LB_BACKEND_FLAG_LOCAL : 0, zone: 0 });
    }
    this.revNat.set(f.revNatId, { address: ip6ToBytes(f.address), port: f.port });
    const start = this.nextRange;
    this.nextRange += f.backends.length;
    f.backends.forEach((b, i) => this.ranges.set(start + i, b.id));
    this.services.set(key, {
      backend_id: start, count: f.backends.length, flags: f.flags, rev_nat_id: f.revNatId,
      affinity_timeout: f.affinityTimeout ?? 0, algorithm: f.algorithm ?? abi.LB_ALG_RANDOM,
    });
  }

  /** loadBalancerSourceRanges of a frontend: "2001:db8:1::/48". */
  addSourceRange(revNatId: number, cidr: string): void {
    const [address, len] = cidr.split('/');
    this.sourceRanges.set({ prefixlen: 32 + Number(len), rev_nat_id: revNatId, address: ip6ToBytes(address!) }, 1);
  }
}

/**
 * The node:test hooks of an IPv6 TC fixture file: one harness named `name`
 * for the file, every map emptied before each test, `snat` the node's IPv6
 * SNAT address (198.18.0.1 the IPv4 one). Tests read fx.h and fx.v6.
 */
export function tc6Fixture(name: string, snat: string): { h: TcHarness; v6: Tc6Maps } {
  const fx = {} as { h: TcHarness; v6: Tc6Maps };
  before(() => {
    fx.h = TcHarness.create(name);
    fx.v6 = new Tc6Maps(fx.h);
  });
  after(() => fx.h?.close());
  beforeEach(() => {
    fx.h.reset();
    fx.v6.reset();
    writeTcConfig(fx.h.tc.config, { snatAddress: '198.18.0.1' });
    fx.v6.setSnat(snat);
  });
  return fx;
}
