// The one place where libbpf's C functions are declared for koffi, and where
// their failures become BpfError. Everything else in src/bpf/ calls `libbpf()`.
//
// libbpf 1.x conventions this file relies on:
//  - low-level bpf_* wrappers return -errno on failure (and also set errno);
//  - pointer-returning APIs (bpf_object__open_file, ...) return NULL and set errno;
//  - Buffers passed for `void *` parameters are handed over as raw pointers by
//    koffi (no copy), which is what keeps map updates cheap.
import * as koffi from 'koffi';
import os from 'node:os';

// ---- errors -------------------------------------------------------------------

// The kernel's internal "not supported" errno leaks to user space from some
// BPF commands (e.g. batch ops on map types without them); Node does not know it.
const ENOTSUPP = 524;

const errnoNames = new Map<number, string>();
for (const [name, value] of Object.entries(os.constants.errno)) {
  if (!errnoNames.has(value)) errnoNames.set(value, name);
}
// Prefer the names the kernel sources and man pages use for aliased values.
errnoNames.set(os.constants.errno.EOPNOTSUPP, 'EOPNOTSUPP');
errnoNames.set(os.constants.errno.EAGAIN, 'EAGAIN');
errnoNames.set(ENOTSUPP, 'ENOTSUPP');

export function errnoName(errno: number): string {
  return errnoNames.get(errno) ?? `E${errno}`;
}

const errnoMessages = new Map<number, string>();
/** strerror() text for an errno, through libbpf_strerror so libbpf's own codes (4000+) read too. */
export function errnoMessage(errno: number): string {
  let msg = errnoMessages.get(errno);
  if (msg === undefined) {
    if (errno === ENOTSUPP) msg = 'Operation not supported (kernel ENOTSUPP)';
    else {
      const buf = Buffer.alloc(256);
      libbpf().libbpf_strerror(errno, buf, buf.length);
      msg = cString(buf);
    }
    errnoMessages.set(errno, msg);
  }
  return msg;
}

export interface BpfErrorDetails {
  /** Tail of the verifier log of the program that failed to load. */
  verifierLog?: string;
  /** libbpf's own warnings printed during the failed operation (e.g. pinned map mismatch). */
  libbpfLog?: string;
  /** Free-form extra context appended to the message. */
  hint?: string;
}

/**
 * A failed libbpf/kernel operation: which operation, on which object, and the errno.
 * Message shape: `bpf_map_update_elem(sluice_svc4): E2BIG (errno 7): Argument list too long`.
 */
export class BpfError extends Error {
  readonly op: string;
  readonly object: string;
  readonly errno: number;
  readonly code: string;
  readonly verifierLog?: string;
  readonly libbpfLog?: string;

  constructor(op: string, object: string, errno: number, details: BpfErrorDetails = {}) {
    const code = errnoName(errno);
    let message = `${op}(${object}): ${code} (errno ${errno}): ${errnoMessage(errno)}`;
    if (details.hint) message += `: ${details.hint}`;
    if (details.libbpfLog) message += `\n${details.libbpfLog}`;
    if (details.verifierLog) message += `\nverifier log (tail):\n${details.verifierLog}`;
    super(message);
    this.name = 'BpfError';
    this.op = op;
    this.object = object;
    this.errno = errno;
    this.code = code;
    if (details.verifierLog !== undefined) this.verifierLog = details.verifierLog;
    if (details.libbpfLog !== undefined) this.libbpfLog = details.libbpfLog;
  }
}

/** Throws BpfError when a libbpf call returned a negative errno; returns the value otherwise. */
export function check(ret: number, op: string, object: string, details?: BpfErrorDetails): number {
  if (ret < 0) throw new BpfError(op, object, -ret, details);
  return ret;
}

/** For pointer-returning calls: NULL means failure with errno set. */
export function checkPtr<T>(ptr: T | null, op: string, object: string, details?: BpfErrorDetails): T {
  if (ptr === null) throw new BpfError(op, object, koffi.errno() || os.constants.errno.EINVAL, details);
  return ptr;
}

