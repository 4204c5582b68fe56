// Shared set-up of the TC tests: the tc_lb object loaded with its maps pinned
// in a throwaway bpffs directory, typed maps, and a writer for one frontend
// (backends, slots, master entry, rev-NAT: make-before-break order).
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import { BpfObject, ensureBpffsDir, progTestRun } from '../../src/bpf';
import type { BpfMap } from '../../src/bpf';
import * as abi from '../../src/abi/generated';
import { idTable, TypedMap, u32Codec } from '../../src/datapath/typedMap';
import { ip4ToNumber } from '../../src/datapath/addr';
import { readCounter } from '../../src/datapath/maps';
import { openTcMaps, type TcMaps } from '../../src/datapath/tc/maps';
import { gcConntrack } from '../../src/datapath/tc/conntrack';

export const TC_OBJECT = process.env.SLUICE_TC_OBJECT ?? path.resolve(__dirname, '../../../build/tc_lb.bpf.o');
const ATTACH_MAIN = path.resolve(__dirname, '../../src/datapath/tc/attachMain.js');

/** Attach tc_lb to `devices` of a network namespace (attachMain run there), links pinned under `pinDir`. */
export function attachInNetns(netnsPath: string, pinDir: string, devices: string[]): SpawnSyncReturns<string> {
  return spawnSync('nsenter', [`--net=${netnsPath}`, process.execPath, ATTACH_MAIN,
    '--object', TC_OBJECT, '--bpffs', pinDir, ...devices.flatMap((d) => ['--device', d])], { encoding: 'utf8', timeout: 10000 });
}

export interface TcBackend {
  id: number;
  address: string;
  port: number;
  local: boolean;
}

export interface TcFrontend {
  address: string;
  port: number;
  proto: 'tcp' | 'udp';
  flags: number;
  revNatId: number;
  backends: TcBackend[];
  affinityTimeout?: number;
  /** LB_ALG_*; default random. */
  algorithm?: number;
}

export class TcHarness {
  readonly obj: BpfObject;
  readonly services: TypedMap<abi.Lb4FrontendKey, abi.Lb4Service>;
  readonly ranges: TypedMap<number, number>;
  /** Next free index of the range array: each upsert writes a new range (as the agent does). */
  private nextRange = 0;
  readonly backends: TypedMap<number, abi.Lb4Backend>;
  readonly revNat: TypedMap<number, abi.Lb4ReverseNat>;
  readonly affinity: TypedMap<abi.Lb4AffinityKey, abi.LbAffinity>;
  readonly counters: BpfMap;
  readonly tc: TcMaps;

  private constructor(readonly pinDir: string, object = TC_OBJECT) {
    this.obj = BpfObject.open(object, { pinDir });
    this.obj.load();
    this.services = new TypedMap(this.obj.map(abi.SLUICE_MAP_SERVICES4), abi.lb4_frontend_keyCodec, abi.lb4_serviceCodec);
    this.ranges = new TypedMap(this.obj.map(abi.SLUICE_MAP_RANGES4), u32Codec, u32Codec);
    this.backends = idTable(this.obj.map(abi.SLUICE_MAP_BACKENDS4), abi.lb4_backendCodec);
    this.revNat = idTable(this.obj.map(abi.SLUICE_MAP_REVNAT4), abi.lb4_reverse_natCodec);
    this.affinity = new TypedMap(this.obj.map(abi.SLUICE_MAP_AFFINITY4), abi.lb4_affinity_keyCodec, abi.lb_affinityCodec);
    this.counters = this.obj.map(abi.SLUICE_MAP_COUNTERS);
    this.tc = openTcMaps(pinDir);
  }

  /** Loads tc_lb into a fresh bpffs directory `<prefix>-<random>`. */
  static create(prefix = 'sluice-tctest', object?: string): TcHarness {
    const pinDir = ensureBpffsDir(`/sys/fs/bpf/${prefix}-${randomBytes(4).toString('hex')}`);
    try {
      return new TcHarness(pinDir, object);
    } catch (err) {
      fs.rmSync(pinDir, { recursive: true, force: true });
      throw err;
    }
  }

  close(): void {
    this.tc.close();
    this.obj.close();
    fs.rmSync(this.pinDir, { recursive: true, force: true });
  }

  /** Empty every map the TC path reads (between tests). */
  reset(): void {
    for (const m of [this.services, this.backends, this.revNat, this.affinity, this.tc.conntrack, this.tc.sourceRanges, this.tc.snatDevices] as Array<TypedMap<unknown, unknown>>) {
      for (const [k] of [...m.entries()]) m.delete(k);
    }
    this.tc.dsr?.set(0, { mode: abi.LB_NODEPORT_MODE_SNAT });
    this.tc.config.set(0, { snat_address: 0, snat_port_min: 0, snat_port_max: 0, tcp_established_timeout: 0, tcp_closing_timeout: 0, udp_timeout: 0, tcp_syn_timeout: 0 });
    this.clearFibCache();
  }

  /** Empty TC's FIB cache on every CPU: a slot outlives a test's routes and neighbours (a build without it: nothing to do). */
  clearFibCache(): void {
    if (!this.obj.mapNames().includes(abi.SLUICE_MAP_TC_FC)) return;
    const fc = this.obj.map(abi.SLUICE_MAP_TC_FC);
    const empty = fc.splitPerCpu(Buffer.alloc(fc.valueBufferSize));
    const key = Buffer.alloc(4);
    for (let slot = 0; slot < abi.SLUICE_XDP_FC_SLOTS; slot++) {
      key.writeUInt32LE(slot);
      fc.updatePerCpu(key, empty);
    }
  }

  upsertFrontend(f: TcFrontend, scope = abi.LB_SCOPE_EXTERNAL): void {
    const proto = f.proto === 'tcp' ? abi.LB_PROTO_TCP : abi.LB_PROTO_UDP;
    const key: abi.Lb4FrontendKey = { address: ip4ToNumber(f.address), port: f.port, proto, scope };
    for (const b of f.backends) {
      this.backends.set(b.id, { address: ip4ToNumber(b.address), port: b.port, proto, flags: b.local ? abi.LB_BACKEND_FLAG_LOCAL : 0, zone: 0 });
    }
    this.revNat.set(f.revNatId, { address: ip4ToNumber(f.address), port: f.port });
    const start = this.nextRange;
    this.nextRange += f.backends.length;
    f.backends.forEach((b, i) => this.ranges.set(start + i, b.id));
    this.services.set(key, {
      backend_id: start,
      count: f.backends.length,
      flags: f.flags,
      rev_nat_id: f.revNatId,
      affinity_timeout: f.affinityTimeout ?? 0,
      algorithm: f.algorithm ?? abi.LB_ALG_RANDOM,
    });
  }

  counter(index: number): bigint {
    return readCounter(this.counters, index);
  }

  /** One in-kernel conntrack GC pass (sluice_ct_gc); returns the entries deleted. */
  gc(): number {
    return gcConntrack(this.obj.program(abi.SLUICE_PROG_CT_GC));
  }

  run(direction: 'ingress' | 'egress', packet: Buffer): { verdict: number; out: Buffer } {
    const prog = this.obj.program(direction === 'ingress' ? 'sluice_tc_ingress' : 'sluice_tc_egress');
    const r = progTestRun(prog.fd, { dataIn: packet });
    return { verdict: r.retval, out: r.dataOut };
  }
}
