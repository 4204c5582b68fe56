// The objects of the upstream kube-proxy bench (bench/upstream.ts) and their
// bulk creation through the real kube-apiserver, for the etcd snapshot
// (bench/snapshot.ts).
//
// Realistic objects, as a cluster's controllers leave them: a Service with a
// named port, labels and kubectl's last-applied annotation; its
// EndpointSlice owned by it (ownerReferences), endpoints with conditions
// (ready, serving, terminating), nodeName (one of 100 nodes), zone (one of 3)
// and a Pod targetRef. The API server adds uid, creationTimestamp and
// managedFields itself. The Services have no selector (the slices are written
// here, as a custom controller does; kube-controller-manager leaves them
// alone) and their slices are managed-by this bench, not by
// endpointslice-controller.k8s.io.
//
// Endpoint addresses come from the cluster's pod CIDR 198.19.0.0/16 (distinct
// up to 6 553 Services, then they repeat): only rules are measured, no packet
// is ever sent to them. ClusterIPs are allocated by the API server from the
// bench's Service CIDR.
import * as fs from 'node:fs';
import * as https from 'node:https';
import * as os from 'node:os';
import * as path from 'node:path';
import { startControlPlane, type ControlPlaneOptions } from '../test/cluster/controlPlane';
import { stopPid, type ManagedProcess } from '../test/cluster/proc';
import type { Binaries } from '../test/cluster/binaries';
import { generatorHash } from './snapshot';

export const UPSTREAM_ENDPOINTS = 10;
export const UPSTREAM_NAMESPACE = 'default';
/**
 * The bench's Service CIDR: a /14 (262 142 ClusterIPs) so 100 000 Services
 * fit; the cluster tier's /16 holds 65 534. kube-apiserver v1.34 accepts IPv4
 * ranges up to a /12 (2^20 addresses). ClusterIPs exist only as rules inside
 * the bench's node namespaces, like the cluster tier's 10.96.0.0/16.
 */
export const UPSTREAM_SERVICE_CIDR = '10.96.0.0/14';

/** The API server's limits for the bench: bulk creation with many requests in flight (APF is off in the harness). */
export const UPSTREAM_CONTROL_PLANE: ControlPlaneOptions = {
  serviceCidr: UPSTREAM_SERVICE_CIDR,
  etcdQuotaBytes: 8 * 1024 ** 3,
  apiserverArgs: ['--max-requests-inflight=1000', '--max-mutating-requests-inflight=1000'],
};

export const upstreamName = (i: number) => `up-${i}`;

export function upstreamService(i: number): Record<string, unknown> {
  const name = upstreamName(i);
  return {
    apiVersion: 'v1', kind: 'Service',
    metadata: {
      name, namespace: UPSTREAM_NAMESPACE,
      labels: { app: name, 'app.kubernetes.io/part-of': 'sluice-bench' },
      annotations: { 'kubectl.kubernetes.io/last-applied-configuration': JSON.stringify({ apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: UPSTREAM_NAMESPACE }, spec: { ports: [{ name: 'http', port: 80, targetPort: 8080 }] } }) },
    },
    spec: { type: 'ClusterIP', sessionAffinity: 'None', ipFamilyPolicy: 'SingleStack', ipFamilies: ['IPv4'], ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }] },
  };
}

/** Endpoint j of Service i: 198.19.0.0/16 (the pod CIDR), skipping .0 and .255. */
export function upstreamEndpointAddress(i: number, j: number): string {
  const n = (i * UPSTREAM_ENDPOINTS + j) % (256 * 254);
  return `198.19.${Math.floor(n / 254)}.${(n % 254) + 1}`;
}

/** Service i's slice with `count` endpoints, owned by the Service with uid `serviceUid`. */
export function upstreamSlice(i: number, count: number, serviceUid: string): Record<string, unknown> {
  const name = upstreamName(i);
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: {
      name, namespace: UPSTREAM_NAMESPACE,
      labels: { 'kubernetes.io/service-name': name, 'endpointslice.kubernetes.io/managed-by': 'sluice-bench' },
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2026-11-30T12:00:00Z' },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name, uid: serviceUid, controller: true, blockOwnerDeletion: true }],
    },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: Array.from({ length: count }, (_, j) => ({
      addresses: [upstreamEndpointAddress(i, j)],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: `node-${(i * UPSTREAM_ENDPOINTS + j) % 100}`,
      zone: `zone-${(i + j) % 3}`,
      targetRef: { kind: 'Pod', namespace: UPSTREAM_NAMESPACE, name: `${name}-7d9f8c6b5-${j.toString(36).padStart(5, 'x')}`, uid: `pod00000-0000-4000-8000-${(i * UPSTREAM_ENDPOINTS + j).toString(16).padStart(12, '0')}` },
    })),
  };
}

/** The generator's part of the snapshot key. */
export function upstreamGeneratorHash(): string {
  return generatorHash([upstreamService, upstreamSlice, upstreamEndpointAddress], [upstreamService(0), upstreamSlice(7, UPSTREAM_ENDPOINTS, 'uid'), UPSTREAM_SERVICE_CIDR]);
}

export interface ApiConn {
  server: string;
  pki: { caCert: string; adminCert: string; adminKey: string };
}

