// A client "pod" for the data-path tests. Prints one JSON object.
//   tcp ADDR PORT COUNT   connect COUNT times; per connection: the backend that
//                         answered and the peer getpeername() showed
//   udp ADDR PORT COUNT   unconnected sendto/recvfrom COUNT times; per reply:
//                         the backend and the source address recvfrom() showed
//   loop ADDR PORT MS [GAP [TIMEOUT]] connect in a loop for MS milliseconds (GAP ms
//                         apart, default 0; each given TIMEOUT ms, default 1000);
//                         counts ok/failed and slow (answered after > 900 ms)
//   udpconn ADDR PORT MS  a resolver-like client: one connected UDP socket,
//                         a query every 50 ms for MS milliseconds; on an error
//                         it opens and connects a new socket. Prints one JSON
//                         line per reply or error as it happens ({t, backend}
//                         or {t, error}; t = Date.now()), then {done, ...}.
//   hold ADDR PORT MS [N]   N (default 3) long-lived TCP connections to a
//                         backend served with /hold: a line every 100 ms, each
//                         echoed, for MS milliseconds; per connection the
//                         backend, getpeername() at the start and at the end
//                         (read again from the kernel), lines sent and echoed
//   soak PORT MS VIPS [C]  churn soak (bench/soak.ts): C parallel loops connect
//                         for MS milliseconds, round robin over the comma-joined
//                         VIPS; one line per connection as it ends:
//                         "t0 t1 vipIndex backend|!error", t0 before connect(),
//                         t1 at its 'connect' (or the error), in ms of
//                         process.hrtime (CLOCK_MONOTONIC, the same in every
//                         process of the machine, so the soak can compare them
//                         with the times it saw the maps change).
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

interface Held { backend?: string; peerStart?: string; peerEnd?: string; sent: number; echoed: number; error?: string }

/** getpeername(2) now: node caches the first answer in _peername. */
function peerNow(sock: net.Socket): string {
  (sock as unknown as { _peername?: unknown })._peername = undefined;
  return `${sock.remoteAddress}:${sock.remotePort}`;
}

function holdOne(address: string, port: number, ms: number): Promise<Held> {
  return new Promise((resolve) => {
    const out: Held = { sent: 0, echoed: 0 };
    const sock = net.connect({ host: address, port });
    let buf = '';
    let timer: NodeJS.Timeout | undefined;
    let done = false;
    const finish = (error?: string) => {
      if (done) return;
      done = true;
      clearInterval(timer);
      if (error) out.error = error;
      else out.peerEnd = peerNow(sock);
      sock.destroy();
      resolve(out);
    };
    sock.on('connect', () => { out.peerStart = peerNow(sock); });
    sock.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (out.backend === undefined) out.backend = line.split(' ')[0];
        else out.echoed++;
      }
    });
    sock.on('error', (e: NodeJS.ErrnoException) => finish(e.code ?? e.message));
    sock.on('close', () => finish('closed by peer'));
    const end = Date.now() + ms;
    timer = setInterval(() => {
      if (Date.now() >= end) {
        // the last lines' echoes get 500 ms
        clearInterval(timer);
        setTimeout(() => (out.echoed === out.sent ? finish() : finish(`${out.sent - out.echoed} lines not echoed`)), 500);
        return;
      }
      if (out.backend === undefined) return;
      sock.write(`ping ${out.sent++}\n`);
    }, 100);
  });
}

const monoMs = () => Number(process.hrtime.bigint()) / 1e6;

/** One soak connection: the backend that answered, with the times around connect(). */
function soakOnce(address: string, port: number): Promise<string> {
  const t0 = monoMs();
  return new Promise((resolve) => {
    const sock = net.connect({ host: address, port });
    let t1 = 0;
    let data = '';
    const done = (what: string) => { clearTimeout(timer); sock.destroy(); resolve(`${t0.toFixed(3)} ${(t1 || monoMs()).toFixed(3)} ${what}`); };
    const timer = setTimeout(() => done('!ETIMEDOUT'), 2000);
    sock.on('connect', () => { t1 = monoMs(); });
    sock.on('data', (d) => (data += d));
    sock.on('end', () => done(data.trim().split(' ')[0] || '!EMPTY'));
    sock.on('error', (e: NodeJS.ErrnoException) => done(`!${e.code ?? e.message}`));
  });
}

async function soakLoops(port: number, ms: number, vips: string[], parallel: number): Promise<void> {
  const end = Date.now() + ms;
  let next = 0;
  let out = '';
  const flush = () => { if (out) process.stdout.write(out); out = ''; };
  const flusher = setInterval(flush, 200);
  await Promise.all(Array.from({ length: parallel }, async () => {
    while (Date.now() < end) {
      const i = next++ % vips.length;
      const r = await soakOnce(vips[i]!, port);
      const [t0, t1, what] = r.split(' ');
      out += `${t0} ${t1} ${i} ${what}\n`;
    }
  }));
  clearInterval(flusher);
  flush();
}

async function main(): Promise<void> {
  if (process.argv[2] === 'soak') {
    const [, portText, msText, vips, parallel] = process.argv.slice(2);
    return soakLoops(Number(portText), Number(msText), (vips ?? '').split(','), Number(parallel ?? 4));
  }
  const [mode, address, portText, countText] = process.argv.slice(2);
  const port = Number(portText);
  const n = Number(countText);
  if (!address || !port || !n) throw new Error('usage: lbClient tcp|udp|loop|udpconn|hold ADDR PORT COUNT|MS');
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
    const gapMs = Number(process.argv[6] ?? 0); // pacing: stay under what SNAT ports and TIME_WAIT allow
    const timeoutMs = Number(process.argv[7] ?? 1000);
    let slow = 0; // answered, but after more than 900 ms (a SYN retransmit)
    while (Date.now() < end) {
      if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
      const r = await tcpOnce(address, port, timeoutMs);
      if (r.error) errors[r.error] = (errors[r.error] ?? 0) + 1;
      else { ok++; backends[r.backend ?? '?'] = (backends[r.backend ?? '?'] ?? 0) + 1; }
      if (!r.error && r.ms > 900) slow++;
    }
    process.stdout.write(JSON.stringify({ ok, errors, backends, slow }) + '\n');
  } else if (mode === 'hold') {
    const conns = Number(process.argv[6] ?? 3);
    const results = await Promise.all(Array.from({ length: conns }, () => holdOne(address, port, n)));
    process.stdout.write(JSON.stringify({ results }) + '\n');
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
