// The conformance matrix: for every Service port of every scenario and for
// every node, the backend set upstream kube-proxy programs (iptables mode,
// then nftables mode; parsed from iptables-save / nft -j list ruleset) must
// equal the one Sluice programs (`sluice services -o json`). One real cluster:
// the Sluice agent runs on every node for the whole test (socket LB on the
// node's cgroup, nothing in netfilter); kube-proxy is started on every node
// for one mode, read, stopped and cleaned up (`kube-proxy --cleanup`), then
// the next mode. No traffic is sent here (traffic.test.ts does that), so the
// two proxies sharing a node namespace cannot carry each other's packets.
//
// Phases change the objects (Service type changes, policy flips, backends
// coming, going and terminating, hints rewritten) and every phase is
// compared again. Rows: scenario, node, kind, frontend, kube-proxy set,
// Sluice set, match. Frontends of externalTrafficPolicy: Local Services get a
// second row for the pod/node path (Sluice's internal scope against
// kube-proxy's short-circuit); see docs/cluster-tier.md.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { startCluster, type Cluster } from './harness';
import { frontendKey, kubeProxyBackendSets, kubeProxySourceRanges, type BackendSets, type FrontendKind } from './kubeProxyOracle';
import { compareBackendSets, formatConformanceTable, missingOnBothSides, withSourceRanges, type ConformanceRow } from './conformance';
import { sluiceBackendSets, sluiceSourceRanges, type SluiceServiceView, type TrafficPath } from './sluiceSets';
import { REPO_ROOT, sluiceBuildMissing, sluiceServices, startSluiceAgent } from './sluiceAgent';
import { setPodStatus, type ClusterPod } from './pods';
import { dumpRules, type KubeProxyMode } from './kubeProxy';
import type { ClusterNode } from './nodes';
import { sleep, waitFor } from './proc';

const NS = 'conf';
const EXT_IP_LOCAL = '198.18.100.21';
const EXT_IP_CLUSTER = '198.18.100.22';
const LB = { cluster: '198.18.200.21', local: '198.18.200.22', noNodePorts: '198.18.200.23', ranges: '198.18.200.24', morph: '198.18.200.25' };
const MODES: KubeProxyMode[] = ['iptables', 'nftables'];
/** Dual-stack scenarios (issue 14): an IPv6 ExternalIP and LoadBalancer IP (fd00::/8, only inside the test namespaces). */
const EXT_IP6 = 'fd00:100::21';
const LB6 = 'fd00:200::21';
/** LoadBalancer ingress IPs of the IPv6 / dual-stack loadBalancerSourceRanges scenarios (v6obs). */
const LB_RANGES6 = { v6: 'fd00:200::22', dsV4: '198.18.200.26', dsV6: 'fd00:200::23', v4OnlyV4: '198.18.200.27', v4OnlyV6: 'fd00:200::24' };
/** How long the two proxies get to agree after kube-proxy's first sync (Sluice may still be applying the last change). */
const SETTLE_MS = 20_000;

