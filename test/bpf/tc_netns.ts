// BPF_PROG_TEST_RUN of the TC programs inside a throwaway network namespace,
// for the code paths that depend on the FIB (bpf_fib_lookup reads the routes
// of the namespace the test run happens in): too big for the next hop, SNAT
// address of the egress device. Each run is a child process entered into the
// namespace with nsenter; it loads tc_lb with the harness's pin directory, so
// it shares every map with the harness, and passes the ingress ifindex in the
// __sk_buff context.
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as path from 'node:path';
import { TC_OBJECT } from './tc_harness';

const BPF_INDEX = path.resolve(__dirname, '../../src/bpf/index.js');
const SK_BUFF_SIZE = 192;
const SK_BUFF_INGRESS_IFINDEX = 36;

const RUN_SCRIPT = `
const { BpfObject, progTestRun } = require(${JSON.stringify(BPF_INDEX)});
const [object, pinDir, prog, hex, ifindex, ctxSize, ctxOff] = process.argv.slice(1);
const o = BpfObject.open(object, { pinDir }); o.load();
const ctx = Buffer.alloc(Number(ctxSize)); ctx.writeUInt32LE(Number(ifindex), Number(ctxOff));
const r = progTestRun(o.program(prog).fd, { dataIn: Buffer.from(hex, 'hex'), ctxIn: ctx });
process.stdout.write(JSON.stringify({ verdict: r.retval, out: r.dataOut.toString('hex') }));
o.close();
`;

export class TcNetns {
  readonly name = `sltn-${randomBytes(3).toString('hex')}`;

  constructor(private readonly pinDir: string) {
    execFileSync('ip', ['netns', 'add', this.name]);
    // bpf_fib_lookup answers FWD_DISABLED on a device that does not forward.
    execFileSync('ip', ['netns', 'exec', this.name, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  }

  ip(...args: string[]): void {
    execFileSync('ip', ['-n', this.name, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  }

  ifindex(device: string): number {
    const [link] = JSON.parse(execFileSync('ip', ['-n', this.name, '-j', 'link', 'show', 'dev', device], { encoding: 'utf8' })) as Array<{ ifindex: number }>;
    return link!.ifindex;
  }

  /** Run the ingress or egress program on `packet` as if it arrived on `ingressIfindex`. */
  run(direction: 'ingress' | 'egress', packet: Buffer, ingressIfindex: number): { verdict: number; out: Buffer } {
    const prog = direction === 'ingress' ? 'sluice_tc_ingress' : 'sluice_tc_egress';
    const r = spawnSync('nsenter', [`--net=/run/netns/${this.name}`, process.execPath, '-e', RUN_SCRIPT, '--',
      TC_OBJECT, this.pinDir, prog, packet.toString('hex'), String(ingressIfindex), String(SK_BUFF_SIZE), String(SK_BUFF_INGRESS_IFINDEX)],
    { encoding: 'utf8', timeout: 15000 });
    if (r.status !== 0) throw new Error(`test run in ${this.name} failed: ${r.stderr}`);
    const { verdict, out } = JSON.parse(r.stdout) as { verdict: number; out: string };
    return { verdict, out: Buffer.from(out, 'hex') };
  }

  destroy(): void {
    spawnSync('ip', ['netns', 'del', this.name]);
  }
}
