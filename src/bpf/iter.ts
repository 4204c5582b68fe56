// BPF iterators (SEC("iter/...")): a program attached as an iterator link;
// each bpf_iter_create() on the link opens a seq file whose read() runs the
// program over the kernel objects (sockets, tasks, ...) and returns what it
// bpf_seq_write()s. A socket iterator walks the network namespace of the
// thread that called bpf_iter_create(), not the one that reads.
import fs from 'node:fs';
import os from 'node:os';
import { BpfError, check, libbpf } from './libbpf';
import { AttachType } from './constants';
import type { BpfProgram } from './program';

/** An iterator link: attach once, run many times. */
export class BpfIterator {
  private linkFd: number;

  private constructor(linkFd: number, readonly label: string) {
    this.linkFd = linkFd;
  }

  /** bpf_link_create(prog, 0, BPF_TRACE_ITER): iterators without parameters (tcp, udp, task, ...). */
  static attach(prog: BpfProgram): BpfIterator {
    const fd = check(libbpf().bpf_link_create(prog.fd, 0, AttachType.TRACE_ITER, null), 'bpf_link_create(iter)', prog.name);
    return new BpfIterator(fd, prog.name);
  }

  /** A fresh seq file (bpf_iter_create); its namespace-scoped view is fixed now. */
  create(): number {
    if (this.linkFd < 0) throw new BpfError('bpf_iter_create', this.label, os.constants.errno.EBADF, { hint: 'iterator link closed' });
    return check(libbpf().bpf_iter_create(this.linkFd), 'bpf_iter_create', this.label);
  }

  /** Create and read to the end: everything the program wrote. */
  run(): Buffer {
    return readIter(this.create(), this.label);
  }

  /** Pins the link: `cat <path>` then runs the iterator in the reader's namespace. */
  pin(pinPath: string): void {
    check(libbpf().bpf_obj_pin(this.linkFd, pinPath), 'bpf_obj_pin', `${this.label} at ${pinPath}`);
  }

  close(): void {
    if (this.linkFd >= 0) fs.closeSync(this.linkFd);
    this.linkFd = -1;
  }
}

/** Reads an iterator fd to EOF (each read() runs the program further) and closes it. */
export function readIter(fd: number, label: string): Buffer {
  const chunks: Buffer[] = [];
  try {
    for (;;) {
      const buf = Buffer.alloc(64 * 1024);
      let n: number;
      try {
        n = fs.readSync(fd, buf, 0, buf.length, null);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? 'EIO';
        const errno = (os.constants.errno as Record<string, number>)[code] ?? os.constants.errno.EIO;
        throw new BpfError('read(iter)', label, errno);
      }
      if (n === 0) break;
      chunks.push(buf.subarray(0, n));
    }
  } finally {
    fs.closeSync(fd);
  }
  return Buffer.concat(chunks);
}
