// Shapes used by the generated codecs (src/abi/generated.ts).

/** One field of a C struct as the compiler laid it out (from BTF). */
export interface FieldLayout {
  name: string;
  kind: 'int' | 'bytes' | 'struct';
  offset: number;
  size: number;
  bigEndian?: boolean;
  struct?: string;
}

export interface StructLayout {
  name: string;
  size: number;
  fields: FieldLayout[];
}

/** Encoder/decoder pair for one C struct. */
export interface Codec<T> {
  size: number;
  encode(value: T, buf?: Buffer, off?: number): Buffer;
  decode(buf: Buffer, off?: number): T;
}

/** A map as declared in the BPF object's .maps section. */
export interface MapSpec {
  name: string;
  type: number;
  /** Key and value: absent for a ring buffer, which has neither. */
  keyType?: string;
  keySize?: number;
  valueType?: string;
  valueSize?: number;
  maxEntries: number;
  flags?: number;
}
