// The usual stage of an agent e2e test: a sandbox whose loopback carries the
// backend addresses (real TCP and UDP servers on :8080), the built-in API
// with the Node, and a kubeconfig for it. close() removes all of it.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { Sandbox, waitFor, labScript } from './sandbox';

export interface AgentLab {
  sb: Sandbox;
  api: ApiServerHandle;
  kubeconfig: string;
  close(): Promise<void>;
}

export async function startAgentLab(prefix: string, backends: string[], nodeName: string): Promise<AgentLab> {
  const sb = Sandbox.create(prefix);
  let api: ApiServerHandle | undefined;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  const lab: AgentLab = {
    sb,
    get api() {
      return api!;
    },
    set api(next: ApiServerHandle) {
      api = next;
    },
    kubeconfig: path.join(tmp, 'kubeconfig'),
    async close() {
      await api?.close();
      sb.close();
      fs.rmSync(tmp, { recursive: true, force: true });
    },
  };
  try {
    for (const b of backends) sb.ip(['addr', 'add', `${b}/32`, 'dev', 'lo']);
    const server = sb.spawnInNetns(['node', labScript('backendServer'), ...backends.map((b) => `${b}:8080`)]);
    let ready = false;
    server.stdout!.on('data', (d) => { if (String(d).includes('ready')) ready = true; });
    await waitFor('backend servers', () => ready);
    api = await startApiServer({ port: 0 });
    api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: nodeName }, status: { addresses: [{ type: 'InternalIP', address: '198.18.0.1' }] } });
    await api.writeKubeconfig(lab.kubeconfig);
  } catch (err) {
    await lab.close();
    throw err;
  }
  return lab;
}
