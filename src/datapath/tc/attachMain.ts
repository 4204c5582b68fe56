// `node dist/src/datapath/tc/attachMain.js --object build/tc_lb.bpf.o --bpffs DIR --device NAME...`
//
// Loads tc_lb (maps reused from / pinned to DIR), attaches its ingress and
// egress programs to each device with pinned tcx links, prints one JSON line
// per attachment and exits: the pins keep the programs attached. Run it in
// the node's network namespace. The CLI (`sluice tc attach`) can call
// attachTcDevices directly.
import * as fs from 'node:fs';
import * as path from 'node:path';
import os from 'node:os';
import type { BpfObject } from '../../bpf/object';
import { BpfError } from '../../bpf/libbpf';
import { BpfLink, unpin } from '../../bpf/link';
import { loadMigrated, type MigratedMap } from '../migrate';
import { attachTc, TC_PROGRAMS, type TcDirection } from './attach';

const { ENOLINK } = os.constants.errno;

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

/**
 * Load tc_lb once (maps reused from their pins) for several attaches. Pinned
 * maps whose capacity or layout changed are migrated (../migrate.ts): every
 * TC link already pinned under bpffs is switched to the new programs before
 * the old maps go, so established flows keep their conntrack entries.
 */
export function loadTcObject(objectPath: string, bpffs: string, opts: { maxEntries?: Record<string, number>; onMigrated?: (m: MigratedMap[]) => void } = {}): BpfObject {
  // All at once (not device by device as they are attached again): no TC
  // program keeps running on a map that is about to be unpinned.
  return loadMigrated(objectPath, bpffs, opts, (obj) => swapPinnedTcLinks(obj, bpffs));
}

/** Every pinned tcx link of this bpffs (any device) runs `obj`'s programs; links of vanished devices are unpinned. */
export function swapPinnedTcLinks(obj: BpfObject, bpffs: string): number {
  const dir = path.join(bpffs, 'links');
  let swapped = 0;
  for (const name of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
    const m = /^tc-.+-(ingress|egress)$/.exec(name);
    if (!m) continue;
    const link = BpfLink.fromPinned(path.join(dir, name));
    try {
      link.update(obj.program(TC_PROGRAMS[m[1] as TcDirection]));
      swapped++;
    } catch (err) {
      if (!(err instanceof BpfError && err.errno === ENOLINK)) throw err;
      unpin(path.join(dir, name)); // its device is gone
    } finally {
      link.close();
    }
  }
  return swapped;
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
