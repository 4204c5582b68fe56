// A backend "pod": serves TCP and UDP on each ADDRESS:PORT given and answers
// every connection or datagram with the address it was reached on and the
// client's address, so tests see which backend got the traffic and who it
// thought the client was. Run: node backendServer.js 192.0.2.2:8080 ...
import * as net from 'node:net';
import * as dgram from 'node:dgram';

const listeners = process.argv.slice(2).map((spec) => {
  // ADDRESS:PORT; the last colon separates the port (IPv6 addresses have colons).
  const at = spec.lastIndexOf(':');
  return { address: spec.slice(0, at), port: Number(spec.slice(at + 1)) };
});

let ready = 0;
const total = listeners.length * 2;
const markReady = () => {
  if (++ready === total) process.stdout.write('ready\n');
};

for (const { address, port } of listeners) {
  net
    .createServer((sock) => {
      sock.on('error', () => undefined);
      sock.end(`${address}:${port} ${sock.remoteAddress}\n`);
    })
    .listen(port, address, markReady);
  const udp = dgram.createSocket(net.isIPv6(address) ? 'udp6' : 'udp4');
  udp.on('message', (_msg, rinfo) => udp.send(`${address}:${port} ${rinfo.address}\n`, rinfo.port, rinfo.address));
  udp.bind(port, address, markReady);
}
process.on('SIGTERM', () => process.exit(0));
