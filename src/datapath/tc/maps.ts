// The north-south (TC) maps, opened from their pins under the bpffs directory
// and typed with the generated codecs. The services/backends/rev-NAT maps are
// shared with the socket LB (../maps.ts); these are the TC path's own.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { BpfMap } from '../../bpf/map';
import * as abi from '../../abi/generated';
import { TypedMap, u32Codec, u8Codec } from '../typedMap';

export { u8Codec };

export interface TcMaps {
  conntrack: TypedMap<abi.Lb4CtKey, abi.Lb4CtEntry>;
  sourceRanges: TypedMap<abi.Lb4SrcRangeKey, number>;
  config: TypedMap<number, abi.Lb4TcConfig>;
  /** ifindex -> SNAT address of flows leaving by that device (multi-homed nodes). */
  snatDevices: TypedMap<number, abi.Lb4SnatDevice>;
  /** IPv6 (issue 14): conntrack and the node's IPv6 SNAT address; absent in pins older than them. */
  conntrack6?: TypedMap<abi.Lb6CtKey, abi.Lb6CtEntry>;
  config6?: TypedMap<number, abi.Lb6TcConfig>;
  /** ifindex -> IPv6 SNAT address of flows leaving by that device (multi-homed nodes); absent in pins older than it. */
  snatDevices6?: TypedMap<number, abi.Lb6SnatDevice>;
  /** DSR (issue 17): the node's --nodeport-mode; absent in pins older than it. */
  dsr?: TypedMap<number, abi.LbDsrConfig>;
  close(): void;
}

/** Open the TC maps pinned under `bpffs`, or fail naming the missing pin. */
export function openTcMaps(bpffs: string): TcMaps {
  const opened: BpfMap[] = [];
  const open = (name: string): BpfMap => {
    const pin = path.join(bpffs, name);
    if (!fs.existsSync(pin)) {
      throw new Error(`open TC map ${name}: no pin at ${pin} (is the TC program loaded with --bpffs ${bpffs}?)`);
    }
    const m = BpfMap.fromPinned(pin);
    opened.push(m);
    return m;
  };
  try {
    return {
      conntrack: new TypedMap(open(abi.SLUICE_MAP_CT4), abi.lb4_ct_keyCodec, abi.lb4_ct_entryCodec),
      sourceRanges: new TypedMap(open(abi.SLUICE_MAP_SRCRANGE4), abi.lb4_src_range_keyCodec, u8Codec),
      config: new TypedMap(open(abi.SLUICE_MAP_TC_CONFIG), u32Codec, abi.lb4_tc_configCodec),
      snatDevices: new TypedMap(open(abi.SLUICE_MAP_SNAT_DEV4), u32Codec, abi.lb4_snat_deviceCodec),
      ...(fs.existsSync(path.join(bpffs, abi.SLUICE_MAP_CT6)) ? {
        conntrack6: new TypedMap(open(abi.SLUICE_MAP_CT6), abi.lb6_ct_keyCodec, abi.lb6_ct_entryCodec),
        config6: new TypedMap(open(abi.SLUICE_MAP_TC_CONFIG6), u32Codec, abi.lb6_tc_configCodec),
      } : {}),
      ...(fs.existsSync(path.join(bpffs, abi.SLUICE_MAP_SNAT_DEV6)) ? {
        snatDevices6: new TypedMap(open(abi.SLUICE_MAP_SNAT_DEV6), u32Codec, abi.lb6_snat_deviceCodec),
      } : {}),
      ...(fs.existsSync(path.join(bpffs, abi.SLUICE_MAP_DSR_CFG)) ? {
        dsr: new TypedMap(open(abi.SLUICE_MAP_DSR_CFG), u32Codec, abi.lb_dsr_configCodec),
      } : {}),
      close: () => opened.forEach((m) => m.close()),
    };
  } catch (err) {
    for (const m of opened) m.close();
    throw err;
  }
}
