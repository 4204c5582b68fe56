// Read an OCI image layout (what umoci writes): the image config and the
// files of each layer, with modes and owners, using only tar and gunzip.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface OciConfig {
  User?: string;
  Env?: string[];
  Entrypoint?: string[];
  Cmd?: string[];
  WorkingDir?: string;
}

export interface LayerEntry { path: string; mode: string; owner: string; type: string }

export interface OciImage {
  manifestDigest: string;
  config: OciConfig;
  layers: { digest: string; entries: LayerEntry[] }[];
}

function blob(dir: string, digest: string): string {
  const [alg, hex] = digest.split(':');
  return join(dir, 'blobs', alg!, hex!);
}

/** `tar -tv` of a layer: "-rwxr-xr-x 0/0 123 1970-01-01 00:00 opt/sluice/bin/sluice" (links: " -> target"). */
export function parseTarListing(listing: string): LayerEntry[] {
  const out: LayerEntry[] = [];
  for (const line of listing.split('\n')) {
    const m = /^(\S)(\S{9})\s+(\S+)\s+\S+\s+\S+\s+\S+\s+(.*)$/.exec(line);
    if (!m) continue;
    const path = m[4]!.replace(/ -> .*$/, '').replace(/ link to .*$/, '').replace(/^\.\//, '').replace(/\/$/, '');
    out.push({ type: m[1]!, mode: m[2]!, owner: m[3]!, path });
  }
  return out;
}

export function readOciImage(dir: string): OciImage {
  const index = JSON.parse(readFileSync(join(dir, 'index.json'), 'utf8')) as { manifests: { digest: string }[] };
  const manifestDigest = index.manifests[0]!.digest;
  const manifest = JSON.parse(readFileSync(blob(dir, manifestDigest), 'utf8')) as {
    config: { digest: string }; layers: { digest: string; mediaType: string }[];
  };
  const config = (JSON.parse(readFileSync(blob(dir, manifest.config.digest), 'utf8')) as { config: OciConfig }).config;
  const layers = manifest.layers.map((l) => {
    const flag = l.mediaType.endsWith('+gzip') ? '-tvzf' : '-tvf';
    const listing = execFileSync('tar', ['--numeric-owner', flag, blob(dir, l.digest)], { maxBuffer: 256 * 1024 * 1024 }).toString();
    return { digest: l.digest, entries: parseTarListing(listing) };
  });
  return { manifestDigest, config, layers };
}
