// BpfObject: one compiled BPF ELF object (bpf_object__open_file → load),
// its maps pinned by name under a bpffs directory and its programs.
//
// Pinning: with `pinDir`, every (non-internal) map gets the pin path
// `<pinDir>/<map name>` before load. libbpf then reuses an existing pinned map
// of that name (after checking type, key/value size, max_entries and flags are
// compatible; it refuses otherwise) or creates the map and pins it. That is how
// the kernel keeps serving from the same maps across agent restarts.
//
// Verifier logs: every program gets its own log buffer but keeps log level 0,
// so a successful load costs nothing extra (the verifier writes no log). When a
// program fails, libbpf 1.x reloads it once with log level 1 into that buffer,
// so the buffer that is non-empty after a failed load names the failing
// program and holds the verifier's explanation (the tail: the kernel keeps
// the end of the log when it does not fit).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BpfError, Handle, check, checkPtr, libbpf, objectLoadAsync, withLibbpfCapture } from './libbpf';
import { BpfMap, kernelAddedMapFlags, mapInfo, type MapDescription, type MapInfo } from './map';
import { BpfProgram } from './program';

export interface OpenOptions {
  /** bpffs directory: maps are reused from / pinned to `<pinDir>/<name>`. */
  pinDir?: string;
  /**
   * Capacity per map name for maps created by this load. A map reused from
   * pinDir keeps the size it was created with (see keptPinnedSizes).
   */
  maxEntries?: Record<string, number>;
}

/** A requested max_entries that was not applied because the map already existed pinned. */
export interface KeptPinnedSize {
  map: string;
  requested: number;
  pinned: number;
}

const { EBADF, EINVAL, ENOENT } = os.constants.errno;
const LOG_BUF_SIZE = 1 << 20;
const LOG_TAIL_LINES = 60;

export class BpfObject {
  readonly path: string;
  readonly pinDir: string | undefined;
  /** Maps whose pinned copy kept its size instead of opts.maxEntries (the agent decides whether to migrate). */
  readonly keptPinnedSizes: KeptPinnedSize[] = [];
  private handle: Handle | null;
  private loaded = false;
  private readonly mapCache = new Map<string, BpfMap>();
  private readonly programCache = new Map<string, BpfProgram>();

  private constructor(file: string, handle: Handle, pinDir: string | undefined) {
    this.path = file;
    this.handle = handle;
    this.pinDir = pinDir;
  }

  /** Opens (parses) an object file; nothing reaches the kernel until load(). */
  static open(file: string, opts: OpenOptions = {}): BpfObject {
    const fns = libbpf();
    const opened = withLibbpfCapture(() => checkPtr(fns.bpf_object__open_file(file, null), 'bpf_object__open_file', file));
    if (opened.error !== undefined || opened.result === undefined) throw withLibbpfLines(opened.error, opened.lines);
    const obj = new BpfObject(file, opened.result, opts.pinDir);
    try {
      obj.configureMaps(opts);
    } catch (err) {
      obj.close();
      throw err;
    }
    return obj;
  }

  private configureMaps(opts: OpenOptions): void {
    const fns = libbpf();
    const handle = this.requireHandle();
    const wanted = new Map(Object.entries(opts.maxEntries ?? {}));
    for (let m = fns.bpf_object__next_map(handle, null); m !== null; m = fns.bpf_object__next_map(handle, m)) {
      const name = fns.bpf_map__name(m);
      const requested = wanted.get(name);
      wanted.delete(name);
      // .rodata/.bss/.data/.kconfig belong to this object's build: never share them.
      const pinPath = opts.pinDir && !fns.bpf_map__is_internal(m) ? path.join(opts.pinDir, name) : undefined;
      const pinned = pinPath ? pinnedInfo(pinPath) : undefined;
      const pinnedSize = pinned?.maxEntries;
      if (pinned !== undefined) {
        // libbpf (1.1) reuses a pin only with equal map_flags, and a devmap's
        // carry BPF_F_RDONLY_PROG, which the kernel adds and the object
        // cannot declare: take the pinned flags when that is the difference.
        const added = kernelAddedMapFlags(fns.bpf_map__type(m)) & kernelAddedMapFlags(pinned.type);
        const declared = fns.bpf_map__map_flags(m);
        if (added && pinned.flags !== declared && (pinned.flags & ~added) === (declared & ~added)) {
          check(fns.bpf_map__set_map_flags(m, pinned.flags), 'bpf_map__set_map_flags', name);
        }
      }
      if (pinnedSize !== undefined) {
        // Reuse needs equal max_entries; adopt the pinned map's size so a map
        // created with a custom size by an earlier run is still reused.
        check(fns.bpf_map__set_max_entries(m, pinnedSize), 'bpf_map__set_max_entries', name);
        if (requested !== undefined && requested !== pinnedSize) this.keptPinnedSizes.push({ map: name, requested, pinned: pinnedSize });
      } else if (requested !== undefined) {
        check(fns.bpf_map__set_max_entries(m, requested), 'bpf_map__set_max_entries', name);
      }
      if (pinPath) check(fns.bpf_map__set_pin_path(m, pinPath), 'bpf_map__set_pin_path', name);
    }
    if (wanted.size > 0) {
      throw new BpfError('BpfObject.open', this.path, EINVAL, { hint: `maxEntries names maps the object does not have: ${[...wanted.keys()].join(', ')}` });
    }
  }

