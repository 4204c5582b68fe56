// `sluice services` names the Service behind every frontend from the pinned
// names map, with no agent: frontends programmed the way the agent does,
// then read back through the real entry point.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import * as path from 'node:path';
import type { SockLbMaps } from '../../src/datapath/maps';
import { LbProgrammer, type FrontendSpec } from '../../src/datapath/programmer';
import { LB_SVC_FLAG_CLUSTER_IP, LB_SVC_FLAG_NODEPORT, SLUICE_MAP_SVC_NAMES } from '../../src/abi/generated';
import { sockLbEachTest } from '../helpers/sockLbEachTest';

const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'sluice');
let bpffs: string;
let maps: SockLbMaps;
sockLbEachTest('sluice-clisvc', (b, m) => {
  bpffs = b;
  maps = m;
});

const sluice = (...args: string[]) => {
  const r = spawnSync(bin, [...args, '--bpffs', bpffs], { encoding: 'utf8' });
  assert.equal(r.status, 0, `sluice ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
};
const be = (h: number, proto: 'tcp' | 'udp' = 'tcp') => ({ address: `198.18.1.${h}`, port: 8053, proto });
const spec = (address: string, port: number, proto: 'tcp' | 'udp', flags: number, service?: FrontendSpec['service'], backends = [be(1, proto)]): FrontendSpec =>
  ({ address, port, proto, scope: 'external', flags, affinityTimeout: 0, backends, service });

const dns = { namespace: 'kube-system', name: 'kube-dns', portName: 'dns' };
const dnsTcp = { ...dns, portName: 'dns-tcp' };
const web = { namespace: 'shop', name: 'web', portName: '' };

function program(p: LbProgrammer): void {
  const r = p.apply([
    spec('198.18.96.10', 53, 'udp', LB_SVC_FLAG_CLUSTER_IP, dns),
    spec('198.18.96.10', 53, 'tcp', LB_SVC_FLAG_CLUSTER_IP, dnsTcp),
    spec('198.18.96.20', 80, 'tcp', LB_SVC_FLAG_CLUSTER_IP, web, [be(2), be(3)]),
    spec('198.18.0.1', 30080, 'tcp', LB_SVC_FLAG_NODEPORT, web, [be(2), be(3)]),
    spec('198.18.96.30', 80, 'tcp', LB_SVC_FLAG_CLUSTER_IP), // `sluice service upsert`: no owner
  ], { prune: true });
  assert.deepEqual(r.failures, []);
}

test('services shows the owning Service and port name of every frontend; TCP and UDP on one address:port keep their own names', () => {
  program(LbProgrammer.adopt(maps));
  const view = JSON.parse(sluice('services', '-o', 'json')) as Array<{ frontend: string; service?: { namespace: string; name: string; portName: string } }>;
  const byFrontend = Object.fromEntries(view.map((s) => [s.frontend, s.service ?? null]));
  assert.deepEqual(byFrontend, {
    '198.18.0.1:30080/tcp': web,
    '198.18.96.10:53/tcp': dnsTcp,
    '198.18.96.10:53/udp': dns,
    '198.18.96.20:80/tcp': web,
    '198.18.96.30:80/tcp': null,
  });
  const text = sluice('services');
  assert.match(text, /^FRONTEND\s+SERVICE\s+SCOPE\s+FLAGS\s+ALGORITHM\s+BACKENDS$/m);
  assert.match(text, /^198\.18\.96\.10:53\/udp\s+kube-system\/kube-dns:dns\s+external\s+ClusterIP\s+random\s+198\.18\.1\.1:8053$/m);
  assert.match(text, /^198\.18\.96\.30:80\/tcp\s+-\s+/m);
});

test('filters by Service, address and port; -o wide adds rev-NAT ids and backend ids', () => {
  program(LbProgrammer.adopt(maps));
  const frontends = (...args: string[]) => (JSON.parse(sluice('services', '-o', 'json', ...args)) as Array<{ frontend: string }>).map((s) => s.frontend).sort();
  assert.deepEqual(frontends('--service', 'shop/web'), ['198.18.0.1:30080/tcp', '198.18.96.20:80/tcp']);
  assert.deepEqual(frontends('--service', 'kube-system/kube-dns:dns-tcp'), ['198.18.96.10:53/tcp']);
  assert.deepEqual(frontends('--address', '198.18.96.10'), ['198.18.96.10:53/tcp', '198.18.96.10:53/udp']);
  assert.deepEqual(frontends('--port', '53/udp'), ['198.18.96.10:53/udp']);
  assert.deepEqual(frontends('--port', '80', '--address', '198.18.96.20'), ['198.18.96.20:80/tcp']);
  assert.deepEqual(frontends('--service', 'nobody/here'), []);
  const wide = sluice('services', '-o', 'wide', '--service', 'shop/web');
  assert.match(wide, /^FRONTEND\s+SERVICE\s+SCOPE\s+FLAGS\s+ALGORITHM\s+REVNAT\s+AFFINITY\s+BACKENDS$/m);
  assert.match(wide, /^198\.18\.96\.20:80\/tcp\s+shop\/web\s+external\s+ClusterIP\s+random\s+\d+\s+-\s+#\d+ 198\.18\.1\.2:8053,#\d+ 198\.18\.1\.3:8053$/m);
});

test('the names map is readable by bpftool with named fields, survives a restart and goes with the frontend', () => {
  program(LbProgrammer.adopt(maps));
  const dump = execFileSync('bpftool', ['map', 'dump', 'pinned', path.join(bpffs, SLUICE_MAP_SVC_NAMES)], { encoding: 'utf8' });
  for (const field of ['"rev_nat_id"', '"namespace": "kube-system"', '"name": "kube-dns"', '"port_name": "dns-tcp"']) {
    assert.ok(dump.includes(field), `bpftool output lacks ${field}:\n${dump.slice(0, 600)}`);
  }
  // A restarted agent adopts the maps and applies the same state: nothing to rewrite, names stay.
  const again = LbProgrammer.adopt(maps);
  program(again);
  assert.equal(maps.serviceNames!.readAll().length, 4);
  const status = JSON.parse(sluice('status', '-o', 'json')) as { maps: Array<{ name: string; entries: number }> };
  assert.deepEqual(status.maps.find((m) => m.name === SLUICE_MAP_SVC_NAMES)?.entries, 4);
  // The ClusterIP of shop/web goes; its NodePort keeps its own name (another rev-NAT id).
  again.remove('198.18.96.20', 80, 'tcp');
  again.remove('198.18.96.10', 53, 'udp');
  assert.equal(maps.serviceNames!.readAll().length, 2);
  const view = JSON.parse(sluice('services', '-o', 'json')) as Array<{ frontend: string; service?: { name: string; portName: string } }>;
  assert.deepEqual(view.map((s) => [s.frontend, s.service?.portName ?? null]).sort(), [
    ['198.18.0.1:30080/tcp', ''],
    ['198.18.96.10:53/tcp', 'dns-tcp'],
    ['198.18.96.30:80/tcp', null],
  ]);
});

test('dual-stack: services, backends and status show both families, in text and -o json (issue 14)', () => {
  const p = LbProgrammer.adopt(maps);
  const be6 = { address: 'fd00:18:1::2', port: 8053, proto: 'tcp' as const };
  const r = p.apply([
    spec('198.18.96.20', 80, 'tcp', LB_SVC_FLAG_CLUSTER_IP, web, [be(2)]),
    spec('fd00:96::20', 80, 'tcp', LB_SVC_FLAG_CLUSTER_IP, web, [be6]),
  ], { prune: true });
  assert.deepEqual(r.failures, []);
  const svcs = JSON.parse(sluice('services', '-o', 'json')) as Array<{ frontend: string; family: string; service?: { name: string } }>;
  assert.deepEqual(svcs.map((s) => [s.frontend, s.family, s.service?.name]).sort(), [
    ['198.18.96.20:80/tcp', 'IPv4', 'web'],
    ['[fd00:96::20]:80/tcp', 'IPv6', 'web'],
  ]);
  assert.match(sluice('services'), /^\[fd00:96::20\]:80\/tcp\s+shop\/web\s+external\s+ClusterIP\s+random\s+\[fd00:18:1::2\]:8053$/m);
  const bes = JSON.parse(sluice('backends', '-o', 'json')) as Array<{ family: string; address: string }>;
  assert.deepEqual(bes.map((b) => [b.family, b.address]).sort(), [['IPv4', '198.18.1.2'], ['IPv6', 'fd00:18:1::2']]);
  assert.match(sluice('backends'), /\[fd00:18:1::2\]:8053\/tcp/);
  const status = JSON.parse(sluice('status', '-o', 'json')) as { maps: Array<{ name: string; entries: number }> };
  const entries = (n: string) => status.maps.find((m) => m.name === n)?.entries;
  assert.equal(entries('sluice_svc6'), 1, 'one master per frontend');
  assert.equal(entries('sluice_rng6'), 1, 'its range: one backend id');
  assert.equal(entries('sluice_be6'), 1, 'backends in use, not the ARRAY\'s indices');
  assert.equal(entries('sluice_revnat6'), 1);
  assert.match(sluice('status'), /^sluice_svc6\s+1\s+/m);
});
