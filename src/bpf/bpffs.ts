// bpffs: where pinned maps and links live. Pinning only works on a bpf
// filesystem, so check before creating directories there.
import fs from 'node:fs';
import path from 'node:path';

export const BPF_FS_MAGIC = 0xcafe4a11;

/** True when path exists and is on a bpf filesystem. */
export function isBpffs(p: string): boolean {
  try {
    return fs.statfsSync(p).type === BPF_FS_MAGIC;
  } catch {
    return false;
  }
}

/**
 * Creates dir (and parents) on bpffs; throws when the nearest existing
 * ancestor is not on a bpf filesystem (bpffs not mounted there).
 */
export function ensureBpffsDir(dir: string): string {
  const abs = path.resolve(dir);
  let existing = abs;
  while (!fs.existsSync(existing)) existing = path.dirname(existing);
  if (!isBpffs(existing)) {
    throw new Error(
      `ensureBpffsDir(${abs}): ${existing} is not on a bpf filesystem (mount it: mount -t bpf bpf /sys/fs/bpf)`,
    );
  }
  fs.mkdirSync(abs, { recursive: true });
  return abs;
}