  /**
   * The maps this object would pin, as configured so far (before load: sizes
   * include opts.maxEntries and any pinned size adopted). Internal maps
   * (.rodata, .bss, ...) are left out: they are never pinned.
   */
  declaredMaps(): MapDescription[] {
    const fns = libbpf();
    const handle = this.requireHandle();
    const out: MapDescription[] = [];
    for (let m = fns.bpf_object__next_map(handle, null); m !== null; m = fns.bpf_object__next_map(handle, m)) {
      if (fns.bpf_map__is_internal(m)) continue;
      out.push({
        name: fns.bpf_map__name(m),
        type: fns.bpf_map__type(m),
        keySize: fns.bpf_map__key_size(m),
        valueSize: fns.bpf_map__value_size(m),
        maxEntries: fns.bpf_map__max_entries(m),
        flags: fns.bpf_map__map_flags(m),
      });
    }
    return out;
  }

  /** Creates the maps (or reuses pinned ones), loads and verifies every program. */
  load(): void {
    const logs = this.verifierLogs();
    if (logs) this.loadDone(withLibbpfCapture(() => libbpf().bpf_object__load(this.requireHandle())), logs);
  }

  /** load(), with the verifier running on a thread-pool thread while the event loop goes on. */
  async loadAsync(): Promise<void> {
    const logs = this.verifierLogs();
    if (logs) this.loadDone(await objectLoadAsync(this.requireHandle()), logs);
  }

  /** A log buffer per program to load (undefined: loaded already). */
  private verifierLogs(): Map<string, Buffer> | undefined {
    const fns = libbpf();
    const handle = this.requireHandle();
    if (this.loaded) return undefined;
    const logs = new Map<string, Buffer>();
    for (let p = fns.bpf_object__next_program(handle, null); p !== null; p = fns.bpf_object__next_program(handle, p)) {
      if (!fns.bpf_program__autoload(p)) continue;
      const buf = Buffer.alloc(LOG_BUF_SIZE);
      check(fns.bpf_program__set_log_buf(p, buf, buf.length), 'bpf_program__set_log_buf', fns.bpf_program__name(p));
      logs.set(fns.bpf_program__name(p), buf);
    }
    return logs;
  }

  // libbpf keeps pointers to the log buffers but writes them only during load;
  // `logs` keeps them alive until here.
  private loadDone(loaded: { result?: number; lines: string[] }, logs: Map<string, Buffer>): void {
    const ret = loaded.result ?? -EINVAL;
    if (ret < 0) {
      let failing: string | undefined;
      let verifierLog: string | undefined;
      for (const [name, buf] of logs) {
        if (buf[0] !== 0) {
          failing = name;
          verifierLog = logTail(buf);
          break;
        }
      }
      const details: { verifierLog?: string; libbpfLog?: string; hint?: string } = {};
      if (verifierLog !== undefined) details.verifierLog = verifierLog;
      if (failing) details.hint = `program ${failing} rejected by the verifier`;
      if (loaded.lines.length > 0) details.libbpfLog = loaded.lines.slice(-20).join('\n');
      throw new BpfError('bpf_object__load', this.path, -ret, details);
    }
    this.loaded = true;
  }

