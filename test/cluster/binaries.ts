// Where the upstream binaries come from: scripts/k8s-binaries.sh builds them
// (once) into a cache outside the repository. This module runs it and says
// either "here they are" or "skipped, because …" — never a fake.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const repoRoot = resolve(__dirname, '..', '..', '..');

export interface Binaries {
  binDir: string;
  etcd: string;
  kubeApiserver: string;
  kubeControllerManager: string;
  kubeProxy: string;
  kubernetesVersion: string;
  etcdVersion: string;
}

export type BinariesResult = { ok: true; binaries: Binaries } | { ok: false; skip: string };

/** The pinned versions from test/cluster/versions.env (the one file that names them). */
export function pinnedVersions(): { kubernetes: string; etcd: string } {
  const text = readFileSync(join(repoRoot, 'test', 'cluster', 'versions.env'), 'utf8');
  const value = (key: string): string => {
    const m = new RegExp(`^${key}=(\\S+)`, 'm').exec(text);
    if (!m?.[1]) throw new Error(`test/cluster/versions.env: ${key} is not set`);
    return m[1];
  };
  return { kubernetes: value('KUBERNETES_VERSION'), etcd: value('ETCD_VERSION') };
}

/**
 * Build (or find cached) etcd, kube-apiserver, kube-controller-manager and
 * kube-proxy. The script's progress goes to our stderr as it happens (a first
 * build takes many minutes on two cores). Exit 2/3 from the script mean Go or
 * the module proxy is missing: reported as a skip with the script's reason.
 */
export function ensureBinaries(timeoutMs = 100 * 60_000): Promise<BinariesResult> {
  const versions = pinnedVersions();
  return new Promise((resolvePromise, reject) => {
    const child = spawn('bash', [join(repoRoot, 'scripts', 'k8s-binaries.sh')], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let lastLines: string[] = [];
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
    child.stderr.on('data', (d: Buffer) => {
      const text = d.toString();
      process.stderr.write(text.split('\n').filter((l) => l.startsWith('k8s-binaries:')).map((l) => `${l}\n`).join(''));
      lastLines = [...lastLines, ...text.trimEnd().split('\n')].slice(-5);
    });
    child.on('error', (err) => { clearTimeout(timer); reject(new Error(`run scripts/k8s-binaries.sh: ${err.message}`)); });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const why = lastLines.filter((l) => l.startsWith('k8s-binaries:')).pop()?.replace(/^k8s-binaries: /, '') ?? lastLines.join(' | ');
      if (code === 2 || code === 3) { resolvePromise({ ok: false, skip: why }); return; }
      if (code !== 0) {
        reject(new Error(`scripts/k8s-binaries.sh failed (${signal ?? `exit ${code}`}): ${lastLines.join(' | ')}`));
        return;
      }
      const binDir = stdout.trim().split('\n').pop() ?? '';
      resolvePromise({
        ok: true,
        binaries: {
          binDir,
          etcd: join(binDir, 'etcd'),
          kubeApiserver: join(binDir, 'kube-apiserver'),
          kubeControllerManager: join(binDir, 'kube-controller-manager'),
          kubeProxy: join(binDir, 'kube-proxy'),
          kubernetesVersion: versions.kubernetes,
          etcdVersion: versions.etcd,
        },
      });
    });
  });
}