/** Reads a NUL-terminated C string out of a buffer. */
export function cString(buf: Buffer, start = 0, end = buf.length): string {
  const nul = buf.indexOf(0, start);
  return buf.toString('utf8', start, nul < 0 || nul > end ? end : nul);
}

// ---- FFI declarations ----------------------------------------------------------

/** Opaque libbpf handles (struct bpf_object *, struct bpf_map *, struct bpf_program *). */
export type Handle = object;

/* eslint-disable @typescript-eslint/naming-convention -- C names on purpose */
export interface LibbpfFunctions {
  libbpf_strerror(err: number, buf: Buffer, size: number): number;
  libbpf_num_possible_cpus(): number;
  libbpf_set_print(fn: unknown): unknown;

  bpf_object__open_file(path: string, opts: null): Handle | null;
  bpf_object__load(obj: Handle): number;
  bpf_object__close(obj: Handle): void;
  bpf_object__next_map(obj: Handle, prev: Handle | null): Handle | null;
  bpf_object__next_program(obj: Handle, prev: Handle | null): Handle | null;
  bpf_object__find_map_by_name(obj: Handle, name: string): Handle | null;
  bpf_object__find_program_by_name(obj: Handle, name: string): Handle | null;

  bpf_map__name(map: Handle): string;
  bpf_map__fd(map: Handle): number;
  bpf_map__type(map: Handle): number;
  bpf_map__key_size(map: Handle): number;
  bpf_map__value_size(map: Handle): number;
  bpf_map__max_entries(map: Handle): number;
  bpf_map__map_flags(map: Handle): number;
  bpf_map__is_internal(map: Handle): boolean;
  bpf_map__set_pin_path(map: Handle, path: string): number;
  bpf_map__set_max_entries(map: Handle, maxEntries: number): number;
  bpf_map__set_map_flags(map: Handle, flags: number): number;
  bpf_map__is_pinned(map: Handle): boolean;

  bpf_program__name(prog: Handle): string;
  bpf_program__section_name(prog: Handle): string;
  bpf_program__fd(prog: Handle): number;
  bpf_program__type(prog: Handle): number;
  bpf_program__expected_attach_type(prog: Handle): number;
  bpf_program__set_log_buf(prog: Handle, buf: Buffer | null, size: number): number;
  bpf_program__set_log_level(prog: Handle, level: number): number;
  bpf_program__autoload(prog: Handle): boolean;

  bpf_map_create(type: number, name: string | null, keySize: number, valueSize: number, maxEntries: number, opts: Buffer | null): number;
  bpf_map_update_elem(fd: number, key: Buffer, value: Buffer, flags: number): number;
  bpf_map_lookup_elem(fd: number, key: Buffer, value: Buffer): number;
  bpf_map_delete_elem(fd: number, key: Buffer): number;
  bpf_map_get_next_key(fd: number, key: Buffer | null, nextKey: Buffer): number;
  bpf_map_update_batch(fd: number, keys: Buffer, values: Buffer, count: Uint32Array, opts: BatchOpts): number;
  bpf_map_delete_batch(fd: number, keys: Buffer, count: Uint32Array, opts: BatchOpts): number;
  bpf_map_lookup_batch(fd: number, inBatch: Buffer | null, outBatch: Buffer, keys: Buffer, values: Buffer, count: Uint32Array, opts: BatchOpts): number;

  bpf_obj_pin(fd: number, path: string): number;
  bpf_obj_get(path: string): number;
  bpf_obj_get_info_by_fd(fd: number, info: Buffer, infoLen: Uint32Array): number;
  bpf_prog_get_fd_by_id(id: number): number;
  bpf_map_get_fd_by_id(id: number): number;
  bpf_link_get_fd_by_id(id: number): number;
  bpf_prog_get_next_id(start: number, next: Uint32Array): number;
  bpf_link_get_next_id(start: number, next: Uint32Array): number;

