// `sluice monitor`'s pure parts: an lb_event record to its view (counter
// labels, Service name, wall-clock time), filters, text lines, bad flags.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import * as abi from '../../src/abi/generated';
import { ip6ToBytes } from '../../src/datapath/addr';
import { eventMatches, eventView, formatEvent, parseEventFilter } from '../../src/cli/monitor';

/** An lb_event address: IPv4 in the first 4 bytes, IPv6 as it is (sluice_abi.h). */
const addr = (text: string): Buffer => (text.includes(':') ? ip6ToBytes(text) : Buffer.concat([Buffer.from(text.split('.').map(Number)), Buffer.alloc(12)]));
const record = (over: Partial<abi.LbEvent>): abi.LbEvent => ({
  timestamp_ns: 5_000_000_000n, netns_cookie: 0n, pid: 0, reason: abi.LB_CNT_TC_TRANSLATED, type: abi.LB_EVENT_NEW_FLOW, proto: abi.LB_PROTO_TCP,
  family: abi.LB_EVENT_FAMILY_IPV4, saddr: addr('198.18.9.9'), daddr: addr('198.18.0.1'), sport: 40000, dport: 30080, rev_nat_id: 5,
  backend_address: addr('198.18.1.1'), backend_port: 8080, ifindex: 2, comm: Buffer.alloc(16), ...over,
});
const names = (revNat: number) => (revNat === 5 ? { namespace: 'shop', name: 'web', portName: 'http' } : undefined);
const WALL = Date.parse('2026-11-30T21:00:10.000Z');

test('a record becomes a view: counter labels, Service, wall-clock time; the encoded layout round-trips', () => {
  const rec = record({});
  const v = eventView(abi.decodeLbEvent(abi.encodeLbEvent(rec)), names, 10_000_000_000n, WALL);
  assert.deepEqual(v, {
    time: '2026-11-30T21:00:05.000Z', family: 'ipv4', type: 'new_flow', reason: 'north_south/new_flow/original', path: 'north_south', proto: 'tcp',
    source: '198.18.9.9:40000', frontend: '198.18.0.1:30080', backend: '198.18.1.1:8080', service: 'shop/web:http', revNatId: 5, ifindex: 2,
  });
  const comm = Buffer.alloc(16);
  comm.write('curl');
  const sock = eventView(record({ type: abi.LB_EVENT_REFUSED, reason: abi.LB_CNT_SOCK_NO_BACKEND, saddr: Buffer.alloc(16), sport: 0, backend_address: Buffer.alloc(16), backend_port: 0, ifindex: 0, pid: 4242, comm, netns_cookie: 4097n, rev_nat_id: 9 }), names, 10_000_000_000n, WALL);
  assert.equal(formatEvent(sock), '2026-11-30T21:00:05.000Z REFUSED  socket/no_backend/original               curl[4242] netns 4097 -> 198.18.0.1:30080/tcp\n');
  const pod = eventView(record({ type: abi.LB_EVENT_REFUSED, reason: abi.LB_CNT_TC_NO_BACKEND + abi.LB_CNT_POD_OFFSET }), names, 10_000_000_000n, WALL);
  assert.equal(pod.reason, 'pod/no_backend/original');
  // IPv6: the same record, family 6, "[address]:port" ends.
  const v6 = eventView(abi.decodeLbEvent(abi.encodeLbEvent(record({ family: abi.LB_EVENT_FAMILY_IPV6, saddr: addr('2001:db8::9'), daddr: addr('fd00:96::1'), backend_address: addr('fd00:18::1') }))), names, 10_000_000_000n, WALL);
  assert.deepEqual([v6.family, v6.source, v6.frontend, v6.backend], ['ipv6', '[2001:db8::9]:40000', '[fd00:96::1]:30080', '[fd00:18::1]:8080']);
  assert.equal(formatEvent(v6), '2026-11-30T21:00:05.000Z NEW_FLOW north_south/new_flow/original            [2001:db8::9]:40000 -> [fd00:96::1]:30080/tcp => [fd00:18::1]:8080 (shop/web:http) if 2\n');
  for (const [flags, expected] of [[{ address: '2001:db8:0::9' }, true], [{ address: 'fd00:18::1', port: '8080' }, true], [{ address: '2001:db8::8' }, false], [{ port: '40000' }, true]] as Array<[Record<string, string>, boolean]>) {
    assert.equal(eventMatches(v6, parseEventFilter(new Map(Object.entries(flags)))), expected, JSON.stringify(flags));
  }
});

test('filters: type, Service (whole or one port), address and port of any end', () => {
  const v = eventView(record({}), names, 10_000_000_000n, WALL);
  const cases: Array<[Record<string, string>, boolean]> = [
    [{}, true],
    [{ type: 'new-flow' }, true],
    [{ type: 'drop,refused' }, false],
    [{ service: 'shop/web' }, true],
    [{ service: 'shop/web:http' }, true],
    [{ service: 'shop/we' }, false],
    [{ address: '198.18.1.1' }, true], // the backend
    [{ address: '198.18.9.9' }, true], // the client
    [{ address: '198.18.9.8' }, false],
    [{ port: '30080' }, true],
    [{ port: '8080' }, true],
    [{ port: '81' }, false],
    [{ port: '30080/tcp' }, true],
    [{ port: '30080/udp' }, false],
  ];
  for (const [flags, expected] of cases) assert.equal(eventMatches(v, parseEventFilter(new Map(Object.entries(flags)))), expected, JSON.stringify(flags));
});

test('bad flags are one-line usage errors through the entry point', () => {
  const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'sluice');
  const cases: Array<[string[], RegExp]> = [
    [['--type', 'lost'], /--type "lost": use drop, refused or new-flow/],
    [['--port', 'x'], /--port "x": expected a port/],
    [['--count', '0'], /--count 0: a positive whole number/],
    [['--duration', '-1'], /--duration -1: positive seconds/],
    [['-o', 'wide'], /-o wide: use json or table/],
  ];
  for (const [args, pattern] of cases) {
    const r = spawnSync(bin, ['monitor', ...args, '--bpffs', '/nonexistent/sluice'], { encoding: 'utf8' });
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`^sluice monitor: ${pattern.source}`));
  }
  const missing = spawnSync(bin, ['monitor', '--bpffs', '/nonexistent/sluice'], { encoding: 'utf8' });
  assert.equal(missing.status, 1);
  assert.match(missing.stderr, /^sluice monitor: no pinned ring buffer \/nonexistent\/sluice\/sluice_ev_v2/);
});
