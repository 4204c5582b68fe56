// core/v1 ServiceList in protobuf -> the JSON form's shape, for the fields
// the agent reads (slim.ts keeps them; the rest of a Service is skipped by
// length). Field numbers from k8s.io/api core/v1 generated.proto (v0.34):
//
//   Service       = 1 metadata, 2 spec, 3 status
//   ServiceSpec   = 1 ports, 2 map selector, 3 clusterIP, 4 type, 5 externalIPs, 7 sessionAffinity,
//                   8 loadBalancerIP, 9 loadBalancerSourceRanges, 10 externalName, 11 externalTrafficPolicy,
//                   12 healthCheckNodePort, 13 publishNotReadyAddresses, 14 sessionAffinityConfig,
//                   17 ipFamilyPolicy, 18 clusterIPs, 19 ipFamilies, 20 allocateLoadBalancerNodePorts,
//                   21 loadBalancerClass, 22 internalTrafficPolicy, 23 trafficDistribution
//   ServicePort   = 1 name, 2 protocol, 3 port, 4 IntOrString targetPort, 5 nodePort, 6 appProtocol
//   IntOrString   = 1 type (0 int, 1 string), 2 intVal, 3 strVal
//   SessionAffinityConfig = 1 clientIP; ClientIPConfig = 1 timeoutSeconds
//   ServiceStatus = 1 loadBalancer; LoadBalancerStatus = 1 ingress; LoadBalancerIngress = 1 ip, 2 hostname, 3 ipMode
//
// Plain Go strings/ints with `omitempty` in JSON (type, clusterIP, sessionAffinity,
// healthCheckNodePort, port names, nodePort, ingress ip...) are always on the
// wire; empty means absent. Pointer fields (internalTrafficPolicy,
// trafficDistribution, ipFamilyPolicy, ...) are on the wire only when set.
import type { V1Service, V1ServicePort, V1ServiceSpec, V1LoadBalancerIngress } from '@kubernetes/client-node';
import { LB_ALGORITHM_ANNOTATION } from '../../translate';
import { annotationKeys, openList, readObjectMeta, type OpenedList } from './meta';
import type { Reader } from './wire';

const ANNOTATIONS = annotationKeys([LB_ALGORITHM_ANNOTATION]);

function readPort(r: Reader): V1ServicePort {
  const end = r.lengthEnd();
  const p: Partial<V1ServicePort> = {};
  while (r.pos < end) {
    const t = r.uint();
    switch (t) {
      case 10: { const v = r.nonEmpty(); if (v !== undefined) p.name = v; } break;
      case 18: { const v = r.nonEmpty(); if (v !== undefined) p.protocol = v; } break;
      case 24: p.port = r.int32(); break;
      case 34: p.targetPort = readIntOrString(r); break;
      case 40: { const v = r.int32(); if (v !== 0) p.nodePort = v; break; }
      case 50: p.appProtocol = r.string(); break;
      default: r.skip(t & 7);
    }
  }
  r.close(end);
  p.port ??= 0;
  return p as V1ServicePort;
}

function readIntOrString(r: Reader): number | string {
  const end = r.lengthEnd();
  let type = 0;
  let int = 0;
  let str = '';
  while (r.pos < end) {
    const t = r.uint();
    if (t === 8) type = r.int64();
    else if (t === 16) int = r.int32();
    else if (t === 26) str = r.string();
    else r.skip(t & 7);
  }
  r.close(end);
  return type === 1 ? str : int;
}

function readStrings(r: Reader, into: string[] | undefined): string[] {
  const out = into ?? [];
  out.push(r.string());
  return out;
}

function readSessionAffinityConfig(r: Reader): NonNullable<V1ServiceSpec['sessionAffinityConfig']> {
  const end = r.lengthEnd();
  const out: NonNullable<V1ServiceSpec['sessionAffinityConfig']> = {};
  while (r.pos < end) {
    const t = r.uint();
    if (t === 10) {
      const e = r.lengthEnd();
      out.clientIP = {};
      while (r.pos < e) {
        const tt = r.uint();
        if (tt === 8) out.clientIP.timeoutSeconds = r.int32();
        else r.skip(tt & 7);
      }
      r.close(e);
    } else r.skip(t & 7);
  }
  r.close(end);
  return out;
}

