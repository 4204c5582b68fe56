// An IPv6 routed "cluster" in network namespaces for the IPv6 north-south
// tests (issue 14). Clients reach node1 on its public device (eth0); node1
// reaches node2 on a private device (eth1) whose MTU is a parameter (a hop
// the client does not see: PMTU). Nothing touches the machine's own
// namespace: every veth is created between two test namespaces, there is no
// default route, addresses are 2001:db8::/32 and fd00::/8, names carry a
// random suffix.
//
//   cli 2001:db8:1::10 ─eth0─ n1 eth0 2001:db8:1::1   n1: local pod p1 (fd00:1::10) on vp1
//                             n1 eth1 2001:db8:2::1 ─eth1─ n2 eth1 2001:db8:2::2   n2: pod p2 (fd00:2::20) on vp2
//
// Pods reach their node through a link-local gateway (fe80::1 on the host
// side of their veth), as IPv6 CNIs commonly do.
import { NetnsTopology } from './netns_topology';

export const V6 = {
  client: '2001:db8:1::10',
  node1Public: '2001:db8:1::1',
  node1Private: '2001:db8:2::1',
  node2Private: '2001:db8:2::2',
  pod1: 'fd00:1::10',
  pod2: 'fd00:2::20',
  /** addClientLink: the client's and node2's ends of their own link. */
  clientN2: '2001:db8:3::10',
  node2Client: '2001:db8:3::2',
  /** ExternalIP / LoadBalancer IPs, routed to node1 by the client. */
  vipNet: '2001:db8:100::/64',
} as const;

export type V6Role = 'cli' | 'n1' | 'n2' | 'p1' | 'p2';
const ROLES: V6Role[] = ['cli', 'n1', 'n2', 'p1', 'p2'];

export class Topology6 extends NetnsTopology<V6Role> {
  constructor(prefix = 'sl6') {
    super(prefix, ROLES);
  }

  create(): void {
    this.addNamespaces();
    for (const r of ROLES) {
      // No duplicate address detection: addresses are usable at once.
      this.sysctl(r, 'net.ipv6.conf.all.accept_dad', '0');
      this.sysctl(r, 'net.ipv6.conf.default.accept_dad', '0');
    }
    const link = (a: V6Role, aDev: string, aAddr: string, b: V6Role, bDev: string, bAddr: string) => {
      this.in(a, 'link', 'add', aDev, 'type', 'veth', 'peer', 'name', bDev, 'netns', this.ns[b]);
      this.in(a, '-6', 'addr', 'add', aAddr, 'dev', aDev, 'nodad');
      this.in(b, '-6', 'addr', 'add', bAddr, 'dev', bDev, 'nodad');
      this.in(a, 'link', 'set', aDev, 'up');
      this.in(b, 'link', 'set', bDev, 'up');
    };
    link('cli', 'eth0', `${V6.client}/64`, 'n1', 'eth0', `${V6.node1Public}/64`);
    link('n1', 'eth1', `${V6.node1Private}/64`, 'n2', 'eth1', `${V6.node2Private}/64`);
    this.addPod6('n1', 'p1', V6.pod1, 'vp1');
    this.addPod6('n2', 'p2', V6.pod2, 'vp2');
    this.in('n1', '-6', 'route', 'add', 'fd00:2::/64', 'via', V6.node2Private, 'dev', 'eth1');
    this.in('n2', '-6', 'route', 'add', '2001:db8:1::/64', 'via', V6.node1Private, 'dev', 'eth1');
    this.in('n2', '-6', 'route', 'add', 'fd00:1::/64', 'via', V6.node1Private, 'dev', 'eth1');
    this.in('cli', '-6', 'route', 'add', V6.vipNet, 'via', V6.node1Public);
    for (const n of ['n1', 'n2'] as const) this.sysctl(n, 'net.ipv6.conf.all.forwarding', '1');
  }