  bpf_link_create(progFd: number, targetFd: number, attachType: number, opts: Buffer | null): number;
  bpf_link_update(linkFd: number, newProgFd: number, opts: LinkUpdateOpts | null): number;
  bpf_link_detach(linkFd: number): number;
  bpf_prog_query(targetFd: number, type: number, queryFlags: number, attachFlags: Uint32Array, progIds: Uint32Array, progCnt: Uint32Array): number;

  bpf_prog_test_run_opts(progFd: number, opts: TestRunOpts): number;

  bpf_iter_create(linkFd: number): number;
  // BTF built in user space (h-maglev: typing the Maglev inner tables the agent creates).
  btf__new_empty(): Handle | null;
  btf__add_int(btf: Handle, name: string, byteSize: number, encoding: number): number;
  btf__add_typedef(btf: Handle, name: string, refTypeId: number): number;
  btf__add_array(btf: Handle, indexTypeId: number, elemTypeId: number, nrElems: number): number;
  btf__add_struct(btf: Handle, name: string, byteSize: number): number;
  btf__add_field(btf: Handle, name: string, typeId: number, bitOffset: number, bitSize: number): number;
  btf__load_into_kernel(btf: Handle): number;
  btf__fd(btf: Handle): number;
  btf__free(btf: Handle): void;
  // Ring buffers (src/bpf/ringBuffer.ts): sampleFn is a koffi-registered ring_buffer_sample_fn.
  ring_buffer__new(mapFd: number, sampleFn: unknown, ctx: null, opts: null): Handle | null;
  ring_buffer__consume(rb: Handle): number;
  ring_buffer__free(rb: Handle): void;
}

/** struct bpf_map_batch_opts (libbpf 1.1.2 bpf.h): 24 bytes on 64-bit. */
export interface BatchOpts {
  sz: number;
  elem_flags: number;
  flags: number;
}

/** struct bpf_link_update_opts. */
export interface LinkUpdateOpts {
  sz: number;
  flags: number;
  old_prog_fd: number;
}

/** struct bpf_test_run_opts (libbpf 1.1.2 bpf.h): 80 bytes on 64-bit. */
export interface TestRunOpts {
  sz: number;
  data_in: Buffer | null;
  data_out: Buffer | null;
  data_size_in: number;
  data_size_out: number;
  ctx_in: Buffer | null;
  ctx_out: Buffer | null;
  ctx_size_in: number;
  ctx_size_out: number;
  retval: number;
  repeat: number;
  duration: number;
  flags: number;
  cpu: number;
  batch_size: number;
}

let loaded: LibbpfFunctions | undefined;

/** The libbpf functions, loading libbpf.so.1 on first use. */
export function libbpf(): LibbpfFunctions {
  return (loaded ??= load());
}

export let BATCH_OPTS_SIZE = 0;
export let LINK_UPDATE_OPTS_SIZE = 0;
export let TEST_RUN_OPTS_SIZE = 0;

