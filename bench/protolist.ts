// LIST as JSON vs Kubernetes protobuf against the real kube-apiserver
// (issue 12, cold start): a control plane started from a bench etcd
// snapshot (bench/snapshot.ts; no controller-manager, own dir and ports),
// then for Services and EndpointSlices with the agent's label selectors,
// paginated LISTs (limit 500) in both encodings: bytes, wall time per page,
// the client's decode time (JSON.parse vs src/k8s/proto), and whether
// slim(JSON) equals slim(protobuf) for every object listed.
//
// With --capture DIR it also creates a set of varied objects (every
// ServiceSpec field the agent reads, IPv6, hints, absent vs false
// conditions...) and writes each list as JSON and protobuf to DIR: the
// fixtures of test/unit/k8s-proto.test.ts.
//
//   node dist/bench/protolist.js --etcd-seed /var/cache/sluice/snapshots/<key>/etcd [--rounds 3] [--capture test/fixtures/k8sproto] [--dump DIR]
//
// --dump keeps the first round's pages for bench/protodecode.ts (decode alone, cold process).
import { deepStrictEqual } from 'node:assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureBinaries } from '../test/cluster/binaries';
import { startControlPlane, type ControlPlane } from '../test/cluster/controlPlane';
import { stopPid, type ManagedProcess } from '../test/cluster/proc';
import { UPSTREAM_CONTROL_PLANE } from './upstreamObjects';
import { PROXY_LABEL_SELECTOR } from '../src/translate';
import { SLICE_LABEL_SELECTOR } from '../src/agent/watch';
import { slimService, slimSlice, StringPool } from '../src/agent/slim';
import { openServiceList, openEndpointSliceList, PROTOBUF_CONTENT_TYPE } from '../src/k8s/proto';
import { PROTO_FIXTURE_OBJECTS } from '../test/fixtures/k8sproto/objects';

const arg = (name: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};

function send(cp: ControlPlane, method: string, path: string, accept: string, body?: unknown): Promise<{ status: number; type: string; body: Buffer; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = request({
      host: '127.0.0.1', port: cp.apiserverPort, path, method, timeout: 60_000,
      headers: { Accept: accept, ...(body ? { 'Content-Type': 'application/json' } : {}) },
      ca: readFileSync(cp.pki.caCert), cert: readFileSync(cp.pki.adminCert), key: readFileSync(cp.pki.adminKey),
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), body: Buffer.concat(chunks), ms: performance.now() - t0 }));
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
    req.on('error', reject);
    req.end(body ? JSON.stringify(body) : undefined);
  });
}

const RESOURCES = [
  { name: 'services', path: '/api/v1/services', selector: PROXY_LABEL_SELECTOR, open: openServiceList, slim: slimService },
  { name: 'endpointslices', path: '/apis/discovery.k8s.io/v1/endpointslices', selector: SLICE_LABEL_SELECTOR, open: openEndpointSliceList, slim: slimSlice },
] as const;

interface ListRun { bytes: number; pages: number; wallMs: number; maxPageMs: number; decodeMs: number; items: unknown[] }

async function listAll(cp: ControlPlane, r: (typeof RESOURCES)[number], proto: boolean, dump?: string): Promise<ListRun> {
  const out: ListRun = { bytes: 0, pages: 0, wallMs: 0, maxPageMs: 0, decodeMs: 0, items: [] };
  const t0 = performance.now();
  let token: string | undefined;
  do {
    const q = new URLSearchParams({ labelSelector: r.selector, limit: '500', ...(token ? { continue: token } : {}) });
    const res = await send(cp, 'GET', `${r.path}?${q}`, proto ? `${PROTOBUF_CONTENT_TYPE}, application/json` : 'application/json');
    if (res.status !== 200) throw new Error(`${r.name}: HTTP ${res.status}`);
    if (proto !== res.type.startsWith(PROTOBUF_CONTENT_TYPE)) throw new Error(`${r.name}: answered ${res.type}`);
    if (dump) writeFileSync(join(dump, `${r.name}-${out.pages}.${proto ? 'pb' : 'json'}`), res.body);
    out.bytes += res.body.length;
    out.pages++;
    out.maxPageMs = Math.max(out.maxPageMs, res.ms);
    const d0 = performance.now();
    const page = proto ? (() => { const o = r.open(res.body); return { metadata: o.metadata, items: o.items() as unknown[] }; })() : JSON.parse(res.body.toString('utf8')) as { metadata: { continue?: string }; items: unknown[] };
    out.decodeMs += performance.now() - d0;
    for (const i of page.items) out.items.push(i);
    token = page.metadata.continue;
  } while (token);
  out.wallMs = performance.now() - t0;
  return out;
}

