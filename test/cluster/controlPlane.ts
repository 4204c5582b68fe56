// The control plane: upstream etcd, kube-apiserver and kube-controller-manager
// (only the EndpointSlice controllers) on 127.0.0.1 with free ports, using
// locally generated certificates. Nothing is exposed beyond loopback.
import { connect, createServer } from 'node:net';
import { cpSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import type { Binaries } from './binaries';
import { generatePki, writeKubeconfig, type Pki } from './pki';
import { FatalWaitError, startProcess, tailLog, waitFor, isAlive, type ManagedProcess } from './proc';

/** Service VIPs are only ever allocated by the API server; they exist as addresses only inside test namespaces. */
export const SERVICE_CIDR = '10.96.0.0/16';
export const KUBERNETES_SERVICE_IP = '10.96.0.1';
/** The second Service CIDR (issue 14): the API server is dual-stack, IPv4 primary, like --service-cluster-ip-range=v4,v6. */
export const SERVICE_CIDR6 = 'fd00:10:96::/112';

export interface ControlPlane {
  dir: string;
  pki: Pki;
  apiserverPort: number;
  /** https://127.0.0.1:<port> */
  server: string;
  /** Admin kubeconfig for clients in the root network namespace. */
  kubeconfigPath: string;
  processes: ManagedProcess[];
  /** etcd's data directory (the bench copies it into a snapshot: bench/snapshot.ts). */
  etcdDataDir: string;
}

/** What a caller may change about the control plane (the defaults are the cluster tier's). */
export interface ControlPlaneOptions {
  /** IPv4 Service CIDR (default SERVICE_CIDR). The bench at 100 000 Services needs a wider one. */
  serviceCidr?: string;
  /** An etcd data directory to start from (copied, never used in place): a prepared cluster's objects. */
  etcdSeedDir?: string;
  /** etcd's --quota-backend-bytes (default 1 GiB). */
  etcdQuotaBytes?: number;
  /** Extra kube-apiserver flags (e.g. raised --max-requests-inflight for bulk creation). */
  apiserverArgs?: string[];
  /** Start kube-controller-manager (default true). */
  controllerManager?: boolean;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** GET path on the API server with the admin certificate; resolves with status and body. */
export function apiGet(cp: Pick<ControlPlane, 'apiserverPort' | 'pki'>, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: '127.0.0.1', port: cp.apiserverPort, path, method: 'GET', timeout: 5000,
      ca: readFileSync(cp.pki.caCert), cert: readFileSync(cp.pki.adminCert), key: readFileSync(cp.pki.adminKey),
    }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => { body += d.toString(); });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path}: timed out`)));
    req.on('error', reject);
    req.end();
  });
}

function mustStayUp(p: ManagedProcess): () => void {
  return () => {
    if (!isAlive(p.pid)) throw new FatalWaitError(`${p.name} exited during start-up:\n${tailLog(p.logPath)}`);
  };
}

/**
 * etcd on two free loopback ports. freePort() closes its probe before etcd
 * binds, so another process (a parallel test, a helper's cluster) can take
 * the port in between: etcd then exits with "address already in use" at
 * once. Try again with new ports, at most three times.
 */
async function startEtcd(bin: Binaries, dir: string, processes: ManagedProcess[], opts: ControlPlaneOptions): Promise<{ etcd: ManagedProcess; etcdClient: number; dataDir: string }> {
  const log = join(dir, 'logs', 'etcd.log');
  for (let attempt = 1; ; attempt++) {
    const etcdClient = await freePort();
    const etcdPeer = await freePort();
    // A data directory per attempt: a failed start may have written its peer URL into it.
    const dataDir = join(dir, attempt === 1 ? 'etcd' : `etcd-${attempt}`);
    if (opts.etcdSeedDir && !existsSync(dataDir)) cpSync(opts.etcdSeedDir, dataDir, { recursive: true });
    const etcd = startProcess('etcd', [
      bin.etcd, '--name=sluice-test', `--data-dir=${dataDir}`,
      `--listen-client-urls=http://127.0.0.1:${etcdClient}`, `--advertise-client-urls=http://127.0.0.1:${etcdClient}`,
      `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`, `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
      `--initial-cluster=sluice-test=http://127.0.0.1:${etcdPeer}`,
      '--listen-metrics-urls=', '--unsafe-no-fsync', `--quota-backend-bytes=${opts.etcdQuotaBytes ?? 1073741824}`, '--log-level=warn',
    ], log);
    processes.push(etcd);
    const listening = await waitFor('etcd listening or exited', 30_000, async () => {
      if (!isAlive(etcd.pid)) return false;
      return (await canConnect(etcdClient)) ? true : undefined;
    });
    if (listening) return { etcd, etcdClient, dataDir };
    if (attempt >= 3 || !tailLog(log, 5).includes('address already in use')) return { etcd, etcdClient, dataDir }; // mustStayUp reports it
  }
}

