// A multi-homed node in network namespaces: clients reach node1 on its public
// device (eth0); node1 reaches node2 on a private device (eth1). This is the
// shape of many bare-metal and cloud nodes, and the one where the egress
// device of a NodePort flow differs from the device it arrived on.
//
//   cli (198.18.20.10) ─eth0─ n1 eth0 198.18.20.1   n1: local pod p1 (198.18.23.10) on vp1
//                             n1 eth1 198.18.21.1 ─eth1─ n2 eth1 198.18.21.2   n2: pod p2 (198.18.22.20) on vp2
//
// node2 routes node1's public subnet over the private link (so a reply to
// node1's public address enters node1 on eth1). The n1-n2 link MTU is a
// parameter: a smaller one there is a hop the client does not see (PMTU).
// No default route anywhere; every name carries a random suffix.
//
// Every device is dual-stack with the same shape in fd00::/8 (MH6): cli
// fd00:20::10, n1 eth0 fd00:20::1, n1 eth1 fd00:21::1, n2 eth1 fd00:21::2,
// pods fd00:23::10 (p1) and fd00:22::20 (p2) behind a link-local gateway
// (fe80::1 on the node's side of their veth, as IPv6 CNIs commonly do).
import { NetnsTopology } from './netns_topology';

export const MH = {
  client: '198.18.20.10',
  node1Public: '198.18.20.1',
  node1Private: '198.18.21.1',
  node2Private: '198.18.21.2',
  pod1: '198.18.23.10',
  pod2: '198.18.22.20',
  /** ExternalIP / LoadBalancer IPs, routed to node1 by the client. */
  vipNet: '198.18.100.0/24',
} as const;

/** The IPv6 twin of MH (ULA only, never routed out). */
export const MH6 = {
  client: 'fd00:20::10',
  node1Public: 'fd00:20::1',
  node1Private: 'fd00:21::1',
  node2Private: 'fd00:21::2',
  pod1: 'fd00:23::10',
  pod2: 'fd00:22::20',
  /** IPv6 ExternalIP / LoadBalancer IPs, routed to node1 by the client. */
  vipNet: 'fd00:100::/64',
} as const;

export type MhRole = 'cli' | 'n1' | 'n2' | 'p1' | 'p2';
const ROLES: MhRole[] = ['cli', 'n1', 'n2', 'p1', 'p2'];

export interface MhOptions {
  /** MTU of the node1-node2 link (both ends); default 1500. */
  privateMtu?: number;
}

export class MultiHomeTopology extends NetnsTopology<MhRole> {
  constructor(prefix = 'slmh') {
    super(prefix, ROLES);
  }

  create(opts: MhOptions = {}): void {
    this.addNamespaces();
    for (const r of ROLES) {
      // No duplicate address detection: IPv6 addresses are usable at once.
      this.sysctl(r, 'net.ipv6.conf.all.accept_dad', '0');
      this.sysctl(r, 'net.ipv6.conf.default.accept_dad', '0');
    }
    const link = (a: MhRole, aDev: string, aAddr: [string, string], b: MhRole, bDev: string, bAddr: [string, string], mtu = 1500) => {
      this.in(a, 'link', 'add', aDev, 'mtu', String(mtu), 'type', 'veth', 'peer', 'name', bDev, 'mtu', String(mtu), 'netns', this.ns[b]);
      this.in(a, 'addr', 'add', aAddr[0], 'dev', aDev);
      this.in(b, 'addr', 'add', bAddr[0], 'dev', bDev);
      this.in(a, '-6', 'addr', 'add', aAddr[1], 'dev', aDev, 'nodad');
      this.in(b, '-6', 'addr', 'add', bAddr[1], 'dev', bDev, 'nodad');
      this.in(a, 'link', 'set', aDev, 'up');
      this.in(b, 'link', 'set', bDev, 'up');
    };
    link('cli', 'eth0', [`${MH.client}/24`, `${MH6.client}/64`], 'n1', 'eth0', [`${MH.node1Public}/24`, `${MH6.node1Public}/64`]);
    link('n1', 'eth1', [`${MH.node1Private}/24`, `${MH6.node1Private}/64`], 'n2', 'eth1', [`${MH.node2Private}/24`, `${MH6.node2Private}/64`], opts.privateMtu ?? 1500);
    this.addPod('n1', 'p1', MH.pod1, MH.node1Public, 'vp1');
    this.addPod('n2', 'p2', MH.pod2, MH.node2Private, 'vp2');
    this.addPodIPv6('n1', 'p1', MH6.pod1, 'vp1');
    this.addPodIPv6('n2', 'p2', MH6.pod2, 'vp2');
    this.in('n1', 'route', 'add', '198.18.22.0/24', 'via', MH.node2Private, 'dev', 'eth1');
    this.in('n2', 'route', 'add', '198.18.20.0/24', 'via', MH.node1Private, 'dev', 'eth1');
    this.in('n2', 'route', 'add', '198.18.23.0/24', 'via', MH.node1Private, 'dev', 'eth1');
    this.in('cli', 'route', 'add', MH.vipNet, 'via', MH.node1Public);
    this.in('n1', '-6', 'route', 'add', 'fd00:22::/64', 'via', MH6.node2Private, 'dev', 'eth1');
    this.in('n2', '-6', 'route', 'add', 'fd00:20::/64', 'via', MH6.node1Private, 'dev', 'eth1');
    this.in('n2', '-6', 'route', 'add', 'fd00:23::/64', 'via', MH6.node1Private, 'dev', 'eth1');
    this.in('cli', '-6', 'route', 'add', MH6.vipNet, 'via', MH6.node1Public);
    this.makeRouters(['n1', 'n2']);
    for (const n of ['n1', 'n2'] as const) this.sysctl(n, 'net.ipv6.conf.all.forwarding', '1');
  }

