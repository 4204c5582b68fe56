// The protobuf wire format, read in place from a Buffer: varints, fixed
// 32/64-bit values, length-delimited fields (strings, bytes, sub-messages),
// and skipping any field by its wire type without looking inside it. This is
// what lets the list decoders (service.ts, endpointSlice.ts) pass over
// managedFields, ownerReferences, targetRef and the like without allocating
// anything for them.
//
// Errors are ProtoError with the byte offset; the list decoders add the
// resource and the message being read.

export class ProtoError extends Error {}

export const WIRE_VARINT = 0;
export const WIRE_FIXED64 = 1;
export const WIRE_BYTES = 2;
export const WIRE_FIXED32 = 5;

/** Buffer's own slice method: toString('utf8', a, b) without its argument checks. */
type Utf8Slicer = Buffer & { utf8Slice(start: number, end: number): string };

/**
 * Names, addresses, label values are short ASCII: built in JS they cost
 * less than a call into the UTF-8 decoder (measured: bench/protolist.ts).
 */
const SHORT = 24;
function shortString(buf: Buffer, start: number, end: number): string {
  for (let i = start; i < end; i++) if (buf[i]! >= 0x80) return (buf as Utf8Slicer).utf8Slice(start, end);
  return (buf as Utf8Slicer & { latin1Slice(start: number, end: number): string }).latin1Slice(start, end);
}

export class Reader {
  pos: number;
  constructor(readonly buf: Buffer, start = 0, public end = buf.length) {
    this.pos = start;
  }

  fail(what: string): never {
    throw new ProtoError(`${what} at byte ${this.pos}`);
  }

  /** An unsigned varint as a number (exact up to 2^53: lengths, tags, ports, seconds). */
  uint(): number {
    const buf = this.buf;
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) this.fail('truncated varint');
      const b = buf[this.pos++]!;
      value += (b & 0x7f) * scale;
      if (b < 0x80) return value;
      scale *= 128;
    }
    return this.fail('varint longer than 10 bytes');
  }

  /** An int32 field: the low 32 bits of the varint, signed (negatives are sign-extended to 10 bytes on the wire). */
  int32(): number {
    const buf = this.buf;
    let lo = 0;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) this.fail('truncated varint');
      const b = buf[this.pos++]!;
      if (i < 5) lo |= (b & 0x7f) << (7 * i);
      if (b < 0x80) return lo | 0;
    }
    return this.fail('varint longer than 10 bytes');
  }

  /** An int64 field as a number (negatives exact to 2^53 too). */
  int64(): number {
    const start = this.pos;
    const v = this.uint();
    if (v < 2 ** 53) return v;
    // Sign-extended negative (or beyond 2^53): redo exactly.
    let big = 0n;
    for (let i = start, shift = 0n; i < this.pos; i++, shift += 7n) big |= BigInt(this.buf[i]! & 0x7f) << shift;
    return Number(BigInt.asIntN(64, big));
  }

  bool(): boolean {
    return this.uint() !== 0;
  }

  /** The length prefix of a length-delimited field, checked against the end; returns the field's end. */
  lengthEnd(): number {
    const len = this.uint();
    const end = this.pos + len;
    if (end > this.end) this.fail(`length ${len} runs past the end (${this.end - this.pos} bytes left)`);
    return end;
  }

  string(): string {
    const end = this.lengthEnd();
    const start = this.pos;
    this.pos = end;
    return end - start <= SHORT ? shortString(this.buf, start, end) : (this.buf as Utf8Slicer).utf8Slice(start, end);
  }

  /** A string field whose empty value means absent (Go's omitempty plain strings): undefined for "", nothing allocated. */
  nonEmpty(): string | undefined {
    if (this.pos < this.end && this.buf[this.pos] === 0) {
      this.pos++;
      return undefined;
    }
    return this.string();
  }

  /** True when the next length-delimited field holds exactly `key`'s bytes (consumed); false leaves it consumed too. */
  stringEquals(key: Buffer): boolean {
    const end = this.lengthEnd();
    const start = this.pos;
    this.pos = end;
    if (end - start !== key.length) return false;
    for (let i = 0; i < key.length; i++) if (this.buf[start + i] !== key[i]) return false;
    return true;
  }

  /** Skip one field's value by its wire type. */
  skip(wireType: number): void {
    switch (wireType) {
      case WIRE_VARINT:
        this.uint();
        return;
      case WIRE_FIXED64:
        this.pos += 8;
        break;
      case WIRE_BYTES:
        this.pos = this.lengthEnd();
        return;
      case WIRE_FIXED32:
        this.pos += 4;
        break;
      default:
        // Groups (3, 4) are proto2 relics Kubernetes never writes.
        this.fail(`unsupported wire type ${wireType}`);
    }
    if (this.pos > this.end) this.fail('truncated fixed-width field');
  }

  /** After a sub-message's fields: they must end exactly where its length said. */
  close(end: number): void {
    if (this.pos !== end) this.fail('sub-message overran its length');
  }
}

/** The tag of field `n` with wire type `w` (what the decoders switch on: a known field with another wire type is skipped). */
export const tag = (n: number, w: number): number => n * 8 + w;