  /**
   * DSR (docs/dsr.md): a client-node2 link (cli eth1 V6.clientN2, n2 eth2
   * V6.node2Client) and node2's route to the client over it, so node2
   * answers the client without node1.
   */
  addClientLink(): void {
    this.in('cli', 'link', 'add', 'eth1', 'type', 'veth', 'peer', 'name', 'eth2', 'netns', this.ns.n2);
    this.in('cli', '-6', 'addr', 'add', `${V6.clientN2}/64`, 'dev', 'eth1', 'nodad');
    this.in('n2', '-6', 'addr', 'add', `${V6.node2Client}/64`, 'dev', 'eth2', 'nodad');
    this.in('cli', 'link', 'set', 'eth1', 'up');
    this.in('n2', 'link', 'set', 'eth2', 'up');
    this.in('n2', '-6', 'route', 'add', `${V6.client}/128`, 'via', V6.clientN2, 'dev', 'eth2');
  }

  /** Set the MTU of the node1-node2 link (both ends). */
  setPrivateMtu(mtu: number): void {
    this.in('n1', 'link', 'set', 'eth1', 'mtu', String(mtu));
    this.in('n2', 'link', 'set', 'eth1', 'mtu', String(mtu));
  }

  private addPod6(node: V6Role, role: V6Role, address: string, hostDev: string): void {
    this.in(node, 'link', 'add', hostDev, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', this.ns[role]);
    this.in(node, '-6', 'addr', 'add', 'fe80::1/64', 'dev', hostDev, 'nodad');
    this.in(node, 'link', 'set', hostDev, 'up');
    this.in(node, '-6', 'route', 'add', `${address}/128`, 'dev', hostDev);
    this.in(role, '-6', 'addr', 'add', `${address}/128`, 'dev', 'eth0', 'nodad');
    this.in(role, 'link', 'set', 'eth0', 'up');
    this.in(role, '-6', 'route', 'add', '2001:db8::/32', 'via', 'fe80::1', 'dev', 'eth0');
    this.in(role, '-6', 'route', 'add', 'fd00::/8', 'via', 'fe80::1', 'dev', 'eth0');
  }
}

/**
 * Backend on [::]: TCP reads until the client half-closes, then answers
 * "<name> <peer> <bytes> <sha256>\n" and echoes the bytes; UDP answers
 * "<name> <peer>:<port>".
 */
export const SERVER6 = `
const net = require('net'), dgram = require('dgram'), crypto = require('crypto');
const [name, port] = process.argv.slice(1);
let ready = 0; const up = () => { if (++ready === 2) process.stdout.write('ready\\n'); };
net.createServer((s) => { const parts = []; s.on('data', (d) => parts.push(d));
  s.on('end', () => { const all = Buffer.concat(parts);
    const head = name + ' ' + s.remoteAddress + ' ' + all.length + ' ' + crypto.createHash('sha256').update(all).digest('hex') + '\\n';
    s.end(Buffer.concat([Buffer.from(head), all])); });
  s.on('error', () => {}); }).listen(Number(port), '::', up);
const u = dgram.createSocket('udp6');
u.on('message', (m, r) => u.send(name + ' ' + r.address + ':' + r.port, r.port, r.address));
u.bind(Number(port), '::', up);
`;

/** Backend on [::] for the DSR tests: TCP answers "<name> <peer>" at once, UDP "<name> <peer>". */
export const PEER_SERVER6 = `
const net = require('net'), dgram = require('dgram');
const [name, port] = process.argv.slice(1);
let ready = 0; const up = () => { if (++ready === 2) process.stdout.write('ready\\n'); };
net.createServer((s) => { s.on('error', () => {}); s.on('data', () => {}); s.end(name + ' ' + s.remoteAddress); }).listen(Number(port), '::', up);
const u = dgram.createSocket('udp6');
u.on('message', (m, r) => u.send(name + ' ' + r.address, r.port, r.address));
u.bind(Number(port), '::', up);
`;

/** One UDP datagram; prints the answer or "timeout". */
export const UDP_CLIENT6 = `
const u = require('dgram').createSocket('udp6'); const [host, port] = process.argv.slice(1);
const done = (s) => { process.stdout.write(s); process.exit(0); };
u.on('message', (m) => done(String(m))); u.on('error', (e) => done('error ' + e.code));
u.send('hi', Number(port), host); setTimeout(() => done('timeout'), 2000);
`;