/** A keep-alive HTTPS client for the API server with the admin certificate: JSON in, JSON out, no client-side rate limit. */
export function rawClient(c: ApiConn, parallel: number) {
  const agent = new https.Agent({
    keepAlive: true, maxSockets: parallel,
    ca: fs.readFileSync(c.pki.caCert), cert: fs.readFileSync(c.pki.adminCert), key: fs.readFileSync(c.pki.adminKey),
  });
  const url = new URL(c.server);
  const call = (method: string, p: string, body?: unknown): Promise<{ status: number; json: Record<string, any> }> => new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = https.request({
      agent, host: url.hostname, port: url.port, path: p, method, timeout: 60_000,
      headers: { accept: 'application/json', ...(data ? { 'content-type': 'application/json', 'content-length': data.length } : {}) },
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => {
        try {
          resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString() || '{}') });
        } catch (e) {
          reject(e);
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${p}: timed out`)));
    req.on('error', reject);
    req.end(data);
  });
  return { call, close: () => agent.destroy() };
}

/** Every object of `resource` (a path), listed in pages: name -> object. */
async function listAll(api: ReturnType<typeof rawClient>, resource: string): Promise<Map<string, Record<string, any>>> {
  const out = new Map<string, Record<string, any>>();
  let cont = '';
  do {
    const r = await api.call('GET', `${resource}?limit=500${cont ? `&continue=${encodeURIComponent(cont)}` : ''}`);
    if (r.status !== 200) throw new Error(`list ${resource}: HTTP ${r.status}`);
    for (const o of r.json['items'] ?? []) out.set(o.metadata.name, o);
    cont = r.json['metadata']?.['continue'] ?? '';
  } while (cont);
  return out;
}

/**
 * S Services and their slices through the API, `parallel` requests in
 * flight; resolves with the ClusterIPs. Objects already there (a resumed
 * build) are listed first and not created again. Logs progress every 10 s.
 */
export async function createUpstreamObjects(c: ApiConn, services: number, parallel: number, deadline: number, log: (m: string) => void): Promise<string[]> {
  const api = rawClient(c, parallel);
  const ns = UPSTREAM_NAMESPACE;
  const vips: string[] = new Array(services);
  const haveSvc = await listAll(api, `/api/v1/namespaces/${ns}/services`);
  const haveEps = await listAll(api, `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`);
  if (haveSvc.size > 1) log(`snapshot: resuming: ${haveSvc.size} Services and ${haveEps.size} slices already there`);
  let next = 0;
  let done = 0;
  const t0 = Date.now();
  const progress = setInterval(() => log(`snapshot: ${done} of ${services} Services created (${(done / ((Date.now() - t0) / 1000)).toFixed(0)}/s)`), 10_000);
  const must = async (method: string, p: string, body: unknown, what: string) => {
    for (let attempt = 1; ; attempt++) {
      const r = await api.call(method, p, body);
      if (r.status >= 200 && r.status < 300) return r.json;
      // 429/5xx under load: back off and retry a few times.
      if ((r.status === 429 || r.status >= 500) && attempt < 5) {
        await new Promise((res) => setTimeout(res, 200 * attempt));
        continue;
      }
      throw new Error(`${what}: HTTP ${r.status}: ${JSON.stringify(r.json).slice(0, 300)}`);
    }
  };
  const worker = async () => {
    while (next < services) {
      if (Date.now() > deadline) throw new Error(`creating ${services} Services: ${done} done when the budget ran out`);
      const i = next++;
      const svc = haveSvc.get(upstreamName(i)) ?? await must('POST', `/api/v1/namespaces/${ns}/services`, upstreamService(i), `create Service ${i}`);
      vips[i] = svc['spec']['clusterIP'];
      if (!haveEps.has(upstreamName(i))) await must('POST', `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`, upstreamSlice(i, UPSTREAM_ENDPOINTS, svc['metadata']['uid']), `create EndpointSlice ${i}`);
      done++;
    }
  };
  try {
    await Promise.all(Array.from({ length: parallel }, worker));
  } finally {
    clearInterval(progress);
    api.close();
  }
  return vips;
}

/**
 * Builds the snapshot's etcd data directory: a fresh etcd + kube-apiserver
 * (the bench's options, no controller manager; started from partialDir when
 * an earlier build left one), the objects created through the API, both
 * stopped (etcd on SIGTERM), the data directory copied to etcdDir. When the
 * budget runs out, what was created goes to partialDir before the error.
 */
export async function buildUpstreamSnapshot(bin: Binaries, services: number, etcdDir: string, partialDir: string, budgetMs: number, log: (m: string) => void): Promise<string[]> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slsnap-'));
  const processes: ManagedProcess[] = [];
  const resume = fs.existsSync(path.join(partialDir, 'member'));
  const stopAll = async () => {
    for (const p of [...processes].reverse()) await stopPid(p.pid, 30_000);
  };
  try {
    const cp = await startControlPlane(bin, dir, processes, { ...UPSTREAM_CONTROL_PLANE, controllerManager: false, ...(resume ? { etcdSeedDir: partialDir } : {}) });
    const t0 = Date.now();
    let vips: string[];
    try {
      vips = await createUpstreamObjects(cp, services, 64, t0 + budgetMs, log);
    } catch (e) {
      await stopAll();
      fs.rmSync(partialDir, { recursive: true, force: true });
      fs.cpSync(cp.etcdDataDir, partialDir, { recursive: true });
      log(`snapshot: kept what was created in ${partialDir}: the next run goes on from there`);
      throw e;
    }
    log(`snapshot: ${services} Services x ${UPSTREAM_ENDPOINTS} endpoints created in ${((Date.now() - t0) / 1000).toFixed(1)} s (64 requests in flight)`);
    await stopAll();
    fs.cpSync(cp.etcdDataDir, etcdDir, { recursive: true });
    return vips;
  } finally {
    for (const p of processes) await stopPid(p.pid).catch(() => undefined);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
