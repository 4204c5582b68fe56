// Backend "pods" for end-to-end tests: addresses on the sandbox netns's
// loopback and the lab's TCP/UDP echo server listening on each address:port.
import type { Sandbox } from '../../src/lab/sandbox';
import { labScript, waitFor } from './sandbox';

export async function startBackends(sb: Sandbox, addresses: readonly string[], ports: readonly number[] = [8080]): Promise<void> {
  for (const a of addresses) sb.ip(['addr', 'add', `${a}/32`, 'dev', 'lo']);
  const server = sb.spawnInNetns(['node', labScript('backendServer'), ...addresses.flatMap((a) => ports.map((p) => `${a}:${p}`))]);
  let ready = false;
  server.stdout!.on('data', (d) => { if (String(d).includes('ready')) ready = true; });
  await waitFor('backend servers', () => ready);
}
