// `node dist/src/datapath/xdp/attachMain.js --object build/xdp_lb.bpf.o --bpffs DIR --device NAME... [--mode native|generic|auto] [--program NAME] [--detach]`
//
// Loads xdp_lb (maps shared by pin with tc_lb under DIR), attaches it to each
// device with a pinned XDP link and lists the devices as XDP_REDIRECT
// targets; prints one JSON line per device. --detach removes the links (and
// the targets) instead. Run it in the node's network namespace (tests:
// nsenter), like the TC attachMain.
import { attachXdp, detachXdp, loadXdpObject, openXdpMaps, type XdpMode } from './xdp';
import { deviceIndex } from '../tc/attach';
import * as abi from '../../abi/generated';

function main(argv: string[]): void {
  const devices: string[] = [];
  let object = 'build/xdp_lb.bpf.o';
  let bpffs = '/sys/fs/bpf/sluice';
  let mode: XdpMode | 'auto' = 'auto';
  let program: string = abi.SLUICE_PROG_XDP;
  let detach = false;
  for (let i = 0; i < argv.length; i++) {
    const value = argv[i + 1];
    switch (argv[i]) {
      case '--object': object = value ?? object; i++; break;
      case '--bpffs': bpffs = value ?? bpffs; i++; break;
      case '--device': if (value) devices.push(value); i++; break;
      case '--mode': mode = (value ?? mode) as XdpMode | 'auto'; i++; break;
      case '--program': program = value ?? program; i++; break;
      case '--detach': detach = true; break;
      default: throw new Error(`xdp attach: unknown argument ${argv[i]}`);
    }
  }
  if (devices.length === 0) throw new Error('xdp attach: give at least one --device');
  if (detach) {
    const maps = openXdpMaps(bpffs);
    try {
      for (const d of devices) {
        const ifindex = deviceIndex(d);
        maps.targets.delete(ifindex);
        process.stdout.write(`${JSON.stringify({ device: d, detached: detachXdp(bpffs, d) })}\n`);
      }
    } finally {
      maps.close();
    }
    return;
  }
  const obj = loadXdpObject(object, bpffs);
  try {
    for (const d of devices) {
      const a = attachXdp(obj, d, mode, bpffs, program);
      if (program === abi.SLUICE_PROG_XDP) {
        const maps = openXdpMaps(bpffs);
        try { maps.targets.set(a.ifindex, a.ifindex); } finally { maps.close(); }
      }
      process.stdout.write(`${JSON.stringify(a)}\n`);
    }
  } finally {
    obj.close();
  }
}

if (require.main === module) {
  try {
    main(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(1);
  }
}