async function capture(cp: ControlPlane, dir: string): Promise<void> {
  const ns = 'proto-fixtures';
  await send(cp, 'POST', '/api/v1/namespaces', 'application/json', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
  for (const o of PROTO_FIXTURE_OBJECTS.services) {
    const res = await send(cp, 'POST', `/api/v1/namespaces/${ns}/services?fieldManager=kubectl-client-side-apply`, 'application/json', o.object);
    if (res.status !== 201) throw new Error(`create service ${o.object.metadata.name}: ${res.status} ${res.body.toString()}`);
    if (o.status) {
      const created = JSON.parse(res.body.toString()) as { status?: unknown };
      created.status = o.status;
      const st = await send(cp, 'PUT', `/api/v1/namespaces/${ns}/services/${o.object.metadata.name}/status`, 'application/json', created);
      if (st.status !== 200) throw new Error(`status ${o.object.metadata.name}: ${st.status} ${st.body.toString()}`);
    }
  }
  const svc = JSON.parse((await send(cp, 'GET', `/api/v1/namespaces/${ns}/services/multi`, 'application/json')).body.toString()) as { metadata: { uid: string } };
  for (const o of PROTO_FIXTURE_OBJECTS.slices(svc.metadata.uid)) {
    const res = await send(cp, 'POST', `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`, 'application/json', o);
    if (res.status !== 201) throw new Error(`create slice ${o.metadata.name}: ${res.status} ${res.body.toString()}`);
  }
  mkdirSync(dir, { recursive: true });
  for (const [file, path] of [['services', `/api/v1/namespaces/${ns}/services`], ['endpointslices', `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`]] as const) {
    const json = await send(cp, 'GET', path, 'application/json');
    const proto = await send(cp, 'GET', path, PROTOBUF_CONTENT_TYPE);
    writeFileSync(join(dir, `${file}.json`), JSON.stringify(JSON.parse(json.body.toString()), null, 1) + '\n');
    writeFileSync(join(dir, `${file}.pb`), proto.body);
    console.log(`captured ${file}: ${json.body.length} B JSON, ${proto.body.length} B protobuf`);
  }
}

async function main(): Promise<void> {
  const seed = arg('etcd-seed');
  const rounds = Number(arg('rounds') ?? 3);
  const bins = await ensureBinaries();
  if (!bins.ok) throw new Error(bins.skip);
  const dir = mkdtempSync(join(tmpdir(), 'slprotolist-'));
  const processes: ManagedProcess[] = [];
  try {
    const cp = await startControlPlane(bins.binaries, dir, processes, { ...UPSTREAM_CONTROL_PLANE, etcdSeedDir: seed, controllerManager: false });
    const dump = arg('dump');
    if (dump) mkdirSync(dump, { recursive: true });
    const cap = arg('capture');
    if (cap) await capture(cp, cap);
    for (let round = 0; round < rounds; round++) {
      for (const r of RESOURCES) {
        const runs: Record<string, ListRun> = {};
        for (const proto of round % 2 ? [true, false] : [false, true]) runs[proto ? 'protobuf' : 'json'] = await listAll(cp, r, proto, round === 0 ? dump : undefined);
        const [j, p] = [runs['json']!, runs['protobuf']!];
        const pj = new StringPool();
        const pp = new StringPool();
        deepStrictEqual(p.items.map((o) => JSON.parse(JSON.stringify(r.slim(o as never, pp)))), j.items.map((o) => JSON.parse(JSON.stringify(r.slim(o as never, pj)))));
        for (const [k, v] of Object.entries(runs)) {
          console.log(`round ${round} ${r.name} ${k}: ${v.items.length} objects, ${(v.bytes / 1e6).toFixed(2)} MB in ${v.pages} pages, wall ${v.wallMs.toFixed(0)} ms (max page ${v.maxPageMs.toFixed(0)} ms), decode ${v.decodeMs.toFixed(0)} ms`);
        }
      }
      console.log(`slim(JSON) == slim(protobuf) for every object; load ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
    }
  } finally {
    for (const p of processes.reverse()) await stopPid(p.pid);
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