function load(): LibbpfFunctions {
  let lib: koffi.IKoffiLib;
  try {
    lib = koffi.load('libbpf.so.1');
  } catch (err) {
    throw new Error(`load libbpf.so.1: ${(err as Error).message} (install Debian's libbpf1)`);
  }
  koffi.opaque('bpf_object');
  koffi.opaque('bpf_map');
  koffi.opaque('bpf_program');
  koffi.opaque('ring_buffer');
  koffi.opaque('btf');
  koffi.proto('int ring_buffer_sample_fn(void *ctx, void *data, size_t size)');
  const batchOpts = koffi.struct('bpf_map_batch_opts', { sz: 'size_t', elem_flags: 'uint64_t', flags: 'uint64_t' });
  const linkUpdateOpts = koffi.struct('bpf_link_update_opts', { sz: 'size_t', flags: 'uint32_t', old_prog_fd: 'uint32_t' });
  const testRunOpts = koffi.struct('bpf_test_run_opts', {
    sz: 'size_t',
    data_in: 'const void *',
    data_out: 'void *',
    data_size_in: 'uint32_t',
    data_size_out: 'uint32_t',
    ctx_in: 'const void *',
    ctx_out: 'void *',
    ctx_size_in: 'uint32_t',
    ctx_size_out: 'uint32_t',
    retval: 'uint32_t',
    repeat: 'int',
    duration: 'uint32_t',
    flags: 'uint32_t',
    cpu: 'uint32_t',
    batch_size: 'uint32_t',
  });
  BATCH_OPTS_SIZE = koffi.sizeof(batchOpts);
  LINK_UPDATE_OPTS_SIZE = koffi.sizeof(linkUpdateOpts);
  TEST_RUN_OPTS_SIZE = koffi.sizeof(testRunOpts);
  // Layouts checked against offsetof() in C on x86_64 with libbpf 1.1.2's headers.
  if (BATCH_OPTS_SIZE !== 24 || LINK_UPDATE_OPTS_SIZE !== 16 || TEST_RUN_OPTS_SIZE !== 80) {
    throw new Error(`libbpf option struct sizes ${BATCH_OPTS_SIZE}/${LINK_UPDATE_OPTS_SIZE}/${TEST_RUN_OPTS_SIZE} differ from libbpf 1.1.2's 24/16/80`);
  }

  const decls = [
    'int libbpf_strerror(int err, void *buf, size_t size)',
    'int libbpf_num_possible_cpus(void)',
    'void *libbpf_set_print(void *fn)',

    'bpf_object *bpf_object__open_file(const char *path, void *opts)',
    'int bpf_object__load(bpf_object *obj)',
    'void bpf_object__close(bpf_object *obj)',
    'bpf_map *bpf_object__next_map(bpf_object *obj, bpf_map *prev)',
    'bpf_program *bpf_object__next_program(bpf_object *obj, bpf_program *prev)',
    'bpf_map *bpf_object__find_map_by_name(bpf_object *obj, const char *name)',
    'bpf_program *bpf_object__find_program_by_name(bpf_object *obj, const char *name)',

    'const char *bpf_map__name(bpf_map *map)',
    'int bpf_map__fd(bpf_map *map)',
    'int bpf_map__type(bpf_map *map)',
    'uint32_t bpf_map__key_size(bpf_map *map)',
    'uint32_t bpf_map__value_size(bpf_map *map)',
    'uint32_t bpf_map__max_entries(bpf_map *map)',
    'uint32_t bpf_map__map_flags(bpf_map *map)',
    'bool bpf_map__is_internal(bpf_map *map)',
    'int bpf_map__set_pin_path(bpf_map *map, const char *path)',
    'int bpf_map__set_max_entries(bpf_map *map, uint32_t max_entries)',
    'int bpf_map__set_map_flags(bpf_map *map, uint32_t flags)',
    'bool bpf_map__is_pinned(bpf_map *map)',

    'const char *bpf_program__name(bpf_program *prog)',
    'const char *bpf_program__section_name(bpf_program *prog)',
    'int bpf_program__fd(bpf_program *prog)',
    'int bpf_program__type(bpf_program *prog)',
    'int bpf_program__expected_attach_type(bpf_program *prog)',
    'int bpf_program__set_log_buf(bpf_program *prog, void *log_buf, size_t log_size)',
    'int bpf_program__set_log_level(bpf_program *prog, uint32_t log_level)',
    'bool bpf_program__autoload(bpf_program *prog)',

    'int bpf_map_create(int map_type, const char *map_name, uint32_t key_size, uint32_t value_size, uint32_t max_entries, const void *opts)',
    'int bpf_map_update_elem(int fd, const void *key, const void *value, uint64_t flags)',
    'int bpf_map_lookup_elem(int fd, const void *key, void *value)',
    'int bpf_map_delete_elem(int fd, const void *key)',
    'int bpf_map_get_next_key(int fd, const void *key, void *next_key)',
    'int bpf_map_update_batch(int fd, const void *keys, const void *values, void *count, const bpf_map_batch_opts *opts)',
    'int bpf_map_delete_batch(int fd, const void *keys, void *count, const bpf_map_batch_opts *opts)',
    'int bpf_map_lookup_batch(int fd, void *in_batch, void *out_batch, void *keys, void *values, void *count, const bpf_map_batch_opts *opts)',

    'int bpf_obj_pin(int fd, const char *pathname)',
    'int bpf_obj_get(const char *pathname)',
    'int bpf_obj_get_info_by_fd(int bpf_fd, void *info, void *info_len)',
    'int bpf_prog_get_fd_by_id(uint32_t id)',
    'int bpf_map_get_fd_by_id(uint32_t id)',
    'int bpf_link_get_fd_by_id(uint32_t id)',
    'int bpf_prog_get_next_id(uint32_t start_id, void *next_id)',
    'int bpf_link_get_next_id(uint32_t start_id, void *next_id)',

    'int bpf_link_create(int prog_fd, int target_fd, int attach_type, void *opts)',
    'int bpf_link_update(int link_fd, int new_prog_fd, const bpf_link_update_opts *opts)',
    'int bpf_link_detach(int link_fd)',
    'int bpf_prog_query(int target_fd, int type, uint32_t query_flags, void *attach_flags, void *prog_ids, void *prog_cnt)',

    'int bpf_prog_test_run_opts(int prog_fd, _Inout_ bpf_test_run_opts *opts)',

    'int bpf_iter_create(int link_fd)',
    'btf *btf__new_empty(void)',
    'int btf__add_int(btf *btf, const char *name, size_t byte_sz, int encoding)',
    'int btf__add_typedef(btf *btf, const char *name, int ref_type_id)',
    'int btf__add_array(btf *btf, int index_type_id, int elem_type_id, uint32_t nr_elems)',
    'int btf__add_struct(btf *btf, const char *name, uint32_t sz)',
    'int btf__add_field(btf *btf, const char *name, int field_type_id, uint32_t bit_offset, uint32_t bit_size)',
    'int btf__load_into_kernel(btf *btf)',
    'int btf__fd(const btf *btf)',
    'void btf__free(btf *btf)',
    'ring_buffer *ring_buffer__new(int map_fd, ring_buffer_sample_fn *sample_cb, void *ctx, void *opts)',
    'int ring_buffer__consume(ring_buffer *rb)',
    'void ring_buffer__free(ring_buffer *rb)',
  ];
  const fns: Record<string, unknown> = {};
  for (const decl of decls) {
    const fn = lib.func(decl);
    const name = /([A-Za-z0-9_]+)\(/.exec(decl)?.[1];
    if (!name) throw new Error(`libbpf declaration without a name: ${decl}`);
    fns[name] = fn;
  }
  const result = fns as unknown as LibbpfFunctions;
  installPrintCallback(result);
  return result;
}

// ---- libbpf's own log -------------------------------------------------------------
//
// libbpf prints through a printf-style callback taking a va_list. koffi cannot
// format a va_list, but it can hand it on: on x86_64 (and arm64) a va_list
// argument is passed as a pointer, so the callback receives it as `void *` and
// passes it to libc's vsnprintf. The formatted lines go to a sink (the agent's
// pino logger, or nowhere) and, while an open/load is in progress, into a
// capture list that ends up in the BpfError of a failed load (libbpf explains
// e.g. a pinned-map mismatch only there).

export enum LibbpfPrintLevel {
  Warn = 0,
  Info = 1,
  Debug = 2,
}

export type LibbpfLogSink = (level: LibbpfPrintLevel, message: string) => void;

let logSink: LibbpfLogSink | undefined;
let capture: string[] | undefined;
// Kept alive for the life of the process: libbpf holds the pointer.
let printCallback: koffi.IKoffiRegisteredCallback | undefined;

/**
 * Route libbpf's messages (warnings, info, debug) somewhere, e.g.
 * `setLibbpfLogSink((lvl, msg) => lvl === LibbpfPrintLevel.Warn ? log.warn(msg) : log.debug(msg))`.
 * Pass undefined to drop them (the default).
 */
export function setLibbpfLogSink(sink: LibbpfLogSink | undefined): void {
  logSink = sink;
  libbpf(); // make sure the callback is installed
}

/** Runs fn while collecting libbpf's warn/info lines; returns them with fn's result or error. */
export function withLibbpfCapture<T>(fn: () => T): { result?: T; error?: unknown; lines: string[] } {
  const outer = capture;
  const lines: string[] = [];
  capture = lines;
  try {
    return { result: fn(), lines };
  } catch (error) {
    return { error, lines };
  } finally {
    capture = outer;
  }
}

/**
 * bpf_object__load on a thread of libuv's pool (koffi's async call): the
 * verifier's kernel time runs beside the event loop, which meanwhile serves
 * I/O (the agent's API lists). libbpf prints nothing meanwhile: its print
 * callback is JS, which koffi would relay to the event loop one line at a
 * time (~700 lines, mostly debug, for sock_lb.bpf.o) with the loading thread
 * waiting each time behind whatever the loop runs. The error of a failed load
 * has the errno and the verifier's log, not libbpf's own lines: a caller that
 * wants them loads again synchronously. Nothing else may call libbpf meanwhile.
 */
export async function objectLoadAsync(handle: unknown): Promise<{ result?: number; error?: unknown; lines: string[] }> {
  const fns = libbpf();
  const fn = fns.bpf_object__load as unknown as koffi.KoffiFunction;
  const previous = fns.libbpf_set_print(null);
  try {
    const result = await new Promise<number>((resolve, reject) => {
      fn.async(handle, (err: unknown, ret: number) => (err ? reject(err as Error) : resolve(ret)));
    });
    return { result, lines: [] };
  } catch (error) {
    return { error, lines: [] };
  } finally {
    fns.libbpf_set_print(previous);
  }
}

function installPrintCallback(fns: LibbpfFunctions): void {
  if (process.arch !== 'x64' && process.arch !== 'arm64') return; // va_list passing differs: route nowhere
  let libc: koffi.IKoffiLib;
  try {
    libc = koffi.load('libc.so.6');
  } catch {
    return;
  }
  const vsnprintf = libc.func('int vsnprintf(void *buf, size_t size, const char *fmt, void *ap)');
  const proto = koffi.proto('int sluice_libbpf_print_fn(int level, const char *fmt, void *ap)');
  const buf = Buffer.alloc(64 * 1024);
  printCallback = koffi.register(
    (level: number, fmt: string, ap: unknown): number => {
      // Debug lines are many (every relocation); skip formatting them unless someone listens.
      if (level === LibbpfPrintLevel.Debug && !logSink) return 0;
      if (!capture && !logSink) return 0;
      const n = vsnprintf(buf, buf.length, fmt, ap) as number;
      if (n <= 0) return 0;
      const message = buf.toString('utf8', 0, Math.min(n, buf.length - 1)).replace(/\n+$/, '');
      if (capture && level !== LibbpfPrintLevel.Debug) capture.push(message);
      try {
        logSink?.(level as LibbpfPrintLevel, message);
      } catch {
        // A failing logger must not unwind through libbpf's C frames.
      }
      return 0;
    },
    koffi.pointer(proto),
  );
  fns.libbpf_set_print(printCallback);
}

// ---- small shared helpers ------------------------------------------------------

let possibleCpus: number | undefined;
/** Number of possible CPUs: the multiplier for per-CPU map values. */
export function numPossibleCpus(): number {
  return (possibleCpus ??= check(libbpf().libbpf_num_possible_cpus(), 'libbpf_num_possible_cpus', 'cpus'));
}

/** Calls bpf_obj_get_info_by_fd with a zeroed buffer of `size` bytes; returns the buffer. */
export function objInfo(fd: number, size: number, op: string, object: string): Buffer {
  const info = Buffer.alloc(size);
  const len = new Uint32Array([size]);
  check(libbpf().bpf_obj_get_info_by_fd(fd, info, len), op, object);
  return info;
}
