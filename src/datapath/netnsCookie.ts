// Network namespace cookies (SO_NETNS_COOKIE, Linux 5.14+): the value
// bpf_get_netns_cookie() returns in the socket hooks, so the agent can tell
// the programs which namespace is the host's. Node has no API for it: libc
// through koffi. Run as a script, prints the cookie of the namespace it runs
// in (netnsCookieOf uses that through nsenter).
import * as koffi from 'koffi';
import * as os from 'node:os';
import { spawnSync } from 'node:child_process';

const AF_INET = 2;
const SOCK_DGRAM = 2;
const SOL_SOCKET = 1;
export const SO_COOKIE = 57;
const SO_NETNS_COOKIE = 71;

let bound: ReturnType<typeof bind> | undefined;
function bind() {
  const libc = koffi.load('libc.so.6');
  return {
    socket: libc.func('int socket(int domain, int type, int protocol)'),
    connect: libc.func('int connect(int fd, void *addr, uint32_t len)'),
    bind: libc.func('int bind(int fd, void *addr, uint32_t len)'),
    getpeername: libc.func('int getpeername(int fd, _Out_ void *addr, _Inout_ uint32_t *len)'),
    getsockopt: libc.func('int getsockopt(int fd, int level, int name, _Out_ void *val, _Inout_ uint32_t *len)'),
    close: libc.func('int close(int fd)'),
  };
}

/** libc's socket calls, bound once. */
export function libcSockets(): ReturnType<typeof bind> {
  return (bound ??= bind());
}

const errnoNames = new Map(Object.entries(os.constants.errno).map(([n, v]) => [v, n]));
export const lastErrno = (): string => errnoNames.get(koffi.errno()) ?? `E${koffi.errno()}`;

/** A SOL_SOCKET option that is a u64 (SO_COOKIE, SO_NETNS_COOKIE). */
export function u64SockOption(fd: number, name: number): bigint {
  const val = Buffer.alloc(8);
  const len = [8];
  if (libcSockets().getsockopt(fd, SOL_SOCKET, name, val, len) < 0) throw new Error(`getsockopt(SOL_SOCKET, ${name}): ${lastErrno()}`);
  return val.readBigUInt64LE(0);
}

/** The cookie of this process's network namespace. */
export function ownNetnsCookie(): bigint {
  const c = libcSockets();
  const fd = c.socket(AF_INET, SOCK_DGRAM, 0) as number;
  if (fd < 0) throw new Error(`socket: ${lastErrno()}`);
  try {
    return u64SockOption(fd, SO_NETNS_COOKIE);
  } finally {
    c.close(fd);
  }
}

/** The cookie of the network namespace at netnsPath (e.g. /run/netns/NAME), read from inside it. */
export function netnsCookieOf(netnsPath: string): bigint {
  const r = spawnSync('nsenter', [`--net=${netnsPath}`, '--', process.execPath, __filename], { encoding: 'utf8', timeout: 10000 });
  const text = r.stdout?.trim() ?? '';
  if (r.status !== 0 || !/^\d+$/.test(text)) {
    throw new Error(`network namespace ${netnsPath}: cannot read its cookie (${(r.stderr || r.error?.message || `exit ${r.status}`).trim()})`);
  }
  return BigInt(text);
}

if (require.main === module) process.stdout.write(`${ownNetnsCookie()}\n`);
