// deploy/kubernetes against a real kube-apiserver (the cluster tier's build):
// every manifest passes a server-side apply dry run with strict field
// validation (the API server's own schema and validation), and the
// least-privilege RBAC, applied for real, is enough for the agent's real
// watch code and nothing more. Skips (with the reason) when the upstream
// binaries are not built; it never starts a build itself.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { join, relative } from 'node:path';
import pino from 'pino';
import YAML from 'yaml';
import { ensureBinaries, pinnedVersions, repoRoot } from './binaries';
import { startControlPlane, type ControlPlane } from './controlPlane';
import { stopPid, waitFor, type ManagedProcess } from './proc';
import { ClusterWatch } from '../../src/agent/watch';
import { ClusterState } from '../../src/agent/store';
import { AgentMetrics } from '../../src/agent/metrics';
import { connectToApi } from '../../src/agent/kubeClient';

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const deployDir = join(repoRoot, 'deploy', 'kubernetes');

function manifests(): Array<{ file: string; o: Obj }> {
  const walk = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(join(dir, e.name)) : /\.ya?ml$/.test(e.name) && e.name !== 'kustomization.yaml' ? [join(dir, e.name)] : []);
  return walk(deployDir).flatMap((file) => YAML.parseAllDocuments(readFileSync(file, 'utf8')).map((d) => ({ file, o: d.toJS() as Obj })));
}

const PLURAL: Record<string, string> = {
  ServiceAccount: 'serviceaccounts', ConfigMap: 'configmaps', DaemonSet: 'daemonsets', ClusterRole: 'clusterroles', ClusterRoleBinding: 'clusterrolebindings',
};

function objectPath(o: Obj): string {
  const plural = PLURAL[o.kind];
  assert.ok(plural, `teach this test the resource of ${o.kind}`);
  const base = o.apiVersion === 'v1' ? '/api/v1' : `/apis/${o.apiVersion}`;
  const ns = o.metadata.namespace ? `/namespaces/${o.metadata.namespace}` : '';
  return `${base}${ns}/${plural}/${o.metadata.name}`;
}

interface Reply { status: number; body: string }

function call(cp: ControlPlane, method: string, path: string, body?: string, contentType = 'application/json', token?: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const auth = token ? { headers: { Authorization: `Bearer ${token}` } } : { cert: readFileSync(cp.pki.adminCert), key: readFileSync(cp.pki.adminKey) };
    const req = request({
      host: '127.0.0.1', port: cp.apiserverPort, path, method, timeout: 15_000, ca: readFileSync(cp.pki.caCert), ...auth,
      headers: { ...(auth as { headers?: Record<string, string> }).headers, 'Content-Type': contentType, Accept: 'application/json' },
    }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => { text += d.toString(); });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
    req.on('error', reject);
    req.end(body);
  });
}

/** Server-side apply; dryRun leaves nothing behind. Strict: unknown or duplicate fields are errors. */
const apply = (cp: ControlPlane, o: Obj, dryRun: boolean) =>
  call(cp, 'PATCH', `${objectPath(o)}?fieldManager=sluice-deploy-test&fieldValidation=Strict&force=true${dryRun ? '&dryRun=All' : ''}`,
    JSON.stringify(o), 'application/apply-patch+yaml');

let skipReason: string | undefined;
let cp: ControlPlane | undefined;
let dir = '';
const processes: ManagedProcess[] = [];

