#!/usr/bin/env node
// Generate src/abi/generated.ts from the BTF of compiled BPF objects and the
// #defines of native/sluice_abi.h.
//
// Why BTF: it is what the compiler actually laid out (offsets, sizes, padding),
// so the TypeScript codecs cannot drift from the C structs. Byte order comes
// from the typedef names (__be16/__be32/__be64 are network order). Constants
// come from the header through the C preprocessor, so a flag is written once.
//
// Usage: node scripts/gen-abi.js build/a.bpf.o [build/b.bpf.o ...] > src/abi/generated.ts
'use strict';
const { execFileSync } = require('child_process');
const path = require('path');

// SLUICE_ABI_HEADER: another copy of the header (the abi tests move a field in one).
const ABI_HEADER = process.env.SLUICE_ABI_HEADER ?? path.join(__dirname, '..', 'native', 'sluice_abi.h');
const OUR_STRUCT = /^(lb[46]?_|sluice_)/;

function btfOf(objectPath) {
  const json = execFileSync('bpftool', ['-j', 'btf', 'dump', 'file', objectPath], { maxBuffer: 64 << 20 });
  const byId = new Map();
  for (const t of JSON.parse(json).types) byId.set(t.id, t);
  return byId;
}

// Follow typedefs/qualifiers to the underlying type, noting network byte order.
function resolve(byId, id) {
  let bigEndian = false;
  let t = byId.get(id);
  while (t && ['TYPEDEF', 'VOLATILE', 'CONST', 'RESTRICT', 'TYPE_TAG'].includes(t.kind)) {
    if (t.kind === 'TYPEDEF' && /^__be(16|32|64)$/.test(t.name)) bigEndian = true;
    t = byId.get(t.type_id);
  }
  if (!t) throw new Error(`BTF type ${id} not found`);
  return { t, bigEndian };
}

function sizeOf(byId, id) {
  const { t } = resolve(byId, id);
  if (t.kind === 'INT' || t.kind === 'STRUCT' || t.kind === 'UNION' || t.kind === 'ENUM') return t.size;
  if (t.kind === 'ARRAY') return t.nr_elems * sizeOf(byId, t.type_id);
  if (t.kind === 'PTR') return 8;
  throw new Error(`no size for BTF kind ${t.kind}`);
}

// A field descriptor the emitter understands: int | bytes | struct.
function describeField(byId, member, structs) {
  const { t, bigEndian } = resolve(byId, member.type_id);
  if (member.bitfield_size) throw new Error(`bitfield ${member.name} is not supported in the ABI`);
  const offset = member.bits_offset / 8;
  if (t.kind === 'INT' || t.kind === 'ENUM') {
    return { name: member.name, kind: 'int', offset, size: t.size, bigEndian };
  }
  if (t.kind === 'STRUCT' && t.name && t.name !== '(anon)') {
    describeStruct(byId, t, structs);
    return { name: member.name, kind: 'struct', offset, size: t.size, struct: t.name };
  }
  // Arrays and unions (padding, IPv6 addresses) are raw bytes.
  return { name: member.name, kind: 'bytes', offset, size: sizeOf(byId, member.type_id) };
}

function describeStruct(byId, t, structs) {
  const fields = t.members.map((m) => describeField(byId, m, structs));
  const desc = { name: t.name, size: t.size, fields };
  const seen = structs.get(t.name);
  if (seen && JSON.stringify(seen) !== JSON.stringify(desc)) {
    throw new Error(`struct ${t.name} has two different layouts across objects`);
  }
  structs.set(t.name, desc);
  return desc;
}

// A map definition in .maps: struct { int (*type)[T]; K *key; V *value; int (*max_entries)[N]; ... }.
function describeMaps(byId, structs, maps) {
  for (const t of byId.values()) {
    if (t.kind !== 'DATASEC' || t.name !== '.maps') continue;
    for (const v of t.vars) {
      const variable = byId.get(v.type_id);
      const def = resolve(byId, variable.type_id).t;
      const spec = { name: variable.name };
      for (const m of def.members) {
        const ptr = byId.get(m.type_id);
        const target = resolve(byId, ptr.type_id).t;
        if (m.name === 'key' || m.name === 'value') {
          let typeName;
          if (target.kind === 'STRUCT') typeName = describeStruct(byId, target, structs).name;
          else if (target.kind === 'INT') typeName = `u${target.size * 8}`;
          else throw new Error(`map ${variable.name}: unsupported ${m.name} kind ${target.kind}`);
          spec[`${m.name}Type`] = typeName;
          spec[`${m.name}Size`] = target.size;
        } else {
          spec[m.name === 'max_entries' ? 'maxEntries' : m.name === 'map_flags' ? 'flags' : m.name] = target.nr_elems;
        }
      }
      const seen = maps.get(spec.name);
      if (seen && JSON.stringify(seen) !== JSON.stringify(spec)) throw new Error(`map ${spec.name} differs across objects`);
      maps.set(spec.name, spec);
    }
  }
}

