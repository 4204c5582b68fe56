// The agent's HTTP connection to the API server: a kubeconfig (or the
// in-cluster service account) turned into one `get(path, query)` call.
//
// Why not @kubernetes/client-node at run time: requiring it loads every
// generated API model, 1.2 s and ~60 MiB of RSS before the agent has done
// anything (measured: `require('@kubernetes/client-node')` 1.6 s / 108 MiB vs
// 0.13 s / 40 MiB for bare node). The agent needs two GETs (list, watch), so
// it speaks HTTP itself for what kubeconfigs of nodes use: CA, client
// certificate and key, bearer token (or token file), insecure-skip-tls-verify,
// tls-server-name. Exec credential plugins and auth-providers are left to
// client-node, loaded only then (kubeConfigFallback).
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as path from 'node:path';
import { parse as parseYaml } from 'yaml';

const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface KubeConnection {
  /** The API server's base URL, without a trailing slash. */
  readonly server: string;
  /**
   * A GET; the response is not read (lists read it page by page, watches line by line).
   * `accept` replaces `application/json` (list pages ask for protobuf too: reflector.ts).
   */
  get(apiPath: string, query: Record<string, string | undefined>, signal?: AbortSignal, accept?: string): Promise<http.IncomingMessage>;
}

interface ConnectionParams {
  server: string;
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  token?: () => string;
  insecure: boolean;
  servername?: string;
  /** Extra headers (from client-node when it prepared the credentials). */
  headers?: Record<string, string>;
  agent?: http.Agent;
}

/** Kubeconfig from a file, else in-cluster; `apiServer` (--k8s-api-server) overrides the server. */
export async function connectToApi(kubeconfig: string | undefined, apiServer: string | undefined): Promise<KubeConnection> {
  const params = kubeconfig ? await fromKubeconfig(kubeconfig) : inCluster();
  if (apiServer) {
    const scheme = params.server.startsWith('http://') ? 'http' : 'https';
    params.server = /^https?:\/\//.test(apiServer) ? apiServer : `${scheme}://${apiServer}`;
  }
  params.server = params.server.replace(/\/$/, '');
  return new HttpConnection(params);
}

class HttpConnection implements KubeConnection {
  private readonly agent: http.Agent;
  private readonly secure: boolean;

  constructor(private readonly p: ConnectionParams) {
    this.secure = p.server.startsWith('https://');
    // keepAlive: list pages and watch restarts reuse connections; the socket
    // keep-alive probes find a dead API server on an idle watch.
    this.agent = p.agent ?? (this.secure
      ? new https.Agent({ keepAlive: true, ca: p.ca, cert: p.cert, key: p.key, rejectUnauthorized: !p.insecure, servername: p.servername })
      : new http.Agent({ keepAlive: true }));
  }

  get server(): string {
    return this.p.server;
  }

  get(apiPath: string, query: Record<string, string | undefined>, signal?: AbortSignal, accept = 'application/json'): Promise<http.IncomingMessage> {
    const url = new URL(this.p.server + apiPath);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, v);
    const headers: Record<string, string> = { Accept: accept, ...this.p.headers };
    const token = this.p.token?.();
    if (token) headers['Authorization'] = `Bearer ${token}`;
    const request = this.secure ? https.request : http.request;
    return new Promise((resolve, reject) => {
      const req = request(url, { method: 'GET', agent: this.agent, headers, signal }, (res) => {
        res.socket?.setKeepAlive(true, 30_000);
        resolve(res);
      });
      req.on('error', reject);
      req.end();
    });
  }
}

function readFileRelative(base: string, file: string): Buffer {
  return fs.readFileSync(path.isAbsolute(file) ? file : path.join(path.dirname(base), file));
}

interface NamedEntry<T> { name: string; [key: string]: unknown; cluster?: T; user?: T; context?: T }

