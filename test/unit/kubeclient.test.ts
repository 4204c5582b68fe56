// The agent's own kubeconfig reader (src/agent/kubeClient.ts): the fields
// node kubeconfigs use reach the request (token, token file, basic auth,
// --k8s-api-server override, files relative to the kubeconfig), and a
// kubeconfig it cannot read gives an error that names the file and why.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import YAML from 'yaml';
import { connectToApi } from '../../src/agent/kubeClient';

let server: http.Server;
let url: string;
let dir: string;
const seen: Array<{ url: string; auth: string | undefined }> = [];

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-kubeclient-'));
  server = http.createServer((req, res) => {
    seen.push({ url: req.url ?? '', auth: req.headers.authorization });
    res.end('{}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});

after(() => {
  server.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function kubeconfig(user: Record<string, unknown>, server = url): string {
  const file = path.join(dir, `kc-${seen.length}-${Math.random().toString(36).slice(2)}`);
  fs.writeFileSync(file, YAML.stringify({
    apiVersion: 'v1', kind: 'Config', 'current-context': 'c',
    clusters: [{ name: 'k', cluster: { server } }],
    users: [{ name: 'u', user }],
    contexts: [{ name: 'c', context: { cluster: 'k', user: 'u' } }],
  }));
  return file;
}

async function get(kc: string, apiServer?: string): Promise<{ url: string; auth: string | undefined }> {
  const api = await connectToApi(kc, apiServer);
  const res = await api.get('/api/v1/services', { limit: '500', continue: undefined });
  res.resume();
  await new Promise((r) => res.on('end', r));
  return seen[seen.length - 1]!;
}

test('a bearer token, a token file (relative to the kubeconfig) and basic auth reach the request', async () => {
  assert.equal((await get(kubeconfig({ token: 'abc' }))).auth, 'Bearer abc');
  fs.writeFileSync(path.join(dir, 'token'), 'from-file\n');
  assert.equal((await get(kubeconfig({ tokenFile: 'token' }))).auth, 'Bearer from-file');
  assert.equal((await get(kubeconfig({ username: 'a', password: 'b' }))).auth, `Basic ${Buffer.from('a:b').toString('base64')}`);
  assert.equal((await get(kubeconfig({}))).url, '/api/v1/services?limit=500', 'undefined query values are left out');
});

test('--k8s-api-server replaces the kubeconfig\'s server', async () => {
  const r = await get(kubeconfig({}, 'http://127.0.0.1:1'), url.replace('http://', ''));
  assert.equal(r.url, '/api/v1/services?limit=500');
});

test('a broken kubeconfig is an error naming the file and the reason', async () => {
  const missing = path.join(dir, 'bad');
  fs.writeFileSync(missing, YAML.stringify({ 'current-context': 'nope', contexts: [] }));
  await assert.rejects(connectToApi(missing, undefined), new RegExp(`kubeconfig ${missing}: current-context "nope" not found`));
  const noServer = path.join(dir, 'noserver');
  fs.writeFileSync(noServer, YAML.stringify({ 'current-context': 'c', contexts: [{ name: 'c', context: { cluster: 'k' } }], clusters: [{ name: 'k', cluster: {} }] }));
  await assert.rejects(connectToApi(noServer, undefined), /cluster "k" has no server/);
});
