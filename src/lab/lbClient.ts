// A client "pod" for the data-path tests. Prints one JSON object.
//   tcp ADDR PORT COUNT   connect COUNT times; per connection: the backend that
//                         answered and the peer getpeername() showed
//   udp ADDR PORT COUNT   unconnected sendto/recvfrom COUNT times; per reply:
//                         the backend and the source address recvfrom() showed
//   loop ADDR PORT MS     connect in a loop for MS milliseconds; counts ok/failed
//   udpconn ADDR PORT MS  a resolver-like client: one connected UDP socket,
//                         a query every 50 ms for MS milliseconds; on an error
//                         it opens and connects a new socket. Prints one JSON
//                         line per reply or error as it happens ({t, backend}
//                         or {t, error}; t = Date.now()), then {done, ...}.
//   udpc ADDR PORT COUNT  one connected UDP socket, COUNT queries; per reply:
//                         the backend, the source recvmsg() showed (peer) and
//                         what getpeername() showed (connectedPeer)
// An IPv6 ADDR uses AF_INET6 sockets; "::ffff:a.b.c.d" is IPv4 through a
// dual-stack AF_INET6 socket (as Java and Go runtimes send it).
import * as net from 'node:net';
import * as dgram from 'node:dgram';

interface Outcome { backend?: string; peer?: string; error?: string; ms: number }

function tcpOnce(address: string, port: number, timeoutMs = 2000): Promise<Outcome> {
  const start = process.hrtime.bigint();
  const ms = () => Number(process.hrtime.bigint() - start) / 1e6;
  return new Promise((resolve) => {
    const sock = net.connect({ host: address, port });
    let data = '';
    let peer: string | undefined;
    const timer = setTimeout(() => { sock.destroy(); resolve({ error: 'ETIMEDOUT', ms: ms() }); }, timeoutMs);
    sock.on('connect', () => { peer = `${sock.remoteAddress}:${sock.remotePort}`; });
    sock.on('data', (d) => (data += d));
    sock.on('end', () => { clearTimeout(timer); sock.destroy(); resolve({ backend: data.trim().split(' ')[0], peer, ms: ms() }); });
    sock.on('error', (e: NodeJS.ErrnoException) => { clearTimeout(timer); resolve({ error: e.code ?? e.message, ms: ms() }); });
  });
}

async function udpRun(address: string, port: number, count: number): Promise<Outcome[]> {
  const sock = dgram.createSocket(udpType(address));
  const out: Outcome[] = [];
  await new Promise<void>((r) => sock.bind(0, r));
  for (let i = 0; i < count; i++) {
    const start = process.hrtime.bigint();
    const reply = await new Promise<Outcome>((resolve) => {
      const timer = setTimeout(() => { sock.removeAllListeners('message'); resolve({ error: 'ETIMEDOUT', ms: 1000 }); }, 1000);
      sock.once('message', (msg, rinfo) => {
        clearTimeout(timer);
        resolve({ backend: msg.toString().trim().split(' ')[0], peer: `${rinfo.address}:${rinfo.port}`, ms: Number(process.hrtime.bigint() - start) / 1e6 });
      });
      sock.send(`ping ${i}`, port, address, (err) => {
        if (err) { clearTimeout(timer); sock.removeAllListeners('message'); resolve({ error: (err as NodeJS.ErrnoException).code ?? err.message, ms: 0 }); }
      });
    });
    out.push(reply);
  }
  sock.close();
  return out;
}

/** One connected socket: resolves with the first error (or undefined when time is up). */
function udpConnectedSession(address: string, port: number, end: number, emit: (o: Record<string, unknown>) => void): Promise<void> {
  return new Promise((resolve) => {
    const sock = dgram.createSocket(udpType(address));
    let timer: NodeJS.Timeout | undefined;
    let finished = false;
    const finish = (error?: string) => {
      if (finished) return;
      finished = true;
      clearInterval(timer);
      if (error) emit({ t: Date.now(), error });
      try { sock.close(); } catch { /* already closed */ }
      resolve();
    };
    sock.on('error', (e: NodeJS.ErrnoException) => finish(e.code ?? e.message));
    sock.on('message', (msg) => emit({ t: Date.now(), backend: msg.toString().trim().split(' ')[0] }));
    sock.connect(port, address, () => {
      emit({ t: Date.now(), connected: `${sock.remoteAddress().address}:${sock.remoteAddress().port}` });
      let i = 0;
      timer = setInterval(() => {
        if (Date.now() >= end) return finish();
        sock.send(`q ${i++}`, (err) => { if (err) finish((err as NodeJS.ErrnoException).code ?? err.message); });
      }, 50);
    });
  });
}