async function fromKubeconfig(file: string): Promise<ConnectionParams> {
  const doc = parseYaml(fs.readFileSync(file, 'utf8')) as Record<string, unknown> | null;
  if (!doc || typeof doc !== 'object') throw new Error(`kubeconfig ${file}: not a YAML mapping`);
  const pick = <T>(list: unknown, name: unknown, field: 'cluster' | 'user' | 'context'): T | undefined =>
    (Array.isArray(list) ? (list as Array<NamedEntry<T>>) : []).find((e) => e.name === name)?.[field];
  const context = pick<Record<string, string>>(doc['contexts'], doc['current-context'], 'context');
  if (!context) throw new Error(`kubeconfig ${file}: current-context "${String(doc['current-context'])}" not found`);
  const cluster = pick<Record<string, unknown>>(doc['clusters'], context['cluster'], 'cluster');
  if (!cluster || typeof cluster['server'] !== 'string') throw new Error(`kubeconfig ${file}: cluster "${context['cluster']}" has no server`);
  const user = pick<Record<string, unknown>>(doc['users'], context['user'], 'user') ?? {};
  if (user['exec'] || user['auth-provider']) return kubeConfigFallback(file);
  const data = (k: string) => (typeof user[`${k}-data`] === 'string' ? Buffer.from(user[`${k}-data`] as string, 'base64') : typeof user[k] === 'string' ? readFileRelative(file, user[k] as string) : undefined);
  const caData = cluster['certificate-authority-data'];
  const caFile = cluster['certificate-authority'];
  const params: ConnectionParams = {
    server: cluster['server'] as string,
    ca: typeof caData === 'string' ? Buffer.from(caData, 'base64') : typeof caFile === 'string' ? readFileRelative(file, caFile) : undefined,
    cert: data('client-certificate'),
    key: data('client-key'),
    insecure: cluster['insecure-skip-tls-verify'] === true,
    servername: typeof cluster['tls-server-name'] === 'string' ? cluster['tls-server-name'] : undefined,
  };
  if (typeof user['token'] === 'string') {
    const token = user['token'];
    params.token = () => token;
  } else if (typeof user['tokenFile'] === 'string') {
    params.token = rereadingToken(readFileRelative.bind(null, file, user['tokenFile']));
  }
  if (typeof user['username'] === 'string') {
    params.headers = { Authorization: `Basic ${Buffer.from(`${user['username']}:${String(user['password'] ?? '')}`).toString('base64')}` };
  }
  return params;
}

/** In-cluster: the service account's token (rotated by the kubelet: re-read) and CA. */
function inCluster(): ConnectionParams {
  const host = process.env['KUBERNETES_SERVICE_HOST'];
  const port = process.env['KUBERNETES_SERVICE_PORT'];
  if (!host || !port) throw new Error('no --kubeconfig and not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset)');
  const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return {
    server,
    ca: fs.readFileSync(path.join(SERVICE_ACCOUNT_DIR, 'ca.crt')),
    token: rereadingToken(() => fs.readFileSync(path.join(SERVICE_ACCOUNT_DIR, 'token'))),
    insecure: false,
  };
}

/** A token file read at most once a minute (client-go re-reads bound tokens the same way). */
function rereadingToken(read: () => Buffer): () => string {
  let token = '';
  let readAt = 0;
  return () => {
    if (Date.now() - readAt > 60_000) {
      token = read().toString('utf8').trim();
      readAt = Date.now();
    }
    return token;
  };
}

/** Credentials only client-node knows how to get (exec plugins, auth-providers). */
async function kubeConfigFallback(file: string): Promise<ConnectionParams> {
  // eslint-disable-next-line @typescript-eslint/no-var-requires
  const { KubeConfig } = require('@kubernetes/client-node') as typeof import('@kubernetes/client-node');
  const kc = new KubeConfig();
  kc.loadFromFile(file);
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error(`kubeconfig ${file}: no current cluster`);
  const opts: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(opts);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(opts.headers ?? {})) if (typeof v === 'string') headers[k] = v;
  return { server: cluster.server, insecure: cluster.skipTLSVerify, headers, agent: opts.agent instanceof http.Agent ? opts.agent : undefined };
}
