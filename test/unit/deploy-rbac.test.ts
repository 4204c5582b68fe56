// Least privilege: the ClusterRole grants exactly the (apiGroup, resource,
// verb) triples the agent's code uses, derived from the source of every module
// `sluice agent` loads (the import closure of src/agent/command.ts): informer
// and ListWatch paths (list + watch) and API client calls (listX, readX,
// createX, ...). A new permission without code that needs it fails here, and
// so does code that starts using a resource the role does not grant.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import YAML from 'yaml';

const repo = path.resolve(__dirname, '..', '..', '..');
type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** Every .ts file reachable from `entry` through relative imports. */
export function importClosure(entry: string): string[] {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const text = fs.readFileSync(file, 'utf8');
    for (const m of text.matchAll(/(?:from\s+|require\(\s*|import\(\s*)'(\.{1,2}\/[^']+)'/g)) {
      const base = path.resolve(path.dirname(file), m[1]!);
      const hit = [`${base}.ts`, path.join(base, 'index.ts')].find((p) => fs.existsSync(p));
      if (hit) visit(hit);
    }
  };
  visit(entry);
  return [...seen];
}

const GROUP_OF_CLIENT: Record<string, string> = {
  Core: '', Discovery: 'discovery.k8s.io', Apps: 'apps', Coordination: 'coordination.k8s.io',
  Events: 'events.k8s.io', RbacAuthorization: 'rbac.authorization.k8s.io', Networking: 'networking.k8s.io',
};
const VERB_OF_METHOD: Record<string, string> = {
  list: 'list', read: 'get', create: 'create', patch: 'patch', replace: 'update', delete: 'delete', deleteCollection: 'deletecollection',
};

const plural = (kind: string) => {
  const lower = kind.toLowerCase();
  return lower.endsWith('s') ? lower : `${lower}s`;
};

/** "/api/v1/services" -> ['', 'services']; "/apis/discovery.k8s.io/v1/endpointslices" -> ['discovery.k8s.io', 'endpointslices']. */
export function resourceOfPath(p: string): [string, string] {
  const core = /^\/api\/v1\/(?:namespaces\/[^/]+\/)?([a-z]+)$/.exec(p);
  if (core) return ['', core[1]!];
  const named = /^\/apis\/([^/]+)\/[^/]+\/(?:namespaces\/[^/]+\/)?([a-z]+)$/.exec(p);
  assert.ok(named, `cannot read an API resource from path ${p}`);
  return [named[1]!, named[2]!];
}