  /** A map by name (after load). The object owns its fd: the BpfMap stops working at close(). */
  map(name: string): BpfMap {
    const cached = this.mapCache.get(name);
    if (cached) return cached;
    const fns = libbpf();
    const handle = this.requireLoaded('map');
    const m = fns.bpf_object__find_map_by_name(handle, name);
    if (m === null) throw new BpfError('bpf_object__find_map_by_name', `${name} in ${this.path}`, ENOENT, { hint: `maps: ${this.mapNames().join(', ')}` });
    const map = new BpfMap(
      fns.bpf_map__fd(m),
      {
        name,
        type: fns.bpf_map__type(m),
        keySize: fns.bpf_map__key_size(m),
        valueSize: fns.bpf_map__value_size(m),
        maxEntries: fns.bpf_map__max_entries(m),
        flags: fns.bpf_map__map_flags(m),
      },
      false,
    );
    this.mapCache.set(name, map);
    return map;
  }

  /** Every map of the object, including internal ones (.rodata, .bss, ...). */
  maps(): BpfMap[] {
    return this.mapNames().map((n) => this.map(n));
  }

  mapNames(): string[] {
    const fns = libbpf();
    const handle = this.requireHandle();
    const names: string[] = [];
    for (let m = fns.bpf_object__next_map(handle, null); m !== null; m = fns.bpf_object__next_map(handle, m)) names.push(fns.bpf_map__name(m));
    return names;
  }

  /** A program by its C function name (after load). The object owns its fd. */
  program(name: string): BpfProgram {
    const cached = this.programCache.get(name);
    if (cached) return cached;
    const fns = libbpf();
    const handle = this.requireLoaded('program');
    const p = fns.bpf_object__find_program_by_name(handle, name);
    if (p === null) throw new BpfError('bpf_object__find_program_by_name', `${name} in ${this.path}`, ENOENT, { hint: `programs: ${this.programNames().join(', ')}` });
    const prog = new BpfProgram(
      {
        name,
        sectionName: fns.bpf_program__section_name(p),
        type: fns.bpf_program__type(p),
        attachType: fns.bpf_program__expected_attach_type(p),
      },
      fns.bpf_program__fd(p),
    );
    this.programCache.set(name, prog);
    return prog;
  }

  programs(): BpfProgram[] {
    return this.programNames().map((n) => this.program(n));
  }

  programNames(): string[] {
    const fns = libbpf();
    const handle = this.requireHandle();
    const names: string[] = [];
    for (let p = fns.bpf_object__next_program(handle, null); p !== null; p = fns.bpf_object__next_program(handle, p)) names.push(fns.bpf_program__name(p));
    return names;
  }

  /**
   * Closes every fd of the object (maps, programs). Pinned maps and pinned
   * links live on in bpffs. BpfMap/BpfProgram handles from this object stop
   * working. Idempotent.
   */
  close(): void {
    if (this.handle === null) return;
    for (const m of this.mapCache.values()) m.invalidate();
    for (const p of this.programCache.values()) p.invalidate();
    libbpf().bpf_object__close(this.handle);
    this.handle = null;
  }

  private requireHandle(): Handle {
    if (this.handle === null) throw new BpfError('BpfObject', this.path, EBADF, { hint: 'object is closed' });
    return this.handle;
  }

  private requireLoaded(what: string): Handle {
    const handle = this.requireHandle();
    if (!this.loaded) throw new BpfError(`BpfObject.${what}`, this.path, EINVAL, { hint: 'call load() first' });
    return handle;
  }
}

/** The map pinned at path, or undefined when nothing is pinned there. */
function pinnedInfo(pinPath: string): MapInfo | undefined {
  if (!fs.existsSync(pinPath)) return undefined;
  const fd = check(libbpf().bpf_obj_get(pinPath), 'bpf_obj_get', pinPath);
  try {
    return mapInfo(fd, pinPath);
  } finally {
    fs.closeSync(fd);
  }
}

function logTail(buf: Buffer): string {
  const nul = buf.indexOf(0);
  const text = buf.toString('utf8', 0, nul < 0 ? buf.length : nul).trimEnd();
  return text.split('\n').slice(-LOG_TAIL_LINES).join('\n');
}

function withLibbpfLines(error: unknown, lines: string[]): unknown {
  if (error instanceof BpfError && lines.length > 0 && error.libbpfLog === undefined) {
    return new BpfError(error.op, error.object, error.errno, { libbpfLog: lines.slice(-20).join('\n') });
  }
  return error;
}
