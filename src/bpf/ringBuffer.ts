// A BPF ring buffer (BPF_MAP_TYPE_RINGBUF) read through libbpf's
// ring_buffer__new/consume: each record is copied into a Buffer and handed to
// the callback, synchronously, inside consume(). Non-blocking on purpose: the
// caller drives it from its own timer, so the event loop (signals, output)
// is never stuck in epoll_wait.
import * as koffi from 'koffi';
import { check, checkPtr, libbpf, type Handle } from './libbpf';
import type { BpfMap } from './map';

export class RingBuffer {
  private rb: Handle | null;
  private readonly callback: koffi.IKoffiRegisteredCallback;
  private failure: unknown;

  /** `onRecord` runs for every record; a throw stops that consume() and is rethrown from it. */
  constructor(readonly map: BpfMap, onRecord: (record: Buffer) => void) {
    this.callback = koffi.register((_ctx: unknown, data: unknown, size: number): number => {
      try {
        // The record lives in the ring only until we return: copy it.
        onRecord(Buffer.from(new Uint8Array(koffi.view(data as never, size) as ArrayBuffer)));
        return 0;
      } catch (err) {
        this.failure = err;
        return -1; // libbpf stops consuming and returns this
      }
    }, koffi.pointer('ring_buffer_sample_fn'));
    try {
      this.rb = checkPtr(libbpf().ring_buffer__new(map.fd, this.callback, null, null), 'ring_buffer__new', map.name);
    } catch (err) {
      koffi.unregister(this.callback);
      throw err;
    }
  }

  /** Read every record available now; returns how many. */
  consume(): number {
    if (!this.rb) throw new Error(`ring buffer ${this.map.name} is closed`);
    const n = libbpf().ring_buffer__consume(this.rb);
    if (this.failure !== undefined) {
      const err = this.failure;
      this.failure = undefined;
      throw err;
    }
    return check(n, 'ring_buffer__consume', this.map.name);
  }

  close(): void {
    if (!this.rb) return;
    libbpf().ring_buffer__free(this.rb);
    this.rb = null;
    koffi.unregister(this.callback);
  }
}
