// Which Service owns a frontend, kept in a pinned map (SLUICE_MAP_SVC_NAMES)
// so `sluice services` can say it without the agent. The programs never read
// it; the agent writes an entry with the frontend and removes it with the
// frontend's last scope. Keyed by rev-NAT id + protocol: TCP and UDP ports
// on one address:port share a rev-NAT id but may carry different port names.
import * as abi from '../abi/generated';
import { cString } from '../bpf/libbpf';
import { protoNumber, type ProtoName } from './addr';
import type { TypedMap } from './typedMap';

export interface ServiceName {
  namespace: string;
  name: string;
  /** ServicePort name, '' for an unnamed port. */
  portName: string;
}

export type ServiceNameMap = TypedMap<abi.LbSvcNameKey, abi.LbSvcName>;

const FIELD_SIZES = { namespace: 64, name: 64, portName: 16 } as const;

/**
 * A name as a fixed-size C array. Kubernetes validation keeps all three below
 * these sizes; anything longer (never from a real API server) is cut at a
 * character boundary rather than failing a sync over a display name.
 */
function fixed(value: string, size: number): Buffer {
  const buf = Buffer.alloc(size);
  let end = Math.min(Buffer.byteLength(value, 'utf8'), size);
  const bytes = Buffer.from(value, 'utf8');
  while (end > 0 && end < bytes.length && (bytes[end]! & 0xc0) === 0x80) end--;
  bytes.copy(buf, 0, 0, end);
  return buf;
}

export function encodeServiceName(n: ServiceName): abi.LbSvcName {
  return {
    namespace: fixed(n.namespace, FIELD_SIZES.namespace),
    name: fixed(n.name, FIELD_SIZES.name),
    port_name: fixed(n.portName, FIELD_SIZES.portName),
  };
}

export function decodeServiceName(v: abi.LbSvcName): ServiceName {
  return { namespace: cString(v.namespace), name: cString(v.name), portName: cString(v.port_name) };
}

/** "default/web:http" ("default/web" for an unnamed port). */
export function formatServiceName(n: ServiceName): string {
  return `${n.namespace}/${n.name}${n.portName ? `:${n.portName}` : ''}`;
}

const keyOf = (revNatId: number, proto: ProtoName): abi.LbSvcNameKey => ({ rev_nat_id: revNatId, proto: protoNumber(proto) });
const cacheKey = (revNatId: number, proto: ProtoName) => `${revNatId}/${proto}`;
const numberKey = (revNatId: number, proto: ProtoName) => revNatId * 2 + (proto === 'udp' ? 1 : 0);

/** Every name in the map, by "revNatId/proto" (the CLI's view). */
export function readServiceNames(map: ServiceNameMap): Map<string, ServiceName> {
  const out = new Map<string, ServiceName>();
  for (const [k, v] of map.readAll()) out.set(`${k.rev_nat_id}/${k.proto === abi.LB_PROTO_UDP ? 'udp' : 'tcp'}`, decodeServiceName(v));
  return out;
}

export function serviceNameOf(names: Map<string, ServiceName>, revNatId: number, proto: ProtoName): ServiceName | undefined {
  return names.get(cacheKey(revNatId, proto));
}

/**
 * The agent's writer: remembers what the map holds (read once) and writes
 * only entries that differ, so a sync of unchanged Services costs no syscall.
 */
export class ServiceNameWriter {
  /** By revNatId * 2 + (udp ? 1 : 0): a number key, no string per entry. */
  private readonly known = new Map<number, ServiceName>();

  constructor(private readonly map: ServiceNameMap) {
    for (const [k, v] of map.readAll()) this.known.set(numberKey(k.rev_nat_id, k.proto === abi.LB_PROTO_UDP ? 'udp' : 'tcp'), decodeServiceName(v));
  }

  write(revNatId: number, proto: ProtoName, name: ServiceName): void {
    this.writeMany([{ revNatId, proto, name }]);
  }

  /** The names that differ from the map's, in one batched update (a full sync names 20k frontends at 10k Services). */
  writeMany(names: Iterable<{ revNatId: number; proto: ProtoName; name: ServiceName }>): void {
    const entries: Array<[abi.LbSvcNameKey, abi.LbSvcName]> = [];
    const known: Array<[number, ServiceName]> = [];
    for (const { revNatId, proto, name } of names) {
      const k = numberKey(revNatId, proto);
      const cur = this.known.get(k);
      if (cur && cur.namespace === name.namespace && cur.name === name.name && cur.portName === name.portName) continue;
      entries.push([keyOf(revNatId, proto), encodeServiceName(name)]);
      known.push([k, name]);
    }
    if (entries.length === 0) return;
    this.map.setMany(entries);
    for (const [k, name] of known) this.known.set(k, name);
  }

  forget(revNatId: number, proto: ProtoName): void {
    if (!this.known.delete(numberKey(revNatId, proto))) return;
    this.map.delete(keyOf(revNatId, proto));
  }
}