/** Service name -> scenario label in the table. */
const SCENARIOS: Record<string, string> = {
  'cluster-ip': 'ClusterIP, named targetPort',
  'multi-port': 'multiple ports (TCP+UDP, named+numeric)',
  'named-ports': 'named port, different number per pod',
  nodeport: 'NodePort eTP Cluster (Local from changes-1)',
  'etp-local': 'eTP Local (NodePort + ExternalIP)',
  'itp-local': 'iTP Local (Cluster from changes-2)',
  'itp-etp-local': 'iTP Local + eTP Local (NodePort)',
  'external-ip': 'ExternalIP eTP Cluster',
  lb: 'LoadBalancer IP eTP Cluster (TCP+UDP)',
  'lb-local': 'LoadBalancer IP eTP Local (Cluster from changes-2)',
  'lb-no-nodeports': 'LoadBalancer, allocateLoadBalancerNodePorts=false',
  'lb-source-ranges': 'LoadBalancer with loadBalancerSourceRanges',
  affinity: 'sessionAffinity ClientIP (NodePort; 600 s, 1200 s from changes-1)',
  'no-endpoints': 'no endpoints',
  'not-ready-only': 'only a not-ready endpoint',
  terminating: 'terminating fallback (+ a ready pod at changes-3)',
  'terminating-mixed': 'ready + terminating: ready only',
  'terminating-local': 'eTP Local, local endpoint terminating',
  'selectorless-endpoints': 'selector-less, Endpoints mirrored (changed at changes-1)',
  'hints-zone': 'topology hints forZones (swapped at changes-1)',
  'hints-partial': 'topology hints on some endpoints only',
  'hints-other-zone': 'topology hints for another zone only',
  'hints-node': 'topology hints forNodes (PreferSameNode)',
  'td-prefer-close': 'trafficDistribution PreferClose',
  'td-same-node': 'trafficDistribution PreferSameNode',
  morph: 'type ClusterIP > NodePort > LoadBalancer > ClusterIP',
  kubernetes: 'default/kubernetes',
  // h-maglev: the algorithm annotation must not change any backend set.
  'alg-maglev': 'annotated maglev (NodePort)',
  'alg-mh-lb': 'annotated mh (IPVS name; LoadBalancer-less NodePort + ExternalIP)',
  'alg-rr': 'annotated round-robin (ClusterIP)',
  'alg-sh': 'annotated source-hash (NodePort eTP Local)',
  // Dual-stack (issue 14): the API server has an IPv4 and an IPv6 Service CIDR, pods have both families.
  'ds-prefer': 'dual-stack PreferDualStack (NodePort + IPv4/IPv6 ExternalIPs)',
  'ds-require-v6-primary': 'dual-stack RequireDualStack, IPv6 primary (TCP+UDP)',
  'ds-etp-local': 'dual-stack PreferDualStack NodePort eTP Local',
  'v6-single': 'IPv6 SingleStack (NodePort)',
  'v6-lb': 'IPv6 SingleStack LoadBalancer (IPv6 ingress IP)',
  'v6-no-endpoints': 'IPv6 SingleStack, no endpoints',
  'ds-affinity': 'dual-stack RequireDualStack, sessionAffinity ClientIP',
  // loadBalancerSourceRanges of IPv6 and dual-stack LoadBalancers: each family's proxier keeps its family's CIDRs.
  'v6-lb-source-ranges': 'IPv6 SingleStack LoadBalancer with IPv6 loadBalancerSourceRanges',
  'ds-lb-source-ranges': 'dual-stack LoadBalancer, loadBalancerSourceRanges of both families',
  'ds-lb-ranges-v4-only': 'dual-stack LoadBalancer, IPv4-only loadBalancerSourceRanges',
};

interface PhaseResult { phase: string; mode: KubeProxyMode; rows: ConformanceRow[] }

let cluster: Cluster | undefined;
let skipReason: string | undefined;
const results: PhaseResult[] = [];
const pods = new Map<string, ClusterPod>();

describe('conformance: Sluice against upstream kube-proxy', { timeout: 15 * 60_000 }, () => {
  before(async () => {
    const missing = sluiceBuildMissing();
    if (missing) { skipReason = missing; return; }
    const started = await startCluster({ nodes: 2 });
    if (!started.ok) { skipReason = started.skip; return; }
    cluster = started.cluster;
    try {
      for (const n of cluster.nodes) await startSluiceAgent(cluster, n);
      await createScenarios(cluster);
    } catch (err) {
      await cluster.close().catch(() => undefined);
      cluster = undefined;
      throw err;
    }
  });

  after(async () => {
    if (cluster) await cluster.close();
    if (results.length > 0) {
      const dir = join(REPO_ROOT, 'build', 'test-results');
      mkdirSync(dir, { recursive: true });
      const header = [
        '# Generated by test/cluster/conformance.test.ts (the cluster tier): Sluice\'s programmed state against',
        '# upstream kube-proxy\'s rules, per phase, kube-proxy mode, node and frontend. Columns: backend sets',
        '# (<reject>/<drop>: the verdict for an empty set), loadBalancerSourceRanges of LoadBalancer frontends',
        '# ((all): none), result. (absent) on both sides: a frontend the Service should have that neither programs.',
        '# docs/conformance-oracle.txt is a committed copy of build/test-results/conformance.txt.',
        '',
      ].join('\n');
      writeFileSync(join(dir, 'conformance.txt'), header + results.map((r) =>
        `== phase "${r.phase}", Sluice vs kube-proxy ${r.mode}\n${formatConformanceTable(r.rows, { kubeProxy: `kube-proxy ${r.mode}`, sluice: 'sluice' })}\n`).join('\n'));
    }
  });

  const phases: Array<{ name: string; change?: (c: Cluster) => Promise<void> }> = [
    { name: 'initial' },
    { name: 'changes-1', change: changes1 },
    { name: 'changes-2', change: changes2 },
    { name: 'changes-3', change: changes3 },
  ];
  for (const phase of phases) {
    test(`phase ${phase.name}: every scenario matches kube-proxy (iptables, nftables) on every node`, async (t) => {
      const c = cluster;
      if (!c) return t.skip(skipReason ?? 'cluster did not start');
      if (phase.change) await phase.change(c);
      await settleEndpointSlices(c);
      let mismatches = 0;
      const differing: string[] = [];
      for (const mode of MODES) {
        const rows = await comparePhase(c, mode);
        results.push({ phase: phase.name, mode, rows });
        t.diagnostic(`\nphase "${phase.name}": Sluice vs kube-proxy ${mode}\n${formatConformanceTable(rows, { kubeProxy: `kube-proxy ${mode}`, sluice: 'sluice' })}`);
        mismatches += rows.filter((r) => !r.match).length;
        // In the assertion's message too: a CI log may keep only the failing test's message, not its diagnostics.
        for (const r of rows.filter((x) => !x.match)) {
          differing.push(`${mode} ${r.node} ${r.scenario} ${r.kind} ${r.frontend}: kube-proxy ${JSON.stringify(r.kubeProxy ?? null)}${r.kubeProxyRanges ? ` ranges ${r.kubeProxyRanges.join(',')}` : ''}, sluice ${JSON.stringify(r.sluice ?? null)}${r.sluiceRanges ? ` ranges ${r.sluiceRanges.join(',')}` : ''}`);
        }
        // Every scenario shows up in the table (a scenario with no rows would prove nothing).
        const seen = new Set(rows.map((r) => r.scenario.replace(/ · .*$/, '')));
        const absent = Object.values(SCENARIOS).filter((s) => !seen.has(s));
        assert.deepEqual(absent, [], `scenarios without a row in phase ${phase.name} (${mode})`);
      }
      assert.equal(mismatches, 0, `${mismatches} frontend(s) where Sluice differs from kube-proxy in phase ${phase.name} (table above):\n${differing.join('\n')}`);
    });
  }
});

