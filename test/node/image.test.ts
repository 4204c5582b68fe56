// `make image` (scripts/image.sh: mmdebstrap + umoci, no registry) against
// deploy/Dockerfile: the image holds the same files under /opt/sluice as the
// Dockerfile's runtime stage copies, with the same entrypoint, command, user,
// working directory and environment. The Dockerfile is parsed
// (test/node/dockerfile.ts): no Docker engine runs here.
import { test, describe, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseDockerfile, instructions, type RuntimeStage } from './dockerfile';
import { readOciImage, parseTarListing, type OciImage, type LayerEntry } from './ociImage';

const repo = join(__dirname, '..', '..', '..');
const dockerfile = readFileSync(join(repo, 'deploy', 'Dockerfile'), 'utf8');

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)]);
}

/** Why the image cannot be built here, or undefined. */
function imageSkip(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (mmdebstrap --mode=root)';
  for (const tool of ['mmdebstrap', 'umoci']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) return `${tool} is not installed`;
  }
  return undefined;
}

describe('the Dockerfile parser (what the comparison relies on)', () => {
  test('continuation lines, COPY destinations, ENV expansion, the build stage cp targets', () => {
    const s = parseDockerfile([
      'FROM a AS build', 'RUN make x \\', ' && cp build/*.o /out/bpf/ \\', ' && cp build/cni /out/cni/plugin',
      'FROM b', '# comment', 'WORKDIR /opt/x', 'COPY --from=build /src/dist ./dist', 'ENV A=/opt/x/bin \\', '    PATH=$A:$PATH',
      'USER 0:0', 'ENTRYPOINT ["x"]', 'CMD ["a", "b"]',
    ].join('\n'));
    assert.deepEqual(s.copies, [{ from: 'build', src: '/src/dist', dest: '/opt/x/dist' }]);
    assert.equal(s.env.PATH, '/opt/x/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
    assert.deepEqual(s.outFiles, { '/out/bpf': [{ src: 'build/*.o', name: '*.o' }], '/out/cni': [{ src: 'build/cni', name: 'plugin' }] });
    assert.equal(s.user, '0:0');
    assert.deepEqual([s.entrypoint, s.cmd], [['x'], ['a', 'b']]);
    assert.equal(instructions('RUN a \\\n  b').length, 1);
  });

  test('tar listings: files, directories, symlinks, numeric owners', () => {
    const e = parseTarListing([
      '-rwxr-xr-x 0/0            12 1970-01-01 00:00 opt/sluice/bin/sluice',
      'drwxr-xr-x 0/0             0 1970-01-01 00:00 opt/sluice/dist/',
      'lrwxrwxrwx 0/0             0 1970-01-01 00:00 ./usr/bin/x -> y',
    ].join('\n'));
    assert.deepEqual(e.map((x) => [x.type, x.path, x.owner]),
      [['-', 'opt/sluice/bin/sluice', '0/0'], ['d', 'opt/sluice/dist', '0/0'], ['l', 'usr/bin/x', '0/0']]);
  });
});

describe('make image matches deploy/Dockerfile', () => {
  const skip = imageSkip();
  let image: OciImage;
  let stage: RuntimeStage;
  let files: Map<string, LayerEntry>;
  let buildSeconds = 0;

  before(() => {
    if (skip) return;
    const t0 = Date.now();
    // The cached root file system makes this ~40 s; a cold one adds mmdebstrap (~2 min).
    const r = spawnSync('bash', [join(repo, 'scripts', 'image.sh')], { cwd: repo, encoding: 'utf8', timeout: 40 * 60_000 });
    buildSeconds = (Date.now() - t0) / 1000;
    assert.equal(r.status, 0, `scripts/image.sh failed (${r.status}):\n${r.stderr}`);
    image = readOciImage(join(repo, 'build', 'image', 'oci'));
    stage = parseDockerfile(dockerfile);
    files = new Map(image.layers.flatMap((l) => l.entries).map((e) => [e.path, e]));
  });

  test('two layers: the Debian root file system, then /opt/sluice only', { skip }, (t) => {
    t.diagnostic(`built in ${buildSeconds.toFixed(0)} s, manifest ${image.manifestDigest}`);
    assert.equal(image.layers.length, 2);
    const [base, app] = image.layers;
    for (const p of ['usr/bin/node', 'usr/sbin/bpftool', 'bin/sh']) {
      assert.ok(base!.entries.some((e) => e.path === p || e.path === p.replace(/^bin\//, 'usr/bin/')), `base layer has no ${p}`);
    }
    assert.ok(base!.entries.some((e) => /^usr\/lib\/x86_64-linux-gnu\/libbpf\.so\.1/.test(e.path)), 'base layer has no libbpf.so.1');
    for (const e of app!.entries) assert.ok(e.path === 'opt' || e.path.startsWith('opt/sluice'), `app layer: ${e.path}`);
    for (const e of app!.entries) assert.equal(e.owner, '0/0', `${e.path} owned by ${e.owner}`);
  });

  test('entrypoint, command, user, working directory and environment are the Dockerfile\'s', { skip }, () => {
    assert.deepEqual(image.config.Entrypoint, stage.entrypoint);
    assert.deepEqual(image.config.Cmd, stage.cmd);
    assert.equal(image.config.User, stage.user);
    assert.equal(image.config.WorkingDir, stage.workdir);
    const env = Object.fromEntries((image.config.Env ?? []).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
    for (const [k, v] of Object.entries(stage.env)) assert.equal(env[k], v, `ENV ${k}`);
  });

  test('/opt/sluice has exactly what the runtime stage copies', { skip }, () => {
    const top = [...files.keys()].filter((p) => /^opt\/sluice\/[^/]+$/.test(p)).map((p) => `/${p}`).sort();
    assert.deepEqual(top, stage.copies.map((c) => c.dest).sort(), 'top-level entries of WORKDIR');
    const inImage = (dest: string) => [...files.values()].filter((e) => e.type !== 'd' && e.path.startsWith(`${dest.slice(1)}/`))
      .map((e) => e.path.slice(dest.length)).sort();
    for (const c of stage.copies) {
      if (c.src === '/src/package.json') {
        assert.equal(files.get(c.dest.slice(1))?.type, '-', c.dest);
      } else if (c.src === '/src/dist' || c.src === '/src/bin') {
        // the same sources, compiled by the same `make` rules
        const local = join(repo, c.src.replace('/src/', ''));
        assert.deepEqual(inImage(c.dest), filesUnder(local).map((f) => relative(local, f)).sort(), `${c.src} -> ${c.dest}`);
      } else if (c.src === '/src/node_modules') {
        // npm ci + npm prune --omit=dev: every production package of the lock file, no dev one
        const lock = JSON.parse(readFileSync(join(repo, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> };
        const entries = Object.entries(lock.packages).filter(([k]) => k.startsWith('node_modules/'));
        assert.ok(entries.length > 10);
        for (const [k, v] of entries) {
          const has = files.has(`opt/sluice/${k}/package.json`);
          assert.equal(has, !v.dev, `${k} (${v.dev ? 'dev' : 'production'}) ${has ? 'is' : 'is not'} in the image`);
        }
      } else if (c.src.startsWith('/out/')) {
        const wanted = (stage.outFiles[c.src] ?? []).flatMap(({ src, name }) => {
          if (!src.includes('*')) return [name];
          const [dir, glob] = [src.slice(0, src.lastIndexOf('/')), src.slice(src.lastIndexOf('/') + 1)];
          const re = new RegExp(`^${glob.replace(/\./g, '\\.').replace(/\*/g, '.*')}$`);
          return readdirSync(join(repo, dir)).filter((f) => re.test(f));
        }).sort();
        assert.ok(wanted.length > 0, `the Dockerfile's build stage puts nothing in ${c.src}`);
        assert.deepEqual(inImage(c.dest), wanted, `${c.src} -> ${c.dest}`);
      } else {
        assert.fail(`COPY ${c.src}: no rule to compare it`);
      }
    }
  });

  test('the commands are executable and the BPF objects readable', { skip }, () => {
    for (const p of ['opt/sluice/bin/sluice', 'opt/sluice/cni/sluice', 'opt/sluice/cni/install-cni.sh']) {
      assert.match(files.get(p)?.mode ?? '', /^..x..x..x$/, `${p} mode`);
    }
    const size = statSync(join(repo, 'build', 'image', 'oci', 'index.json')).size;
    assert.ok(size > 0);
    assert.ok(existsSync(join(repo, 'build', 'image', `sluice-${(JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { version: string }).version}.oci.tar`)));
  });

  test('reproducible: a second build gives the same manifest digest', { skip }, () => {
    const first = image.manifestDigest;
    execFileSync('bash', [join(repo, 'scripts', 'image.sh')], { cwd: repo, stdio: ['ignore', 'ignore', 'pipe'], timeout: 20 * 60_000 });
    assert.equal(readOciImage(join(repo, 'build', 'image', 'oci')).manifestDigest, first);
  });
});
