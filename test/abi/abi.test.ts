// The ABI tier: the TypeScript codecs must equal what the compiler laid out.
// native/sluice_abi.h is the one source; src/abi/generated.ts is generated
// from the BTF of the compiled objects, and this tier proves both that it is
// current and that a C change which is not regenerated is caught.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import type { StructLayout } from '../../src/abi/types';

const repo = path.resolve(__dirname, '..', '..', '..');
const objects = fs.readdirSync(path.join(repo, 'build')).filter((f) => f.endsWith('.bpf.o')).map((f) => path.join(repo, 'build', f));

function generate(objs: string[], header?: string): string {
  const env = { ...process.env, ...(header ? { SLUICE_ABI_HEADER: header } : {}) };
  return execFileSync('node', [path.join(repo, 'scripts', 'gen-abi.js'), ...objs], { encoding: 'utf8', env });
}

interface BtfType { id: number; kind: string; name: string; size?: number; members?: Array<{ name: string; bits_offset: number }> }

function btfStructs(obj: string): Map<string, BtfType> {
  const json = JSON.parse(execFileSync('bpftool', ['-j', 'btf', 'dump', 'file', obj], { encoding: 'utf8', maxBuffer: 64 << 20 })) as { types: BtfType[] };
  return new Map(json.types.filter((t) => t.kind === 'STRUCT').map((t) => [t.name, t]));
}

const layouts = Object.entries(abi).filter(([name]) => name.endsWith('Layout')).map(([, v]) => v as StructLayout);

test('the committed codecs are what the compiled objects generate', () => {
  assert.ok(objects.length > 0, 'no build/*.bpf.o: run make build');
  const fresh = generate(objects);
  const committed = fs.readFileSync(path.join(repo, 'src', 'abi', 'generated.ts'), 'utf8');
  assert.equal(committed, fresh, 'src/abi/generated.ts is stale: run `make abi`');
});

test('every generated layout has the BTF size and field offsets', () => {
  const btf = new Map<string, BtfType>();
  for (const o of objects) for (const [k, v] of btfStructs(o)) btf.set(k, v);
  assert.ok(layouts.length >= 8, `only ${layouts.length} layouts`);
  for (const layout of layouts) {
    const t = btf.get(layout.name);
    assert.ok(t, `struct ${layout.name} is not in the BTF`);
    assert.equal(layout.size, t.size, `${layout.name} size`);
    assert.deepEqual(layout.fields.map((f) => [f.name, f.offset]), t.members!.map((m) => [m.name, m.bits_offset / 8]), `${layout.name} offsets`);
  }
});

test('network-order fields are written big endian, host-order fields little endian', () => {
  const key = abi.encodeLb4FrontendKey({ address: 0x0a60000a, port: 80, proto: 6, scope: 1 });
  assert.deepEqual([...key], [0x0a, 0x60, 0x00, 0x0a, 0x00, 0x50, 6, 1]);
  assert.deepEqual(abi.decodeLb4FrontendKey(key), { address: 0x0a60000a, port: 80, proto: 6, scope: 1 });
  const svc = abi.encodeLb4Service({ backend_id: 0, count: 2, flags: abi.LB_SVC_FLAG_CLUSTER_IP, rev_nat_id: 7, affinity_timeout: 10800, algorithm: 0 });
  assert.equal(svc.length, abi.LB4_SERVICE_SIZE);
  assert.equal(svc.readUInt16LE(4), 2);
  assert.equal(svc.readUInt32LE(8), 7);
});

