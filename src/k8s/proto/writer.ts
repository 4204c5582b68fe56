// The protobuf wire format, written: what the built-in API
// (src/k8s/apiserver) answers a LIST of Services or EndpointSlices with when
// the client asks for application/vnd.kubernetes.protobuf (encode.ts).
// A sub-message is written in place and its length put in front afterwards
// (the bytes moved by the length's size), so no buffer per message.
export class Writer {
  private buf = Buffer.allocUnsafe(1 << 16);
  pos = 0;

  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(bigger, 0, 0, this.pos);
    this.buf = bigger;
  }

  raw(bytes: Buffer): void {
    this.room(bytes.length);
    bytes.copy(this.buf, this.pos);
    this.pos += bytes.length;
  }

  varint(v: number): void {
    if (v < 0) {
      // int32/int64 negatives: 10 bytes, two's complement.
      let big = BigInt.asUintN(64, BigInt(Math.trunc(v)));
      this.room(10);
      for (let i = 0; i < 10; i++, big >>= 7n) this.buf[this.pos++] = Number(big & 0x7fn) | (i < 9 ? 0x80 : 0);
      return;
    }
    this.room(10);
    while (v >= 0x80) {
      this.buf[this.pos++] = (v % 128) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buf[this.pos++] = v;
  }

  /** A varint field (int32, int64, bool, enum); undefined writes nothing. */
  int(field: number, v: number | boolean | undefined | null): void {
    if (v === undefined || v === null) return;
    this.varint(field * 8);
    this.varint(typeof v === 'boolean' ? (v ? 1 : 0) : v);
  }

  /** A string field; undefined writes nothing, "" writes an empty one. */
  string(field: number, s: string | undefined | null): void {
    if (s === undefined || s === null) return;
    const len = Buffer.byteLength(s);
    this.varint(field * 8 + 2);
    this.varint(len);
    this.room(len);
    this.pos += this.buf.write(s, this.pos, 'utf8');
  }

  strings(field: number, list: readonly string[] | undefined | null): void {
    for (const s of list ?? []) this.string(field, s);
  }

  /** A sub-message: `body` writes its fields. */
  message(field: number, body: () => void): void {
    this.varint(field * 8 + 2);
    const start = this.pos;
    body();
    const len = this.pos - start;
    let size = 1;
    for (let v = len; v >= 0x80; v = Math.floor(v / 128)) size++;
    this.room(size);
    this.buf.copyWithin(start + size, start, this.pos);
    const end = this.pos + size;
    this.pos = start;
    this.varint(len);
    this.pos = end;
  }

  /** map<string,string>: one entry message per key. */
  map(field: number, m: Record<string, string> | undefined | null): void {
    for (const [k, v] of Object.entries(m ?? {})) this.message(field, () => (this.string(1, k), this.string(2, v)));
  }

  bytes(): Buffer {
    return this.buf.subarray(0, this.pos);
  }
}
