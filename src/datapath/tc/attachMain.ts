// `node dist/src/datapath/tc/attachMain.js --object build/tc_lb.bpf.o --bpffs DIR --device NAME...`
//
// Loads tc_lb (maps reused from / pinned to DIR), attaches its ingress and
// egress programs to each device with pinned tcx links, prints one JSON line
// per attachment and exits: the pins keep the programs attached. Run it in
// the node's network namespace. The CLI (`sluice tc attach`) can call
// attachTcDevices directly.
import { BpfObject } from '../../bpf/object';
import { attachTc, TC_PROGRAMS, type TcDirection } from './attach';

export interface TcAttachment {
  device: string;
  direction: TcDirection;
  linkId: number;
  programId: number;
  ifindex: number;
}

export function attachTcDevices(objectPath: string, bpffs: string, devices: string[]): TcAttachment[] {
  const obj = loadTcObject(objectPath, bpffs);
  try {
    return attachLoaded(obj, bpffs, devices);
  } finally {
    obj.close();
  }
}

/** Load tc_lb once (maps reused from their pins) for several attaches. */
export function loadTcObject(objectPath: string, bpffs: string): BpfObject {
  const obj = BpfObject.open(objectPath, { pinDir: bpffs });
  try {
    obj.load();
  } catch (err) {
    obj.close();
    throw err;
  }
  return obj;
}

/** Attach a loaded tc_lb to devices (pinned tcx links; an existing pin is updated in place). */
export function attachLoaded(obj: BpfObject, bpffs: string, devices: string[]): TcAttachment[] {
  const out: TcAttachment[] = [];
  for (const device of devices) {
    for (const direction of ['ingress', 'egress'] as const) {
      const link = attachTc(obj.program(TC_PROGRAMS[direction]), device, direction, bpffs);
      try {
        const info = link.info();
        out.push({ device, direction, linkId: info.id, programId: info.progId, ifindex: info.ifindex ?? 0 });
      } finally {
        link.close();
      }
    }
  }
  return out;
}

function main(argv: string[]): void {
  const devices: string[] = [];
  let object = 'build/tc_lb.bpf.o';
  let bpffs = '/sys/fs/bpf/sluice';
  for (let i = 0; i < argv.length; i++) {
    const value = argv[i + 1];
    switch (argv[i]) {
      case '--object': object = value ?? object; i++; break;
      case '--bpffs': bpffs = value ?? bpffs; i++; break;
      case '--device': if (value) devices.push(value); i++; break;
      default: throw new Error(`tc attach: unknown argument ${argv[i]}`);
    }
  }
  if (devices.length === 0) throw new Error('tc attach: give at least one --device');
  for (const a of attachTcDevices(object, bpffs, devices)) process.stdout.write(`${JSON.stringify(a)}\n`);
}

if (require.main === module) {
  try {
    main(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(1);
  }
}