// #defines of the ABI header: numbers (possibly shifted/or-ed) and map names.
function constants() {
  const out = execFileSync('clang', ['-dM', '-E', '-x', 'c', ABI_HEADER], { encoding: 'utf8' });
  const defs = new Map();
  for (const line of out.split('\n')) {
    const m = /^#define ((?:LB|SLUICE)_[A-Z0-9_]+) (.+)$/.exec(line);
    if (m) defs.set(m[1], m[2].trim());
  }
  const result = [];
  for (const [name, raw] of defs) {
    if (name === 'SLUICE_ABI_H') continue;
    if (/^[a-z][a-z0-9_]*$/.test(raw)) { result.push({ name, value: JSON.stringify(raw) }); continue; }
    if (!/^[0-9xXa-fA-F()<|\s]+$/.test(raw)) throw new Error(`cannot evaluate #define ${name} ${raw}`);
    result.push({ name, value: String(Function(`"use strict"; return (${raw});`)()) });
  }
  return result.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

const pascal = (s) => s.split('_').map((p) => p.charAt(0).toUpperCase() + p.slice(1)).join('');
const isPad = (f) => /^pad/.test(f.name) || f.name.startsWith('__');

function tsType(f) {
  if (f.kind === 'int') return f.size === 8 ? 'bigint' : 'number';
  if (f.kind === 'bytes') return 'Buffer';
  return pascal(f.struct);
}

function emitStruct(s) {
  const T = pascal(s.name);
  const fields = s.fields.filter((f) => !isPad(f));
  const lines = [];
  lines.push(`/** struct ${s.name} (${s.size} bytes) */`);
  lines.push(`export interface ${T} {`);
  for (const f of fields) lines.push(`  ${f.name}: ${tsType(f)};${f.kind === 'int' && f.bigEndian ? ' // network byte order in the map' : ''}`);
  lines.push('}');
  lines.push(`export const ${s.name.toUpperCase()}_SIZE = ${s.size};`);
  lines.push(`export const ${s.name}Layout: StructLayout = ${JSON.stringify({ name: s.name, size: s.size, fields: s.fields })};`);
  // Encoder: writes every byte (padding zeroed) so map keys compare equal.
  lines.push(`export function encode${T}(v: ${T}, buf: Buffer = Buffer.alloc(${s.size}), off = 0): Buffer {`);
  lines.push(`  buf.fill(0, off, off + ${s.size});`);
  for (const f of fields) lines.push(`  ${writer(f)}`);
  lines.push('  return buf;');
  lines.push('}');
  lines.push(`export function decode${T}(buf: Buffer, off = 0): ${T} {`);
  lines.push('  return {');
  for (const f of fields) lines.push(`    ${f.name}: ${reader(f)},`);
  lines.push('  };');
  lines.push('}');
  lines.push(`export const ${s.name}Codec: Codec<${T}> = { size: ${s.size}, encode: encode${T}, decode: decode${T} };`);
  return lines.join('\n');
}

function writer(f) {
  const at = `off + ${f.offset}`;
  if (f.kind === 'bytes') return `v.${f.name}.copy(buf, ${at}, 0, ${f.size});`;
  if (f.kind === 'struct') return `encode${pascal(f.struct)}(v.${f.name}, buf, ${at});`;
  const E = f.bigEndian ? 'BE' : 'LE';
  switch (f.size) {
    case 1: return `buf.writeUInt8(v.${f.name} & 0xff, ${at});`;
    case 2: return `buf.writeUInt16${E}(v.${f.name} & 0xffff, ${at});`;
    case 4: return `buf.writeUInt32${E}(v.${f.name} >>> 0, ${at});`;
    case 8: return `buf.writeBigUInt64${E}(v.${f.name}, ${at});`;
  }
  throw new Error(`int of size ${f.size}`);
}

function reader(f) {
  const at = `off + ${f.offset}`;
  if (f.kind === 'bytes') return `Buffer.from(buf.subarray(${at}, ${at} + ${f.size}))`;
  if (f.kind === 'struct') return `decode${pascal(f.struct)}(buf, ${at})`;
  const E = f.bigEndian ? 'BE' : 'LE';
  switch (f.size) {
    case 1: return `buf.readUInt8(${at})`;
    case 2: return `buf.readUInt16${E}(${at})`;
    case 4: return `buf.readUInt32${E}(${at})`;
    case 8: return `buf.readBigUInt64${E}(${at})`;
  }
  throw new Error(`int of size ${f.size}`);
}

function main() {
  const objects = process.argv.slice(2);
  if (objects.length === 0) throw new Error('usage: gen-abi.js OBJECT.bpf.o...');
  const structs = new Map();
  const maps = new Map();
  for (const obj of objects) {
    const byId = btfOf(obj);
    for (const t of byId.values()) {
      if (t.kind === 'STRUCT' && OUR_STRUCT.test(t.name)) describeStruct(byId, t, structs);
    }
    describeMaps(byId, structs, maps);
  }
  const out = [];
  out.push('// GENERATED by scripts/gen-abi.js from the BTF of the compiled BPF objects');
  out.push('// and the #defines of native/sluice_abi.h. Do not edit: change the C header and run `make abi`.');
  out.push('// `make build` fails when this file no longer matches the C layout.');
  out.push('/* eslint-disable */');
  out.push('');
  out.push("import type { Codec, StructLayout, MapSpec } from './types';");
  out.push('');
  out.push('// ---- constants (native/sluice_abi.h) ----');
  for (const c of constants()) out.push(`export const ${c.name} = ${c.value};`);
  out.push('');
  out.push('// ---- structs (BTF) ----');
  for (const name of [...structs.keys()].sort()) out.push(emitStruct(structs.get(name)), '');
  out.push('// ---- maps (BTF .maps section) ----');
  out.push('export const MAP_SPECS: Record<string, MapSpec> = {');
  for (const name of [...maps.keys()].sort()) out.push(`  ${name}: ${JSON.stringify(maps.get(name))},`);
  out.push('};');
  process.stdout.write(out.join('\n') + '\n');
}

try {
  main();
} catch (err) {
  process.stderr.write(`gen-abi: ${err.message}\n`);
  process.exit(1);
}
