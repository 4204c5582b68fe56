// Table tests: Service + EndpointSlices + Node → frontends and backend sets,
// against kube-proxy's semantics (pkg/proxy/topology.go CategorizeEndpoints,
// endpointslicecache.go, serviceport.go, iptables/proxier.go).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import type { NodeContext, ServiceTranslation, TranslateOptions } from '../../src/model/frontend';
import { translateService } from '../../src/translate';
import { HTTP, NODE, ep, slice, summarize, svc } from './translate-fixtures';
import { slimService, slimSlice, StringPool } from '../../src/agent/slim';

const CIP = 'ClusterIP 10.96.0.10:80/TCP';
const NP = 'NodePort 192.0.2.10:30080/TCP';
const NP_IN = `${NP} internal`;
const LB = 'LoadBalancer 203.0.113.7:80/TCP';
const LB_IN = `${LB} internal`;
const EIP = 'ExternalIP 203.0.113.50:80/TCP';
const EIP_IN = `${EIP} internal`;

// Local ready (node-a, zone-a), remote ready same zone, remote ready other zone.
const A = (o = {}) => ep('198.18.1.1', { node: 'node-a', zone: 'zone-a', ...o });
const B = (o = {}) => ep('198.18.1.2', { node: 'node-b', zone: 'zone-a', ...o });
const C = (o = {}) => ep('198.18.1.3', { node: 'node-c', zone: 'zone-b', ...o });
const a = '198.18.1.1:8080';
const b = '198.18.1.2:8080';
const c = '198.18.1.3:8080';
const NOT_READY = { ready: false, serving: false, terminating: false };
const TERMINATING = { ready: false, serving: true, terminating: true };
const TERMINATING_NOT_SERVING = { ready: false, serving: false, terminating: true };

const NODEPORT = { type: 'NodePort', ports: [{ ...HTTP, nodePort: 30080 }] };
const LOADBALANCER = {
  type: 'LoadBalancer',
  ports: [{ ...HTTP, nodePort: 30080 }],
  status: { loadBalancer: { ingress: [{ ip: '203.0.113.7' }] } },
};
const ETP_LOCAL = { externalTrafficPolicy: 'Local' };
const ITP_LOCAL = { internalTrafficPolicy: 'Local' };

interface Row {
  name: string;
  svc: V1Service;
  slices?: V1EndpointSlice[];
  node?: NodeContext;
  opts?: Partial<TranslateOptions>;
  /** frontend id → backends ("ip:port", " T" = terminating fallback); must match exactly. */
  want: Record<string, string[]>;
  /** Problem reasons, in order. */
  problems?: string[];
  check?: (t: ServiceTranslation) => void;
}

