// discovery/v1 EndpointSliceList in protobuf -> the JSON form's shape, for
// the fields the agent reads (slim.ts; the store's trigger-time annotation).
// Field numbers from k8s.io/api discovery/v1 generated.proto (v0.34):
//
//   EndpointSlice      = 1 metadata, 2 endpoints, 3 ports, 4 addressType
//   Endpoint           = 1 addresses, 2 conditions, 3 hostname, 6 nodeName, 7 zone, 8 hints
//                        (4 targetRef, 5 deprecatedTopology: skipped)
//   EndpointConditions = 1 ready, 2 serving, 3 terminating (optional bools: absent = unknown)
//   EndpointHints      = 1 forZones, 2 forNodes; ForZone / ForNode = 1 name
//   EndpointPort       = 1 name, 2 protocol, 3 port, 4 appProtocol
//
// Every Endpoint / EndpointPort field is a Go pointer: on the wire only when
// set, so present-but-empty stays present, as in JSON.
import type { V1EndpointSlice, V1Endpoint, DiscoveryV1EndpointPort } from '@kubernetes/client-node';
import { TRIGGER_TIME_ANNOTATION } from '../../agent/store';
import { annotationKeys, openList, readObjectMeta, type OpenedList } from './meta';
import type { Reader } from './wire';

const ANNOTATIONS = annotationKeys([TRIGGER_TIME_ANNOTATION]);

function readConditions(r: Reader): NonNullable<V1Endpoint['conditions']> {
  const end = r.lengthEnd();
  const c: NonNullable<V1Endpoint['conditions']> = {};
  while (r.pos < end) {
    const t = r.uint();
    if (t === 8) c.ready = r.bool();
    else if (t === 16) c.serving = r.bool();
    else if (t === 24) c.terminating = r.bool();
    else r.skip(t & 7);
  }
  r.close(end);
  return c;
}

/** One ForZone / ForNode: { name }. */
function readNamed(r: Reader): { name: string } {
  const end = r.lengthEnd();
  let name = '';
  while (r.pos < end) {
    const t = r.uint();
    if (t === 10) name = r.string();
    else r.skip(t & 7);
  }
  r.close(end);
  return { name };
}

function readHints(r: Reader): NonNullable<V1Endpoint['hints']> {
  const end = r.lengthEnd();
  const h: NonNullable<V1Endpoint['hints']> = {};
  while (r.pos < end) {
    const t = r.uint();
    if (t === 10) (h.forZones ??= []).push(readNamed(r));
    else if (t === 18) (h.forNodes ??= []).push(readNamed(r));
    else r.skip(t & 7);
  }
  r.close(end);
  return h;
}

function readEndpoint(r: Reader): V1Endpoint {
  const end = r.lengthEnd();
  const e: V1Endpoint = { addresses: [] };
  while (r.pos < end) {
    const t = r.uint();
    switch (t) {
      case 10: e.addresses.push(r.string()); break;
      case 18: e.conditions = readConditions(r); break;
      case 26: e.hostname = r.string(); break;
      case 50: e.nodeName = r.string(); break;
      case 58: e.zone = r.string(); break;
      case 66: e.hints = readHints(r); break;
      default: r.skip(t & 7);
    }
  }
  r.close(end);
  return e;
}

function readPort(r: Reader): DiscoveryV1EndpointPort {
  const end = r.lengthEnd();
  const p: DiscoveryV1EndpointPort = {};
  while (r.pos < end) {
    const t = r.uint();
    if (t === 10) p.name = r.string();
    else if (t === 18) p.protocol = r.string();
    else if (t === 24) p.port = r.int32();
    else if (t === 34) p.appProtocol = r.string();
    else r.skip(t & 7);
  }
  r.close(end);
  return p;
}

function readSlice(r: Reader): V1EndpointSlice {
  const end = r.lengthEnd();
  const s: V1EndpointSlice = { addressType: '', endpoints: [] };
  while (r.pos < end) {
    const t = r.uint();
    if (t === 10) s.metadata = readObjectMeta(r, ANNOTATIONS) as V1EndpointSlice['metadata'];
    else if (t === 18) s.endpoints.push(readEndpoint(r));
    else if (t === 26) (s.ports ??= []).push(readPort(r));
    else if (t === 34) s.addressType = r.string();
    else r.skip(t & 7);
  }
  r.close(end);
  return s;
}

/** An EndpointSliceList page in protobuf (throws ProtoError when it is not one). */
export function openEndpointSliceList(body: Buffer): OpenedList<V1EndpointSlice> {
  return openList(body, 'EndpointSliceList', readSlice);
}
