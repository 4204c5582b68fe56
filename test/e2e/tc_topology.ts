// A small routed "cluster" in network namespaces for the north-south tests.
// Nothing here touches the machine's own namespace or devices: every veth is
// created directly between two test namespaces, there is no default route,
// and every name carries a random suffix.
//
//   cli (198.18.0.10) ─┐
//   n1  (198.18.0.1)  ─┼─ br0 in lan            n1: TC on eth0; pods p1 (198.18.1.10), p1b (198.18.1.11)
//   n2  (198.18.0.2)  ─┘                        n2: pod p2 (198.18.2.20)
import { NetnsTopology } from './netns_topology';

export const ADDR = {
  client: '198.18.0.10',
  node1: '198.18.0.1',
  node2: '198.18.0.2',
  pod1: '198.18.1.10',
  pod1b: '198.18.1.11',
  pod2: '198.18.2.20',
  /** ExternalIP / LoadBalancer IPs, routed to node1 by the client. */
  vipNet: '198.18.100.0/24',
} as const;

export type Role = 'lan' | 'cli' | 'n1' | 'n2' | 'p1' | 'p1b' | 'p2';
const ROLES: Role[] = ['lan', 'cli', 'n1', 'n2', 'p1', 'p1b', 'p2'];

export class Topology extends NetnsTopology<Role> {
  constructor(prefix = 'sltc') {
    super(prefix, ROLES);
  }

  create(): void {
    this.addNamespaces();
    this.in('lan', 'link', 'add', 'br0', 'type', 'bridge');
    this.in('lan', 'link', 'set', 'br0', 'up');
    const lanPort = (role: Role, address: string) => {
      this.in('lan', 'link', 'add', `${role}-l`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', this.ns[role]);
      this.in('lan', 'link', 'set', `${role}-l`, 'master', 'br0', 'up');
      this.in(role, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
      this.in(role, 'link', 'set', 'eth0', 'up');
    };
    lanPort('cli', ADDR.client);
    lanPort('n1', ADDR.node1);
    lanPort('n2', ADDR.node2);
    // Pods reach their node through a link-local-free /32 scheme: the node's
    // pod-facing address is its LAN address (as many CNIs do).
    this.addPod('n1', 'p1', ADDR.pod1, ADDR.node1, 'vp1');
    this.addPod('n1', 'p1b', ADDR.pod1b, ADDR.node1, 'vp1b');
    this.addPod('n2', 'p2', ADDR.pod2, ADDR.node2, 'vp2');
    this.in('n1', 'route', 'add', '198.18.2.0/24', 'via', ADDR.node2);
    this.in('n2', 'route', 'add', '198.18.1.0/24', 'via', ADDR.node1);
    this.in('cli', 'route', 'add', ADDR.vipNet, 'via', ADDR.node1);
    this.makeRouters(['n1', 'n2']);
  }
}

/** TCP and UDP server answering "<name> <peer address>:<peer port>". */
export const SERVER_SCRIPT = `
const net = require('net'), dgram = require('dgram');
const [name, port] = process.argv.slice(1);
let ready = 0; const up = () => { if (++ready === 2) process.stdout.write('ready\\n'); };
net.createServer((s) => s.end(name + ' ' + s.remoteAddress + ':' + s.remotePort)).listen(Number(port), '0.0.0.0', up);
const u = dgram.createSocket('udp4');
u.on('message', (m, r) => u.send(name + ' ' + r.address + ':' + r.port, r.port, r.address));
u.bind(Number(port), '0.0.0.0', up);
`;

/** One TCP request or UDP datagram (either family); prints the answer or "timeout"/"error <code>". */
export const CLIENT_SCRIPT = `
const net = require('net'), dgram = require('dgram');
const [proto, host, port] = process.argv.slice(1);
const done = (s) => { process.stdout.write(s); process.exit(0); };
setTimeout(() => done('timeout'), 2000);
if (proto === 'tcp') {
  const s = net.connect(Number(port), host); let data = '';
  s.on('data', (d) => (data += d)); s.on('end', () => done(data)); s.on('error', (e) => done('error ' + e.code));
} else {
  const u = dgram.createSocket(host.includes(':') ? 'udp6' : 'udp4');
  u.on('message', (m) => done(String(m)));
  u.send('hi', Number(port), host);
}
`;