/** The triples "group/resource:verb" the agent's code uses. */
export function permissionsUsedBy(files: string[]): Set<string> {
  const used = new Set<string>();
  for (const file of files) {
    const text = fs.readFileSync(file, 'utf8');
    const where = path.relative(repo, file);
    // Informers and ListWatch: list + watch on the path's resource.
    // client-node informers, or the agent's own reflectors (src/agent/watch.ts: reflect('name', 'path', ...)): list + watch.
    for (const m of text.matchAll(/(?:makeInformer(?:<[^>]*>)?\(\s*\w+\s*,|new\s+ListWatch(?:<[^>]*>)?\(|\.watch\(|\breflect(?:<[^>]*>)?\(\s*'[^']+'\s*,)\s*'([^']+)'/g)) {
      const [group, resource] = resourceOfPath(m[1]!);
      used.add(`${group}/${resource}:list`).add(`${group}/${resource}:watch`);
    }
    // API clients: const core = kc.makeApiClient(CoreV1Api); core.listNode(...)
    for (const c of text.matchAll(/(\w+)\s*=\s*\w+\.makeApiClient\(\s*(\w+?)V\d\w*Api\s*\)/g)) {
      const [, variable, client] = c;
      const group = GROUP_OF_CLIENT[client!];
      assert.ok(group !== undefined, `${where}: teach this test the API group of ${client}V*Api`);
      for (const call of text.matchAll(new RegExp(`\\b${variable}\\.(\\w+)\\(`, 'g'))) {
        const method = call[1]!;
        const verb = Object.keys(VERB_OF_METHOD).sort((a, b) => b.length - a.length).find((v) => method.startsWith(v));
        assert.ok(verb, `${where}: ${variable}.${method}: not a verb this test knows`);
        const kind = method.slice(verb.length).replace(/^Namespaced/, '').replace(/ForAllNamespaces$/, '').replace(/Status$/, '');
        used.add(`${group}/${plural(kind)}:${VERB_OF_METHOD[verb]}`);
      }
    }
  }
  return used;
}

function loadAll(file: string): Obj[] {
  return YAML.parseAllDocuments(fs.readFileSync(path.join(repo, file), 'utf8')).map((d) => d.toJS() as Obj);
}

describe('least-privilege ClusterRole', () => {
  const rbac = loadAll('deploy/kubernetes/rbac.yaml');
  const role = rbac.find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'sluice')!;
  const agentFiles = importClosure(path.join(repo, 'src', 'agent', 'command.ts'));

  test('the agent code is found and uses the API (a self-check of the parser)', () => {
    assert.ok(agentFiles.some((f) => f.endsWith(path.join('agent', 'watch.ts'))), 'watch.ts is in the closure');
    const used = permissionsUsedBy(agentFiles);
    assert.ok(used.size >= 2, `only found ${[...used].join(', ')}`);
    // Every informer path has its list call and vice versa (both are derived).
    const informed = [...used].filter((p) => p.endsWith(':watch')).map((p) => p.replace(':watch', ':list'));
    for (const p of informed) assert.ok(used.has(p), p);
  });

  test('grants exactly what the agent uses', () => {
    const granted = new Set<string>();
    for (const rule of role.rules as Obj[]) {
      for (const g of rule.apiGroups as string[]) {
        for (const r of rule.resources as string[]) for (const v of rule.verbs as string[]) granted.add(`${g}/${r}:${v}`);
      }
    }
    const used = permissionsUsedBy(agentFiles);
    const extra = [...granted].filter((p) => !used.has(p)).sort();
    const missing = [...used].filter((p) => !granted.has(p)).sort();
    assert.deepEqual({ extra, missing }, { extra: [], missing: [] }, 'ClusterRole differs from what src/agent uses');
  });

  test('no wildcards, resource names, non-resource URLs or aggregation', () => {
    assert.equal(role.aggregationRule, undefined);
    for (const rule of role.rules as Obj[]) {
      for (const list of [rule.apiGroups, rule.resources, rule.verbs]) assert.ok(!list.includes('*'), JSON.stringify(rule));
      assert.equal(rule.nonResourceURLs, undefined);
      assert.equal(rule.resourceNames, undefined);
      for (const r of rule.resources as string[]) assert.ok(!r.includes('/'), `no subresources: ${r}`);
    }
  });

  test('the binding gives the role to the DaemonSet service account, and only there', () => {
    const binding = rbac.find((o) => o.kind === 'ClusterRoleBinding')!;
    const sa = rbac.find((o) => o.kind === 'ServiceAccount')!;
    assert.deepEqual(binding.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role.metadata.name });
    assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: sa.metadata.name, namespace: sa.metadata.namespace }]);
    const ds = loadAll('deploy/kubernetes/daemonset.yaml').find((o) => o.kind === 'DaemonSet')!;
    assert.equal(ds.spec.template.spec.serviceAccountName, sa.metadata.name);
    assert.equal(ds.metadata.namespace, sa.metadata.namespace);
  });

  test('the derivation catches a new use and a new grant', () => {
    const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'sluice-rbac-'));
    try {
      const file = path.join(dir, 'more.ts');
      fs.writeFileSync(file, "const core = kc.makeApiClient(CoreV1Api);\ncore.createNamespacedEvent({});\ncore.readNode({});\nmakeInformer(kc, '/apis/coordination.k8s.io/v1/leases', f);\n");
      assert.deepEqual([...permissionsUsedBy([file])].sort(), [
        '/events:create', '/nodes:get', 'coordination.k8s.io/leases:list', 'coordination.k8s.io/leases:watch',
      ]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
