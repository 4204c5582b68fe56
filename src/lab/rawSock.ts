// Socket calls Node does not offer (socket cookies, a bare connect() on a UDP
// socket, bind() errors as the kernel returns them), made through libc with
// koffi. A lab tool for the socket-LB tests; prints one JSON object.
//   alias A1 P1 A2 P2 SLOTS MAXITER  TCP socket S connects to A1:P1; then sockets are created
//                                    until one's cookie equals S's modulo SLOTS, which
//                                    connects to A2:P2; prints S's peer before and after, and
//                                    the other socket's peer (otherPeer)
//   udpalias A1 P1 A2 P2 SLOTS MAXITER  unconnected UDP: socket S exchanges with A1:P1; a socket
//                                    O whose cookie equals S's modulo SLOTS (S holds that slot)
//                                    exchanges with A2:P2 and A1:P1; S again with A1:P1; S
//                                    closes, and a socket R in the same slot exchanges with
//                                    A2:P2, then A1:P1 and A2:P2; O again with both. Prints each
//                                    exchange's backend and the reply's source, per socket
//   stress ADDR PORT MS MAXCOUNT [tcp]  connected-UDP (tcp: TCP) loop: socket, connect, getpeername, close;
//                                    counts refusals and peers other than ADDR:PORT
// Every ADDR may be IPv6 (an AF_INET6 socket; peers print as [addr]:port).
//   bind tcp|udp ADDR PORT           bind() once; prints ok or the errno name
//   from SRC ADDR PORT               connected UDP from SRC (bound to SRC:0; '-': unbound) to
//                                    ADDR:PORT; prints the peer getpeername shows, or the errno
//   hold ADDR PORT FLAG MS           TCP connect; prints {cookie, peer} at once, waits until
//                                    the file FLAG exists (at most MS), then prints the
//                                    peer again and the greeting read from the connection;
//                                    with BPFFS BACKEND:PORT, first moves the socket's pair from
//                                    sluice_sk_pair4 or sluice_sk_tcp4 into its socket storage (sluice_sock4), where
//                                    an object from before the LRU layout kept TCP pairs
import * as koffi from 'koffi';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { BpfMap } from '../bpf/map';
import { ip4ToNumber, isIp6, ip6ToBytes, bytesToIp6, canonicalIp6, hostPort } from '../datapath/addr';
import * as abi from '../abi/generated';
import { libcSockets, lastErrno as lastError, u64SockOption as u64Option, SO_COOKIE } from '../datapath/netnsCookie';

const AF_INET = 2;
const AF_INET6 = 10;
const SOCK_STREAM = 1;
const SOCK_DGRAM = 2;
const c = libcSockets();
const libc = koffi.load('libc.so.6');
const sendto = libc.func('intptr_t sendto(int fd, void *buf, size_t len, int flags, void *addr, uint32_t alen)');
const recvfrom = libc.func('intptr_t recvfrom(int fd, _Out_ void *buf, size_t len, int flags, _Out_ void *addr, _Inout_ uint32_t *alen)');
const setsockopt = libc.func('int setsockopt(int fd, int level, int name, void *val, uint32_t len)');
const SOL_SOCKET = 1;
const SO_RCVTIMEO = 20;

/** sockaddr_in, or sockaddr_in6 (28 bytes) for an IPv6 address. */
function sockaddr(address: string, port: number): Buffer {
  if (isIp6(address)) {
    const b6 = Buffer.alloc(28);
    b6.writeUInt16LE(AF_INET6, 0);
    b6.writeUInt16BE(port, 2);
    ip6ToBytes(address).copy(b6, 8);
    return b6;
  }
  const b = Buffer.alloc(16);
  b.writeUInt16LE(AF_INET, 0);
  b.writeUInt16BE(port, 2);
  address.split('.').forEach((octet, i) => b.writeUInt8(Number(octet), 4 + i));
  return b;
}

/** A socket of the family of the address it will be used with. */
function open(type: number, address: string): number {
  const fd = c.socket(isIp6(address) ? AF_INET6 : AF_INET, type, 0) as number;
  if (fd < 0) throw new Error(`socket: ${lastError()}`);
  return fd;
}