  /** The IPv6 address of a pod addPod made: a /128 on its eth0, fe80::1 on the node's side as its gateway. */
  private addPodIPv6(node: MhRole, role: MhRole, address: string, hostDev: string): void {
    this.in(node, '-6', 'addr', 'add', 'fe80::1/64', 'dev', hostDev, 'nodad');
    this.in(node, '-6', 'route', 'add', `${address}/128`, 'dev', hostDev);
    this.in(role, '-6', 'addr', 'add', `${address}/128`, 'dev', 'eth0', 'nodad');
    this.in(role, '-6', 'route', 'add', 'fd00::/8', 'via', 'fe80::1', 'dev', 'eth0');
  }
}

/**
 * Backend, on 0.0.0.0 and on :: (IPv6 only, so IPv4 peers keep their plain
 * address): UDP echo (the whole datagram back, whatever its size) and a TCP
 * server that reads until the client half-closes, then answers
 * "<name> <peer> <bytes received> <sha256>" and echoes the bytes back.
 */
export const ECHO_SERVER = `
const net = require('net'), dgram = require('dgram'), crypto = require('crypto');
const [name, port] = process.argv.slice(1);
let ready = 0; const up = () => { if (++ready === 4) process.stdout.write('ready\\n'); };
const serve = (s) => { const parts = []; s.on('data', (d) => parts.push(d));
  s.on('end', () => { const all = Buffer.concat(parts);
    const head = name + ' ' + s.remoteAddress + ' ' + all.length + ' ' + crypto.createHash('sha256').update(all).digest('hex') + '\\n';
    s.end(Buffer.concat([Buffer.from(head), all])); });
  s.on('error', () => {}); };
net.createServer(serve).listen(Number(port), '0.0.0.0', up);
net.createServer(serve).listen({ port: Number(port), host: '::', ipv6Only: true }, up);
for (const type of ['udp4', 'udp6']) {
  const u = dgram.createSocket(type === 'udp4' ? { type } : { type, ipv6Only: true });
  u.on('message', (m, r) => u.send(m, r.port, r.address));
  u.bind(Number(port), type === 'udp4' ? '0.0.0.0' : '::', up);
}
`;

/** One UDP datagram of N bytes; prints "ok <N>" when the same bytes come back, else what happened. */
export const BIG_UDP_CLIENT = `
const dgram = require('dgram'), crypto = require('crypto');
const [host, port, size] = process.argv.slice(1);
const msg = crypto.randomBytes(Number(size)); const u = dgram.createSocket(host.includes(':') ? 'udp6' : 'udp4');
const done = (s) => { process.stdout.write(s); process.exit(0); };
u.on('message', (m) => done(m.equals(msg) ? 'ok ' + m.length : 'mismatch ' + m.length));
u.on('error', (e) => done('error ' + e.code));
u.send(msg, Number(port), host); setTimeout(() => done('timeout'), 3000);
`;

/** Sends N random bytes over TCP, half-closes, checks the server's digest and echo. Prints "ok <peer> <N>" or the failure. */
export const BULK_TCP_CLIENT = `
const net = require('net'), crypto = require('crypto');
const [host, port, size, ms] = process.argv.slice(1);
const data = crypto.randomBytes(Number(size)); const digest = crypto.createHash('sha256').update(data).digest('hex');
const done = (s) => { process.stdout.write(s); process.exit(0); };
const s = net.connect(Number(port), host, () => s.end(data)); const parts = [];
s.on('data', (d) => parts.push(d)); s.on('error', (e) => done('error ' + e.code));
s.on('end', () => { const all = Buffer.concat(parts); const nl = all.indexOf(10);
  const [name, peer, n, sum] = all.subarray(0, nl).toString().split(' '); const echo = all.subarray(nl + 1);
  done(Number(n) === data.length && sum === digest && echo.equals(data) ? 'ok ' + name + ' ' + peer + ' ' + n : 'mismatch ' + n + ' ' + echo.length); });
setTimeout(() => done('timeout after ' + Buffer.concat(parts).length + ' bytes back'), Number(ms));
`;
