// Live map migration with the real agent (issue 13 item 4): traffic runs
// through an agent restart that (1) upgrades from a previous Sluice built
// from a git revision, and (2) raises map capacities in the config. During
// each: long-lived TCP connections through the socket LB (getpeername must
// still show the Service afterwards) and north-south through a NodePort
// (conntrack must be carried or the replies stop), and connect loops on
// both paths. Failed connections must be 0 and every entry carried.
//
// The previous revision is built once per commit by scripts/build-revision.sh
// (cached under /var/cache/sluice/revisions); UPGRADE_FROM overrides it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startApiServer, type ApiServerHandle } from '../../src/k8s/apiserver';
import { Topology, ADDR } from './tc_topology';
import { cgroup2Root, bpffsRoot, sluiceBin, waitFor, labScript, repoRoot } from '../helpers/sandbox';
import { AGENT_CAPS, withCaps } from '../helpers/agentProcess';
import { BpfMap } from '../../src/bpf/map';
import { readLayouts } from '../../src/datapath/migrate';
import * as abi from '../../src/abi/generated';
import { recordSoakRow } from '../helpers/fuzzResults';

/** The last commit before the h-alg merge changed the data path (new sluice_rr4 map, new programs). */
const UPGRADE_FROM = process.env.UPGRADE_FROM ?? '2564673';
const FORWARDER = path.join(__dirname, '..', 'cluster', 'forwarder.js');
const HOLD_MS = 9000;

let topo: Topology;
let api: ApiServerHandle;
let tmp: string;
let kubeconfigSock: string;
const children: ChildProcess[] = [];
const track = (c: ChildProcess) => (children.push(c), c);

class Agent {
  log = '';
  readonly child: ChildProcess;
  constructor(bin: string, readonly cgroup: string, readonly bpffs: string, configFile?: string) {
    const args = [bin, 'agent', '--kubeconfig', path.join(tmp, 'kubeconfig'), '--k8s-api-server', '127.0.0.1:6443', '--node-name', 'n1',
      '--cgroup-path', cgroup, '--bpffs', bpffs, '--devices', 'eth0', '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0',
      '--healthcheck-addresses', ADDR.node1, '--stale-socket-netns=', ...(configFile ? ['--config', configFile] : [])];
    this.child = track(spawn('nsenter', [`--net=${topo.netnsPath('n1')}`, ...withCaps(AGENT_CAPS, [process.execPath, ...args])], { stdio: ['ignore', 'pipe', 'pipe'] }));
    this.child.stdout!.on('data', (d) => (this.log += d));
    this.child.stderr!.on('data', (d) => (this.log += d));
  }
  async synced(): Promise<void> {
    await waitFor('agent synced', () => this.log.includes('informers synced') || this.child.exitCode !== null, 30000);
    assert.equal(this.child.exitCode, null, `agent exited:\n${this.log.slice(-3000)}`);
  }
  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.kill('SIGTERM');
    await exited;
  }
  lines(): Array<Record<string, unknown>> {
    return this.log.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
  }
}

/** One Node's worth of state: its cgroup and bpffs, removed after. */
function nodeDirs(tag: string): { cgroup: string; bpffs: string; close(): void } {
  const name = `sluice-migrate-${tag}-${path.basename(tmp)}`;
  const cgroup = path.join(cgroup2Root(), name);
  const bpffs = path.join(bpffsRoot(), name);
  fs.mkdirSync(cgroup);
  return {
    cgroup,
    bpffs,
    close() {
      fs.rmSync(bpffs, { recursive: true, force: true });
      for (let i = 0; i < 50 && fs.existsSync(cgroup); i++) {
        try { fs.rmdirSync(cgroup); } catch { execFileSync('sleep', ['0.1']); }
      }
    },
  };
}

function slice(service: string) {
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: `${service}-1`, namespace: 'default', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: [{ name: 'hold', port: 8080, protocol: 'TCP' }, { name: 'plain', port: 8081, protocol: 'TCP' }],
    endpoints: [[ADDR.pod1, 'n1'], [ADDR.pod2, 'n2']].map(([ip, node]) => ({ addresses: [ip], conditions: { ready: true }, nodeName: node })),
  };
}