/** A sockaddr_in or sockaddr_in6 as a.b.c.d:port or [addr]:port. */
function sockaddrText(addr: Buffer): string {
  if (addr.readUInt16LE(0) === AF_INET6) return hostPort(bytesToIp6(addr.subarray(8, 24)), addr.readUInt16BE(2));
  return `${[...addr.subarray(4, 8)].join('.')}:${addr.readUInt16BE(2)}`;
}

function peer(fd: number): string {
  const addr = Buffer.alloc(28);
  const len = [28];
  if (c.getpeername(fd, addr, len) < 0) return lastError();
  return sockaddrText(addr);
}

/** 0 or the errno name. */
function connect(fd: number, address: string, port: number): string | 0 {
  const sa = sockaddr(address, port);
  return c.connect(fd, sa, sa.length) < 0 ? lastError() : 0;
}

function alias(a1: string, p1: number, a2: string, p2: number, slots: bigint, maxIterations: number) {
  const s = open(SOCK_STREAM, a1);
  const err = connect(s, a1, p1);
  if (err) throw new Error(`connect ${a1}:${p1}: ${err}`);
  const cookie = u64Option(s, SO_COOKIE);
  const peerBefore = peer(s);
  let iterations = 0;
  let other: bigint | undefined;
  let otherPeer: string | undefined;
  while (iterations < maxIterations) {
    iterations++;
    const fd = open(SOCK_STREAM, a2);
    const k = u64Option(fd, SO_COOKIE);
    if (k !== cookie && k % slots === cookie % slots) {
      other = k;
      const e = connect(fd, a2, p2);
      if (!e) otherPeer = peer(fd);
      c.close(fd);
      if (e) throw new Error(`connect ${a2}:${p2}: ${e}`);
      break;
    }
    c.close(fd);
  }
  const out = { cookie: String(cookie), other: other === undefined ? undefined : String(other), otherPeer, iterations, peerBefore, peerAfter: peer(s) };
  c.close(s);
  return out;
}

/** A UDP socket whose replies time out after a second (no test waits forever). */
function openUdp(address: string): number {
  const fd = open(SOCK_DGRAM, address);
  const tv = Buffer.alloc(16);
  tv.writeBigInt64LE(1n, 0);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, tv, 16) < 0) throw new Error(`setsockopt: ${lastError()}`);
  return fd;
}

/** One unconnected sendto/recvfrom: the backend (the reply's first word) and
 * the reply's source address, or the errno name. */
function exchange(fd: number, address: string, port: number): { backend?: string; from?: string; error?: string } {
  const sa = sockaddr(address, port);
  const req = Buffer.from('udpalias');
  if (Number(sendto(fd, req, req.length, 0, sa, sa.length)) < 0) return { error: lastError() };
  const buf = Buffer.alloc(256);
  const from = Buffer.alloc(28);
  const n = Number(recvfrom(fd, buf, buf.length, 0, from, [28]));
  if (n < 0) return { error: lastError() };
  return { backend: buf.subarray(0, n).toString().trim().split(' ')[0], from: sockaddrText(from) };
}

/** A new UDP socket whose cookie is another than `not` but the same modulo slots. */
function udpInSlotOf(address: string, not: bigint, slots: bigint, maxIterations: number): { fd: number; cookie: bigint; iterations: number } {
  for (let iterations = 1; iterations <= maxIterations; iterations++) {
    const fd = openUdp(address);
    const k = u64Option(fd, SO_COOKIE);
    if (k !== not && k % slots === not % slots) return { fd, cookie: k, iterations };
    c.close(fd);
  }
  throw new Error(`no UDP socket in the slot of cookie ${not} within ${maxIterations} sockets`);
}