// ---------------------------------------------------------------- comparing

/** Start kube-proxy (mode) on every node, compare each node's sets with Sluice's, stop and clean up. */
async function comparePhase(c: Cluster, mode: KubeProxyMode): Promise<ConformanceRow[]> {
  const proxies = await Promise.all(c.nodes.map((n) => c.startKubeProxy(n, mode)));
  try {
    const rows: ConformanceRow[] = [];
    for (const n of c.nodes) rows.push(...await compareNode(c, n, mode));
    return rows;
  } finally {
    await Promise.all(proxies.map((kp) => c.stopKubeProxy(kp)));
  }
}

async function compareNode(c: Cluster, node: ClusterNode, mode: KubeProxyMode): Promise<ConformanceRow[]> {
  let rows: ConformanceRow[] = [];
  const deadline = Date.now() + SETTLE_MS;
  for (;;) {
    const services = await listServices(c);
    const owner = frontendOwners(services, node);
    const localETP = new Set(services.filter((s) => s.spec?.externalTrafficPolicy === 'Local').map((s) => s.metadata?.name ?? ''));
    const opts = { serviceCidrs: [c.serviceCidr, c.serviceCidr6], loadBalancerIPs: [...Object.values(LB), LB6, ...Object.values(LB_RANGES6)] };
    const view = await sluiceServices(node);
    rows = [];
    for (const path of ['external', 'internal'] as TrafficPath[]) {
      const kp = await kubeProxyBackendSets(node, mode, { ...opts, path });
      const sl = sluiceBackendSets(view, path, [node.ip]);
      // The internal path differs from the external one only for eTP Local's external frontends.
      const keep = (kind: FrontendKind, fe: string): boolean =>
        path === 'external' || (kind !== 'clusterIP' && localETP.has(owner.get(`${kind} ${fe}`) ?? ''));
      const byScenario = new Map<string, { kp: BackendSets; sl: BackendSets }>();
      for (const [kind, sets] of [['kp', kp], ['sl', sl]] as const) {
        for (const k of Object.keys(sets) as FrontendKind[]) {
          for (const fe of Object.keys(sets[k])) {
            if (!keep(k, fe)) continue;
            const svc = owner.get(`${k} ${fe}`) ?? '(not in any scenario)';
            const entry = byScenario.get(svc) ?? { kp: emptySets(), sl: emptySets() };
            entry[kind][k][fe] = sets[k][fe]!;
            byScenario.set(svc, entry);
          }
        }
      }
      const pathRows: ConformanceRow[] = [];
      const labelOf = (svc: string): string => { const l = SCENARIOS[svc] ?? svc; return path === 'external' ? l : `${l} · pod/node path`; };
      for (const [svc, { kp: k, sl: s }] of [...byScenario].sort(([a], [b]) => a.localeCompare(b))) {
        pathRows.push(...compareBackendSets(labelOf(svc), node.name, k, s));
      }
      // Every frontend the Services imply on this node must have a row: one both sides drop is a mismatch too.
      const expected = [...expectedFrontends(services, node)].map(([k]) => {
        const [kind, frontend] = k.split(' ') as [FrontendKind, string];
        return { kind, frontend };
      }).filter((e) => keep(e.kind, e.frontend));
      pathRows.push(...missingOnBothSides((kind, fe) => labelOf(owner.get(`${kind} ${fe}`) ?? ''), node.name, expected, pathRows));
      rows.push(...(path === 'external'
        ? withSourceRanges(pathRows, await kubeProxySourceRanges(node, mode, opts), sluiceSourceRanges(view))
        : pathRows));
    }
    rows.push(...await affinityRows(node, mode, services, view));
    if (rows.every((r) => r.match) || Date.now() > deadline) return rows;
    await sleep(500);
  }
}

