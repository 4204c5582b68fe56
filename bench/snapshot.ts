// A cached etcd data directory of a prepared control plane (issue 12 item 4):
// S Services x 10 endpoints created once through the real kube-apiserver
// (parallel clients, raised in-flight limits), then etcd stopped and its data
// directory kept under /var/cache/sluice/snapshots/<key>/etcd. Each bench run
// starts etcd from a copy, so kube-apiserver reads back objects it wrote
// itself (no direct etcd writes).
//
// The key names everything the stored objects depend on: the Kubernetes and
// etcd versions, S, the endpoints per Service, the Service CIDR and a hash of
// the object generator (its source and a sample of its output). A run whose
// key has no complete entry builds one (into a temporary directory, renamed
// into place when complete, so an interrupted build leaves nothing that looks
// usable; a build that runs out of budget keeps what it created for the next
// one to go on from); entries for the same S with another key are removed then.
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';

export const SNAPSHOT_ROOT = path.join(process.env.SLUICE_CACHE ?? '/var/cache/sluice', 'snapshots');

export interface SnapshotKeyInput {
  kubernetes: string;
  etcd: string;
  services: number;
  endpointsPerService: number;
  serviceCidr: string;
  /** generatorHash() of the functions that make the objects. */
  generator: string;
}

/** A stable hash of the object generator: its source text and what it makes for a few indices. */
export function generatorHash(fns: Array<(...args: never[]) => unknown>, samples: unknown[]): string {
  const h = createHash('sha256');
  for (const f of fns) h.update(f.toString()).update('\0');
  h.update(JSON.stringify(samples));
  return h.digest('hex').slice(0, 16);
}

/** The directory name of a snapshot: readable prefix (S and versions), then a hash of every input. */
export function snapshotKey(k: SnapshotKeyInput): string {
  const h = createHash('sha256').update(JSON.stringify([k.kubernetes, k.etcd, k.services, k.endpointsPerService, k.serviceCidr, k.generator])).digest('hex').slice(0, 16);
  return `up-${k.services}x${k.endpointsPerService}-k8s${k.kubernetes}-etcd${k.etcd}-${h}`;
}

export interface SnapshotMeta {
  key: string;
  input: SnapshotKeyInput;
  builtAt: string;
  buildMs: number;
  /** Service name -> ClusterIP, as the API server allocated them (the bench polls these). */
  clusterIPs: string[];
}

export interface Snapshot {
  dir: string;
  /** The etcd data directory to copy (never to run etcd in). */
  etcdDir: string;
  meta: SnapshotMeta;
  /** false: built by this call. */
  cached: boolean;
}

const META = 'meta.json';

/** The complete snapshot for `key` under root, if there is one. */
export function findSnapshot(root: string, key: string): Snapshot | undefined {
  const dir = path.join(root, key);
  try {
    const meta = JSON.parse(fs.readFileSync(path.join(dir, META), 'utf8')) as SnapshotMeta;
    if (meta.key !== key || !fs.existsSync(path.join(dir, 'etcd', 'member'))) return undefined;
    return { dir, etcdDir: path.join(dir, 'etcd'), meta, cached: true };
  } catch {
    return undefined;
  }
}

/**
 * The snapshot for `input`: the cached one, or built now by `build(etcdDir)`,
 * which must leave a stopped etcd's data directory at etcdDir and return the
 * ClusterIPs. Other entries for the same S (stale keys) and leftovers of
 * interrupted builds are removed after a successful build.
 */
export async function ensureSnapshot(root: string, input: SnapshotKeyInput, build: (etcdDir: string, partialDir: string) => Promise<string[]>, log: (m: string) => void = () => undefined): Promise<Snapshot> {
  const key = snapshotKey(input);
  const found = findSnapshot(root, key);
  if (found) return found;
  fs.mkdirSync(root, { recursive: true });
  const tmp = path.join(root, `.building-${key}-${process.pid}`);
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp);
  const t0 = Date.now();
  try {
    // A build that ran out of budget leaves what it created in partialDir (an
    // etcd data directory): the next build for this key starts from it.
    const clusterIPs = await build(path.join(tmp, 'etcd'), partialDir(root, key));
    if (!fs.existsSync(path.join(tmp, 'etcd', 'member'))) throw new Error(`snapshot build left no etcd data directory in ${tmp}/etcd`);
    const meta: SnapshotMeta = { key, input, builtAt: new Date().toISOString(), buildMs: Date.now() - t0, clusterIPs };
    fs.writeFileSync(path.join(tmp, META), JSON.stringify(meta));
    const dir = path.join(root, key);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.renameSync(tmp, dir);
    fs.rmSync(partialDir(root, key), { recursive: true, force: true });
    for (const stale of staleEntries(root, key, input.services)) {
      log(`snapshot: removing ${stale} (another key for ${input.services} Services, or an interrupted build)`);
      fs.rmSync(path.join(root, stale), { recursive: true, force: true });
    }
    return { dir, etcdDir: path.join(dir, 'etcd'), meta, cached: false };
  } catch (e) {
    fs.rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
}

/** Where an unfinished build of `key` keeps what it created. */
export function partialDir(root: string, key: string): string {
  return path.join(root, `.partial-${key}`);
}

/** Entries that the key `key` (for S Services) replaces: other keys of the same S, and dead builds. */
export function staleEntries(root: string, key: string, services: number): string[] {
  const prefix = `up-${services}x`;
  const out: string[] = [];
  for (const name of fs.readdirSync(root)) {
    if (name === key || name === `.partial-${key}`) continue;
    const building = /^\.building-(.+)-(\d+)$/.exec(name);
    if (building) {
      if (!pidAlive(Number(building[2]))) out.push(name);
    } else if (name.startsWith(prefix) || name.startsWith(`.partial-${prefix}`)) {
      out.push(name);
    }
  }
  return out;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