function udpAlias(a1: string, p1: number, a2: string, p2: number, slots: bigint, maxIterations: number) {
  const s = openUdp(a1);
  const sFirst = [exchange(s, a1, p1), exchange(s, a1, p1)];
  const cookie = u64Option(s, SO_COOKIE);
  const o = udpInSlotOf(a1, cookie, slots, maxIterations);
  const oHeld = [exchange(o.fd, a2, p2), exchange(o.fd, a2, p2), exchange(o.fd, a1, p1), exchange(o.fd, a2, p2)];
  const sAgain = [exchange(s, a1, p1), exchange(s, a1, p1)];
  c.close(s);
  const r = udpInSlotOf(a1, cookie, slots, maxIterations);
  const rReused = [exchange(r.fd, a2, p2), exchange(r.fd, a2, p2), exchange(r.fd, a1, p1), exchange(r.fd, a2, p2), exchange(r.fd, a1, p1)];
  const oAfter = [exchange(o.fd, a2, p2), exchange(o.fd, a1, p1)];
  c.close(r.fd);
  c.close(o.fd);
  return {
    cookie: String(cookie), other: String(o.cookie), reused: String(r.cookie), iterations: o.iterations + r.iterations,
    sFirst, oHeld, sAgain, rReused, oAfter,
  };
}

function stress(address: string, port: number, ms: number, maxCount: number, tcp = false) {
  const want = hostPort(isIp6(address) ? canonicalIp6(address) : address, port);
  const end = Date.now() + ms;
  let count = 0;
  let refused = 0;
  const wrongPeers: Record<string, number> = {};
  const errors: Record<string, number> = {};
  while (count < maxCount && (count % 256 !== 0 || Date.now() < end)) {
    count++;
    const fd = open(tcp ? SOCK_STREAM : SOCK_DGRAM, address);
    const e = connect(fd, address, port);
    if (e === 'ECONNREFUSED') refused++;
    else if (e) errors[e] = (errors[e] ?? 0) + 1;
    else {
      const p = peer(fd);
      if (p !== want) wrongPeers[p] = (wrongPeers[p] ?? 0) + 1;
    }
    c.close(fd);
  }
  return { count, refused, wrongPeers, errors };
}

function bindOnce(proto: string, address: string, port: number) {
  const fd = open(proto === 'udp' ? SOCK_DGRAM : SOCK_STREAM, address);
  const sa = sockaddr(address, port);
  const result = c.bind(fd, sa, sa.length) < 0 ? lastError() : 'ok';
  c.close(fd);
  return { result };
}

function lcToStorage(fdKey: Buffer, bpffs: string, backendId: number): void {
  const lc = BpfMap.fromPinned(path.join(bpffs, abi.SLUICE_MAP_LC_SOCK4));
  try {
    lc.update(fdKey, abi.lb_lc_sockCodec.encode({ lock: { val: 0 }, backend_id: backendId }));
  } finally {
    lc.close();
  }
}

