// The pod-veth programs (build/pod_lb.bpf.o) for BPF_PROG_TEST_RUN fixtures:
// loaded against the maps a TcHarness pinned (as on a node, where they share
// the TC object's maps), with the comparison helpers both families' fixture
// files use (test/bpf/pod_lb.test.ts, pod_lb6.test.ts).
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { BpfObject, progTestRun } from '../../src/bpf';
import * as abi from '../../src/abi/generated';
import { diffHex } from './tc_packet';
import type { TcHarness } from './tc_harness';

/** SLUICE_TEST_POD_OBJECT: another build, to show a new fixture failing on it (fail first). */
export const POD_OBJECT = process.env.SLUICE_TEST_POD_OBJECT ?? path.resolve(__dirname, '../../../build/pod_lb.bpf.o');

export class PodPrograms {
  private constructor(readonly obj: BpfObject) {}

  /** `object`: another build of pod_lb.bpf.o (a fail-first run against an older one). */
  static load(h: TcHarness, object = POD_OBJECT): PodPrograms {
    const obj = BpfObject.open(object, { pinDir: h.pinDir });
    try {
      obj.load();
    } catch (err) {
      obj.close();
      throw err;
    }
    return new PodPrograms(obj);
  }

  /** One packet through the host veth's ingress (from the pod) or egress (to the pod) program. */
  run(direction: 'ingress' | 'egress', packet: Buffer): { verdict: number; out: Buffer } {
    const prog = this.obj.program(direction === 'ingress' ? abi.SLUICE_PROG_POD_INGRESS : abi.SLUICE_PROG_POD_EGRESS);
    const r = progTestRun(prog.fd, { dataIn: packet });
    return { verdict: r.retval, out: r.dataOut };
  }

  close(): void {
    this.obj.close();
  }
}

export function expectPacket(actual: Buffer, expected: Buffer, what: string): void {
  assert.ok(actual.equals(expected), `${what}: output differs from the expected packet\n${diffHex(actual, expected)}`);
}

/** The frame as sent back into the pod it came from: MAC addresses swapped. */
export function bounced(f: Buffer): Buffer {
  const out = Buffer.from(f);
  f.copy(out, 0, 6, 12);
  f.copy(out, 6, 0, 6);
  return out;
}