/**
 * sessionAffinity ClientIP: the backend sets above do not show it, so one more
 * row per such Service compares the timeouts: kube-proxy's `-m recent
 * --rcheck --seconds N` (iptables) or its affinity set's `timeout` (nftables),
 * against the affinity timeout of every Sluice frontend of the Service.
 */
async function affinityRows(node: ClusterNode, mode: KubeProxyMode, services: V1Service[], view: SluiceServiceView[]): Promise<ConformanceRow[]> {
  const sticky = services.filter((s) => s.spec?.sessionAffinity === 'ClientIP');
  if (sticky.length === 0) return [];
  const rules = await dumpRules(node, mode);
  const rows: ConformanceRow[] = [];
  for (const s of sticky) {
    const name = s.metadata?.name ?? '';
    const key = `${s.metadata?.namespace}/${name}`;
    const kp = new Set<string>();
    if (mode === 'iptables') {
      for (const line of rules.split('\n')) {
        const m = / --seconds (\d+)/.exec(line);
        if (m && line.includes(`--comment "${key}:`)) kp.add(`timeout ${m[1]}s`);
      }
    } else {
      for (const item of (JSON.parse(rules) as { nftables: Array<{ set?: { name?: string; timeout?: number } }> }).nftables) {
        if (item.set?.name?.startsWith('affinity-') && item.set.name.includes(`-${key}/`) && typeof item.set.timeout === 'number') kp.add(`timeout ${item.set.timeout}s`);
      }
    }
    // Every address the Service answers on: cluster IPs, external IPs, LoadBalancer ingress IPs.
    const addresses = [...(s.spec?.clusterIPs ?? []), ...(s.spec?.externalIPs ?? []),
      ...(s.status?.loadBalancer?.ingress ?? []).map((i) => i.ip).filter((ip): ip is string => !!ip)];
    const vips = new Set(addresses.flatMap((ip) => (s.spec?.ports ?? []).map((p) => frontendKey(ip, p.port, p.protocol ?? 'TCP'))));
    const nodePorts = new Set((s.spec?.ports ?? []).filter((p) => p.nodePort)
      .flatMap((p) => nodeAddressesOf(s, node).map((ip) => frontendKey(ip, p.nodePort!, p.protocol ?? 'TCP'))));
    const sl = new Set(view.filter((v) => vips.has(v.frontend) || nodePorts.has(v.frontend))
      .map((v) => (v.affinityTimeoutSeconds ? `timeout ${v.affinityTimeoutSeconds}s` : 'none')));
    const a = [...kp].sort();
    const b = [...sl].sort();
    rows.push({
      scenario: `${SCENARIOS[name] ?? name} · affinity`, node: node.name, kind: 'clusterIP', frontend: 'sessionAffinity timeout',
      kubeProxy: a, sluice: b, match: a.length > 0 && JSON.stringify(a) === JSON.stringify(b),
    });
  }
  return rows;
}

function emptySets(): BackendSets {
  return { clusterIP: {}, externalIP: {}, loadBalancerIP: {}, nodePort: {} };
}

async function listServices(c: Cluster): Promise<V1Service[]> {
  const ours = await c.core.listNamespacedService({ namespace: NS });
  const kubernetes = await c.core.readNamespacedService({ name: 'kubernetes', namespace: 'default' });
  return [...ours.items, kubernetes];
}

/** "<kind> <address:port/proto>" -> Service name, for every frontend a Service implies on `node`. */
function frontendOwners(services: V1Service[], node: ClusterNode): Map<string, string> {
  const owner = expectedFrontends(services, node);
  // Frontends a Service used to have (the morph scenario) still belong to it.
  for (const [k, v] of morphHistory) if (!owner.has(k)) owner.set(k, v);
  return owner;
}

/** The frontends the Services' current specs imply on `node` (what both proxies must program). */
function expectedFrontends(services: V1Service[], node: ClusterNode): Map<string, string> {
  const owner = new Map<string, string>();
  for (const s of services) {
    const name = s.metadata?.name ?? '';
    const ingress = (s.status?.loadBalancer?.ingress ?? []).map((i) => i.ip).filter((ip): ip is string => !!ip);
    for (const p of s.spec?.ports ?? []) {
      const proto = p.protocol ?? 'TCP';
      for (const ip of s.spec?.clusterIPs ?? []) if (ip !== 'None') owner.set(`clusterIP ${frontendKey(ip, p.port, proto)}`, name);
      for (const ip of s.spec?.externalIPs ?? []) owner.set(`externalIP ${frontendKey(ip, p.port, proto)}`, name);
      for (const ip of ingress) owner.set(`loadBalancerIP ${frontendKey(ip, p.port, proto)}`, name);
      if (p.nodePort) for (const ip of nodeAddressesOf(s, node)) owner.set(`nodePort ${frontendKey(ip, p.nodePort, proto)}`, name);
    }
  }
  return owner;
}

