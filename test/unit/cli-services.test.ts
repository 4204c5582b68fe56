// `sluice services`: filters, rendering and bad flags (pure parts and the real entry point),
// and the agent's specs carrying the owning Service to the names map.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { filterServices, parseServiceFilter, renderServices } from '../../src/cli/servicesCommand';
import type { ServiceView } from '../../src/cli/inspect';
import { decodeServiceName, encodeServiceName, formatServiceName } from '../../src/datapath/serviceNames';
import { toFrontendSpec, ZoneIds } from '../../src/agent/toSpecs';
import type { Frontend } from '../../src/model/frontend';

const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'sluice');

const view = (frontend: string, service?: ServiceView['service']): ServiceView => {
  const [address, rest] = frontend.split(':') as [string, string];
  const [port, protocol] = rest.split('/') as [string, string];
  return { frontend, family: 'IPv4', address, port: Number(port), protocol, scope: 'external', flags: ['ClusterIP'], revNatId: 7, affinityTimeoutSeconds: 0, algorithm: 'random', service, backends: [{ id: 3, address: '198.18.1.1', port: 80, flags: ['local'] }] };
};
const all = [
  view('198.18.96.10:53/udp', { namespace: 'kube-system', name: 'kube-dns', portName: 'dns' }),
  view('198.18.96.10:53/tcp', { namespace: 'kube-system', name: 'kube-dns', portName: 'dns-tcp' }),
  view('198.18.96.20:80/tcp', { namespace: 'shop', name: 'web', portName: '' }),
  view('198.18.96.30:80/tcp'),
];

test('filters: table of flag sets and the frontends they keep', () => {
  const cases: Array<[Record<string, string>, string[]]> = [
    [{}, ['198.18.96.10:53/udp', '198.18.96.10:53/tcp', '198.18.96.20:80/tcp', '198.18.96.30:80/tcp']],
    [{ service: 'kube-system/kube-dns' }, ['198.18.96.10:53/udp', '198.18.96.10:53/tcp']],
    [{ service: 'kube-system/kube-dns:dns' }, ['198.18.96.10:53/udp']],
    [{ service: 'shop/web' }, ['198.18.96.20:80/tcp']],
    [{ service: 'shop/we' }, []],
    [{ address: '198.18.96.10' }, ['198.18.96.10:53/udp', '198.18.96.10:53/tcp']],
    [{ port: '80' }, ['198.18.96.20:80/tcp', '198.18.96.30:80/tcp']],
    [{ port: '53/TCP' }, ['198.18.96.10:53/tcp']],
    [{ port: '80', address: '198.18.96.30' }, ['198.18.96.30:80/tcp']],
  ];
  for (const [flags, expected] of cases) {
    const kept = filterServices(all, parseServiceFilter(new Map(Object.entries(flags)))).map((s) => s.frontend);
    assert.deepEqual(kept, expected, JSON.stringify(flags));
  }
});

test('bad filters and outputs are one-line usage errors (exit 2) through the entry point', () => {
  const cases: Array<[string[], RegExp]> = [
    [['--service', 'web'], /--service "web": expected NAMESPACE\/NAME/],
    [['--address', '10.0.0.300'], /--address "10.0.0.300": not an IPv4 or IPv6 address/],
    [['--port', '0'], /--port "0": expected a port 1-65535/],
    [['--port', '80/sctp'], /--port "80\/sctp"/],
    [['-o', 'yaml'], /-o yaml: use table, wide or json/],
  ];
  for (const [args, pattern] of cases) {
    const r = spawnSync(bin, ['services', ...args, '--bpffs', '/nonexistent/sluice'], { encoding: 'utf8' });
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`^sluice services: ${pattern.source}`), args.join(' '));
    assert.equal(r.stderr.trim().split('\n').length, 1);
  }
});

test('table and wide rendering', () => {
  const t = renderServices(all.slice(0, 1), 'table');
  assert.equal(t, [
    'FRONTEND             SERVICE                   SCOPE     FLAGS      ALGORITHM  BACKENDS',
    '198.18.96.10:53/udp  kube-system/kube-dns:dns  external  ClusterIP  random     198.18.1.1:80',
    '',
  ].join('\n'));
  const w = renderServices([all[3]!], 'wide');
  assert.match(w, /^198\.18\.96\.30:80\/tcp\s+-\s+external\s+ClusterIP\s+random\s+7\s+-\s+#3 198\.18\.1\.1:80\(local\)$/m);
});

test('names: fixed-size fields round-trip; over-long input is cut at a character boundary', () => {
  const n = { namespace: 'kube-system', name: 'kube-dns', portName: 'dns-tcp' };
  assert.deepEqual(decodeServiceName(encodeServiceName(n)), n);
  assert.equal(formatServiceName(n), 'kube-system/kube-dns:dns-tcp');
  assert.equal(formatServiceName({ ...n, portName: '' }), 'kube-system/kube-dns');
  const long = decodeServiceName(encodeServiceName({ namespace: 'x', name: 'y', portName: 'ééééééééé' })); // 18 bytes into 16
  assert.equal(long.portName, 'éééééééé');
});

test('the agent\'s frontend specs carry namespace, name and port name', () => {
  const f = {
    service: 'kube-system/kube-dns', portName: 'dns', kind: 'ClusterIP', family: 'IPv4', address: '198.18.96.10', port: 53, proto: 'UDP',
    scope: 'external', backends: [], externalLocal: false, internalLocal: false, twoScopes: false, affinityTimeoutSeconds: 0, sourceRanges: [], algorithm: 'random',
  } as unknown as Frontend;
  assert.deepEqual(toFrontendSpec(f, new ZoneIds())?.service, { namespace: 'kube-system', name: 'kube-dns', portName: 'dns' });
});