/** Move a TCP socket's pair from its slot (or the LRU) into its socket-local storage (the pre-LRU layout). */
function pairToStorage(fd: number, bpffs: string, backend: string): void {
  const [ba, bp] = backend.split(':') as [string, string];
  const key = abi.encodeLb4SockTcpKey({ cookie: u64Option(fd, SO_COOKIE), backend_address: ip4ToNumber(ba), backend_port: Number(bp) });
  const cookie = u64Option(fd, SO_COOKIE);
  const lru = BpfMap.fromPinned(path.join(bpffs, abi.SLUICE_MAP_SOCK_TCP4));
  const slots = BpfMap.fromPinned(path.join(bpffs, abi.SLUICE_MAP_SOCK_SLOT4));
  const storage = BpfMap.fromPinned(path.join(bpffs, abi.SLUICE_MAP_SOCK4));
  try {
    const at = Buffer.alloc(4);
    at.writeUInt32LE(Number(cookie % BigInt(abi.SLUICE_SOCK_SLOTS4)));
    const slot = abi.decodeLb4SockSlot(slots.lookup(at)!);
    const raw = lru.lookup(key);
    if (slot.cookie !== cookie && !raw) throw new Error(`no pair for this socket and ${backend} in ${abi.SLUICE_MAP_SOCK_SLOT4} or ${abi.SLUICE_MAP_SOCK_TCP4}`);
    const tcp = slot.cookie === cookie ? slot : abi.decodeLb4SockTcp(raw!);
    const pairs = Buffer.alloc(abi.LB4_SOCK_PAIR_SIZE * abi.SLUICE_SOCK_PAIRS);
    abi.encodeLb4SockPair({
      frontend_address: tcp.frontend_address, frontend_port: tcp.frontend_port, scope: abi.LB_SCOPE_EXTERNAL, used: 1,
      backend_address: ip4ToNumber(ba), backend_port: Number(bp), backend_slot: 1, backend_id: 0, rev_nat_id: tcp.rev_nat_id,
    }, pairs, 0);
    const fdKey = Buffer.alloc(4);
    fdKey.writeInt32LE(fd);
    storage.update(fdKey, abi.lb4_sock_stateCodec.encode({ lock: { val: 0 }, next: 0, last: 0, pairs }));
    if (slot.cookie === cookie) {
      // A least-connection count in the slot goes to the socket's own
      // storage (where the pre-slot layout kept it) before the slot is freed.
      if (slot.lc_backend_id) lcToStorage(fdKey, bpffs, slot.lc_backend_id);
      slots.update(at, abi.lb4_sock_slotCodec.encode({ ...slot, cookie: 0n, lc_backend_id: 0 }));
    } else lru.delete(key);
  } finally {
    lru.close();
    slots.close();
    storage.close();
  }
}

function hold(address: string, port: number, flag: string, maxMs: number, bpffs?: string, backend?: string) {
  const s = open(SOCK_STREAM, address);
  const err = connect(s, address, port);
  if (err) throw new Error(`connect ${address}:${port}: ${err}`);
  if (bpffs && backend) pairToStorage(s, bpffs, backend);
  process.stdout.write(JSON.stringify({ cookie: String(u64Option(s, SO_COOKIE)), peer: peer(s) }) + '\n');
  const end = Date.now() + maxMs;
  const tick = new Int32Array(new SharedArrayBuffer(4));
  while (!fs.existsSync(flag) && Date.now() < end) Atomics.wait(tick, 0, 0, 20);
  const buf = Buffer.alloc(256);
  let greeting: string;
  try {
    greeting = buf.subarray(0, fs.readSync(s, buf)).toString().trim();
  } catch (e) {
    greeting = `error:${(e as NodeJS.ErrnoException).code}`;
  }
  const out = { peerAfter: peer(s), greeting };
  c.close(s);
  return out;
}

function connectFromSource(source: string, address: string, port: number) {
  const fd = open(SOCK_DGRAM, address);
  const from = source === '-' ? undefined : sockaddr(source, 0);
  try {
    if (from && c.bind(fd, from, from.length) < 0) throw new Error(`bind ${source}: ${lastError()}`);
    const e = connect(fd, address, port);
    return { result: e || peer(fd) };
  } finally {
    c.close(fd);
  }
}

function main(): unknown {
  const [mode, ...a] = process.argv.slice(2);
  switch (mode) {
    case 'alias':
      return alias(a[0]!, Number(a[1]), a[2]!, Number(a[3]), BigInt(a[4]!), Number(a[5]));
    case 'udpalias':
      return udpAlias(a[0]!, Number(a[1]), a[2]!, Number(a[3]), BigInt(a[4]!), Number(a[5]));
    case 'stress':
      return stress(a[0]!, Number(a[1]), Number(a[2]), Number(a[3]), a[4] === 'tcp');
    case 'bind':
      return bindOnce(a[0]!, a[1]!, Number(a[2]));
    case 'from':
      return connectFromSource(a[0]!, a[1]!, Number(a[2]));
    case 'hold':
      return hold(a[0]!, Number(a[1]), a[2]!, Number(a[3]), a[4], a[5]);
    default:
      throw new Error('usage: rawSock alias|udpalias|stress|bind|from|hold ...');
  }
}

try {
  process.stdout.write(JSON.stringify(main()) + '\n');
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(1);
}
