// Shared set-up of the XDP tests: xdp_lb loaded next to tc_lb (a TcHarness:
// every map shared by pin), a throwaway network namespace whose FIB the
// program consults (bpf_fib_lookup reads the namespace the test run happens
// in), and BPF_PROG_TEST_RUN of the XDP and TC programs inside it, with the
// ingress device set in the context as a real arrival would.
import { execFileSync, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as path from 'node:path';
import { BpfObject, progTestRun } from '../../src/bpf';
import { inNetns } from '../../src/bpf/netns';
import * as abi from '../../src/abi/generated';
import { openXdpMaps, readXdpStats, type XdpDeviceStats, type XdpMaps } from '../../src/datapath/xdp/xdp';
import { TcHarness } from './tc_harness';

/** SLUICE_XDP_OBJECT: another build of the object (bench/xdpcost.ts compares two builds). */
export const XDP_OBJECT = process.env.SLUICE_XDP_OBJECT ?? path.resolve(__dirname, '../../../build/xdp_lb.bpf.o');
const XDP_ATTACH_MAIN = path.resolve(__dirname, '../../src/datapath/xdp/attachMain.js');

export const XDP_ABORTED = 0;
export const XDP_DROP = 1;
export const XDP_PASS = 2;
export const XDP_TX = 3;
export const XDP_REDIRECT = 4;

/** Attach (or with `detach`, remove) xdp_lb on `devices` of a network namespace; links pinned under `pinDir`. */
export function xdpAttachInNetns(netnsPath: string, pinDir: string, devices: string[], extra: string[] = []): SpawnSyncReturns<string> {
  return spawnSync('nsenter', [`--net=${netnsPath}`, process.execPath, XDP_ATTACH_MAIN,
    '--object', XDP_OBJECT, '--bpffs', pinDir, ...devices.flatMap((d) => ['--device', d]), ...extra], { encoding: 'utf8', timeout: 15000 });
}

const XDP_MD_SIZE = 24; // struct xdp_md
const SK_BUFF_SIZE = 192;
const SK_BUFF_INGRESS_IFINDEX = 36;

export class XdpHarness {
  readonly tc: TcHarness;
  readonly xdp: BpfObject;
  readonly maps: XdpMaps;
  readonly netns = `slxd-${randomBytes(3).toString('hex')}`;

  constructor() {
    this.tc = TcHarness.create('sluice-xdptest');
    try {
      this.xdp = BpfObject.open(XDP_OBJECT, { pinDir: this.tc.pinDir });
      this.xdp.load();
      this.maps = openXdpMaps(this.tc.pinDir);
      execFileSync('ip', ['netns', 'add', this.netns]);
      // bpf_fib_lookup answers FWD_DISABLED on a device that does not forward.
      execFileSync('ip', ['netns', 'exec', this.netns, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
    } catch (err) {
      this.close();
      throw err;
    }
  }

  sysctl(setting: string): void {
    execFileSync('ip', ['netns', 'exec', this.netns, 'sysctl', '-qw', setting]);
  }

  ip(...args: string[]): void {
    execFileSync('ip', ['-n', this.netns, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  }

  /**
   * The node of the north-south tests: `ext0` (client side, `nodeAddress`/24)
   * and `int0` (backend side, 198.18.3.1/24), veth pairs (this kernel has no
   * dummy devices) whose peers only carry the link up.
   */
  addNodeDevices(extMac: string, intMac: string, nodeAddress: string): void {
    this.ip('link', 'add', 'ext0', 'address', extMac, 'type', 'veth', 'peer', 'name', 'ext0p');
    this.ip('link', 'add', 'int0', 'address', intMac, 'type', 'veth', 'peer', 'name', 'int0p');
    this.ip('link', 'set', 'ext0p', 'up');
    this.ip('link', 'set', 'int0p', 'up');
    this.ip('addr', 'add', `${nodeAddress}/24`, 'dev', 'ext0');
    this.ip('addr', 'add', '198.18.3.1/24', 'dev', 'int0');
    this.ip('link', 'set', 'ext0', 'up');
    this.ip('link', 'set', 'int0', 'up');
  }

  ifindex(device: string): number {
    const [link] = JSON.parse(execFileSync('ip', ['-n', this.netns, '-j', 'link', 'show', 'dev', device], { encoding: 'utf8' })) as Array<{ ifindex: number }>;
    return link!.ifindex;
  }

  /** Run `fn` with this thread in the test namespace (device indexes, devmap updates, test runs). */
  inside<T>(fn: () => T): T {
    return inNetns(`/run/netns/${this.netns}`, fn);
  }

  /** The XDP program on `packet` as received by `ifindex`. */
  runXdp(packet: Buffer, ifindex: number): { verdict: number; out: Buffer } {
    const ctx = Buffer.alloc(XDP_MD_SIZE);
    ctx.writeUInt32LE(packet.length, 4); // data_end
    ctx.writeUInt32LE(ifindex, 12); // ingress_ifindex
    const prog = this.xdp.program(abi.SLUICE_PROG_XDP);
    const r = this.inside(() => progTestRun(prog.fd, { dataIn: packet, ctxIn: ctx }));
    return { verdict: r.retval, out: r.dataOut };
  }

  /** The TC ingress program on the same packet and device (the fallback). */
  runTc(packet: Buffer, ifindex: number): { verdict: number; out: Buffer } {
    const ctx = Buffer.alloc(SK_BUFF_SIZE);
    ctx.writeUInt32LE(ifindex, SK_BUFF_INGRESS_IFINDEX);
    const prog = this.tc.obj.program('sluice_tc_ingress');
    const r = this.inside(() => progTestRun(prog.fd, { dataIn: packet, ctxIn: ctx }));
    return { verdict: r.retval, out: r.dataOut };
  }

  stats(ifindex: number): XdpDeviceStats {
    return readXdpStats(this.maps.stats, this.maps.passed, [ifindex]).find((s) => s.ifindex === ifindex)
      ?? { ifindex, packets: 0n, passed: 0n, tx: 0n, redirected: 0n, dropped: 0n, fallback: 0n };
  }

  reset(): void {
    this.tc.reset();
    for (const [k] of [...this.maps.frontends.entries()]) this.maps.frontends.delete(k);
    for (const [k] of [...this.maps.frontends6?.entries() ?? []]) this.maps.frontends6!.delete(k);
    if (this.maps.prefilter) {
      const zero = Buffer.alloc(8 * abi.SLUICE_XDP_PF_WORDS);
      const keys = Buffer.alloc(4 * abi.SLUICE_XDP_PF_WORDS);
      for (let i = 0; i < abi.SLUICE_XDP_PF_WORDS; i++) keys.writeUInt32LE(i, 4 * i);
      this.maps.prefilter.updateBatch(keys, zero, abi.SLUICE_XDP_PF_WORDS);
    }
    // The FIB caches outlive a test's routes and flows (bench/xdpcost.ts may load a build without them).
    for (const name of [abi.SLUICE_MAP_XDP_FC, abi.SLUICE_MAP_XDP_FC6]) {
      if (!this.xdp.mapNames().includes(name)) continue;
      const fc = this.xdp.map(name);
      const empty = fc.splitPerCpu(Buffer.alloc(fc.valueBufferSize));
      const key = Buffer.alloc(4);
      for (let slot = 0; slot < abi.SLUICE_XDP_FC_SLOTS; slot++) {
        key.writeUInt32LE(slot);
        fc.updatePerCpu(key, empty);
      }
    }
  }

  close(): void {
    spawnSync('ip', ['netns', 'del', this.netns]);
    this.maps?.close();
    this.xdp?.close();
    this.tc.close();
  }
}
