// deploy/: every manifest parses and says what the issue asks of it, the
// ConfigMap's config file is accepted by the agent's own loader, and the
// Dockerfile is well formed (no Docker engine runs here: it is parsed, not built).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import YAML from 'yaml';
import { loadConfigFile } from '../../src/agent/config';

const repo = path.resolve(__dirname, '..', '..', '..');
const k8sDir = path.join(repo, 'deploy', 'kubernetes');

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

function yamlFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? yamlFiles(path.join(dir, e.name)) : /\.ya?ml$/.test(e.name) ? [path.join(dir, e.name)] : []);
}

export function loadManifests(file: string): Obj[] {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  for (const d of docs) assert.equal(d.errors.length, 0, `${file}: ${d.errors.map((e) => e.message).join('; ')}`);
  return docs.map((d) => d.toJS() as Obj).filter((o) => o !== null);
}

const all = yamlFiles(k8sDir).filter((f) => !f.endsWith('kustomization.yaml')).flatMap((f) => loadManifests(f).map((o) => ({ file: f, o })));
const find = (kind: string, name: string) => {
  const hit = all.find(({ o }) => o.kind === kind && o.metadata?.name === name);
  assert.ok(hit, `no ${kind} ${name} under deploy/kubernetes`);
  return hit.o;
};