/** The node addresses a Service's NodePorts open on: the node's primary address of each of the Service's families. */
function nodeAddressesOf(s: V1Service, node: ClusterNode): string[] {
  const families = s.spec?.ipFamilies ?? ['IPv4'];
  return families.map((f) => (f === 'IPv6' ? node.ip6 : node.ip));
}

/** Frontends the morph Service had in earlier phases: a proxy still programming one is a stale rule. */
const morphHistory = new Map<string, string>();

function rememberFrontends(s: V1Service, nodes: ClusterNode[]): void {
  for (const n of nodes) for (const [k, v] of frontendOwners([s], n)) morphHistory.set(k, v);
}

/** Wait until the EndpointSlice controller has caught up with the Pods (no slice older than the last pod change). */
async function settleEndpointSlices(c: Cluster): Promise<void> {
  // The controller batches nothing here (no --endpointslice-updates-batch-period): a short pause is enough
  // for it to write; the comparison itself then waits for both proxies to agree.
  await sleep(1000);
  await waitFor('the EndpointSlices of conf/terminating to show the terminating endpoint', 15_000, async () => {
    const eps = await endpointsOf(c, 'terminating');
    return eps.some((e) => e.conditions?.terminating === true) ? true : undefined;
  });
}

async function endpointsOf(c: Cluster, service: string): Promise<NonNullable<V1EndpointSlice['endpoints']>> {
  const slices = await c.discovery.listNamespacedEndpointSlice({ namespace: NS, labelSelector: `kubernetes.io/service-name=${service}` });
  return slices.items.flatMap((s) => s.endpoints ?? []);
}

// ---------------------------------------------------------------- the objects

async function svc(c: Cluster, name: string, spec: V1Service['spec'], ingressIP?: string | string[]): Promise<V1Service> {
  const created = await c.core.createNamespacedService({ namespace: NS, body: { metadata: { name }, spec } });
  if (!ingressIP) return created;
  created.status = { loadBalancer: { ingress: [ingressIP].flat().map((ip) => ({ ip })) } };
  return c.core.replaceNamespacedServiceStatus({ name, namespace: NS, body: created });
}

async function pod(c: Cluster, name: string, node: ClusterNode, labels: Record<string, string>, httpPort = 8080, ready = true): Promise<ClusterPod> {
  const p = await c.addPod({
    name, namespace: NS, node, labels, ready,
    ports: [{ name: 'http', containerPort: httpPort, protocol: 'TCP' }, { name: 'dns', containerPort: 5353, protocol: 'UDP' }],
  });
  pods.set(name, p);
  return p;
}

function podIP(name: string): string {
  const p = pods.get(name);
  if (!p) throw new Error(`conformance: no pod ${name}`);
  return p.ip;
}

/** Delete a pod with a long grace period: with no kubelet to finish it, its endpoint stays serving+terminating. */
async function startTerminating(c: Cluster, name: string): Promise<void> {
  await c.core.deleteNamespacedPod({ name, namespace: NS, gracePeriodSeconds: 600 });
}

const http = (port: number, targetPort: number | string = 'http', name = 'http') => ({ name, port, targetPort: targetPort as never, protocol: 'TCP' });