/** Whether a TCP connection to 127.0.0.1:port is accepted. */
function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect({ host: '127.0.0.1', port }, () => { sock.destroy(); resolve(true); });
    sock.on('error', () => resolve(false));
    sock.setTimeout(1000, () => { sock.destroy(); resolve(false); });
  });
}

/**
 * Start etcd, kube-apiserver and kube-controller-manager under `dir`. Each
 * started process is pushed into `processes` as soon as it exists, so the
 * caller can stop them even when a later step fails.
 */
export async function startControlPlane(bin: Binaries, dir: string, processes: ManagedProcess[], opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  mkdirSync(join(dir, 'logs'), { recursive: true });
  const pki = await generatePki(join(dir, 'pki'), KUBERNETES_SERVICE_IP);

  const { etcd, etcdClient, dataDir: etcdDataDir } = await startEtcd(bin, dir, processes, opts);

  const apiserverPort = await freePort();
  const apiserver = startProcess('kube-apiserver', [
    bin.kubeApiserver,
    `--etcd-servers=http://127.0.0.1:${etcdClient}`,
    '--bind-address=127.0.0.1', `--secure-port=${apiserverPort}`,
    // The kubernetes Service's endpoints are not reconciled (--endpoint-reconciler-type=none):
    // its real address is loopback, which an EndpointSlice may not carry.
    '--advertise-address=198.18.0.1', '--endpoint-reconciler-type=none',
    `--cert-dir=${join(dir, 'apiserver-certs')}`,
    `--tls-cert-file=${pki.serverCert}`, `--tls-private-key-file=${pki.serverKey}`,
    `--client-ca-file=${pki.caCert}`,
    `--service-account-key-file=${pki.serviceAccountPub}`,
    `--service-account-signing-key-file=${pki.serviceAccountKey}`,
    '--service-account-issuer=https://kubernetes.default.svc',
    `--service-cluster-ip-range=${opts.serviceCidr ?? SERVICE_CIDR},${SERVICE_CIDR6}`,
    '--authorization-mode=Node,RBAC',
    // Pods here have no service account token to mount (there is no kubelet).
    '--disable-admission-plugins=ServiceAccount',
    '--allow-privileged=true', '--enable-priority-and-fairness=false', '--profiling=false',
    '--v=1',
    ...(opts.apiserverArgs ?? []),
  ], join(dir, 'logs', 'kube-apiserver.log'));
  processes.push(apiserver);

  const cp: ControlPlane = {
    dir, pki, apiserverPort, server: `https://127.0.0.1:${apiserverPort}`,
    kubeconfigPath: join(dir, 'admin.kubeconfig'), processes, etcdDataDir,
  };
  writeKubeconfig(cp.kubeconfigPath, cp.server, pki);

  await waitFor('kube-apiserver /readyz', 120_000, async () => {
    mustStayUp(etcd)();
    mustStayUp(apiserver)();
    const r = await apiGet(cp, '/readyz');
    return r.status === 200 ? true : undefined;
  }, 500);
  if (opts.controllerManager === false) return cp;

  const kcm = startProcess('kube-controller-manager', [
    bin.kubeControllerManager,
    `--kubeconfig=${cp.kubeconfigPath}`,
    // Only what turns Services + Pods into EndpointSlices.
    '--controllers=endpointslice,endpointslicemirroring',
    '--use-service-account-credentials=false', '--leader-elect=false',
    '--secure-port=0', '--concurrent-service-endpoint-syncs=5',
    '--v=1',
  ], join(dir, 'logs', 'kube-controller-manager.log'));
  processes.push(kcm);
  // There is no readiness endpoint with --secure-port=0: the caller's first
  // EndpointSlice is the proof it works; here only check it did not die at once.
  await new Promise((r) => setTimeout(r, 1000));
  mustStayUp(kcm)();
  return cp;
}