function readSpec(r: Reader): V1ServiceSpec {
  const end = r.lengthEnd();
  const s: V1ServiceSpec = {};
  while (r.pos < end) {
    const t = r.uint();
    switch (t) {
      case 10: (s.ports ??= []).push(readPort(r)); break;
      case 18: readSelector(r, (s.selector ??= {})); break;
      case 26: { const v = r.nonEmpty(); if (v !== undefined) s.clusterIP = v; } break;
      case 34: { const v = r.nonEmpty(); if (v !== undefined) s.type = v; } break;
      case 42: s.externalIPs = readStrings(r, s.externalIPs); break;
      case 58: { const v = r.nonEmpty(); if (v !== undefined) s.sessionAffinity = v; } break;
      case 66: { const v = r.nonEmpty(); if (v !== undefined) s.loadBalancerIP = v; } break;
      case 74: s.loadBalancerSourceRanges = readStrings(r, s.loadBalancerSourceRanges); break;
      case 82: { const v = r.nonEmpty(); if (v !== undefined) s.externalName = v; } break;
      case 90: { const v = r.nonEmpty(); if (v !== undefined) s.externalTrafficPolicy = v; } break;
      case 96: { const v = r.int32(); if (v !== 0) s.healthCheckNodePort = v; break; }
      case 104: if (r.bool()) s.publishNotReadyAddresses = true; break;
      case 114: s.sessionAffinityConfig = readSessionAffinityConfig(r); break;
      case 138: s.ipFamilyPolicy = r.string(); break;
      case 146: s.clusterIPs = readStrings(r, s.clusterIPs); break;
      case 154: s.ipFamilies = readStrings(r, s.ipFamilies); break;
      case 160: s.allocateLoadBalancerNodePorts = r.bool(); break;
      case 170: s.loadBalancerClass = r.string(); break;
      case 178: s.internalTrafficPolicy = r.string(); break;
      case 186: s.trafficDistribution = r.string(); break;
      default: r.skip(t & 7);
    }
  }
  r.close(end);
  return s;
}

function readSelector(r: Reader, into: Record<string, string>): void {
  const end = r.lengthEnd();
  let key = '';
  let value = '';
  while (r.pos < end) {
    const t = r.uint();
    if (t === 10) key = r.string();
    else if (t === 18) value = r.string();
    else r.skip(t & 7);
  }
  r.close(end);
  into[key] = value;
}

function readIngress(r: Reader): V1LoadBalancerIngress {
  const end = r.lengthEnd();
  const i: V1LoadBalancerIngress = {};
  while (r.pos < end) {
    const t = r.uint();
    if (t === 10) { const v = r.nonEmpty(); if (v !== undefined) i.ip = v; }
    else if (t === 18) { const v = r.nonEmpty(); if (v !== undefined) i.hostname = v; }
    else if (t === 26) i.ipMode = r.string();
    else r.skip(t & 7);
  }
  r.close(end);
  return i;
}

/** ServiceStatus: only loadBalancer.ingress (conditions are skipped). */
function readStatus(r: Reader): NonNullable<V1Service['status']> {
  const end = r.lengthEnd();
  const ingress: V1LoadBalancerIngress[] = [];
  while (r.pos < end) {
    const t = r.uint();
    if (t === 10) {
      const e = r.lengthEnd();
      while (r.pos < e) {
        const tt = r.uint();
        if (tt === 10) ingress.push(readIngress(r));
        else r.skip(tt & 7);
      }
      r.close(e);
    } else r.skip(t & 7);
  }
  r.close(end);
  return { loadBalancer: ingress.length > 0 ? { ingress } : {} };
}

function readService(r: Reader): V1Service {
  const end = r.lengthEnd();
  const svc: V1Service = {};
  while (r.pos < end) {
    const t = r.uint();
    if (t === 10) svc.metadata = readObjectMeta(r, ANNOTATIONS) as V1Service['metadata'];
    else if (t === 18) svc.spec = readSpec(r);
    else if (t === 26) svc.status = readStatus(r);
    else r.skip(t & 7);
  }
  r.close(end);
  return svc;
}

/** A ServiceList page in protobuf (throws ProtoError when it is not one). */
export function openServiceList(body: Buffer): OpenedList<V1Service> {
  return openList(body, 'ServiceList', readService);
}