function udpType(address: string): 'udp4' | 'udp6' {
  return net.isIPv6(address) ? 'udp6' : 'udp4';
}

/** Connected UDP: COUNT request/replies on one socket. */
async function udpConnectedRun(address: string, port: number, count: number): Promise<Array<Outcome & { connectedPeer?: string }>> {
  const sock = dgram.createSocket(udpType(address));
  const out: Array<Outcome & { connectedPeer?: string }> = [];
  const start = process.hrtime.bigint();
  const error = await new Promise<string | undefined>((resolve) => {
    sock.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    sock.connect(port, address, (err?: NodeJS.ErrnoException) => resolve(err ? err.code ?? err.message : undefined));
  });
  if (error) {
    sock.close();
    return [{ error, ms: Number(process.hrtime.bigint() - start) / 1e6 }];
  }
  const connectedPeer = `${sock.remoteAddress().address}:${sock.remoteAddress().port}`;
  for (let i = 0; i < count; i++) {
    const start = process.hrtime.bigint();
    out.push(await new Promise((resolve) => {
      const timer = setTimeout(() => { sock.removeAllListeners('message'); resolve({ error: 'ETIMEDOUT', ms: 1000 }); }, 1000);
      sock.once('message', (msg, rinfo) => {
        clearTimeout(timer);
        resolve({ backend: msg.toString().trim().split(' ')[0], peer: `${rinfo.address}:${rinfo.port}`, connectedPeer, ms: Number(process.hrtime.bigint() - start) / 1e6 });
      });
      sock.send(`q ${i}`);
    }));
  }
  sock.close();
  return out;
}

async function udpConnectedLoop(address: string, port: number, ms: number): Promise<void> {
  const end = Date.now() + ms;
  const emit = (o: Record<string, unknown>) => process.stdout.write(JSON.stringify(o) + '\n');
  let sessions = 0;
  while (Date.now() < end) {
    sessions++;
    await udpConnectedSession(address, port, end, emit);
    await new Promise((r) => setTimeout(r, 20)); // a failing connect() must not spin
  }
  emit({ done: true, sessions });
}

async function main(): Promise<void> {
  const [mode, address, portText, countText] = process.argv.slice(2);
  const port = Number(portText);
  const n = Number(countText);
  if (!address || !port || !n) throw new Error('usage: lbClient tcp|udp|loop|udpconn ADDR PORT COUNT|MS');
  if (mode === 'tcp') {
    const results: Outcome[] = [];
    for (let i = 0; i < n; i++) results.push(await tcpOnce(address, port));
    process.stdout.write(JSON.stringify({ results }) + '\n');
  } else if (mode === 'udp') {
    process.stdout.write(JSON.stringify({ results: await udpRun(address, port, n) }) + '\n');
  } else if (mode === 'loop') {
    const end = Date.now() + n;
    let ok = 0;
    const errors: Record<string, number> = {};
    const backends: Record<string, number> = {};
    while (Date.now() < end) {
      const r = await tcpOnce(address, port, 1000);
      if (r.error) errors[r.error] = (errors[r.error] ?? 0) + 1;
      else { ok++; backends[r.backend ?? '?'] = (backends[r.backend ?? '?'] ?? 0) + 1; }
    }
    process.stdout.write(JSON.stringify({ ok, errors, backends }) + '\n');
  } else if (mode === 'udpc') {
    process.stdout.write(JSON.stringify({ results: await udpConnectedRun(address, port, n) }) + '\n');
  } else if (mode === 'udpconn') {
    await udpConnectedLoop(address, port, n);
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(1);
});
