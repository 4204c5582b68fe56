// setns(2) for the calling thread, through libc. Socket iterators see the
// network namespace of the thread that creates them, so the agent enters a
// Pod's namespace for exactly one bpf_iter_create() and returns at once.
// Only the calling (main) thread moves: libuv's worker threads never do, and
// no JavaScript runs between the two setns() calls. Needs CAP_SYS_ADMIN.
import fs from 'node:fs';
import os from 'node:os';
import * as koffi from 'koffi';

const CLONE_NEWNET = 0x40000000;

let setnsFn: ((fd: number, nstype: number) => number) | undefined;

function setns(fd: number, what: string): void {
  setnsFn ??= koffi.load('libc.so.6').func('int setns(int fd, int nstype)') as (fd: number, nstype: number) => number;
  if (setnsFn(fd, CLONE_NEWNET) !== 0) {
    const errno = koffi.errno();
    const err = new Error(`setns(${what}): ${errnoCode(errno)} (errno ${errno})`) as NodeJS.ErrnoException;
    err.code = errnoCode(errno);
    err.errno = errno;
    throw err;
  }
}

function errnoCode(errno: number): string {
  for (const [name, value] of Object.entries(os.constants.errno)) if (value === errno) return name;
  return `E${errno}`;
}

/**
 * Runs fn with the calling thread in the network namespace `nsPath`
 * (/run/netns/NAME, /proc/PID/ns/net) and always returns to the namespace it
 * started in. fn must be synchronous.
 */
export function inNetns<T>(nsPath: string, fn: () => T): T {
  const home = fs.openSync('/proc/thread-self/ns/net', 'r');
  try {
    const target = fs.openSync(nsPath, 'r');
    try {
      setns(target, nsPath);
    } finally {
      fs.closeSync(target);
    }
    try {
      return fn();
    } finally {
      // Staying in a Pod's namespace would misdirect every later socket of
      // the agent (API watch, metrics): there is no safe way to go on.
      try {
        setns(home, 'the agent\'s own network namespace');
      } catch (err) {
        process.stderr.write(`fatal: ${(err as Error).message}\n`);
        process.abort();
      }
    }
  } finally {
    fs.closeSync(home);
  }
}

/** Inode of a namespace file: the same namespace reached through two paths is walked once. */
export function netnsInode(nsPath: string): bigint {
  return fs.statSync(nsPath, { bigint: true }).ino;
}
