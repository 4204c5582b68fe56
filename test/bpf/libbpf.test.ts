// The libbpf binding against the real kernel: objects, pinned maps, every map
// operation, verifier errors, cgroup links that outlive their fds, and
// BPF_PROG_TEST_RUN. Needs root.
//
// Everything this file creates has a unique name (sluice-bt-<random>): a bpffs
// directory, a child cgroup under the cgroup v2 mount and a network namespace
// with only `lo` (no routes out); all are removed in `after`, even on failure.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  AttachType,
  BPF_EXIST,
  BPF_NOEXIST,
  BpfError,
  BpfLink,
  BpfMap,
  BpfObject,
  LinkType,
  MapFlags,
  MapType,
  attachCgroup,
  cgroupId,
  cgroupV2Mount,
  ensureBpffsDir,
  isBpffs,
  linkInfo,
  numPossibleCpus,
  progInfo,
  progTestRun,
  queryCgroup,
  unpin,
} from '../../src/bpf';

const repo = path.resolve(__dirname, '../../..');
const suffix = crypto.randomBytes(4).toString('hex');
const name = `sluice-bt-${suffix}`;
const pinRoot = `/sys/fs/bpf/${name}`;
const netns = name;
let cgroupDir = '';
let workDir = '';
let objPath = '';
let rejectedPath = '';

const isRoot = process.getuid?.() === 0;

function compileFixture(file: string): string {
  const out = path.join(workDir, path.basename(file).replace(/\.c$/, '.o'));
  execFileSync('clang', ['-O2', '-g', '-target', 'bpf', '-Wall', '-Werror', `-I${repo}/build`, `-I${repo}/native`, '-c', file, '-o', out], {
    stdio: 'pipe',
    timeout: 60_000,
  });
  return out;
}

let pinCounter = 0;
/** A fresh bpffs directory for one test: maps pinned there start empty. */
function freshPinDir(): string {
  return ensureBpffsDir(path.join(pinRoot, `t${++pinCounter}`));
}

/** Opens and loads the fixture object; the caller closes it. */
function loadFixture(pinDir: string, maxEntries?: Record<string, number>): BpfObject {
  const obj = BpfObject.open(objPath, maxEntries ? { pinDir, maxEntries } : { pinDir });
  try {
    obj.load();
    return obj;
  } catch (err) {
    obj.close();
    throw err;
  }
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
}

function u64(n: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(n));
  return b;
}

/** A 12-byte bt_key for index i. */
function key12(i: number): Buffer {
  const b = Buffer.alloc(12);
  b.writeUInt32BE(0x0a600000 + i, 0); // 10.96.x.y
  b.writeUInt16BE(80, 4);
  b.writeUInt8(6, 6);
  b.writeUInt32LE(i & 0xffff, 8);
  return b;
}

/** A 20-byte bt_value for index i. */
function value20(i: number): Buffer {
  const b = Buffer.alloc(20);
  for (let f = 0; f < 5; f++) b.writeUInt32LE(i * 10 + f, f * 4);
  return b;
}

const CNT_ALLOW = 0;
const CNT_DENY = 1;
const CNT_OTHER = 2;

/** bt_counters[slot].calls summed over CPUs (struct bt_counter: u32 calls, u32 last_port, u32 spare). */
function counter(map: BpfMap, slot: number): number {
  const perCpu = map.lookupPerCpu(u32(slot));
  assert.ok(perCpu, `counter slot ${slot} present`);
  return perCpu.reduce((sum, v) => sum + v.readUInt32LE(0), 0);
}

/**
 * Runs `count` TCP connect()s to 127.0.0.1:9 from a process in our cgroup and
 * our netns (joins the cgroup first, then enters the netns: `ip netns exec`
 * would remount /sys). Returns the error text of each attempt.
 */