describe('deploy manifests against a real kube-apiserver', { timeout: 5 * 60_000 }, () => {
  before(async () => {
    if (process.getuid?.() !== 0) { skipReason = 'needs root (the cluster tier)'; return; }
    const { kubernetes } = pinnedVersions();
    const apiserver = join(process.env.SLUICE_CACHE ?? '/var/cache/sluice', `k8s-${kubernetes}`, 'bin', 'kube-apiserver');
    if (!existsSync(apiserver)) { skipReason = `${apiserver} is not built (scripts/k8s-binaries.sh builds it; the cluster tier runs it)`; return; }
    const bins = await ensureBinaries();
    if (!bins.ok) { skipReason = bins.skip; return; }
    dir = mkdtempSync('/tmp/sluice-deploy-');
    cp = await startControlPlane(bins.binaries, dir, processes);
  });

  after(async () => {
    for (const p of [...processes].reverse()) await stopPid(p.pid);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('every manifest passes a strict server-side apply dry run', async (t) => {
    if (!cp) { t.skip(skipReason); return; }
    const all = manifests();
    assert.ok(all.length >= 6);
    for (const { file, o } of all) {
      const r = await apply(cp, o, true);
      assert.ok(r.status === 200 || r.status === 201, `${relative(repoRoot, file)} ${o.kind}/${o.metadata.name}: ${r.status} ${r.body}`);
    }
    // Dry run: nothing was stored.
    const ds = await call(cp, 'GET', '/apis/apps/v1/namespaces/kube-system/daemonsets/sluice');
    assert.equal(ds.status, 404);
  });

  test('the dry run does reject what the API server would refuse (the check has teeth)', async (t) => {
    if (!cp) { t.skip(skipReason); return; }
    const ds = manifests().find(({ o }) => o.kind === 'DaemonSet' && o.metadata.name === 'sluice')!.o;
    const typo = structuredClone(ds);
    typo.spec.template.spec.hostNetwrok = true;
    const r1 = await apply(cp, typo, true);
    // kube-apiserver v1.34 answers an undeclared field in an apply patch with a 500 naming it.
    assert.ok(r1.status >= 400, `${r1.status} ${r1.body}`);
    assert.match(r1.body, /hostNetwrok: field not declared in schema/);
    // The API server refuses allowPrivilegeEscalation: false with privileged: true.
    const privileged = structuredClone(ds);
    const agent = (privileged.spec.template.spec.containers as Obj[]).find((c) => c.name === 'agent')!;
    agent.securityContext.privileged = true;
    const r2 = await apply(cp, privileged, true);
    assert.equal(r2.status, 422, r2.body);
    assert.match(r2.body, /allowPrivilegeEscalation/);
  });

  test("the ClusterRole is enough for the agent's real watches, and nothing more", async (t) => {
    if (!cp) { t.skip(skipReason); return; }
    for (const { o } of manifests().filter(({ file }) => file.endsWith('rbac.yaml'))) {
      const r = await apply(cp, o, false);
      assert.ok(r.status === 200 || r.status === 201, `${o.kind}: ${r.status} ${r.body}`);
    }
    const tr = await call(cp, 'POST', '/api/v1/namespaces/kube-system/serviceaccounts/sluice/token',
      JSON.stringify({ apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 600 } }));
    assert.equal(tr.status, 201, tr.body);
    const token = (JSON.parse(tr.body) as { status: { token: string } }).status.token;

    // The agent's own kubeconfig reader and HTTP client, as in a pod: CA file + service-account token.
    const kcDir = mkdtempSync(join(repoRoot, 'build', 'rbac-kubeconfig-'));
    const kcFile = join(kcDir, 'kubeconfig');
    writeFileSync(kcFile, YAML.stringify({
      apiVersion: 'v1', kind: 'Config', 'current-context': 'test',
      clusters: [{ name: 'test', cluster: { server: cp.server, 'certificate-authority': cp.pki.caCert } }],
      users: [{ name: 'sluice', user: { token } }],
      contexts: [{ name: 'test', context: { cluster: 'test', user: 'sluice' } }],
    }), { mode: 0o600 });
    const kc = await connectToApi(kcFile, undefined);
    rmSync(kcDir, { recursive: true, force: true });
    const watch = new ClusterWatch(kc, 'node-1', new ClusterState(() => undefined), new AgentMetrics(), pino({ level: 'silent' }));
    let synced = false;
    try {
      watch.start(() => { synced = true; });
      await waitFor('the agent informers to list with the sluice service account', 30_000, async () => (synced ? true : undefined), 100);
    } finally {
      await watch.stop();
    }

    // Nothing more: reads of single objects, secrets, and any write are forbidden.
    for (const [method, path, body] of [
      ['GET', '/api/v1/namespaces/default/services/kubernetes'],
      ['GET', '/api/v1/secrets'],
      ['GET', '/api/v1/pods'],
      ['POST', '/api/v1/namespaces/default/services', JSON.stringify({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'x' }, spec: { ports: [{ port: 80 }] } })],
      ['DELETE', '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes'],
    ] as const) {
      const r = await call(cp, method, path, body, 'application/json', token);
      assert.equal(r.status, 403, `${method} ${path} as system:serviceaccount:kube-system:sluice: ${r.status}`);
    }
  });
});