async function createScenarios(c: Cluster): Promise<void> {
  const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
  await c.core.createNamespace({ body: { metadata: { name: NS } } });

  // Pods: 'web' on both nodes (+ a not-ready one), 'named' with different port numbers, terminating sets.
  await pod(c, 'web-1', n1, { app: 'web' });
  await pod(c, 'web-2', n2, { app: 'web' });
  await pod(c, 'web-nr', n2, { app: 'web' }, 8080, false);
  await pod(c, 'named-1', n1, { app: 'named' }, 8080);
  await pod(c, 'named-2', n2, { app: 'named' }, 9090);
  await pod(c, 'nr-1', n1, { app: 'nr' }, 8080, false);
  await pod(c, 'drain-1', n2, { app: 'drain' });
  await pod(c, 'mix-1', n1, { app: 'mix' });
  await pod(c, 'mix-2', n2, { app: 'mix' });
  await pod(c, 'drainl-1', n1, { app: 'drainl' });
  await pod(c, 'drainl-2', n2, { app: 'drainl' });

  const web = { app: 'web' };
  await svc(c, 'cluster-ip', { selector: web, ports: [http(80)] });
  await svc(c, 'multi-port', {
    selector: web,
    ports: [http(80), { name: 'dns', port: 53, targetPort: 'dns' as never, protocol: 'UDP' }, { name: 'metrics', port: 9100, targetPort: 9100 as never, protocol: 'TCP' }],
  });
  await svc(c, 'named-ports', { selector: { app: 'named' }, ports: [http(80)] });
  await svc(c, 'nodeport', { type: 'NodePort', selector: web, ports: [http(80)] });
  await svc(c, 'etp-local', { type: 'NodePort', externalTrafficPolicy: 'Local', externalIPs: [EXT_IP_LOCAL], selector: web, ports: [http(8081)] });
  await svc(c, 'itp-local', { internalTrafficPolicy: 'Local', selector: web, ports: [http(8082)] });
  await svc(c, 'itp-etp-local', { type: 'NodePort', internalTrafficPolicy: 'Local', externalTrafficPolicy: 'Local', selector: web, ports: [http(8083)] });
  await svc(c, 'external-ip', { externalIPs: [EXT_IP_CLUSTER], selector: web, ports: [http(8084)] });
  await svc(c, 'lb', {
    type: 'LoadBalancer', selector: web,
    ports: [http(80), { name: 'dns', port: 53, targetPort: 'dns' as never, protocol: 'UDP' }],
  }, LB.cluster);
  await svc(c, 'lb-local', { type: 'LoadBalancer', externalTrafficPolicy: 'Local', selector: web, ports: [http(80)] }, LB.local);
  await svc(c, 'lb-no-nodeports', { type: 'LoadBalancer', allocateLoadBalancerNodePorts: false, selector: web, ports: [http(80)] }, LB.noNodePorts);
  await svc(c, 'lb-source-ranges', { type: 'LoadBalancer', loadBalancerSourceRanges: ['198.18.0.0/24'], selector: web, ports: [http(80)] }, LB.ranges);
  await svc(c, 'affinity', {
    type: 'NodePort', sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } }, selector: web, ports: [http(8085)],
  });
  await svc(c, 'no-endpoints', { selector: { app: 'nothing' }, ports: [http(80)] });
  await svc(c, 'not-ready-only', { selector: { app: 'nr' }, ports: [http(80)] });
  await svc(c, 'terminating', { selector: { app: 'drain' }, ports: [http(80)] });
  await svc(c, 'terminating-mixed', { selector: { app: 'mix' }, ports: [http(80)] });
  await svc(c, 'terminating-local', { type: 'NodePort', externalTrafficPolicy: 'Local', selector: { app: 'drainl' }, ports: [http(80)] });
  await svc(c, 'td-prefer-close', { trafficDistribution: 'PreferClose', selector: web, ports: [http(80)] });
  // PreferSameNode needs the PreferSameTrafficDistribution gate (beta, on by default in 1.34).
  await svc(c, 'td-same-node', { trafficDistribution: 'PreferSameNode', selector: web, ports: [http(80)] });
  await svc(c, 'morph', { selector: web, ports: [http(80)] });
  // h-maglev: annotated Services (sluice.io/lb-algorithm); kube-proxy ignores the annotation.
  const annotated = (name: string, algorithm: string, spec: V1Service['spec']) =>
    c.core.createNamespacedService({ namespace: NS, body: { metadata: { name, annotations: { 'sluice.io/lb-algorithm': algorithm } }, spec } });
  await annotated('alg-maglev', 'maglev', { type: 'NodePort', selector: web, ports: [http(8086)] });
  await annotated('alg-mh-lb', 'mh', { type: 'NodePort', externalIPs: [EXT_IP_CLUSTER], selector: web, ports: [http(8087)] });
  await annotated('alg-rr', 'rr', { selector: web, ports: [http(8088)] });
  await annotated('alg-sh', 'sh', { type: 'NodePort', externalTrafficPolicy: 'Local', selector: web, ports: [http(8089)] });

  // Dual-stack and IPv6 Services: the EndpointSlice controller writes one slice per family.
  await svc(c, 'ds-prefer', {
    type: 'NodePort', ipFamilyPolicy: 'PreferDualStack', externalIPs: [EXT_IP_CLUSTER, EXT_IP6], selector: web, ports: [http(8090)],
  });
  await svc(c, 'ds-require-v6-primary', {
    ipFamilyPolicy: 'RequireDualStack', ipFamilies: ['IPv6', 'IPv4'], selector: web,
    ports: [http(8091), { name: 'dns', port: 53, targetPort: 'dns' as never, protocol: 'UDP' }],
  });
  await svc(c, 'ds-etp-local', { type: 'NodePort', ipFamilyPolicy: 'PreferDualStack', externalTrafficPolicy: 'Local', selector: web, ports: [http(8092)] });
  await svc(c, 'v6-single', { type: 'NodePort', ipFamilyPolicy: 'SingleStack', ipFamilies: ['IPv6'], selector: web, ports: [http(8093)] });
  await svc(c, 'v6-lb', {
    type: 'LoadBalancer', ipFamilyPolicy: 'SingleStack', ipFamilies: ['IPv6'], selector: web, ports: [http(8094)],
  }, LB6);
  await svc(c, 'v6-no-endpoints', { ipFamilyPolicy: 'SingleStack', ipFamilies: ['IPv6'], selector: { app: 'nothing' }, ports: [http(8095)] });
  await svc(c, 'ds-affinity', {
    ipFamilyPolicy: 'RequireDualStack', sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 900 } }, selector: web, ports: [http(8096)],
  });
  // IPv6 loadBalancerSourceRanges (sluice_srcrng6 against ip6tables KUBE-FW-* / nft ip6 firewall-ips).
  await svc(c, 'v6-lb-source-ranges', {
    type: 'LoadBalancer', ipFamilyPolicy: 'SingleStack', ipFamilies: ['IPv6'], loadBalancerSourceRanges: ['2001:db8:100::/48', 'fd00:18::/64'],
    selector: web, ports: [http(8097)],
  }, LB_RANGES6.v6);
  await svc(c, 'ds-lb-source-ranges', {
    type: 'LoadBalancer', ipFamilyPolicy: 'RequireDualStack', loadBalancerSourceRanges: ['198.18.0.0/24', '198.19.200.0/24', '2001:db8:100::/48'],
    selector: web, ports: [http(8098)],
  }, [LB_RANGES6.dsV4, LB_RANGES6.dsV6]);
  // Ranges of one family only: what does the other family's LoadBalancer IP let through?
  await svc(c, 'ds-lb-ranges-v4-only', {
    type: 'LoadBalancer', ipFamilyPolicy: 'RequireDualStack', loadBalancerSourceRanges: ['198.18.0.0/24'],
    selector: web, ports: [http(8099)],
  }, [LB_RANGES6.v4OnlyV4, LB_RANGES6.v4OnlyV6]);

  // Selector-less: an Endpoints object the mirroring controller turns into a slice.
  await svc(c, 'selectorless-endpoints', { ports: [{ name: 'http', port: 80, targetPort: 8080 as never, protocol: 'TCP' }] });
  await c.core.createNamespacedEndpoints({
    namespace: NS,
    body: {
      metadata: { name: 'selectorless-endpoints' },
      subsets: [{ addresses: [{ ip: podIP('web-1'), nodeName: n1.name }, { ip: '198.19.9.9' }], ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] }],
    },
  });

  // Selector-less with hand-written EndpointSlices carrying topology hints.
  const hinted: Array<[string, Array<{ ip: string; node: ClusterNode; zones?: string[]; nodes?: string[] }>]> = [
    ['hints-zone', [{ ip: podIP('web-1'), node: n1, zones: ['zone-a'] }, { ip: podIP('web-2'), node: n2, zones: ['zone-b'] }]],
    ['hints-partial', [{ ip: podIP('web-1'), node: n1, zones: ['zone-a'] }, { ip: podIP('web-2'), node: n2 }]],
    ['hints-other-zone', [{ ip: podIP('web-1'), node: n1, zones: ['zone-c'] }, { ip: podIP('web-2'), node: n2, zones: ['zone-c'] }]],
    ['hints-node', [
      { ip: podIP('web-1'), node: n1, zones: ['zone-a'], nodes: [n1.name] },
      { ip: podIP('web-2'), node: n2, zones: ['zone-b'], nodes: [n2.name] },
    ]],
  ];
  for (const [name, eps] of hinted) {
    await svc(c, name, { ports: [{ port: 80, targetPort: 8080 as never, protocol: 'TCP' }] });
    await writeSlice(c, name, eps);
  }

  // Terminating: drain-1 is the only endpoint; mix-2 terminates beside a ready mix-1; drainl-1 is node 1's only local one.
  await c.waitForReadyEndpoints(NS, 'terminating', 1);
  await c.waitForReadyEndpoints(NS, 'terminating-mixed', 2);
  await c.waitForReadyEndpoints(NS, 'terminating-local', 2);
  await startTerminating(c, 'drain-1');
  await startTerminating(c, 'mix-2');
  await startTerminating(c, 'drainl-1');
  await c.waitForReadyEndpoints(NS, 'terminating-mixed', 1);
  await c.waitForReadyEndpoints(NS, 'terminating-local', 1);
  await c.waitForReadyEndpoints(NS, 'cluster-ip', 2);
  await c.waitForReadyEndpoints(NS, 'named-ports', 2);
  rememberFrontends(await c.core.readNamespacedService({ name: 'morph', namespace: NS }), c.nodes);
}

