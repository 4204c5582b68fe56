// The report protocol of the stale-socket tests' client (test/bpf/sock_destroy*.test.ts):
// the client script holds named sockets in `state`; on SIGUSR1 each UDP socket
// still open sends once more (a destroyed one errors), then one JSON line of
// name -> status is printed.
import type { ChildProcess } from 'node:child_process';
import { waitFor } from './sandbox';

/** JavaScript source for the client script, after its sockets are open. */
export const REPORT_ON_SIGUSR1 = `
  process.stdout.write('ready\\n');
  process.on('SIGUSR1', async () => {
    for (const [name, s] of Object.entries(state)) if (name.startsWith('udp') && s.status === 'ok') s.sock.send('again', () => {});
    await new Promise((r) => setTimeout(r, 300));
    const out = {};
    for (const [name, s] of Object.entries(state)) out[name] = s.status;
    process.stdout.write(JSON.stringify(out) + '\\n');
  });`;

/** Ask the client for its report; `lines` is its stdout so far, one entry a line. */
export async function askReport(client: ChildProcess, lines: string[]): Promise<Record<string, string>> {
  const before = lines.length;
  client.kill('SIGUSR1');
  await waitFor('client report', () => lines.length > before, 5000);
  return JSON.parse(lines[lines.length - 1]!) as Record<string, string>;
}
