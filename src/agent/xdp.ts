// The XDP side of the north-south path (issue 17; docs/xdp.md): xdp_lb on the
// external devices in front of TC, opt-in with --xdp-mode. The agent keeps
// its frontend-address set (the program's first check) in step with the
// programmed frontends; with --xdp-mode off it removes XDP links an earlier
// run pinned, which is how XDP is turned off (TC carries on from the shared
// conntrack).
import * as fs from 'node:fs';
import type { Logger } from 'pino';
import type { AgentMetrics } from './metrics';
import { bpfObjectPath } from '../datapath/sockLb';
import { summarize } from '../datapath/migrate';
import { deviceIndex } from '../datapath/tc/attach';
import {
  attachXdp, detachXdp, listXdp, loadXdpObject, openXdpMaps, syncFrontendAddresses, syncFrontendAddresses6, xdpMapsPresent,
  type XdpAttachment, type XdpMaps, type XdpModeSetting,
} from '../datapath/xdp/xdp';

export interface XdpAgent {
  attachments: XdpAttachment[];
  /** The programmed frontends: north-south addresses go into the sets (one per family). */
  frontends(list: Iterable<{ address: string; flags: number }>): void;
  stop(): void;
}

export function startXdp(mode: XdpModeSetting, bpffs: string, devices: string[], maxEntries: Record<string, number>, metrics: AgentMetrics, log: Logger): XdpAgent | undefined {
  if (mode === 'off') {
    turnOff(bpffs, log);
    return undefined;
  }
  const obj = loadXdpObject(bpfObjectPath('xdp_lb.bpf.o'), bpffs, {
    maxEntries,
    onMigrated: (migrated) => log.info({ migrated: summarize(migrated) }, 'XDP maps migrated; XDP links switched in place'),
  });
  let maps: XdpMaps | undefined;
  try {
    maps = openXdpMaps(bpffs);
    const attachments: XdpAttachment[] = [];
    for (const device of devices) {
      try {
        const a = attachXdp(obj, device, mode, bpffs);
        maps.targets.set(a.ifindex, a.ifindex);
        attachments.push(a);
      } catch (err) {
        // TC still serves the device: XDP is an accelerator, not a requirement.
        metrics.errors.inc({ reason: 'xdp_attach_failed' });
        log.error({ device, mode, error: (err as Error).message }, `XDP (${mode}) on ${device} failed: TC serves it alone: ${(err as Error).message}`);
      }
    }
    log.info({ attachments }, 'XDP attached in front of TC on the external devices');
    const opened = maps;
    let lastKey = ''; // the frontends last written: most syncs change no address
    return {
      attachments,
      frontends(list) {
        const items = [...list];
        let nodePorts: number[] = [];
        try {
          nodePorts = [...opened.nodeIps.entries()].map(([a]) => a);
        } catch {
          // read again at the next sync
        }
        // Node addresses change without any frontend changing: they are part of the key.
        const key = `${items.map((f) => `${f.address}/${f.flags}`).sort().join(',')}|${nodePorts.sort().join(',')}`;
        if (key === lastKey) return;
        lastKey = key;
        try {
          // Each keeps the prefilter a superset of both sets (bits set before adding, cleared after removing).
          const r = syncFrontendAddresses(opened, items, nodePorts);
          if (r.added || r.removed) log.debug(r, 'XDP frontend addresses updated');
          const r6 = syncFrontendAddresses6(opened, items);
          if (r6.added || r6.removed) log.debug(r6, 'XDP IPv6 frontend addresses updated');
        } catch (err) {
          lastKey = '';
          metrics.errors.inc({ reason: 'xdp_frontends_failed' });
          log.error({ error: (err as Error).message }, 'XDP frontend addresses not updated: new frontends are served by TC until the next sync');
        }
      },
      stop() {
        opened.close();
        obj.close(); // the links are pinned: XDP stays attached
      },
    };
  } catch (err) {
    maps?.close();
    obj.close();
    throw err;
  }
}

/** --xdp-mode off: remove what an earlier run attached (links and redirect targets). */
function turnOff(bpffs: string, log: Logger): void {
  const attached = fs.existsSync(bpffs) ? listXdp(bpffs) : [];
  if (attached.length === 0) return;
  const maps = xdpMapsPresent(bpffs) ? openXdpMaps(bpffs) : undefined;
  try {
    for (const a of attached) {
      detachXdp(bpffs, a.device);
      try {
        maps?.targets.delete(deviceIndex(a.device));
      } catch {
        // the device is gone: so is its devmap entry
      }
    }
  } finally {
    maps?.close();
  }
  log.info({ devices: attached.map((a) => a.device) }, 'XDP detached (--xdp-mode off): TC serves the devices alone');
}