async function writeSlice(c: Cluster, service: string, eps: Array<{ ip: string; node: ClusterNode; zones?: string[]; nodes?: string[] }>): Promise<void> {
  const body: V1EndpointSlice = {
    metadata: { name: `${service}-manual`, labels: { 'kubernetes.io/service-name': service, 'endpointslice.kubernetes.io/managed-by': 'sluice-conformance' } },
    addressType: 'IPv4',
    ports: [{ name: '', port: 8080, protocol: 'TCP' }],
    endpoints: eps.map((e) => ({
      addresses: [e.ip], conditions: { ready: true, serving: true, terminating: false }, nodeName: e.node.name, zone: e.node.zone,
      ...(e.zones || e.nodes ? { hints: { forZones: (e.zones ?? []).map((z) => ({ name: z })), ...(e.nodes ? { forNodes: e.nodes.map((n) => ({ name: n })) } : {}) } } : {}),
    })),
  };
  const existing = await c.discovery.readNamespacedEndpointSlice({ name: body.metadata!.name!, namespace: NS }).catch(() => undefined);
  if (existing) {
    body.metadata!.resourceVersion = existing.metadata?.resourceVersion;
    await c.discovery.replaceNamespacedEndpointSlice({ name: body.metadata!.name!, namespace: NS, body });
  } else {
    await c.discovery.createNamespacedEndpointSlice({ namespace: NS, body });
  }
}

