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

/** Byte offsets of the fields in lb_svc_name (from the generated layout). */
const NAME_OFFSETS = {
  namespace: fieldOffset('namespace'),
  name: fieldOffset('name'),
  portName: fieldOffset('port_name'),
} as const;

function fieldOffset(name: string): number {
  const field = abi.lb_svc_nameLayout.fields.find((f) => f.name === name);
  if (!field) throw new Error(`lb_svc_name has no field ${name}`);
  return field.offset;
}

/**
 * fixed() written in place into a zeroed buffer: Buffer#write stops before a
 * character that does not fit whole, which is the same cut.
 */
function writeFixed(buf: Buffer, off: number, value: string, size: number): void {
  if (value.length > 0) buf.write(value, off, size, 'utf8');
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

  /**
   * The names that differ from the map's, in one batched update (a full sync
   * names 20k frontends at 10k Services), encoded straight into the batch's
   * buffers; both scopes of a frontend share its key and are written once.
   */
  writeMany(names: Iterable<{ revNatId: number; proto: ProtoName; name: ServiceName }>): void {
    const changed = new Map<number, { revNatId: number; proto: ProtoName; name: ServiceName }>();
    for (const n of names) {
      const k = numberKey(n.revNatId, n.proto);
      const cur = changed.get(k)?.name ?? this.known.get(k);
      if (cur && cur.namespace === n.name.namespace && cur.name === n.name.name && cur.portName === n.name.portName) continue;
      changed.set(k, n);
    }
    if (changed.size === 0) return;
    const ks = abi.LB_SVC_NAME_KEY_SIZE;
    const vs = abi.LB_SVC_NAME_SIZE;
    const keys = Buffer.alloc(changed.size * ks);
    const values = Buffer.alloc(changed.size * vs);
    let i = 0;
    for (const { revNatId, proto, name } of changed.values()) {
      abi.encodeLbSvcNameKey(keyOf(revNatId, proto), keys, i * ks);
      writeFixed(values, i * vs + NAME_OFFSETS.namespace, name.namespace, FIELD_SIZES.namespace);
      writeFixed(values, i * vs + NAME_OFFSETS.name, name.name, FIELD_SIZES.name);
      writeFixed(values, i * vs + NAME_OFFSETS.portName, name.portName, FIELD_SIZES.portName);
      i++;
    }
    try {
      this.map.map.updateBatch(keys, values, changed.size);
    } finally {
      // Also on a failure (a full map): the names that did not fit are not
      // sent again with every pass; they are retried when they change.
      for (const [k, { name }] of changed) this.known.set(k, name);
    }
  }

  forget(revNatId: number, proto: ProtoName): void {
    if (!this.known.delete(numberKey(revNatId, proto))) return;
    this.map.delete(keyOf(revNatId, proto));
  }
}
