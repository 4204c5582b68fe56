// What a process's /proc/PID/maps and smaps say about its memory, for tests
// that check the agent's memory settings took effect (not only that they
// were passed).
import * as fs from 'node:fs';

/** glibc's HEAP_MAX_SIZE on 64-bit: every arena but the main one lives in heaps of this size, this aligned. */
const ARENA_HEAP = 64n * 1024n * 1024n;

/**
 * The glibc malloc heaps of threads' arenas (not the main arena, which is
 * [heap]): anonymous, 64 MiB aligned, a read-write part then a reserved
 * (---p) rest that together span exactly 64 MiB.
 */
export function mallocArenaHeaps(pid: number): number {
  const maps = fs.readFileSync(`/proc/${pid}/maps`, 'utf8').trim().split('\n').map((l) => {
    const [range, perms, , , inode, name] = l.split(/\s+/);
    const [lo, hi] = range!.split('-').map((h) => BigInt('0x' + h)) as [bigint, bigint];
    return { lo, hi, perms: perms!, anon: inode === '0' && !name };
  });
  let heaps = 0;
  for (const [i, m] of maps.entries()) {
    if (!m.anon || m.perms !== 'rw-p' || m.lo % ARENA_HEAP !== 0n) continue;
    const next = maps[i + 1];
    const end = next && next.anon && next.perms === '---p' && next.lo === m.hi ? next.hi : m.hi;
    if (end - m.lo === ARENA_HEAP) heaps++;
  }
  return heaps;
}