function connectFromCgroup(count: number): string[] {
  const inner = `for i in $(seq ${count}); do (exec 3<>/dev/tcp/127.0.0.1/9) 2>&1 | tail -n1; echo; done`;
  const res = spawnSync('sh', ['-c', `echo $$ > ${cgroupDir}/cgroup.procs && exec nsenter --net=/run/netns/${netns} bash -c '${inner}'`], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  assert.equal(res.error, undefined, `spawn: ${String(res.error)}`);
  assert.equal(res.status, 0, `connect helper failed: ${res.stderr}`);
  return res.stdout.split('\n\n').map((s) => s.trim()).filter((s) => s.length > 0);
}

interface BpftoolCgroupProg {
  id: number;
  attach_type: string;
  name: string;
}

function bpftoolCgroupShow(): BpftoolCgroupProg[] {
  const out = execFileSync('bpftool', ['-j', 'cgroup', 'show', cgroupDir], { encoding: 'utf8', timeout: 10_000 });
  return out.trim() ? (JSON.parse(out) as BpftoolCgroupProg[]) : [];
}

/** Waits (bounded) until cond() holds: link release after the last unpin can be deferred to a workqueue. */
function waitFor(cond: () => boolean, what: string, timeoutMs = 5_000): void {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
  }
}

function assertBpfError(fn: () => unknown, check: (e: BpfError) => void): void {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof BpfError, `expected a BpfError, got ${String(caught)}`);
  check(caught);
}

