// A byte forwarder that carries the API server's TLS stream into a node's
// network namespace without any network link between that namespace and the
// machine: a unix socket (which lives in the file system, not in a netns)
// joins the two halves.
//
//   root netns:  unix-to-tcp  <socket> 127.0.0.1:<apiserver port>
//   node netns:  tcp-to-unix  127.0.0.1:6443 <socket>     (started with nsenter --net=...)
//
// So kube-proxy (and later the Sluice agent) inside a node namespace reach the
// API server at https://127.0.0.1:6443, and the node namespace still has no
// route anywhere. TLS is end to end: this process only copies bytes.
import { createServer, connect, Socket } from 'node:net';
import { existsSync, unlinkSync } from 'node:fs';

function hostPort(s: string): { host: string; port: number } {
  const i = s.lastIndexOf(':');
  const port = Number(s.slice(i + 1));
  if (i < 0 || !Number.isInteger(port)) throw new Error(`forwarder: '${s}' is not host:port`);
  return { host: s.slice(0, i), port };
}

function pipeBoth(a: Socket, b: Socket): void {
  a.pipe(b);
  b.pipe(a);
  const end = (): void => { a.destroy(); b.destroy(); };
  a.on('error', end); b.on('error', end);
  a.on('close', end); b.on('close', end);
}

function main(argv: string[]): void {
  const [mode, from, to] = argv;
  if (mode === 'tcp-to-unix' && from && to) {
    const { host, port } = hostPort(from);
    createServer((c) => pipeBoth(c, connect(to))).listen(port, host);
  } else if (mode === 'unix-to-tcp' && from && to) {
    const { host, port } = hostPort(to);
    if (existsSync(from)) unlinkSync(from);
    createServer((c) => pipeBoth(c, connect(port, host))).listen(from);
  } else {
    process.stderr.write('usage: forwarder tcp-to-unix HOST:PORT SOCKET | unix-to-tcp SOCKET HOST:PORT\n');
    process.exit(2);
  }
  const stop = (): void => process.exit(0);
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main(process.argv.slice(2));
