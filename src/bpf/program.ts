// BpfProgram (a loaded program of a BpfObject), what the kernel says about any
// program (progInfo), and BPF_PROG_TEST_RUN (progTestRun) for packet tests.
import fs from 'node:fs';
import { BpfError, TEST_RUN_OPTS_SIZE, TestRunOpts, check, cString, libbpf, objInfo } from './libbpf';

export interface ProgramDescription {
  /** The C function name. */
  name: string;
  /** ELF section, e.g. "cgroup/connect4" or "tc". */
  sectionName: string;
  /** enum bpf_prog_type. */
  type: number;
  /** enum bpf_attach_type libbpf derived from the section name. */
  attachType: number;
}

export class BpfProgram implements ProgramDescription {
  readonly name: string;
  readonly sectionName: string;
  readonly type: number;
  readonly attachType: number;
  private fdValue: number;

  /** Made by BpfObject after load; the object owns the fd. */
  constructor(desc: ProgramDescription, fd: number) {
    this.name = desc.name;
    this.sectionName = desc.sectionName;
    this.type = desc.type;
    this.attachType = desc.attachType;
    this.fdValue = fd;
  }

  /** The program fd (owned by its BpfObject; -1 once the object is closed). */
  get fd(): number {
    return this.fdValue;
  }

  /** Kernel id, tag, name (bpf_obj_get_info_by_fd). */
  info(): ProgInfo {
    return progInfo({ fd: this.fdValue });
  }

  /** @internal BpfObject.close() closed the fd. */
  invalidate(): void {
    this.fdValue = -1;
  }
}

/** What the kernel says about a program (struct bpf_prog_info). */
export interface ProgInfo {
  id: number;
  type: number;
  /** Kernel's name: the C function name truncated to 15 characters. */
  name: string;
  /** 8-byte hash of the instructions as hex, as `bpftool prog` prints it. */
  tag: string;
  /** ns since boot. */
  loadTime: bigint;
  createdByUid: number;
  btfId: number;
  /** Only counted while kernel.bpf_stats_enabled=1. */
  runCount: bigint;
  runTimeNs: bigint;
  verifiedInsns: number;
}

// struct bpf_prog_info in libbpf 1.1.2's <linux/bpf.h>: 232 bytes.
const PROG_INFO_SIZE = 232;

/**
 * What the kernel says about a program: pass a kernel program id (a number,
 * e.g. LinkInfo.progId or one of queryCgroup's ids; opened with
 * bpf_prog_get_fd_by_id) or `{ fd }` for a program fd you hold.
 */
export function progInfo(ref: number | { fd: number }): ProgInfo {
  if (typeof ref !== 'number') return decodeProgInfo(objInfo(ref.fd, PROG_INFO_SIZE, 'bpf_obj_get_info_by_fd', `program fd ${ref.fd}`));
  const fd = check(libbpf().bpf_prog_get_fd_by_id(ref), 'bpf_prog_get_fd_by_id', `program id ${ref}`);
  try {
    return decodeProgInfo(objInfo(fd, PROG_INFO_SIZE, 'bpf_obj_get_info_by_fd', `program id ${ref}`));
  } finally {
    fs.closeSync(fd);
  }
}

function decodeProgInfo(b: Buffer): ProgInfo {
  return {
    type: b.readUInt32LE(0),
    id: b.readUInt32LE(4),
    tag: b.toString('hex', 8, 16),
    loadTime: b.readBigUInt64LE(40),
    createdByUid: b.readUInt32LE(48),
    name: cString(b, 64, 80),
    btfId: b.readUInt32LE(128),
    runTimeNs: b.readBigUInt64LE(192),
    runCount: b.readBigUInt64LE(200),
    verifiedInsns: b.readUInt32LE(216),
  };
}

/** Opens a program by kernel id; the caller closes the returned fd (fs.closeSync). */
export function progFdById(id: number): number {
  return check(libbpf().bpf_prog_get_fd_by_id(id), 'bpf_prog_get_fd_by_id', `program id ${id}`);
}

export interface TestRunInput {
  /** The packet (for tc/xdp: starting at the Ethernet header). */
  dataIn: Buffer;
  /** Room for the output packet; defaults to dataIn.length + 256 (programs may grow packets). */
  dataOutSize?: number;
  /** Context in (e.g. a struct __sk_buff for tc programs), optional. */
  ctxIn?: Buffer;
  /** Room for the output context; defaults to ctxIn's length when ctxIn is given. */
  ctxOutSize?: number;
  /** Run the program this many times (duration is the average). Default 1. */
  repeat?: number;
  /** BPF_F_TEST_RUN_ON_CPU etc. */
  flags?: number;
  cpu?: number;
}

export interface TestRunResult {
  /** The program's return code (TC_ACT_*, XDP_*, ...). */
  retval: number;
  /** The packet as the program left it. */
  dataOut: Buffer;
  /** Output context when ctxIn was given. */
  ctxOut?: Buffer;
  /** Average ns per run. */
  duration: number;
}

/** Runs a program on a crafted input with BPF_PROG_TEST_RUN (bpf_prog_test_run_opts). */
export function progTestRun(progFd: number, input: TestRunInput): TestRunResult {
  const dataOut = Buffer.alloc(input.dataOutSize ?? input.dataIn.length + 256);
  const ctxOutSize = input.ctxOutSize ?? input.ctxIn?.length ?? 0;
  const ctxOut = ctxOutSize > 0 ? Buffer.alloc(ctxOutSize) : null;
  const opts: TestRunOpts = {
    sz: TEST_RUN_OPTS_SIZE,
    data_in: input.dataIn,
    data_out: dataOut,
    data_size_in: input.dataIn.length,
    data_size_out: dataOut.length,
    ctx_in: input.ctxIn ?? null,
    ctx_out: ctxOut,
    ctx_size_in: input.ctxIn?.length ?? 0,
    ctx_size_out: ctxOut?.length ?? 0,
    retval: 0,
    repeat: input.repeat ?? 1,
    duration: 0,
    flags: input.flags ?? 0,
    cpu: input.cpu ?? 0,
    batch_size: 0,
  };
  const ret = libbpf().bpf_prog_test_run_opts(progFd, opts);
  if (ret < 0) {
    const hint = ret === -28 ? `output larger than dataOutSize ${dataOut.length}` : undefined;
    throw new BpfError('bpf_prog_test_run_opts', `program fd ${progFd}`, -ret, hint ? { hint } : undefined);
  }
  const result: TestRunResult = {
    retval: opts.retval,
    dataOut: dataOut.subarray(0, Math.min(opts.data_size_out, dataOut.length)),
    duration: opts.duration,
  };
  if (ctxOut) result.ctxOut = ctxOut.subarray(0, Math.min(opts.ctx_size_out, ctxOut.length));
  return result;
}
