// What deploy/Dockerfile says its runtime image contains, read from the
// Dockerfile itself (no Docker engine runs here), so `make image`'s output
// can be compared with it: the final stage's WORKDIR, COPY --from lines, ENV,
// USER, ENTRYPOINT and CMD, and, for the files the build stage gathers under
// /out/<dir>, which repository files its RUN's `cp` commands put there.

export interface RuntimeStage {
  workdir: string;
  /** COPY --from=<stage> <src> <dest>, dest resolved against WORKDIR. */
  copies: { from: string; src: string; dest: string }[];
  env: Record<string, string>;
  user: string;
  entrypoint: string[];
  cmd: string[];
  /** /out/<dir> -> [{ src: repository path or glob, name: file name in the dir }] from the build stage's cp commands. */
  outFiles: Record<string, { src: string; name: string }[]>;
}

/** Instructions with their continuation lines joined; comments dropped. */
export function instructions(text: string): { op: string; args: string }[] {
  const out: { op: string; args: string }[] = [];
  let current = '';
  for (const raw of text.split('\n')) {
    const line = raw.trimEnd();
    if (current === '' && /^\s*#/.test(line)) continue;
    if (line.endsWith('\\')) { current += line.slice(0, -1) + ' '; continue; }
    current += line;
    const m = /^\s*([A-Za-z]+)\s+([\s\S]*)$/.exec(current);
    if (m) out.push({ op: m[1]!.toUpperCase(), args: m[2]!.trim() });
    current = '';
  }
  return out;
}

function jsonArray(args: string, what: string): string[] {
  const v: unknown = JSON.parse(args);
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) throw new Error(`Dockerfile ${what}: not an exec-form JSON array: ${args}`);
  return v as string[];
}

/** `ENV A=1 B=$X:y` (the key=value form) into a map; $VAR references to earlier values are expanded. */
function parseEnv(args: string, env: Record<string, string>): void {
  for (const m of args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S+)/g)) {
    const value = m[2]!.replace(/^"|"$/g, '');
    env[m[1]!] = value.replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, (_, k: string) => env[k] ?? `$${k}`);
  }
}

/** `cp a b /out/x/` and `cp a /out/x/name` in the build stage's RUN commands. */
function outCopies(run: string, outFiles: RuntimeStage['outFiles']): void {
  for (const cmd of run.split(/&&|;|\|\||\bthen\b|\belse\b/)) {
    const words = cmd.trim().split(/\s+/);
    const at = words.indexOf('cp');
    if (at < 0) continue;
    const args = words.slice(at + 1).filter((w) => !w.startsWith('-'));
    const dest = args.pop();
    if (!dest || !dest.startsWith('/out/')) continue;
    const toDir = dest.endsWith('/');
    const dir = toDir ? dest.slice(0, -1) : dest.slice(0, dest.lastIndexOf('/'));
    for (const src of args) {
      (outFiles[dir] ??= []).push({ src, name: toDir ? src.slice(src.lastIndexOf('/') + 1) : dest.slice(dest.lastIndexOf('/') + 1) });
    }
  }
}

export function parseDockerfile(text: string): RuntimeStage {
  const all = instructions(text);
  const froms = all.map((i, n) => (i.op === 'FROM' ? n : -1)).filter((n) => n >= 0);
  if (froms.length < 2) throw new Error('Dockerfile: expected a build stage and a runtime stage');
  const last = froms[froms.length - 1]!;
  const stage: RuntimeStage = { workdir: '/', copies: [], env: {}, user: '', entrypoint: [], cmd: [], outFiles: {} };
  all.slice(0, last).filter((i) => i.op === 'RUN').forEach((i) => outCopies(i.args, stage.outFiles));
  // The base image's PATH (Debian's default) is what $PATH expands to in ENV.
  stage.env.PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
  for (const i of all.slice(last + 1)) {
    switch (i.op) {
      case 'WORKDIR': stage.workdir = i.args; break;
      case 'COPY': {
        const m = /^--from=(\S+)\s+(\S+)\s+(\S+)$/.exec(i.args);
        if (!m) throw new Error(`Dockerfile: COPY in the runtime stage without --from: ${i.args}`);
        const dest = m[3]!.startsWith('/') ? m[3]! : `${stage.workdir}/${m[3]!.replace(/^\.\//, '')}`;
        stage.copies.push({ from: m[1]!, src: m[2]!, dest: dest.replace(/\/+$/, '') });
        break;
      }
      case 'ENV': parseEnv(i.args, stage.env); break;
      case 'USER': stage.user = i.args; break;
      case 'ENTRYPOINT': stage.entrypoint = jsonArray(i.args, 'ENTRYPOINT'); break;
      case 'CMD': stage.cmd = jsonArray(i.args, 'CMD'); break;
      default: break;
    }
  }
  return stage;
}
