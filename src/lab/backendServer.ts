// A backend "pod": serves TCP and UDP on each ADDRESS:PORT given and answers
// every connection or datagram with the address it was reached on and the
// client's address, so tests see which backend got the traffic and who it
// thought the client was. Run: node backendServer.js 192.0.2.2:8080 ...
import * as net from 'node:net';
import * as dgram from 'node:dgram';

// ADDRESS:PORT/hold: a TCP connection is kept open after that first line and
// every chunk the client sends is echoed (long-lived connections, issue 13.4).
const listeners = process.argv.slice(2).map((spec) => {
  const [hostPort, mode] = spec.split('/') as [string, string | undefined];
  // ADDRESS:PORT; the last colon separates the port (IPv6 addresses have colons).
  const at = hostPort.lastIndexOf(':');
  return { address: hostPort.slice(0, at), port: Number(hostPort.slice(at + 1)), hold: mode === 'hold' };
});

let ready = 0;
const total = listeners.length * 2;
const markReady = () => {
  if (++ready === total) process.stdout.write('ready\n');
};

for (const { address, port, hold } of listeners) {
  net
    .createServer((sock) => {
      sock.on('error', () => undefined);
      if (!hold) return void sock.end(`${address}:${port} ${sock.remoteAddress}\n`);
      sock.write(`${address}:${port} ${sock.remoteAddress}\n`);
      sock.on('data', (d) => sock.write(d));
    })
    .listen(port, address, markReady);
  const udp = dgram.createSocket(net.isIPv6(address) ? 'udp6' : 'udp4');
  udp.on('message', (_msg, rinfo) => udp.send(`${address}:${port} ${rinfo.address}\n`, rinfo.port, rinfo.address));
  udp.bind(port, address, markReady);
}
process.on('SIGTERM', () => process.exit(0));