test('a C field that moves without regenerating the TypeScript side fails the check', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-abi-'));
  try {
    // Swap two fields of struct lb4_backend in a copy of the header.
    const header = fs.readFileSync(path.join(repo, 'native', 'sluice_abi.h'), 'utf8');
    const moved = header.replace(
      /(\t__u8   proto;   \/\* LB_PROTO_\* \*\/\n)(\t__u8   flags;   \/\* LB_BACKEND_FLAG_\* \*\/\n)/,
      '$2$1',
    );
    assert.notEqual(moved, header, 'the test could not find the fields to move');
    fs.mkdirSync(path.join(tmp, 'native'));
    fs.writeFileSync(path.join(tmp, 'native', 'sluice_abi.h'), moved);
    const obj = path.join(tmp, 'sock_lb.bpf.o');
    execFileSync('clang', ['-O2', '-g', '-target', 'bpf', '-Wall', '-Werror', `-I${path.join(repo, 'build')}`, `-I${path.join(tmp, 'native')}`,
      `-I${path.join(repo, 'bpf')}`, '-c', path.join(repo, 'bpf', 'sock_lb.bpf.c'), '-o', obj]);
    const regenerated = generate([obj], path.join(tmp, 'native', 'sluice_abi.h'));
    const committed = fs.readFileSync(path.join(repo, 'src', 'abi', 'generated.ts'), 'utf8');
    assert.notEqual(regenerated, committed, 'a moved field must change the generated codecs');
    // The exact failure `make build` reports: lb4_backend's layout differs.
    assert.match(regenerated, /"name":"flags","kind":"int","offset":6/);
    assert.match(committed, /"name":"flags","kind":"int","offset":7/);
    // And the build step itself fails on it: the Makefile's abi-check, which
    // generates to a file (gen-abi must succeed) and then compares with cmp
    // (exit 1: the files differ). A pipe into cmp -s would end gen-abi in an
    // EPIPE at the first difference.
    const out = path.join(tmp, 'generated.ts');
    execFileSync('bash', ['-c', `node ${path.join(repo, 'scripts', 'gen-abi.js')} ${obj} > ${out}`], { env: { ...process.env, SLUICE_ABI_HEADER: path.join(tmp, 'native', 'sluice_abi.h') } });
    const cmp = spawnSync('cmp', ['-s', out, path.join(repo, 'src', 'abi', 'generated.ts')]);
    assert.equal(cmp.status, 1, 'the abi check must fail: cmp finds the generated codecs differ');
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

// issue 12: the UDP slot's sequence count (recvmsg4's lock-free read) sits in
// the word the TCP slots use for their rev-NAT id, so the three slot types
// keep one head (lock, word, cookie); host order like the C __u32.
test('lb4_sock_uslot: seq at offset 4, host order, in the slot head the TCP slots share', () => {
  const head = (l: StructLayout) => l.fields.slice(0, 3).map((f) => [f.offset, f.size]);
  assert.deepEqual(abi.lb4_sock_uslotLayout.fields.slice(0, 3).map((f) => f.name), ['lock', 'seq', 'cookie']);
  assert.deepEqual(head(abi.lb4_sock_uslotLayout), head(abi.lb4_sock_slotLayout));
  const buf = abi.encodeLb4SockUslot({ ...abi.decodeLb4SockUslot(Buffer.alloc(abi.LB4_SOCK_USLOT_SIZE)), seq: 3, cookie: 7n });
  assert.equal(buf.readUInt32LE(4), 3);
  assert.equal(abi.decodeLb4SockUslot(buf).seq, 3);
});

// issue 12, IPv6: lb6_sock_uslot has the same head as lb4_sock_uslot (the
// sequence count of recvmsg6's lock-free read where the TCP slots keep a
// rev-NAT id).
test('lb6_sock_uslot: seq at offset 4, host order, in the slot head the TCP slots share', () => {
  const head = (l: StructLayout) => l.fields.slice(0, 3).map((f) => [f.offset, f.size]);
  assert.deepEqual(abi.lb6_sock_uslotLayout.fields.slice(0, 3).map((f) => f.name), ['lock', 'seq', 'cookie']);
  assert.deepEqual(head(abi.lb6_sock_uslotLayout), head(abi.lb6_sock_slotLayout));
  const buf = abi.encodeLb6SockUslot({ ...abi.decodeLb6SockUslot(Buffer.alloc(abi.LB6_SOCK_USLOT_SIZE)), seq: 5, cookie: 9n });
  assert.equal(buf.readUInt32LE(4), 5);
  assert.equal(abi.decodeLb6SockUslot(buf).seq, 5);
});
