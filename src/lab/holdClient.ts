// A client "pod" that keeps its TCP connections open (least-connection
// tests): commands on stdin, one JSON line per command on stdout.
//   open PORT N      open N connections to ADDR:PORT one after another, each
//                    kept open after the backend's greeting; prints
//                    {opened: [{id, backend}]}
//   close ID,ID,...  close those connections; prints {closed: n}
//   peers            every open connection's peer, by a getpeername() of
//                    its own (the socket hook's reverse translation runs);
//                    prints {peers: {id: "address:port"}}
//   exit
// Run: node holdClient.js ADDR
import * as net from 'node:net';
import * as readline from 'node:readline';

const address = process.argv[2]!;
const open = new Map<number, net.Socket>();
let nextId = 1;

function connectOne(port: number): Promise<{ id: number; backend?: string; error?: string }> {
  return new Promise((resolve) => {
    // allowHalfOpen: the backend's FIN after its greeting must not close our
    // side; the socket (and the count it holds) lives until `close`.
    const sock = net.connect({ host: address, port, allowHalfOpen: true });
    const id = nextId++;
    let data = '';
    const timer = setTimeout(() => { sock.destroy(); resolve({ id, error: 'ETIMEDOUT' }); }, 3000);
    sock.on('data', (d) => {
      data += d;
      if (!data.includes('\n')) return;
      clearTimeout(timer);
      open.set(id, sock);
      resolve({ id, backend: data.trim().split(' ')[0] });
    });
    sock.on('error', (e: NodeJS.ErrnoException) => { clearTimeout(timer); resolve({ id, error: e.code ?? e.message }); });
  });
}

function closeOne(id: number): Promise<void> {
  const sock = open.get(id);
  open.delete(id);
  if (!sock) return Promise.resolve();
  return new Promise((resolve) => {
    sock.once('close', () => resolve());
    sock.destroy();
  });
}

const out = (o: unknown) => process.stdout.write(`${JSON.stringify(o)}\n`);
const rl = readline.createInterface({ input: process.stdin });
let queue = Promise.resolve();
rl.on('line', (line) => {
  queue = queue.then(async () => {
    const [cmd, a, b] = line.trim().split(/\s+/);
    if (cmd === 'open') {
      const opened = [];
      for (let i = 0; i < Number(b); i++) opened.push(await connectOne(Number(a)));
      out({ opened });
    } else if (cmd === 'close') {
      const ids = (a ?? '').split(',').filter(Boolean).map(Number);
      for (const id of ids) await closeOne(id);
      out({ closed: ids.length });
    } else if (cmd === 'peers') {
      const peers: Record<number, string> = {};
      // Node caches a socket's peer after its first getpeername(): each
      // socket is asked once, when this command first sees it.
      for (const [id, sock] of open) peers[id] = `${sock.remoteAddress}:${sock.remotePort}`;
      out({ peers });
    } else if (cmd === 'exit') {
      for (const id of [...open.keys()]) await closeOne(id);
      process.exit(0);
    }
  });
});
rl.on('close', () => process.exit(0));