describe('libbpf binding (real kernel)', { skip: !isRoot && 'needs root' }, () => {
  before(() => {
    workDir = fs.mkdtempSync(path.join(os.tmpdir(), `${name}-`));
    const vmlinux = path.join(repo, 'build/vmlinux.h');
    if (!fs.existsSync(vmlinux)) {
      fs.mkdirSync(path.dirname(vmlinux), { recursive: true });
      const text = execFileSync('bpftool', ['btf', 'dump', 'file', '/sys/kernel/btf/vmlinux', 'format', 'c'], { maxBuffer: 256 << 20, timeout: 60_000 });
      fs.writeFileSync(`${vmlinux}.${suffix}.tmp`, text);
      fs.renameSync(`${vmlinux}.${suffix}.tmp`, vmlinux);
    }
    objPath = compileFixture(path.join(repo, 'test/fixtures/bpf/binding_test.bpf.c'));
    rejectedPath = compileFixture(path.join(repo, 'test/fixtures/bpf/rejected.bpf.c'));

    const cgRoot = cgroupV2Mount();
    assert.ok(cgRoot, 'cgroup v2 is mounted');
    cgroupDir = path.join(cgRoot, name);
    fs.mkdirSync(cgroupDir);
    execFileSync('ip', ['netns', 'add', netns], { timeout: 10_000 });
    execFileSync('ip', ['-n', netns, 'link', 'set', 'lo', 'up'], { timeout: 10_000 });
    ensureBpffsDir(pinRoot);
  });

  after(() => {
    // Pins first (they hold links, so the cgroup's programs go away with them).
    if (fs.existsSync(pinRoot)) fs.rmSync(pinRoot, { recursive: true, force: true });
    if (cgroupDir && fs.existsSync(cgroupDir)) {
      try {
        fs.rmdirSync(cgroupDir);
      } catch (err) {
        // A helper process still exiting keeps the cgroup busy for a moment.
        waitFor(() => {
          try {
            fs.rmdirSync(cgroupDir);
            return true;
          } catch {
            return false;
          }
        }, `rmdir ${cgroupDir} (${String(err)})`);
      }
    }
    spawnSync('ip', ['netns', 'del', netns], { timeout: 10_000 });
    if (workDir) fs.rmSync(workDir, { recursive: true, force: true });
  });

  it('opens, loads and pins every map by name; maxEntries applies to new maps', () => {
    const pinDir = freshPinDir();
    assert.ok(isBpffs(pinDir));
    const obj = loadFixture(pinDir, { bt_lru: 256 });
    try {
      for (const m of ['bt_hash', 'bt_small', 'bt_array', 'bt_counters', 'bt_lru']) {
        assert.ok(fs.existsSync(path.join(pinDir, m)), `${m} pinned`);
      }
      const hash = obj.map('bt_hash');
      assert.equal(hash.type, MapType.HASH);
      assert.equal(hash.keySize, 12);
      assert.equal(hash.valueSize, 20);
      assert.equal(hash.maxEntries, 1024);
      assert.ok(hash.fd >= 0);
      assert.equal(obj.map('bt_lru').maxEntries, 256);
      assert.equal(obj.map('bt_lru').type, MapType.LRU_HASH);
      assert.deepEqual(obj.programNames().sort(), ['bt_connect4_allow', 'bt_connect4_deny', 'bt_connect4_other', 'bt_tc_mark']);
      const allow = obj.program('bt_connect4_allow');
      assert.equal(allow.sectionName, 'cgroup/connect4');
      assert.equal(allow.attachType, AttachType.CGROUP_INET4_CONNECT);
      assert.ok(allow.fd >= 0);
      assert.equal(allow.info().name, 'bt_connect4_all'); // the kernel keeps 15 characters
      assert.match(allow.info().tag, /^[0-9a-f]{16}$/);

      // The pinned file is the same map, seen through bpf_obj_get + bpf_map_info.
      const pinned = BpfMap.fromPinned(path.join(pinDir, 'bt_hash'));
      try {
        assert.equal(pinned.id, hash.id);
        assert.equal(pinned.name, 'bt_hash');
        assert.equal(pinned.keySize, 12);
        assert.equal(pinned.valueSize, 20);
        assert.equal(pinned.maxEntries, 1024);
        assert.equal(pinned.type, MapType.HASH);
      } finally {
        pinned.close();
      }
    } finally {
      obj.close();
    }
  });

  it('a second object with the same pinDir reuses the pinned maps (same id, same data)', () => {
    const pinDir = freshPinDir();
    const first = loadFixture(pinDir, { bt_hash: 2000 });
    let second: BpfObject | undefined;
    try {
      first.map('bt_hash').update(key12(1), value20(1));
      // Asking for another size does not break reuse: the pinned map keeps its size and the object says so.
      second = loadFixture(pinDir, { bt_hash: 4096 });
      assert.equal(second.map('bt_hash').id, first.map('bt_hash').id);
      assert.equal(second.map('bt_counters').id, first.map('bt_counters').id);
      assert.equal(second.map('bt_hash').maxEntries, 2000);
      assert.deepEqual(second.keptPinnedSizes, [{ map: 'bt_hash', requested: 4096, pinned: 2000 }]);
      assert.deepEqual(second.map('bt_hash').lookup(key12(1)), value20(1));
    } finally {
      second?.close();
      first.close();
    }
    // The maps outlive both objects.
    const survivor = BpfMap.fromPinned(path.join(pinDir, 'bt_hash'));
    try {
      assert.deepEqual(survivor.lookup(key12(1)), value20(1));
    } finally {
      survivor.close();
    }
  });

  it('refuses to reuse an incompatible pinned map and says why', () => {
    const pinDir = freshPinDir();
    const wrong = BpfMap.create({ type: MapType.HASH, name: 'bt_hash', keySize: 8, valueSize: 20, maxEntries: 1024 });
    try {
      wrong.pin(path.join(pinDir, 'bt_hash'));
    } finally {
      wrong.close();
    }
    assertBpfError(
      () => loadFixture(pinDir),
      (e) => {
        assert.equal(e.op, 'bpf_object__load');
        assert.equal(e.object, objPath);
        assert.match(e.libbpfLog ?? '', /bt_hash/);
        assert.match(e.message, /mismatch|reuse/i);
      },
    );
  });

  it('update / lookup / delete / iterate round trip on a hash map', () => {
    const obj = loadFixture(freshPinDir());
    try {
      const m = obj.map('bt_hash');
      assert.equal(m.lookup(key12(7)), undefined);
      m.update(key12(7), value20(7));
      assert.deepEqual(m.lookup(key12(7)), value20(7));
      const out = Buffer.alloc(20);
      assert.equal(m.lookupInto(key12(7), out), true);
      assert.deepEqual(out, value20(7));
      assertBpfError(
        () => m.update(key12(7), value20(8), BPF_NOEXIST),
        (e) => assert.equal(e.code, 'EEXIST'),
      );
      m.update(key12(7), value20(8), BPF_EXIST);
      assert.deepEqual(m.lookup(key12(7)), value20(8));
      assertBpfError(
        () => m.update(key12(99), value20(99), BPF_EXIST),
        (e) => assert.equal(e.code, 'ENOENT'),
      );
      for (let i = 0; i < 50; i++) m.update(key12(i), value20(i));
      const keys = [...m.keys()].map((k) => k.toString('hex')).sort();
      assert.deepEqual(keys, Array.from({ length: 50 }, (_, i) => key12(i).toString('hex')).sort());
      const entries = [...m.entries()];
      assert.equal(entries.length, 50);
      for (const [k, v] of entries) assert.deepEqual(v, value20(k.readUInt32LE(8)));
      assert.equal(m.delete(key12(3)), true);
      assert.equal(m.delete(key12(3)), false);
      assert.equal(m.lookup(key12(3)), undefined);
      assert.equal([...m.keys()].length, 49);
    } finally {
      obj.close();
    }
  });

  it('batch update / lookup / delete round trip (hash, array, LRU)', () => {
    const obj = loadFixture(freshPinDir());
    try {
      const m = obj.map('bt_hash');
      const n = 1000;
      const keys = Buffer.concat(Array.from({ length: n }, (_, i) => key12(i)));
      const values = Buffer.concat(Array.from({ length: n }, (_, i) => value20(i)));
      m.updateBatch(keys, values, n);
      assert.deepEqual(m.lookup(key12(999)), value20(999));

      // Small batches force many syscalls and the bucket-cursor hand-over.
      for (const batchSize of [4096, 7, 1]) {
        const all = m.lookupBatch(batchSize);
        assert.equal(all.count, n, `batch size ${batchSize}`);
        assert.equal(all.keys.length, n * 12);
        assert.equal(all.values.length, n * 20);
        const seen = new Set<number>();
        for (let i = 0; i < all.count; i++) {
          const k = all.keys.subarray(i * 12, i * 12 + 12);
          const idx = k.readUInt32LE(8);
          seen.add(idx);
          assert.deepEqual(all.values.subarray(i * 20, i * 20 + 20), value20(idx));
        }
        assert.equal(seen.size, n);
      }

      // Delete half of them plus 10 keys that were never there: missing keys are skipped.
      const del = Buffer.concat([...Array.from({ length: 500 }, (_, i) => key12(i * 2)), ...Array.from({ length: 10 }, (_, i) => key12(5000 + i))]);
      assert.equal(m.deleteBatch(del, 510), 500);
      assert.equal(m.lookupBatch().count, 500);
      assert.equal(m.lookup(key12(2)), undefined);
      assert.deepEqual(m.lookup(key12(3)), value20(3));

      // Arrays: every index exists; batch lookup walks by key.
      const arr = obj.map('bt_array');
      arr.updateBatch(Buffer.concat([u32(2), u32(5)]), Buffer.concat([u64(22), u64(55)]), 2);
      const arrAll = arr.lookupBatch(3);
      assert.equal(arrAll.count, 16);
      assert.equal(arrAll.values.readBigUInt64LE(5 * 8), 55n);
      assert.equal(arr.lookup(u32(2))?.readBigUInt64LE(0), 22n);
    } finally {
      obj.close();
    }
  });

  it('array lookups past the end are absent; LRU maps evict instead of filling', () => {
    const obj = loadFixture(freshPinDir());
    try {
      const arr = obj.map('bt_array');
      assert.equal(arr.lookup(u32(16)), undefined);
      assert.deepEqual(arr.lookup(u32(15)), u64(0));
      const lru = obj.map('bt_lru');
      for (let i = 0; i < 1000; i++) lru.update(u32(i), u32(i * 3));
      const all = lru.lookupBatch();
      assert.ok(all.count > 0 && all.count <= 128, `LRU holds ${all.count} entries`);
      assert.deepEqual(lru.lookup(u32(999)), u32(2997));
    } finally {
      obj.close();
    }
  });

  it('per-CPU maps carry one 8-byte-aligned slot per possible CPU', () => {
    const obj = loadFixture(freshPinDir());
    try {
      const m = obj.map('bt_counters');
      const cpus = numPossibleCpus();
      assert.equal(m.perCpu, true);
      assert.equal(m.valueSize, 12);
      assert.equal(m.valueBufferSize, 16 * cpus);
      const values = Array.from({ length: cpus }, (_, c) => {
        const v = Buffer.alloc(12);
        v.writeUInt32LE(100 + c, 0);
        v.writeUInt32LE(c, 8);
        return v;
      });
      m.updatePerCpu(u32(3), values);
      const back = m.lookupPerCpu(u32(3));
      assert.ok(back);
      assert.equal(back.length, cpus);
      back.forEach((v, c) => assert.deepEqual(v, values[c]));
      const all = m.lookupBatch();
      assert.equal(all.count, 4);
      assert.equal(all.values.length, 4 * 16 * cpus);
      assertBpfError(
        () => m.update(u32(0), Buffer.alloc(12)),
        (e) => {
          assert.equal(e.code, 'EINVAL');
          assert.match(e.message, /bt_counters/);
          assert.match(e.message, new RegExp(`needs ${16 * cpus}`));
        },
      );
    } finally {
      obj.close();
    }
  });

  it('lookupBatch falls back to key iteration for map types without batch ops', () => {
    // DEVMAP_HASH has no batch ops (ENOTSUPP). Its values are ifindexes; an
    // entry only references loopback and redirects nothing: no program uses it.
    const devmap = BpfMap.create({ type: MapType.DEVMAP_HASH, name: 'bt_devmap', keySize: 4, valueSize: 4, maxEntries: 8 });
    try {
      devmap.update(u32(10), u32(1));
      devmap.update(u32(20), u32(1));
      const all = devmap.lookupBatch();
      assert.equal(all.count, 2);
      assert.deepEqual([all.keys.readUInt32LE(0), all.keys.readUInt32LE(4)].sort((a, b) => a - b), [10, 20]);
      assert.deepEqual(all.values, Buffer.concat([u32(1), u32(1)]));
    } finally {
      devmap.close();
    }
  });

  it('LPM tries: longest-prefix lookups and batch reads', () => {
    const lpm = BpfMap.create({ type: MapType.LPM_TRIE, name: 'bt_lpm', keySize: 8, valueSize: 4, maxEntries: 16, flags: MapFlags.NO_PREALLOC });
    try {
      const prefix = (len: number, a: number, b: number, c: number, d: number): Buffer => Buffer.from([len, 0, 0, 0, a, b, c, d]);
      lpm.update(prefix(24, 198, 18, 0, 0), u32(1));
      lpm.update(prefix(16, 198, 18, 0, 0), u32(2));
      // Longest-prefix match: a /32 lookup key finds the /24.
      assert.deepEqual(lpm.lookup(prefix(32, 198, 18, 0, 7)), u32(1));
      const all = lpm.lookupBatch();
      assert.equal(all.count, 2);
      assert.equal(all.keys.length, 16);
      assert.deepEqual([all.values.readUInt32LE(0), all.values.readUInt32LE(4)].sort(), [1, 2]);
    } finally {
      lpm.close();
    }
    assertBpfError(
      () => lpm.lookup(Buffer.alloc(8)),
      (e) => assert.equal(e.code, 'EBADF'), // closed: the fd is gone, not reused by accident
    );
  });

  it('a full map is an E2BIG error that names the map', () => {
    const obj = loadFixture(freshPinDir());
    try {
      const m = obj.map('bt_small');
      for (let i = 0; i < 4; i++) m.update(u32(i), u64(i));
      assertBpfError(
        () => m.update(u32(4), u64(4)),
        (e) => {
          assert.equal(e.code, 'E2BIG');
          assert.equal(e.errno, 7);
          assert.equal(e.op, 'bpf_map_update_elem');
          assert.equal(e.object, 'bt_small');
          assert.match(e.message, /^bpf_map_update_elem\(bt_small\): E2BIG \(errno 7\): Argument list too long/);
        },
      );
      m.delete(u32(3));
      assertBpfError(
        () => m.updateBatch(Buffer.concat([u32(10), u32(11)]), Buffer.concat([u64(1), u64(2)]), 2),
        (e) => {
          assert.equal(e.code, 'E2BIG');
          assert.match(e.message, /bpf_map_update_batch\(bt_small\).*1 of 2 entries written/);
        },
      );
    } finally {
      obj.close();
    }
  });

  it('wrong key or value sizes are refused before reaching the kernel', () => {
    const obj = loadFixture(freshPinDir());
    try {
      const m = obj.map('bt_hash');
      assertBpfError(
        () => m.update(Buffer.alloc(8), value20(1)),
        (e) => {
          assert.equal(e.code, 'EINVAL');
          assert.match(e.message, /bpf_map_update_elem\(bt_hash\).*key is 8 bytes, the map's keys are 12 bytes/);
        },
      );
      assertBpfError(() => m.lookup(Buffer.alloc(13)), (e) => assert.match(e.message, /key is 13 bytes/));
      assertBpfError(() => m.delete(Buffer.alloc(4)), (e) => assert.match(e.message, /key is 4 bytes/));
      assertBpfError(() => m.update(key12(1), Buffer.alloc(19)), (e) => assert.match(e.message, /value buffer is 19 bytes, the map needs 20/));
      assertBpfError(() => m.updateBatch(Buffer.alloc(24), Buffer.alloc(40), 3), (e) => assert.match(e.message, /keys buffer is 24 bytes/));
    } finally {
      obj.close();
    }
  });

  it('other errors carry op, object and errno', () => {
    assertBpfError(
      () => BpfObject.open('/nonexistent/sluice.bpf.o'),
      (e) => {
        assert.equal(e.op, 'bpf_object__open_file');
        assert.equal(e.code, 'ENOENT');
      },
    );
    assertBpfError(
      () => BpfMap.fromPinned(path.join(pinRoot, 'no-such-map')),
      (e) => {
        assert.equal(e.op, 'bpf_obj_get');
        assert.equal(e.code, 'ENOENT');
        assert.match(e.message, /no-such-map/);
      },
    );
    assertBpfError(
      () => BpfObject.open(objPath, { maxEntries: { bt_nope: 1 } }),
      (e) => assert.match(e.message, /bt_nope/),
    );
  });

  it('a verifier rejection throws with the tail of the verifier log', () => {
    const obj = BpfObject.open(rejectedPath);
    try {
      assertBpfError(
        () => obj.load(),
        (e) => {
          assert.equal(e.op, 'bpf_object__load');
          assert.equal(e.object, rejectedPath);
          assert.equal(e.code, 'EACCES');
          assert.ok(e.verifierLog && e.verifierLog.length > 0, 'verifier log present');
          assert.match(e.verifierLog, /map_value_or_null/);
          assert.ok(e.verifierLog.split('\n').length <= 60);
          assert.match(e.message, /rj_connect4_unchecked/);
          assert.match(e.message, /map_value_or_null/);
        },
      );
    } finally {
      obj.close();
    }
  });

  it('loadAsync (the verifier on a thread-pool thread): a rejection throws the same error, a good object loads', async () => {
    const rejected = BpfObject.open(rejectedPath);
    try {
      let caught: unknown;
      await rejected.loadAsync().catch((err: unknown) => (caught = err));
      assert.ok(caught instanceof BpfError, `expected a BpfError, got ${String(caught)}`);
      assert.equal(caught.op, 'bpf_object__load');
      assert.equal(caught.code, 'EACCES');
      assert.match(caught.verifierLog ?? '', /map_value_or_null/);
      assert.match(caught.message, /rj_connect4_unchecked/);
    } finally {
      rejected.close();
    }
    const obj = BpfObject.open(objPath, { pinDir: freshPinDir() });
    try {
      await obj.loadAsync();
      assert.ok(obj.program('bt_connect4_allow').fd > 0, 'the program is in the kernel');
      assert.ok(obj.map('bt_counters').fd > 0, 'its maps exist');
      await obj.loadAsync(); // idempotent, as load()
    } finally {
      obj.close();
    }
  });

  it('attaches connect4 to a child cgroup through a link; connects from that cgroup run it', () => {
    const pinDir = freshPinDir();
    const obj = loadFixture(pinDir);
    let link: BpfLink | undefined;
    try {
      const prog = obj.program('bt_connect4_allow');
      const counters = obj.map('bt_counters');
      link = attachCgroup(prog, cgroupDir, AttachType.CGROUP_INET4_CONNECT);
      const info = linkInfo(link.fd);
      assert.equal(info.type, LinkType.CGROUP);
      assert.equal(info.progId, prog.info().id);
      assert.equal(info.cgroupId, cgroupId(cgroupDir));
      assert.equal(info.attachType, AttachType.CGROUP_INET4_CONNECT);
      assert.deepEqual(queryCgroup(cgroupDir, AttachType.CGROUP_INET4_CONNECT), [prog.info().id]);
      assert.deepEqual(queryCgroup(cgroupDir, AttachType.CGROUP_INET6_CONNECT), []);

      const before = counter(counters, CNT_ALLOW);
      const results = connectFromCgroup(3);
      assert.equal(results.length, 3);
      for (const r of results) assert.match(r, /refused/i); // allowed, nobody listens on port 9
      assert.equal(counter(counters, CNT_ALLOW), before + 3);
      // last_port is the destination port in network order as the hook saw it.
      const perCpu = counters.lookupPerCpu(u32(CNT_ALLOW)) ?? [];
      assert.ok(perCpu.some((v) => v.readUInt32LE(4) === 0x0900), 'hook saw port 9');

      link.close();
      link = undefined;
      assert.deepEqual(queryCgroup(cgroupDir, AttachType.CGROUP_INET4_CONNECT), [], 'closing the only fd detaches');
    } finally {
      link?.close();
      obj.close();
    }
  });

  it('a pinned link outlives its fds and object; update swaps the program; unpin detaches', () => {
    const pinDir = freshPinDir();
    const linkPin = path.join(pinDir, 'link_connect4');
    let obj: BpfObject | undefined = loadFixture(pinDir);
    const allowId = obj.program('bt_connect4_allow').info().id;
    const link = attachCgroup(obj.program('bt_connect4_allow'), cgroupDir, AttachType.CGROUP_INET4_CONNECT);
    try {
      link.pin(linkPin);
    } finally {
      link.close();
    }
    obj.close();
    obj = undefined;

    const counters = BpfMap.fromPinned(path.join(pinDir, 'bt_counters'));
    let next: BpfObject | undefined;
    let pinned: BpfLink | undefined;
    try {
      // No fd of ours is left, the link is still there.
      const shown = bpftoolCgroupShow();
      assert.deepEqual(
        shown.map((p) => p.id),
        [allowId],
      );
      const before = counter(counters, CNT_ALLOW);
      assert.match(connectFromCgroup(1)[0] ?? '', /refused/i);
      assert.equal(counter(counters, CNT_ALLOW), before + 1);

      // A "new agent": reopens the objects and the link, swaps the program atomically.
      next = loadFixture(pinDir);
      pinned = BpfLink.fromPinned(linkPin);
      assert.equal(pinned.info().progId, allowId);
      const deny = next.program('bt_connect4_deny');
      pinned.update(deny);
      assert.equal(linkInfo(pinned.fd).progId, deny.info().id);
      assert.deepEqual(queryCgroup(cgroupDir, AttachType.CGROUP_INET4_CONNECT), [deny.info().id]);
      const denied = counter(counters, CNT_DENY);
      assert.match(connectFromCgroup(1)[0] ?? '', /not permitted/i);
      assert.equal(counter(counters, CNT_DENY), denied + 1);
      // A guarded replace that names the wrong old program is refused.
      assertBpfError(
        () => pinned?.update(next!.program('bt_connect4_allow'), next!.program('bt_connect4_other').fd),
        (e) => assert.equal(e.code, 'EPERM'),
      );
      pinned.close();
      pinned = undefined;
      next.close();
      next = undefined;

      // Still attached with every fd closed; unpinning ends it.
      assert.equal(bpftoolCgroupShow().length, 1);
      assert.equal(unpin(linkPin), true);
      assert.equal(unpin(linkPin), false);
      waitFor(() => bpftoolCgroupShow().length === 0, 'the link to detach after unpin');
      assert.match(connectFromCgroup(1)[0] ?? '', /refused/i);
    } finally {
      pinned?.close();
      next?.close();
      counters.close();
      unpin(linkPin);
    }
  });

  it('two links on the same cgroup and hook coexist (multi-attach)', () => {
    const obj = loadFixture(freshPinDir());
    const links: BpfLink[] = [];
    try {
      const a = obj.program('bt_connect4_allow');
      const b = obj.program('bt_connect4_other');
      links.push(attachCgroup(a, cgroupDir, AttachType.CGROUP_INET4_CONNECT));
      links.push(attachCgroup(b.fd, cgroupDir, AttachType.CGROUP_INET4_CONNECT));
      const ids = queryCgroup(cgroupDir, AttachType.CGROUP_INET4_CONNECT);
      assert.deepEqual([...ids].sort(), [a.info().id, b.info().id].sort());
      const counters = obj.map('bt_counters');
      const [ca, cb] = [counter(counters, CNT_ALLOW), counter(counters, CNT_OTHER)];
      connectFromCgroup(2);
      assert.equal(counter(counters, CNT_ALLOW), ca + 2);
      assert.equal(counter(counters, CNT_OTHER), cb + 2);
      assert.equal(progInfo(ids[0] ?? 0).id, ids[0]);
      assert.equal(progInfo(ids[0] ?? 0).name, progInfo({ fd: a.fd }).id === ids[0] ? 'bt_connect4_all' : 'bt_connect4_oth');
    } finally {
      for (const l of links) l.close();
      obj.close();
    }
    assert.deepEqual(queryCgroup(cgroupDir, AttachType.CGROUP_INET4_CONNECT), []);
  });

  it('progTestRun runs a tc program on a crafted packet', () => {
    const obj = loadFixture(freshPinDir());
    try {
      const prog = obj.program('bt_tc_mark');
      const packet = Buffer.alloc(64, 0xab);
      packet[0] = 0x41;
      const res = progTestRun(prog.fd, { dataIn: packet });
      assert.equal(res.retval, 2); // TC_ACT_SHOT
      assert.equal(res.dataOut.length, 64);
      assert.equal(res.dataOut[0], 0x42);
      assert.deepEqual(res.dataOut.subarray(1), packet.subarray(1));
      assert.equal(packet[0], 0x41, 'the input buffer is not modified');
      // With repeat the kernel runs the program on the same skb again and again.
      const repeated = progTestRun(prog.fd, { dataIn: packet, repeat: 10 });
      assert.equal(repeated.dataOut[0], 0x41 + 10);
      assert.ok(repeated.duration > 0);
      assertBpfError(
        () => progTestRun(prog.fd, { dataIn: Buffer.alloc(4) }),
        (e) => assert.equal(e.op, 'bpf_prog_test_run_opts'),
      );
    } finally {
      obj.close();
    }
  });
});