describe('deploy/kubernetes manifests', () => {
  test('every document has apiVersion, kind and metadata.name; namespaced ones live in kube-system', () => {
    assert.ok(all.length >= 6, `only ${all.length} objects`);
    for (const { file, o } of all) {
      const where = `${path.relative(repo, file)} ${o.kind}/${o.metadata?.name}`;
      assert.match(String(o.apiVersion), /^([a-z0-9.-]+\/)?v\d+$/, where);
      assert.match(String(o.kind), /^[A-Z]/, where);
      assert.match(String(o.metadata?.name), /^[a-z0-9-]+$/, where);
      if (!['ClusterRole', 'ClusterRoleBinding'].includes(o.kind)) assert.equal(o.metadata.namespace, 'kube-system', where);
    }
  });

  test('the kustomization lists files that exist and the install objects', () => {
    const k = YAML.parse(fs.readFileSync(path.join(k8sDir, 'kustomization.yaml'), 'utf8')) as Obj;
    for (const r of k.resources as string[]) assert.ok(fs.existsSync(path.join(k8sDir, r)), `kustomization: ${r} missing`);
    const kinds = (k.resources as string[]).flatMap((r) => loadManifests(path.join(k8sDir, r)).map((o) => o.kind)).sort();
    assert.deepEqual(kinds, ['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'DaemonSet', 'ServiceAccount']);
    assert.ok((k.images as Obj[]).some((i) => i.name === 'sluice'), 'kustomization sets the sluice image');
  });

  const ds = find('DaemonSet', 'sluice');
  const pod = ds.spec.template.spec as Obj;
  const agent = (pod.containers as Obj[]).find((c) => c.name === 'agent')!;
  const volumes = new Map((pod.volumes as Obj[]).map((v) => [v.name, v]));
  const mountsOf = (c: Obj) => new Map((c.volumeMounts as Obj[]).map((m) => [m.mountPath, volumes.get(m.name)]));

  test('DaemonSet: host network, every node, node-critical, selector matches the template', () => {
    assert.equal(pod.hostNetwork, true);
    assert.equal(pod.priorityClassName, 'system-node-critical');
    assert.ok((pod.tolerations as Obj[]).some((t) => t.operator === 'Exists' && !t.key && !t.effect), 'tolerates every taint');
    assert.equal(pod.serviceAccountName, 'sluice');
    assert.equal(pod.dnsPolicy, 'Default', 'no cluster DNS before the Services work');
    for (const [k, v] of Object.entries(ds.spec.selector.matchLabels as Obj)) assert.equal(ds.spec.template.metadata.labels[k], v);
  });

  test('DaemonSet: rolling update one node at a time, never two agents on a node', () => {
    assert.equal(ds.spec.updateStrategy.type, 'RollingUpdate');
    assert.equal(ds.spec.updateStrategy.rollingUpdate.maxSurge, 0);
    assert.equal(ds.spec.updateStrategy.rollingUpdate.maxUnavailable, 1);
  });

  test('DaemonSet: host bpffs, cgroup v2, CNI directories and the config are mounted', () => {
    const agentMounts = mountsOf(agent);
    assert.equal(agentMounts.get('/sys/fs/bpf')?.hostPath.path, '/sys/fs/bpf');
    assert.equal(agentMounts.get('/host/sys/fs/cgroup')?.hostPath.path, '/sys/fs/cgroup');
    assert.equal(agentMounts.get('/etc/sluice')?.configMap.name, 'sluice');
    const cni = (pod.containers as Obj[]).find((c) => c.name === 'cni-installer')!;
    const cniMounts = mountsOf(cni);
    assert.equal(cniMounts.get('/host/etc/cni/net.d')?.hostPath.path, '/etc/cni/net.d');
    assert.equal(cniMounts.get('/host/opt/cni/bin')?.hostPath.path, '/opt/cni/bin');
    // The paths the containers are told about are the mounted ones.
    const env = new Map((cni.env as Obj[]).map((e) => [e.name, e.value]));
    assert.equal(env.get('CNI_NET_DIR'), '/host/etc/cni/net.d');
    assert.equal(env.get('CNI_BIN_DIR'), '/host/opt/cni/bin');
    // Every mount names a volume that exists.
    for (const c of [...(pod.initContainers as Obj[]), ...(pod.containers as Obj[])]) {
      for (const m of c.volumeMounts as Obj[]) assert.ok(volumes.has(m.name), `${c.name}: volume ${m.name} is not defined`);
    }
  });

  test('DaemonSet: capabilities, not privileged; only what each container needs', () => {
    const expected: Record<string, string[]> = {
      agent: ['BPF', 'NET_ADMIN', 'PERFMON'],
      'cni-installer': [],
      'cleanup-kube-proxy': ['NET_ADMIN', 'NET_RAW'],
    };
    for (const c of [...(pod.initContainers as Obj[]), ...(pod.containers as Obj[])]) {
      const sc = c.securityContext as Obj;
      assert.ok(sc, `${c.name}: no securityContext`);
      assert.notEqual(sc.privileged, true, `${c.name} is privileged`);
      assert.deepEqual(sc.capabilities.drop, ['ALL'], `${c.name} drops every capability first`);
      assert.deepEqual([...(sc.capabilities.add ?? [])].sort(), expected[c.name], `${c.name} capabilities`);
      assert.equal(sc.readOnlyRootFilesystem, true, `${c.name} root filesystem`);
      assert.equal(sc.allowPrivilegeEscalation, false, `${c.name}: no setuid/file-capability escalation`);
    }
  });

  test('DaemonSet: NODE_NAME from the downward API, the config file, the probes kube-proxy has', () => {
    const nodeName = (agent.env as Obj[]).find((e) => e.name === 'NODE_NAME');
    assert.equal(nodeName?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName');
    assert.deepEqual(agent.command.slice(-2), ['--config', '/etc/sluice/config.yaml']);
    assert.equal(agent.livenessProbe.httpGet.path, '/livez');
    assert.equal(agent.livenessProbe.httpGet.port, 10256);
    // /healthz is 503 on a Node being deleted (for load balancers): readiness on it would stall rollouts.
    assert.equal(agent.readinessProbe.httpGet.path, '/livez');
    assert.equal(agent.readinessProbe.httpGet.port, 10256);
    assert.equal(agent.startupProbe.httpGet.path, '/livez', 'the first sync may take a while');
  });

  test('DaemonSet: ConfigMap keys the containers read exist', () => {
    const cm = find('ConfigMap', 'sluice');
    for (const c of [...(pod.initContainers as Obj[]), ...(pod.containers as Obj[])]) {
      for (const e of (c.env ?? []) as Obj[]) {
        const ref = e.valueFrom?.configMapKeyRef;
        if (ref) {
          assert.equal(ref.name, 'sluice');
          assert.ok(ref.key in cm.data, `${c.name}: ConfigMap key ${ref.key} missing`);
          assert.match(cm.data[ref.key], /^(true|false)$/);
        }
      }
    }
  });

  test("ConfigMap: config.yaml is accepted by the agent's config loader", () => {
    const cm = find('ConfigMap', 'sluice');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-cm-'));
    try {
      const file = path.join(dir, 'config.yaml');
      fs.writeFileSync(file, cm.data['config.yaml']);
      const config = loadConfigFile(file);
      assert.equal(config.cgroupPath, '/host/sys/fs/cgroup', 'the mounted host cgroup tree');
      assert.equal(config.bpffs, '/sys/fs/bpf/sluice');
      assert.equal(config.healthzBindAddress, '0.0.0.0:10256', 'the probes reach it');
      assert.match(cm.data['config.yaml'], /k8sApiServer/, 'the kube-proxy-free bootstrap is documented where it is set');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('uninstall DaemonSet: runs sluice uninstall and the CNI uninstall on every node', () => {
    const un = find('DaemonSet', 'sluice-uninstall');
    const spec = un.spec.template.spec as Obj;
    assert.ok((spec.tolerations as Obj[]).some((t) => t.operator === 'Exists'));
    const script = (spec.initContainers as Obj[])[0]!.command.join(' ');
    assert.match(script, /sluice uninstall --bpffs \/sys\/fs\/bpf\/sluice/);
    assert.match(script, /install-cni\.sh uninstall/);
    assert.equal(spec.automountServiceAccountToken, false, 'it needs no API access');
  });
});

// ---- Dockerfile: a small parser, enough to check the structure --------------

interface Instruction { op: string; args: string; line: number }

export function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const first = i;
    let line = lines[i]!;
    if (/^\s*(#|$)/.test(line)) continue;
    while (line.endsWith('\\') && i + 1 < lines.length) {
      line = line.slice(0, -1) + ' ' + lines[++i]!.replace(/^\s*#.*$/, '');
    }
    const m = /^\s*([A-Za-z]+)\s+(.*)$/.exec(line);
    assert.ok(m, `Dockerfile line ${first + 1}: not an instruction: ${line}`);
    out.push({ op: m[1]!.toUpperCase(), args: m[2]!.trim(), line: first + 1 });
  }
  return out;
}

describe('deploy/Dockerfile', () => {
  const text = fs.readFileSync(path.join(repo, 'deploy', 'Dockerfile'), 'utf8');
  const ins = parseDockerfile(text);
  const KNOWN = new Set(['FROM', 'RUN', 'COPY', 'ADD', 'ENV', 'ARG', 'WORKDIR', 'USER', 'ENTRYPOINT', 'CMD', 'LABEL', 'EXPOSE', 'VOLUME', 'HEALTHCHECK', 'SHELL', 'STOPSIGNAL', 'ONBUILD']);
  const args = new Map(ins.filter((i) => i.op === 'ARG').map((i) => i.args.split('=') as [string, string]));
  const stages = ins.filter((i) => i.op === 'FROM').map((i) => {
    const [image, as, name] = i.args.split(/\s+/);
    return { image: image!.replace(/^\$\{(\w+)\}$/, (_, v: string) => args.get(v) ?? v), name: as?.toUpperCase() === 'AS' ? name : undefined, at: ins.indexOf(i) };
  });
  const finalStage = ins.slice(stages[stages.length - 1]!.at);

  test('only known instructions; a build stage and a runtime stage', () => {
    for (const i of ins) assert.ok(KNOWN.has(i.op), `line ${i.line}: unknown instruction ${i.op}`);
    assert.ok(stages.length >= 2, 'multi-stage');
    assert.equal(stages[0]!.name, 'build');
  });

  test('Debian-based Node.js LTS images, Debian packages; the runtime is slim and has libbpf', () => {
    for (const s of stages) assert.match(s.image, /^node:20-bookworm/, `${s.name}: ${s.image}`);
    assert.match(stages[stages.length - 1]!.image, /-slim$/);
    const build = ins.slice(0, stages[1]!.at).filter((i) => i.op === 'RUN').map((i) => i.args).join('\n');
    for (const p of ['clang', 'libbpf-dev', 'bpftool', 'make']) assert.match(build, new RegExp(`apt-get install[^&]*\\b${p}\\b`), `build stage installs ${p}`);
    assert.match(build, /make bpf abi-check ts native/, 'compiles BPF, checks the ABI, compiles TS and native');
    const runtime = finalStage.filter((i) => i.op === 'RUN').map((i) => i.args).join('\n');
    assert.match(runtime, /apt-get install[^&]*\blibbpf1\b/);
    assert.match(runtime, /rm -rf \/var\/lib\/apt\/lists/);
  });

  test('COPY --from names an earlier stage; COPY from the context names files that exist', () => {
    for (const i of ins.filter((x) => x.op === 'COPY')) {
      const from = /--from=(\S+)/.exec(i.args)?.[1];
      if (from) {
        assert.ok(stages.some((s) => s.name === from && s.at < ins.indexOf(i)), `line ${i.line}: unknown stage ${from}`);
        continue;
      }
      const parts = i.args.split(/\s+/).filter((p) => !p.startsWith('--'));
      for (const src of parts.slice(0, -1)) {
        if (src !== '.') assert.ok(fs.existsSync(path.join(repo, src)), `line ${i.line}: ${src} is not in the repository`);
      }
    }
    assert.ok(!ins.some((i) => i.op === 'ADD' && /https?:/.test(i.args)), 'no remote ADD');
  });

  test('the runtime sets SLUICE_BPF_DIR to where the objects are copied, and runs sluice', () => {
    const env = finalStage.filter((i) => i.op === 'ENV').map((i) => i.args).join(' ');
    const dir = /SLUICE_BPF_DIR=(\S+)/.exec(env)?.[1];
    assert.ok(dir, 'SLUICE_BPF_DIR is set in the runtime stage');
    const workdir = finalStage.find((i) => i.op === 'WORKDIR')!.args;
    const bpfCopy = finalStage.find((i) => i.op === 'COPY' && /\/out\/bpf/.test(i.args))!;
    assert.equal(path.resolve(workdir, bpfCopy.args.split(/\s+/).pop()!), dir);
    const entry = finalStage.find((i) => i.op === 'ENTRYPOINT')!;
    assert.deepEqual(JSON.parse(entry.args), ['sluice'], 'exec form');
  });

  test('the user is root only with a stated reason', () => {
    const user = finalStage.filter((i) => i.op === 'USER').pop();
    assert.ok(user, 'USER is explicit');
    if (/^(0|root)(:|$)/.test(user.args)) {
      const before = text.split('\n').slice(Math.max(0, user.line - 8), user.line - 1).join('\n');
      assert.match(before, /#.*root/i, 'a comment above USER says why root');
      assert.match(before, /capabilit/i, 'and that capabilities are dropped');
    }
  });

  test('the image build context ignores build output and node_modules', () => {
    const ignore = fs.readFileSync(path.join(repo, 'deploy', 'Dockerfile.dockerignore'), 'utf8').split('\n');
    for (const p of ['node_modules', 'dist', '.git']) assert.ok(ignore.includes(p), `${p} ignored`);
  });
});