/** A client in the node, in the agent's cgroup (the socket LB translates it). */
function inNode(cgroup: string, args: string[]): ChildProcess {
  const script = `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=${topo.netnsPath('n1')} -- "$@"`;
  return track(spawn('sh', ['-c', script, 'sh', process.execPath, labScript('lbClient'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] }));
}

/** A client outside the node (north-south through TC on n1's eth0). */
function outside(args: string[]): ChildProcess {
  return track(spawn('nsenter', [`--net=${topo.netnsPath('cli')}`, process.execPath, labScript('lbClient'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] }));
}

function output(child: ChildProcess, what: string): Promise<string> {
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (err += d));
  return new Promise((resolve, reject) => child.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${what} exited ${code}: ${err}`)))));
}

interface Held { backend?: string; peerStart?: string; peerEnd?: string; sent: number; echoed: number; error?: string }
interface Loop { ok: number; errors: Record<string, number>; slow: number }

/** Traffic on both paths for HOLD_MS while `during` restarts the agent; returns what the clients saw. */
async function withTraffic(cgroup: string, clusterIP: string, during: () => Promise<void>) {
  const ms = String(HOLD_MS);
  const runs = {
    sockHold: output(inNode(cgroup, ['hold', clusterIP, '80', ms, '3']), 'socket-LB hold'),
    sockLoop: output(inNode(cgroup, ['loop', clusterIP, '81', ms, '0', '3000']), 'socket-LB loop'),
    nsHold: output(outside(['hold', ADDR.node1, '30090', ms, '3']), 'north-south hold'),
    // Paced: SNATed flows reuse the 4 536 SNAT ports, and a port reused while
    // the backend still holds the last flow in TIME_WAIT is refused (PAWS),
    // restart or not; 40 connects/s stays clear of that.
    nsLoop: output(outside(['loop', ADDR.node1, '30091', ms, '25', '3000']), 'north-south loop'),
  };
  await new Promise((r) => setTimeout(r, 1500));
  try {
    await during();
  } catch (err) {
    // The clients are in the node's cgroup: let them end (HOLD_MS bounds them) so it can be removed.
    await Promise.allSettled(Object.values(runs));
    throw err;
  }
  const [sockHold, sockLoop, nsHold, nsLoop] = await Promise.all([runs.sockHold, runs.sockLoop, runs.nsHold, runs.nsLoop]);
  return {
    sockHold: (JSON.parse(sockHold) as { results: Held[] }).results,
    nsHold: (JSON.parse(nsHold) as { results: Held[] }).results,
    sockLoop: JSON.parse(sockLoop) as Loop,
    nsLoop: JSON.parse(nsLoop) as Loop,
  };
}

function assertNoLoss(r: Awaited<ReturnType<typeof withTraffic>>, clusterIP: string): string {
  for (const c of r.sockHold) {
    assert.equal(c.error, undefined, `socket-LB connection broke: ${JSON.stringify(c)}`);
    assert.equal(c.peerStart, `${clusterIP}:80`);
    assert.equal(c.peerEnd, `${clusterIP}:80`, 'getpeername after the restart still shows the Service');
    assert.ok(c.sent >= 40 && c.echoed === c.sent, JSON.stringify(c));
  }
  for (const c of r.nsHold) {
    assert.equal(c.error, undefined, `north-south connection broke (conntrack lost?): ${JSON.stringify(c)}`);
    assert.equal(c.peerEnd, `${ADDR.node1}:30090`);
    assert.ok(c.sent >= 40 && c.echoed === c.sent, JSON.stringify(c));
  }
  assert.deepEqual(r.sockLoop.errors, {}, 'socket-LB connects during the restart');
  assert.deepEqual(r.nsLoop.errors, {}, 'north-south connects during the restart');
  assert.ok(r.sockLoop.ok > 100 && r.nsLoop.ok > 100, `${r.sockLoop.ok} / ${r.nsLoop.ok} connects`);
  const echoed = [...r.sockHold, ...r.nsHold].reduce((n, c) => n + c.echoed, 0);
  return `${r.sockHold.length + r.nsHold.length} held connections (${echoed} lines echoed), ${r.sockLoop.ok} socket-LB + ${r.nsLoop.ok} north-south connects, 0 failed, ${r.sockLoop.slow + r.nsLoop.slow} answered after a SYN retransmit (> 900 ms)`;
}

function clusterIP(): string {
  return api.store.get<{ apiVersion: string; kind: string; metadata: { name: string }; spec: { clusterIP: string } }>('services', 'web', 'default').spec.clusterIP;
}

function dump(bpffs: string, name: string): string[] {
  const m = BpfMap.fromPinned(path.join(bpffs, name));
  try {
    return [...m.entries()].map(([k, v]) => `${k.toString('hex')}=${v.toString('hex')}`).sort();
  } finally {
    m.close();
  }
}

/**
 * frontends() with its IPv4 NodePort frontends as one wildcard group per
 * port: key address 0, rev-NAT id of the master left out (the wildcard gets
 * its own). Master hex: count(2) flags(2, LE) rev_nat_id(4) ...
 */
function nodePortsAsWildcard(entries: string[]): string[] {
  return [...new Set(entries.map((e) => {
    const [k, rest] = e.split('=') as [string, string];
    const [m, ids] = rest.split(':') as [string, string];
    if (!(parseInt(m.slice(6, 8) + m.slice(4, 6), 16) & abi.LB_SVC_FLAG_NODEPORT)) return e;
    return `00000000${k.slice(8)}=${m.slice(0, 8)}--------${m.slice(16)}:${ids}`;
  }))].sort();
}

/**
 * The IPv4 frontends as the programs see them, in either layout of
 * sluice_svc4: frontend key (8 bytes, hex) -> master fields (range start
 * aside) and backend ids in order. Layout 1: slot 0 the master, slots
 * 1..count the ids; layout 2: the master's range in sluice_rng4.
 */
function frontends(bpffs: string): string[] {
  const svc = BpfMap.fromPinned(path.join(bpffs, abi.SLUICE_MAP_SERVICES4));
  try {
    const all = [...svc.entries()];
    const master = (v: Buffer) => v.subarray(4).toString('hex'); // count, flags, rev-NAT id, affinity, algorithm
    if (svc.keySize === 12) {
      const ids = new Map<string, number[]>();
      for (const [k, v] of all) {
        const slot = k.readUInt16LE(8);
        if (slot === 0) continue;
        const f = k.subarray(0, 8).toString('hex');
        if (!ids.has(f)) ids.set(f, []);
        ids.get(f)![slot - 1] = v.readUInt32LE(0);
      }
      return all.filter(([k]) => k.readUInt16LE(8) === 0).map(([k, v]) => `${k.subarray(0, 8).toString('hex')}=${master(v)}:${(ids.get(k.subarray(0, 8).toString('hex')) ?? []).join(',')}`).sort();
    }
    const rng = BpfMap.fromPinned(path.join(bpffs, abi.SLUICE_MAP_RANGES4));
    try {
      const at = (i: number) => { const k = Buffer.alloc(4); k.writeUInt32LE(i, 0); return rng.lookup(k)!.readUInt32LE(0); };
      return all.map(([k, v]) => `${k.toString('hex')}=${master(v)}:${Array.from({ length: v.readUInt16LE(4) }, (_, i) => at(v.readUInt32LE(0) + i)).join(',')}`).sort();
    } finally {
      rng.close();
    }
  } finally {
    svc.close();
  }
}

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-migrate-'));
  topo = new Topology('slmig');
  topo.create();
  await startBackends();
  api = await startApiServer({ port: 0 });
  api.store.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: ADDR.node1 }] } });
  await api.writeKubeconfig(path.join(tmp, 'kubeconfig'));
  kubeconfigSock = path.join(tmp, 'api.sock');
  track(spawn(process.execPath, [FORWARDER, 'unix-to-tcp', kubeconfigSock, `127.0.0.1:${api.port}`], { stdio: 'ignore' }));
  await waitFor('forwarder socket', () => fs.existsSync(kubeconfigSock));
  track(spawn('nsenter', [`--net=${topo.netnsPath('n1')}`, process.execPath, FORWARDER, 'tcp-to-unix', '127.0.0.1:6443', kubeconfigSock], { stdio: 'ignore' }));
  api.store.create('services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' },
    spec: { type: 'NodePort', ports: [
      { name: 'hold', port: 80, targetPort: 8080, nodePort: 30090, protocol: 'TCP' },
      { name: 'plain', port: 81, targetPort: 8081, nodePort: 30091, protocol: 'TCP' },
    ] } });
  api.store.create('endpointslices', slice('web'));
});

after(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 300));
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  topo?.destroy();
  await api?.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

/** The backends: p1 on node n1 (local), p2 on n2 (remote); /hold echoes on 8080, 8081 answers and closes. */
async function startBackends(): Promise<void> {
  for (const [role, addr] of [['p1', ADDR.pod1], ['p2', ADDR.pod2]] as const) {
    const server = track(spawn('nsenter', [`--net=${topo.netnsPath(role)}`, process.execPath, labScript('backendServer'), `${addr}:8080/hold`, `${addr}:8081`], { stdio: ['ignore', 'pipe', 'pipe'] }));
    let ready = false;
    server.stdout!.on('data', (d) => { if (String(d).includes('ready')) ready = true; });
    await waitFor(`backend in ${role}`, () => ready);
  }
}

test(`upgrade from ${UPGRADE_FROM} (built from git) to this tree under traffic: 0 failed connections, getpeername unchanged, conntrack kept`, async () => {
  const old = execFileSync(path.join(repoRoot, 'scripts', 'build-revision.sh'), [UPGRADE_FROM], { encoding: 'utf8', timeout: 600_000, stdio: ['ignore', 'pipe', 'inherit'] }).trim();
  const node = nodeDirs('up');
  let agent: Agent | undefined;
  try {
    agent = new Agent(path.join(old, 'bin', 'sluice'), node.cgroup, node.bpffs);
    await agent.synced();
    await waitFor('TC path programmed', () => outputSync(['tcp', ADDR.node1, '30091', '1']).includes(ADDR.pod1) || outputSync(['tcp', ADDR.node1, '30091', '1']).includes(ADDR.pod2), 15000);
    assert.equal(readLayouts(node.bpffs).size, 0, 'the old agent records no layout versions');
    const vip = clusterIP();
    const before = frontends(node.bpffs);
    let upgraded: Agent | undefined;
    const r = await withTraffic(node.cgroup, vip, async () => {
      await agent!.stop();
      upgraded = new Agent(sluiceBin, node.cgroup, node.bpffs);
      await upgraded.synced();
    });
    agent = upgraded;
    const summary = assertNoLoss(r, vip);
    // The old version wrote the slot layout (sluice_svc4 layout 1); the new
    // one migrated it into masters + ranges before swapping the programs.
    // IPv4 NodePorts become one wildcard frontend per port (bpf/lib/nodeport.h).
    assert.deepEqual(nodePortsAsWildcard(frontends(node.bpffs)), nodePortsAsWildcard(before), 'the frontends were adopted as they were (same masters, same backend ids in order)');
    assert.equal(readLayouts(node.bpffs).get(abi.SLUICE_MAP_SERVICES4), 2, 'sluice_svc4 migrated to layout 2');
    assert.equal(readLayouts(node.bpffs).get(abi.SLUICE_MAP_CT4), 1, 'the new agent records the layouts it found');
    assert.ok(fs.existsSync(path.join(node.bpffs, abi.SLUICE_MAP_RR4)), 'the map the new version added exists');
    process.stdout.write(`# upgrade ${UPGRADE_FROM} -> this tree: ${summary}\n`);
    // reached only when every assertion held: 0 failed connections
    recordSoakRow('migration-upgrade', { figure: `live map migration: failed connections, upgrade from ${UPGRADE_FROM}`, value: summary, required: '0 failed', ok: true });
  } finally {
    await agent?.stop();
    node.close();
  }
});