const rows: Row[] = [
  // ---- ready / serving / terminating (CategorizeEndpoints) -------------------
  { name: 'ClusterIP: every ready endpoint', svc: svc(), slices: [slice('s1', [C(), A(), B()])], want: { [CIP]: [a, b, c] } },
  { name: 'conditions nil: ready', svc: svc(), slices: [slice('s1', [ep('198.18.1.1')])], want: { [CIP]: [a] } },
  { name: 'not-ready endpoint left out', svc: svc(), slices: [slice('s1', [A(NOT_READY), B()])], want: { [CIP]: [b] } },
  {
    name: 'no ready endpoint: serving+terminating fallback',
    svc: svc(),
    slices: [slice('s1', [A(TERMINATING), B(TERMINATING), C(NOT_READY)])],
    want: { [CIP]: [`${a} T`, `${b} T`] },
  },
  {
    name: 'terminating but not serving: never used',
    svc: svc(),
    slices: [slice('s1', [A(TERMINATING_NOT_SERVING)])],
    want: { [CIP]: [] },
  },
  {
    name: 'serving nil counts as serving (kube-proxy: nil = true)',
    svc: svc(),
    slices: [slice('s1', [A({ ready: false, terminating: true })])],
    want: { [CIP]: [`${a} T`] },
  },
  {
    name: 'one ready endpoint: terminating ones are not added',
    svc: svc(),
    slices: [slice('s1', [A(TERMINATING), B()])],
    want: { [CIP]: [b] },
  },
  {
    name: 'ready and terminating (publishNotReadyAddresses): in through ready, not flagged',
    svc: svc(),
    slices: [slice('s1', [A({ ready: true, serving: true, terminating: true })])],
    want: { [CIP]: [a] },
  },
  { name: 'no slices: ClusterIP frontend with no backends (refused)', svc: svc(), slices: [], want: { [CIP]: [] } },

  // ---- internalTrafficPolicy -------------------------------------------------
  {
    name: 'ITP Local: only local endpoints',
    svc: svc(ITP_LOCAL),
    slices: [slice('s1', [A(), B(), C()])],
    want: { [CIP]: [a] },
    check: (t) => assert.equal(t.frontends[0]?.internalLocal, true),
  },
  { name: 'ITP Local, no local endpoint: empty, no remote fallback', svc: svc(ITP_LOCAL), slices: [slice('s1', [B(), C()])], want: { [CIP]: [] } },
  {
    name: 'ITP Local, endpoints only on other nodes: DROP (kube-proxy drops, it does not reject)',
    svc: svc(ITP_LOCAL),
    slices: [slice('s1', [B(), C()])],
    want: { [CIP]: [] },
    check: (t) => assert.deepEqual(t.frontends.map((f) => f.noBackendVerdict), ['drop']),
  },
  {
    name: 'ITP Local, no endpoints at all: REJECT',
    svc: svc(ITP_LOCAL),
    slices: [],
    want: { [CIP]: [] },
    check: (t) => assert.deepEqual(t.frontends.map((f) => f.noBackendVerdict), ['reject']),
  },
  {
    name: 'ITP Local, only not-ready remote endpoints: REJECT (none usable anywhere)',
    svc: svc(ITP_LOCAL),
    slices: [slice('s1', [B(NOT_READY)])],
    want: { [CIP]: [] },
    check: (t) => assert.deepEqual(t.frontends.map((f) => f.noBackendVerdict), ['reject']),
  },
  {
    name: 'eTP Local without local endpoints: external scope DROP, internal twin has backends, ClusterIP too',
    svc: svc({ ...NODEPORT, ...ETP_LOCAL }),
    slices: [slice('s1', [B(), C()])],
    want: { [CIP]: [b, c], [NP]: [], [NP_IN]: [b, c] },
    check: (t) => assert.deepEqual(t.frontends.map((f) => `${f.kind} ${f.scope} ${f.noBackendVerdict}`),
      ['ClusterIP external reject', 'NodePort external drop', 'NodePort internal reject']),
  },
  {
    name: 'eTP Local, no endpoints at all: every frontend REJECTs',
    svc: svc({ ...NODEPORT, ...ETP_LOCAL }),
    slices: [],
    want: { [CIP]: [], [NP]: [], [NP_IN]: [] },
    check: (t) => assert.ok(t.frontends.every((f) => f.noBackendVerdict === 'reject')),
  },
  {
    name: 'ITP Local: local terminating fallback even when remote ready exist',
    svc: svc(ITP_LOCAL),
    slices: [slice('s1', [A(TERMINATING), B()])],
    want: { [CIP]: [`${a} T`] },
  },
  {
    name: 'ITP Local ignores topology hints',
    svc: svc(ITP_LOCAL),
    slices: [slice('s1', [A({ zones: ['zone-b'] }), C({ zones: ['zone-b'] })])],
    want: { [CIP]: [a] },
  },

  // ---- NodePort / externalTrafficPolicy -----------------------------------------
  { name: 'NodePort, eTP Cluster: every endpoint', svc: svc(NODEPORT), slices: [slice('s1', [A(), B()])], want: { [CIP]: [a, b], [NP]: [a, b] } },
  {
    name: 'NodePort on every node address',
    svc: svc(NODEPORT),
    slices: [slice('s1', [B()])],
    node: { ...NODE, addresses: ['192.0.2.11', '192.0.2.10'] },
    want: { [CIP]: [b], [NP]: [b], 'NodePort 192.0.2.11:30080/TCP': [b] },
  },
  {
    name: 'eTP Local: external = local, internal twin = cluster-wide',
    svc: svc({ ...NODEPORT, ...ETP_LOCAL }),
    slices: [slice('s1', [A(), B(), C()])],
    want: { [CIP]: [a, b, c], [NP]: [a], [NP_IN]: [a, b, c] },
    check: (t) => {
      const np = t.frontends.filter((f) => f.kind === 'NodePort');
      assert.deepEqual(
        np.map((f) => [f.scope, f.externalLocal, f.twoScopes]),
        [['external', true, true], ['internal', false, true]],
      );
      assert.equal(t.frontends[0]?.twoScopes, false, 'ClusterIP has one scope');
    },
  },
  {
    name: 'eTP Local, no local endpoint: external empty, twin still cluster-wide',
    svc: svc({ ...NODEPORT, ...ETP_LOCAL }),
    slices: [slice('s1', [B(), C()])],
    want: { [CIP]: [b, c], [NP]: [], [NP_IN]: [b, c] },
  },
  {
    name: 'eTP Local + ITP Local: ClusterIP local, twin cluster-wide',
    svc: svc({ ...NODEPORT, ...ETP_LOCAL, ...ITP_LOCAL }),
    slices: [slice('s1', [A(), B()])],
    want: { [CIP]: [a], [NP]: [a], [NP_IN]: [a, b] },
  },
  {
    name: 'eTP Local: local terminating fallback, cluster set stays ready-only',
    svc: svc({ ...NODEPORT, ...ETP_LOCAL }),
    slices: [slice('s1', [A(TERMINATING), B()])],
    want: { [CIP]: [b], [NP]: [`${a} T`], [NP_IN]: [b] },
  },
  {
    name: 'eTP Local: fallback independently for cluster and local sets',
    svc: svc({ ...NODEPORT, ...ETP_LOCAL }),
    slices: [slice('s1', [A(), B(TERMINATING)])],
    want: { [CIP]: [a], [NP]: [a], [NP_IN]: [a] },
  },
  {
    name: 'eTP Local ignored on a plain ClusterIP Service without external IPs',
    svc: svc({ ...ETP_LOCAL }),
    slices: [slice('s1', [A(), B()])],
    want: { [CIP]: [a, b] },
  },

  // ---- LoadBalancer ---------------------------------------------------------------
  {
    name: 'LoadBalancer: ClusterIP + NodePort + ingress IP',
    svc: svc(LOADBALANCER),
    slices: [slice('s1', [A(), C()])],
    want: { [CIP]: [a, c], [NP]: [a, c], [LB]: [a, c] },
  },
  {
    name: 'LoadBalancer: ipMode Proxy and hostname-only ingress ignored, ipMode VIP kept',
    svc: svc({
      ...LOADBALANCER,
      status: {
        loadBalancer: {
          ingress: [{ ip: '203.0.113.7', ipMode: 'VIP' }, { ip: '203.0.113.8', ipMode: 'Proxy' }, { hostname: 'lb.example.com' }],
        },
      },
    }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b], [NP]: [b], [LB]: [b] },
  },
  {
    name: 'LoadBalancer, allocateLoadBalancerNodePorts false: no NodePort',
    svc: svc({ ...LOADBALANCER, allocateLoadBalancerNodePorts: false, ports: [HTTP] }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b], [LB]: [b] },
  },
  {
    name: 'LoadBalancer eTP Local: LB and NodePort get twins',
    svc: svc({ ...LOADBALANCER, ...ETP_LOCAL, healthCheckNodePort: 31999 }),
    slices: [slice('s1', [A(), B()])],
    want: { [CIP]: [a, b], [NP]: [a], [NP_IN]: [a, b], [LB]: [a], [LB_IN]: [a, b] },
  },
  {
    name: 'loadBalancerSourceRanges: LoadBalancer frontends only, trimmed, family-filtered',
    svc: svc({ ...LOADBALANCER, loadBalancerSourceRanges: [' 198.51.100.0/24 ', 'fd00::/8', '198.51.100.77/32'] }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b], [NP]: [b], [LB]: [b] },
    check: (t) => {
      for (const f of t.frontends) {
        assert.deepEqual(f.sourceRanges, f.kind === 'LoadBalancer' ? ['198.51.100.0/24', '198.51.100.77/32'] : [], f.kind);
      }
    },
  },
  {
    name: 'invalid loadBalancerSourceRange: problem, the rest kept',
    svc: svc({ ...LOADBALANCER, loadBalancerSourceRanges: ['198.51.100.0/24', '198.51.100.0/33'] }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b], [NP]: [b], [LB]: [b] },
    problems: ['invalid_source_range'],
    check: (t) => assert.deepEqual(t.frontends.find((f) => f.kind === 'LoadBalancer')?.sourceRanges, ['198.51.100.0/24']),
  },

  // ---- ExternalIPs ----------------------------------------------------------------
  { name: 'ExternalIPs, eTP Cluster', svc: svc({ externalIPs: ['203.0.113.50'] }), slices: [slice('s1', [A(), C()])], want: { [CIP]: [a, c], [EIP]: [a, c] } },
  {
    name: 'ExternalIPs on ClusterIP type with eTP Local: external = local + twin',
    svc: svc({ externalIPs: ['203.0.113.50'], ...ETP_LOCAL }),
    slices: [slice('s1', [A(), C()])],
    want: { [CIP]: [a, c], [EIP]: [a], [EIP_IN]: [a, c] },
  },
  {
    name: 'external IP equal to LB IP: one frontend, ExternalIP wins (its rule comes first)',
    svc: svc({ ...LOADBALANCER, externalIPs: ['203.0.113.7'] }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b], [NP]: [b], 'ExternalIP 203.0.113.7:80/TCP': [b] },
  },

  // ---- ports and protocols -------------------------------------------------------
  {
    name: 'SCTP port skipped with a problem, TCP port programmed',
    svc: svc({ ports: [HTTP, { name: 'sig', port: 3868, protocol: 'SCTP' }] }),
    slices: [slice('s1', [B()], { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }, { name: 'sig', port: 3868, protocol: 'SCTP' }] })],
    want: { [CIP]: [b] },
    problems: ['unsupported_protocol'],
  },
  {
    name: 'unknown protocol: invalid_protocol, port skipped',
    svc: svc({ ports: [HTTP, { name: 'x', port: 81, protocol: 'ICMP' }] }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b] },
    problems: ['invalid_protocol'],
  },
  {
    name: 'UDP port matched by name and protocol (a TCP slice port of that name does not match)',
    svc: svc({ ports: [{ name: 'dns', port: 53, protocol: 'UDP' }, { name: 'dns-tcp', port: 53, protocol: 'TCP' }] }),
    slices: [
      slice('s1', [B()], {
        ports: [
          { name: 'dns', port: 5353, protocol: 'UDP' },
          { name: 'dns-tcp', port: 5354, protocol: 'TCP' },
        ],
      }),
      slice('s2', [C()], { ports: [{ name: 'dns', port: 5355, protocol: 'TCP' }] }),
    ],
    want: { 'ClusterIP 10.96.0.10:53/UDP': ['198.18.1.2:5353'], 'ClusterIP 10.96.0.10:53/TCP': ['198.18.1.2:5354'] },
  },
  {
    name: 'named targetPort resolved per slice (different pods, different numbers)',
    svc: svc(),
    slices: [slice('s1', [A()], { ports: [{ name: 'http', port: 8080 }] }), slice('s2', [C()], { ports: [{ name: 'http', port: 9090 }] })],
    want: { [CIP]: [a, '198.18.1.3:9090'] },
  },
  {
    name: 'multi-port Service: each port gets its own slice port',
    svc: svc({ ports: [HTTP, { name: 'metrics', port: 9100, protocol: 'TCP' }] }),
    slices: [slice('s1', [A(), B()], { ports: [{ name: 'http', port: 8080 }, { name: 'metrics', port: 9102 }] })],
    want: { [CIP]: [a, b], 'ClusterIP 10.96.0.10:9100/TCP': ['198.18.1.1:9102', '198.18.1.2:9102'] },
  },
  {
    name: 'unnamed Service port matches unnamed slice port',
    svc: svc({ ports: [{ port: 80, targetPort: 8080, protocol: 'TCP' }] }),
    slices: [slice('s1', [B()], { ports: [{ name: '', port: 8080, protocol: 'TCP' }] })],
    want: { [CIP]: [b] },
    check: (t) => assert.equal(t.frontends[0]?.portName, ''),
  },
  {
    name: 'port 0 and port 70000: invalid_port, skipped',
    svc: svc({ ports: [HTTP, { name: 'zero', port: 0 }, { name: 'big', port: 70000 }] }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b] },
    problems: ['invalid_port', 'invalid_port'],
  },
  {
    name: 'nodePort out of range: NodePort frontends skipped, ClusterIP kept',
    svc: svc({ type: 'NodePort', ports: [{ ...HTTP, nodePort: 70000 }] }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b] },
    problems: ['invalid_port'],
  },
  {
    name: 'slice port with nil number ("all ports") ignored, port 0 is a problem',
    svc: svc({ ports: [HTTP, { name: 'other', port: 81 }] }),
    slices: [slice('s1', [B()], { ports: [{ name: 'http', port: 8080 }, { name: 'other' }] }), slice('s2', [C()], { ports: [{ name: 'http', port: 0 }] })],
    want: { [CIP]: [b], 'ClusterIP 10.96.0.10:81/TCP': [] },
    problems: ['invalid_port'],
  },

  // ---- dedup across slices ---------------------------------------------------------
  {
    name: 'endpoint in two slices counted once',
    svc: svc(),
    slices: [slice('s1', [A(), B()]), slice('s2', [B(), C()])],
    want: { [CIP]: [a, b, c] },
  },
  {
    name: 'dedup: terminating copy replaced by a ready copy from another slice',
    svc: svc(),
    slices: [slice('s1', [B(TERMINATING)]), slice('s2', [B()])],
    want: { [CIP]: [b] },
  },
  {
    name: 'dedup: ready copy not replaced by a later terminating copy',
    svc: svc(),
    slices: [slice('s1', [B()]), slice('s2', [B(TERMINATING)])],
    want: { [CIP]: [b] },
  },
  {
    name: 'only the first address of an endpoint is used',
    svc: svc(),
    slices: [slice('s1', [ep('198.18.1.2', { extra: ['198.18.1.9'] })])],
    want: { [CIP]: [b] },
  },

  // ---- topology: zone hints (PreferClose / PreferSameZone) ------------------------
  {
    name: 'zone hints: only endpoints hinted for this zone',
    svc: svc({ trafficDistribution: 'PreferClose' }),
    slices: [slice('s1', [A({ zones: ['zone-a'] }), B({ zones: ['zone-a'] }), C({ zones: ['zone-b'] })])],
    want: { [CIP]: [a, b] },
  },
  {
    name: 'zone hints: an endpoint hinted for another zone only, even if in ours',
    svc: svc({ trafficDistribution: 'PreferSameZone' }),
    slices: [slice('s1', [A({ zones: ['zone-b'] }), C({ zones: ['zone-a'] })])],
    want: { [CIP]: [c] },
  },
  {
    name: 'zone hints: one ready endpoint without hints → all endpoints',
    svc: svc(),
    slices: [slice('s1', [A({ zones: ['zone-a'] }), B(), C({ zones: ['zone-b'] })])],
    want: { [CIP]: [a, b, c] },
  },
  {
    name: 'zone hints: a not-ready endpoint without hints does not disable them',
    svc: svc(),
    slices: [slice('s1', [A({ zones: ['zone-a'] }), B(NOT_READY), C({ zones: ['zone-b'] })])],
    want: { [CIP]: [a] },
  },
  {
    name: 'zone hints: none for this zone → all endpoints',
    svc: svc(),
    slices: [slice('s1', [A({ zones: ['zone-c'] }), C({ zones: ['zone-b'] })])],
    want: { [CIP]: [a, c] },
  },
  {
    name: 'zone hints: node without zone label → all endpoints',
    svc: svc(),
    node: { name: 'node-a', addresses: ['192.0.2.10'] },
    slices: [slice('s1', [A({ zones: ['zone-a'] }), C({ zones: ['zone-b'] })])],
    want: { [CIP]: [a, c] },
  },
  {
    name: 'zone hints: ready endpoints in zone, terminating ones ignored',
    svc: svc(),
    slices: [slice('s1', [A({ zones: ['zone-a'] }), B({ ...TERMINATING, zones: ['zone-a'] }), C({ zones: ['zone-b'] })])],
    want: { [CIP]: [a] },
  },
  {
    name: 'zone hints + no ready endpoint: terminating fallback ignores topology',
    svc: svc(),
    slices: [slice('s1', [A({ ...TERMINATING, zones: ['zone-a'] }), C({ ...TERMINATING, zones: ['zone-b'] })])],
    want: { [CIP]: [`${a} T`, `${c} T`] },
  },
  {
    name: 'zone hints apply to the eTP Local twin (cluster set), not to the local set',
    svc: svc({ ...NODEPORT, ...ETP_LOCAL }),
    slices: [slice('s1', [A({ zones: ['zone-b'] }), B({ zones: ['zone-a'] }), C({ zones: ['zone-b'] })])],
    want: { [CIP]: [b], [NP]: [a], [NP_IN]: [b] },
  },

  // ---- topology: node hints (PreferSameNode) ------------------------------------------
  {
    name: 'node hints: only endpoints hinted for this node',
    svc: svc({ trafficDistribution: 'PreferSameNode' }),
    slices: [
      slice('s1', [
        A({ nodes: ['node-a'], zones: ['zone-a'] }),
        B({ nodes: ['node-b'], zones: ['zone-a'] }),
        C({ nodes: ['node-c'], zones: ['zone-b'] }),
      ]),
    ],
    want: { [CIP]: [a] },
  },
  {
    name: 'node hints: none for this node → zone hints',
    svc: svc({ trafficDistribution: 'PreferSameNode' }),
    slices: [slice('s1', [B({ nodes: ['node-b'], zones: ['zone-a'] }), C({ nodes: ['node-c'], zones: ['zone-b'] })])],
    want: { [CIP]: [b] },
  },
  {
    name: 'node hints: one ready endpoint without node hint → zone hints',
    svc: svc(),
    slices: [slice('s1', [A({ nodes: ['node-a'], zones: ['zone-a'] }), B({ zones: ['zone-a'] }), C({ nodes: ['node-c'], zones: ['zone-b'] })])],
    want: { [CIP]: [a, b] },
  },
  {
    name: 'node hints without zone hints, none for this node → all',
    svc: svc(),
    slices: [slice('s1', [B({ nodes: ['node-b'] }), C({ nodes: ['node-c'] })])],
    want: { [CIP]: [b, c] },
  },

  // ---- session affinity -----------------------------------------------------------
  {
    name: 'sessionAffinity ClientIP: default timeout 10800',
    svc: svc({ sessionAffinity: 'ClientIP' }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b] },
    check: (t) => assert.equal(t.frontends[0]?.affinityTimeoutSeconds, 10800),
  },
  {
    name: 'sessionAffinity ClientIP with timeout on every frontend',
    svc: svc({ ...NODEPORT, sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } } }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b], [NP]: [b] },
    check: (t) => assert.deepEqual(t.frontends.map((f) => f.affinityTimeoutSeconds), [60, 60]),
  },
  {
    name: 'sessionAffinity None: 0',
    svc: svc({ sessionAffinity: 'None', sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } } }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b] },
    check: (t) => assert.equal(t.frontends[0]?.affinityTimeoutSeconds, 0),
  },

  // ---- bad input -------------------------------------------------------------------
  {
    name: 'invalid endpoint address: invalid_ip, endpoint skipped, others kept',
    svc: svc(),
    slices: [slice('s1', [ep('198.18.1.300'), B(), ep('not-an-ip')])],
    want: { [CIP]: [b] },
    problems: ['invalid_ip'],
    check: (t) => {
      assert.equal(t.problems[0]?.object, 'EndpointSlice default/s1');
      assert.match(t.problems[0]?.message ?? '', /2 endpoint address\(es\).*"198\.18\.1\.300", "not-an-ip"/);
    },
  },
  {
    name: 'IPv4 address in an IPv6 slice (dual-stack): invalid_ip',
    svc: svc({ clusterIPs: ['10.96.0.10', 'fd00:96::10'], ipFamilies: ['IPv4', 'IPv6'] }),
    opts: { ipFamilies: ['IPv4', 'IPv6'] },
    slices: [slice('s6', [ep('198.18.1.2')], { addressType: 'IPv6' })],
    want: { [CIP]: [], 'ClusterIP [fd00:96::10]:80/TCP': [] },
    problems: ['invalid_ip'],
  },
  {
    name: 'IPv6 slice ignored when only IPv4 is programmed (no problem)',
    svc: svc(),
    slices: [slice('s1', [B()]), slice('s6', [ep('fd00::2')], { addressType: 'IPv6' })],
    want: { [CIP]: [b] },
  },
  {
    name: 'invalid ClusterIP: problem, ClusterIP frontend skipped, NodePort kept',
    svc: svc({ ...NODEPORT, clusterIP: '10.96.0.300', clusterIPs: ['10.96.0.300'] }),
    slices: [slice('s1', [B()])],
    want: { [NP]: [b] },
    problems: ['invalid_cluster_ip'],
  },
  {
    name: 'invalid external IP: problem, valid one kept',
    svc: svc({ externalIPs: ['203.0.113.50', '203.0.113.500'] }),
    slices: [slice('s1', [B()])],
    want: { [CIP]: [b], [EIP]: [b] },
    problems: ['invalid_ip'],
  },
  {
    name: 'a frontend over the per-frontend guard keeps the first backends and reports it (kube-proxy has no cap)',
    svc: svc(LOADBALANCER),
    opts: { maxEndpointsPerService: 2 },
    slices: [slice('s1', [A(), B(), C()])],
    want: { [CIP]: [a, b], [NP]: [a, b], [LB]: [a, b] },
    problems: ['too_many_endpoints'],
  },
  {
    name: 'endpoint count at the limit: programmed',
    svc: svc(),
    opts: { maxEndpointsPerService: 3 },
    slices: [slice('s1', [A(), B(), C()]), slice('s2', [C()])],
    want: { [CIP]: [a, b, c] },
  },
  {
    name: 'the guard is per frontend: a 3-port Service with more distinct backends than the limit is programmed whole',
    svc: svc({ ports: [HTTP, { name: 'metrics', port: 9090, protocol: 'TCP' }, { name: 'dns', port: 53, protocol: 'UDP' }] }),
    opts: { maxEndpointsPerService: 3 },
    slices: [slice('s1', [A(), B(), C()], { ports: [{ name: 'http', port: 8080 }, { name: 'metrics', port: 9100 }, { name: 'dns', port: 5353, protocol: 'UDP' }] })],
    want: {
      [CIP]: [a, b, c],
      'ClusterIP 10.96.0.10:9090/TCP': ['198.18.1.1:9100', '198.18.1.2:9100', '198.18.1.3:9100'],
      'ClusterIP 10.96.0.10:53/UDP': ['198.18.1.1:5353', '198.18.1.2:5353', '198.18.1.3:5353'],
    },
  },
  {
    name: 'address spellings canonicalised (leading zeros, IPv6 compression)',
    svc: svc({ clusterIPs: ['10.96.0.10', 'FD00:96:0:0::0010'], ipFamilies: ['IPv4', 'IPv6'] }),
    opts: { ipFamilies: ['IPv4', 'IPv6'] },
    slices: [slice('s1', [ep('198.018.001.002')]), slice('s6', [ep('fd00:0:0:0::0002')], { addressType: 'IPv6' })],
    want: { [CIP]: [b], 'ClusterIP [fd00:96::10]:80/TCP': ['[fd00::2]:8080'] },
  },

  // ---- dual-stack ------------------------------------------------------------------
  {
    name: 'dual-stack: one set of frontends per family, backends from that family only',
    svc: svc({
      ...NODEPORT,
      clusterIPs: ['10.96.0.10', 'fd00:96::10'],
      ipFamilies: ['IPv4', 'IPv6'],
      externalIPs: ['203.0.113.50', 'fd00:113::50'],
    }),
    node: { ...NODE, addresses: ['192.0.2.10', 'fd00:2::10'] },
    opts: { ipFamilies: ['IPv4', 'IPv6'] },
    slices: [slice('s4', [B()]), slice('s6', [ep('fd00::2', { node: 'node-b' })], { addressType: 'IPv6' })],
    want: {
      [CIP]: [b],
      'ClusterIP [fd00:96::10]:80/TCP': ['[fd00::2]:8080'],
      [NP]: [b],
      'NodePort [fd00:2::10]:30080/TCP': ['[fd00::2]:8080'],
      [EIP]: [b],
      'ExternalIP [fd00:113::50]:80/TCP': ['[fd00::2]:8080'],
    },
  },
  {
    name: 'IPv6-only Service on an IPv4-only node: nothing, no problem',
    svc: svc({ clusterIP: 'fd00:96::10', clusterIPs: ['fd00:96::10'], ipFamilies: ['IPv6'] }),
    slices: [slice('s6', [ep('fd00::2')], { addressType: 'IPv6' })],
    want: {},
  },

  // ---- Services without selectors, foreign slices -----------------------------------
  {
    name: 'hand-written slice (no selector): no port name, no protocol, no conditions',
    svc: svc({ ports: [{ port: 80, protocol: 'TCP' }] }),
    slices: [
      {
        metadata: { name: 'manual', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } },
        addressType: 'IPv4',
        ports: [{ port: 8080 }],
        endpoints: [{ addresses: ['198.18.1.2'] }],
      },
    ],
    want: { [CIP]: [b] },
  },
  {
    name: 'slices of another Service or namespace, or labelled headless, are ignored',
    svc: svc(),
    slices: [
      slice('s1', [B()]),
      slice('other', [C()], { service: 'other' }),
      slice('ns', [C()], { namespace: 'kube-system' }),
      slice('hl', [A()], { labels: { 'service.kubernetes.io/headless': '' } }),
    ],
    want: { [CIP]: [b] },
  },
  {
    name: 'FQDN slices are ignored',
    svc: svc(),
    slices: [slice('s1', [B()]), slice('f', [ep('example.com')], { addressType: 'FQDN' })],
    want: { [CIP]: [b] },
  },
];

for (const row of rows) {
  test(`translate: ${row.name}`, () => {
    const opts: TranslateOptions = { maxEndpointsPerService: 10000, ...row.opts };
    const t = translateService(row.svc, row.slices ?? [], row.node ?? NODE, opts);
    assert.deepEqual(summarize(t), row.want);
    assert.deepEqual(
      t.problems.map((p) => p.reason),
      row.problems ?? [],
      t.problems.map((p) => p.message).join('\n'),
    );
    row.check?.(t);
    // The agent keeps slim records (src/agent/slim.ts), not the API objects: same translation.
    const pool = new StringPool();
    assert.deepEqual(translateService(slimService(row.svc, pool), (row.slices ?? []).map((s) => slimSlice(s, pool)), row.node ?? NODE, opts), t, 'slim records translate the same');
  });
}

test('translate: table has 40+ rows', () => {
  assert.ok(rows.length >= 40, `${rows.length} rows`);
});
