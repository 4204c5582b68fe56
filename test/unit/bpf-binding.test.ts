// The parts of the libbpf binding that need no privileges: error formatting,
// errno names, the libbpf log route, and the UAPI numbers checked against the
// system's <linux/bpf.h>.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { AttachType, BpfError, BpfObject, LibbpfPrintLevel, MapType, attachTypeName, errnoName, isPerCpuMapType, setLibbpfLogSink } from '../../src/bpf';

describe('BpfError', () => {
  it('names the operation, the object, the errno and its meaning', () => {
    const e = new BpfError('bpf_map_update_elem', 'sluice_svc4', 7);
    assert.equal(e.message, 'bpf_map_update_elem(sluice_svc4): E2BIG (errno 7): Argument list too long');
    assert.equal(e.code, 'E2BIG');
    assert.equal(e.errno, 7);
    assert.equal(e.op, 'bpf_map_update_elem');
    assert.equal(e.object, 'sluice_svc4');
    assert.ok(e instanceof Error);
    assert.equal(e.name, 'BpfError');
  });

  it('carries hints and logs in the message', () => {
    const e = new BpfError('bpf_object__load', 'x.bpf.o', 13, { hint: 'program p rejected', verifierLog: 'R0 invalid mem access', libbpfLog: 'libbpf: failed' });
    assert.match(e.message, /^bpf_object__load\(x\.bpf\.o\): EACCES \(errno 13\): Permission denied: program p rejected\n/);
    assert.match(e.message, /libbpf: failed/);
    assert.match(e.message, /verifier log \(tail\):\nR0 invalid mem access$/);
    assert.equal(e.verifierLog, 'R0 invalid mem access');
  });

  it('knows the errno names the kernel uses, including ENOTSUPP', () => {
    assert.equal(errnoName(2), 'ENOENT');
    assert.equal(errnoName(95), 'EOPNOTSUPP');
    assert.equal(errnoName(11), 'EAGAIN');
    assert.equal(errnoName(524), 'ENOTSUPP');
    assert.match(new BpfError('op', 'obj', 524).message, /ENOTSUPP \(errno 524\)/);
  });
});

describe('libbpf log route', () => {
  it('hands libbpf messages to the sink, formatted', () => {
    const seen: Array<[LibbpfPrintLevel, string]> = [];
    setLibbpfLogSink((level, message) => seen.push([level, message]));
    try {
      assert.throws(() => BpfObject.open('/nonexistent/unit.bpf.o'), (e: unknown) => e instanceof BpfError && e.code === 'ENOENT');
    } finally {
      setLibbpfLogSink(undefined);
    }
    assert.ok(
      seen.some(([level, m]) => level === LibbpfPrintLevel.Warn && m.includes('/nonexistent/unit.bpf.o') && m.includes('No such file')),
      JSON.stringify(seen),
    );
  });

  it('puts libbpf warnings of a failed open into the error', () => {
    assert.throws(
      () => BpfObject.open('/nonexistent/unit.bpf.o'),
      (e: unknown) => e instanceof BpfError && /libbpf: .*failed to open/.test(e.libbpfLog ?? ''),
    );
  });
});

describe('UAPI numbers', () => {
  const header = '/usr/include/linux/bpf.h';
  it('AttachType and MapType match <linux/bpf.h>', { skip: !fs.existsSync(header) && 'no linux-libc-dev headers' }, () => {
    const text = fs.readFileSync(header, 'utf8');
    const enumValues = (name: string): Map<string, number> => {
      const body = new RegExp(`enum ${name} \\{([^}]*)\\}`).exec(text)?.[1] ?? '';
      const out = new Map<string, number>();
      let next = 0;
      for (const raw of body.split(',')) {
        const m = /^\s*(?:\/\*.*?\*\/\s*)?([A-Z0-9_]+)\s*(?:=\s*(\d+))?/s.exec(raw.replace(/\/\*[\s\S]*?\*\//g, ''));
        if (!m?.[1]) continue;
        next = m[2] !== undefined ? Number(m[2]) : next;
        out.set(m[1], next++);
      }
      return out;
    };
    const attach = enumValues('bpf_attach_type');
    for (const [name, value] of Object.entries(AttachType)) {
      if (name.startsWith('TCX_')) continue; // newer than these headers
      assert.equal(attach.get(`BPF_${name}`), value, `BPF_${name}`);
    }
    const maps = enumValues('bpf_map_type');
    for (const [name, value] of Object.entries(MapType)) assert.equal(maps.get(`BPF_MAP_TYPE_${name}`), value, name);
  });

  it('helpers', () => {
    assert.equal(isPerCpuMapType(MapType.PERCPU_ARRAY), true);
    assert.equal(isPerCpuMapType(MapType.HASH), false);
    assert.equal(attachTypeName(AttachType.CGROUP_INET4_CONNECT), 'cgroup_inet4_connect');
  });
});