test('maxEntries raised in the config, agent restarted under traffic: maps migrated with every entry carried, 0 failed connections', async () => {
  const node = nodeDirs('cap');
  let agent: Agent | undefined;
  try {
    agent = new Agent(sluiceBin, node.cgroup, node.bpffs);
    await agent.synced();
    await waitFor('TC path programmed', () => /p[12]|198\.18/.test(outputSync(['tcp', ADDR.node1, '30091', '1'])), 15000);
    const vip = clusterIP();
    const sizes = {
      [abi.SLUICE_MAP_SERVICES4]: abi.SLUICE_MAX_SERVICE_ENTRIES * 2,
      [abi.SLUICE_MAP_BACKENDS4]: abi.SLUICE_MAX_BACKENDS * 2,
      [abi.SLUICE_MAP_AFFINITY4]: abi.SLUICE_MAX_AFFINITY * 2,
      [abi.SLUICE_MAP_CT4]: abi.SLUICE_MAX_CT4 + 65536,
    };
    const config = path.join(tmp, 'bigger.yaml');
    fs.writeFileSync(config, `maxEntries:\n${Object.entries(sizes).map(([k, v]) => `  ${k}: ${v}`).join('\n')}\n`);
    const before = dump(node.bpffs, abi.SLUICE_MAP_SERVICES4);
    let ctBefore = 0;
    let restarted: Agent | undefined;
    const r = await withTraffic(node.cgroup, vip, async () => {
      await agent!.stop();
      ctBefore = dump(node.bpffs, abi.SLUICE_MAP_CT4).length;
      restarted = new Agent(sluiceBin, node.cgroup, node.bpffs, config);
      await restarted.synced();
    });
    agent = restarted!;
    const summary = assertNoLoss(r, vip);
    for (const [name, size] of Object.entries(sizes)) {
      const m = BpfMap.fromPinned(path.join(node.bpffs, name));
      assert.equal(m.maxEntries, size, `${name} max_entries`);
      m.close();
    }
    assert.deepEqual(dump(node.bpffs, abi.SLUICE_MAP_SERVICES4), before, 'frontends carried');
    const migrated = agent.lines().flatMap((l) => (l.migrated as Array<{ map: string; carried: number; dropped: number }> | undefined) ?? []);
    assert.deepEqual(migrated.map((m) => m.map).sort(), Object.keys(sizes).sort(), agent.log.slice(-3000));
    for (const m of migrated) assert.equal(m.dropped, 0, `${m.map}: ${JSON.stringify(m)}`);
    const ct = migrated.find((m) => m.map === abi.SLUICE_MAP_CT4)!;
    assert.ok(ct.carried >= ctBefore && ctBefore >= 6, `conntrack: ${ctBefore} entries before the restart, ${ct.carried} carried`);
    assert.ok(!fs.readdirSync(node.bpffs).some((f) => f.endsWith('_migrating')), 'old maps unpinned');
    recordSoakRow('migration-capacity', { figure: 'live map migration: failed connections, maxEntries raised', value: summary, required: '0 failed', ok: true });
    process.stdout.write(`# capacity change: ${migrated.map((m) => `${m.map} ${m.carried}`).join(', ')} entries carried, 0 dropped; ${summary}\n`);
  } finally {
    await agent?.stop();
    node.close();
  }
});

function outputSync(args: string[]): string {
  try {
    return execFileSync('nsenter', [`--net=${topo.netnsPath('cli')}`, process.execPath, labScript('lbClient'), ...args], { encoding: 'utf8', timeout: 5000 });
  } catch {
    return '';
  }
}