async function updateService(c: Cluster, name: string, edit: (s: V1Service) => void): Promise<V1Service> {
  const s = await c.core.readNamespacedService({ name, namespace: NS });
  edit(s);
  const updated = await c.core.replaceNamespacedService({ name, namespace: NS, body: s });
  rememberFrontends(updated, c.nodes);
  return updated;
}

/** Type ClusterIP -> NodePort; eTP flips; a new backend; a not-ready one turns ready; hints swap; Endpoints change. */
async function changes1(c: Cluster): Promise<void> {
  const [n1, n2] = c.nodes as [ClusterNode, ClusterNode];
  await updateService(c, 'morph', (s) => { s.spec!.type = 'NodePort'; });
  await updateService(c, 'nodeport', (s) => { s.spec!.externalTrafficPolicy = 'Local'; });
  await updateService(c, 'affinity', (s) => { s.spec!.sessionAffinityConfig = { clientIP: { timeoutSeconds: 1200 } }; });
  await pod(c, 'web-3', n2, { app: 'web' });
  await setPodStatus(c.core, pods.get('web-nr')!, true);
  await writeSlice(c, 'hints-zone', [{ ip: podIP('web-1'), node: n1, zones: ['zone-b'] }, { ip: podIP('web-2'), node: n2, zones: ['zone-a'] }]);
  await c.core.replaceNamespacedEndpoints({
    name: 'selectorless-endpoints', namespace: NS,
    body: {
      metadata: { name: 'selectorless-endpoints' },
      subsets: [{ addresses: [{ ip: podIP('web-2'), nodeName: n2.name }], notReadyAddresses: [{ ip: '198.19.9.9' }], ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] }],
    },
  });
  await c.waitForReadyEndpoints(NS, 'cluster-ip', 4);
}

/** Type NodePort -> LoadBalancer (with an ingress IP); a backend goes away; eTP Local -> Cluster; iTP Local -> Cluster. */
async function changes2(c: Cluster): Promise<void> {
  const morph = await updateService(c, 'morph', (s) => { s.spec!.type = 'LoadBalancer'; });
  morph.status = { loadBalancer: { ingress: [{ ip: LB.morph }] } };
  rememberFrontends(await c.core.replaceNamespacedServiceStatus({ name: 'morph', namespace: NS, body: morph }), c.nodes);
  await c.core.deleteNamespacedPod({ name: 'web-1', namespace: NS, gracePeriodSeconds: 0 });
  await updateService(c, 'lb-local', (s) => { s.spec!.externalTrafficPolicy = 'Cluster'; });
  await updateService(c, 'itp-local', (s) => { s.spec!.internalTrafficPolicy = 'Cluster'; });
  await c.waitForReadyEndpoints(NS, 'cluster-ip', 3);
}

/** Type LoadBalancer -> ClusterIP (NodePorts released); a web pod on node 1 again; the terminating-only Service gets a ready pod. */
async function changes3(c: Cluster): Promise<void> {
  const [n1] = c.nodes as [ClusterNode];
  await updateService(c, 'morph', (s) => {
    s.spec!.type = 'ClusterIP';
    for (const p of s.spec!.ports ?? []) delete p.nodePort;
    delete s.spec!.externalTrafficPolicy;
  });
  await pod(c, 'web-4', n1, { app: 'web' });
  await pod(c, 'drain-2', n1, { app: 'drain' });
  await c.waitForReadyEndpoints(NS, 'cluster-ip', 4);
  await c.waitForReadyEndpoints(NS, 'terminating', 1);
}
