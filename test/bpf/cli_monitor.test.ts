// `sluice monitor` streams what the programs emit, through the real entry
// point: TC drops and new flows (BPF_PROG_TEST_RUN), a socket refusal (a
// real connect() in a test cgroup), filters, and the listener flag: nothing
// reaches the ring before the monitor starts or after it exits. The same for
// IPv6 (issue 14): TC drops and new flows of IPv6 frontends, and a real
// connect() of an AF_INET6 socket refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as abi from '../../src/abi/generated';
import { ip4ToNumber } from '../../src/datapath/addr';
import { BpfMap, RingBuffer } from '../../src/bpf';
import { TypedMap, u32Codec } from '../../src/datapath/typedMap';
import type { EventView } from '../../src/cli/monitor';
import { TcHarness } from './tc_harness';
import { Tc6Maps } from './tc_harness6';
import { PodPrograms } from './pod_harness';
import { writeTcConfig } from '../../src/datapath/tc/config';
import { frame, TCP_SYN } from './tc_packet';
import { frame6 } from './tc_packet6';
import { Sandbox, sh, sluiceBin, waitFor, labScript } from '../helpers/sandbox';

interface Monitor { child: ChildProcess; events: EventView[]; exited: Promise<number | null> }

function startMonitor(bpffs: string, ...args: string[]): Monitor {
  const child = spawn(sluiceBin, ['monitor', '--bpffs', bpffs, '-o', 'json', '--duration', '20', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const m: Monitor = { child, events: [], exited: new Promise((resolve) => child.on('exit', (code) => resolve(code))) };
  let buf = '';
  child.stdout!.on('data', (d) => {
    buf += String(d);
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      m.events.push(JSON.parse(buf.slice(0, i)) as EventView);
      buf = buf.slice(i + 1);
    }
  });
  child.stderr!.on('data', (d) => process.stderr.write(`monitor: ${d}`));
  return m;
}

function listenerOf(bpffs: string): number {
  const m = BpfMap.fromPinned(`${bpffs}/${abi.SLUICE_MAP_EVENTS_ON}`);
  try {
    return new TypedMap(m, u32Codec, abi.lb_events_ctlCodec).get(0)?.listener_pid ?? -1;
  } finally {
    m.close();
  }
}

/** Records waiting in the ring (read by the test itself). */
function drainRing(bpffs: string): number {
  const m = BpfMap.fromPinned(`${bpffs}/${abi.SLUICE_MAP_EVENTS}`);
  let n = 0;
  const rb = new RingBuffer(m, () => n++);
  try {
    rb.consume();
    return n;
  } finally {
    rb.close();
    m.close();
  }
}

test('TC: drops with their reason and new flows reach the monitor, filtered; nothing is emitted without a listener', async () => {
  const h = TcHarness.create('sluice-climon');
  let mon: Monitor | undefined;
  try {
    h.reset();
    h.tc.config.set(0, { snat_address: ip4ToNumber('198.18.0.1'), snat_port_min: 0, snat_port_max: 0, tcp_established_timeout: 0, tcp_closing_timeout: 0, udp_timeout: 0, tcp_syn_timeout: 0 });
    h.upsertFrontend({ address: '198.18.50.1', port: 443, proto: 'tcp', flags: abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE, revNatId: 3, backends: [{ id: 1, address: '198.18.1.1', port: 8443, local: false }] });
    h.upsertFrontend({ address: '198.18.0.1', port: 30081, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_DROP_NO_BACKEND, revNatId: 4, backends: [] });
    h.tc.sourceRanges.set({ prefixlen: 32 + 24, rev_nat_id: 3, address: ip4ToNumber('198.18.200.0') }, 1);
    const send = (src: string, sport: number, dst: string, dport: number) => h.run('ingress', frame({ proto: 'tcp', src, dst, sport, dport, tcpFlags: TCP_SYN }));

    assert.equal(listenerOf(h.pinDir), 0);
    send('198.18.9.9', 40000, '198.18.50.1', 443);
    assert.equal(drainRing(h.pinDir), 0, 'no listener: nothing written to the ring');

    mon = startMonitor(h.pinDir, '--count', '3');
    await waitFor('monitor to claim the listener flag', () => listenerOf(h.pinDir) > 0);
    send('198.18.9.9', 40001, '198.18.50.1', 443); // outside the source ranges
    send('198.18.200.7', 40002, '198.18.50.1', 443); // new flow, SNATed
    send('198.18.9.9', 40003, '198.18.0.1', 30081); // Local without local backends (endpoints elsewhere: dropped)
    assert.equal(await mon.exited, 0);
    assert.deepEqual(mon.events.map((e) => [e.type, e.reason, e.source, e.frontend, e.backend ?? null]), [
      ['drop', 'north_south/source_range_drop/original', '198.18.9.9:40001', '198.18.50.1:443', null],
      ['new_flow', 'north_south/new_flow/original', '198.18.200.7:40002', '198.18.50.1:443', '198.18.1.1:8443'],
      ['drop', 'north_south/no_backend/original', '198.18.9.9:40003', '198.18.0.1:30081', null],
    ]);
    assert.equal(mon.events[0]!.revNatId, 3);
    assert.equal(listenerOf(h.pinDir), 0, 'the monitor clears the flag on exit');
    send('198.18.9.9', 40004, '198.18.50.1', 443);
    assert.equal(drainRing(h.pinDir), 0, 'after the monitor: nothing written');

    // Filters: only new flows of one client.
    mon = startMonitor(h.pinDir, '--count', '1', '--type', 'new-flow', '--address', '198.18.200.8');
    await waitFor('monitor to claim the listener flag', () => listenerOf(h.pinDir) > 0);
    send('198.18.9.9', 40005, '198.18.50.1', 443);
    send('198.18.200.7', 40006, '198.18.50.1', 443);
    send('198.18.200.8', 40007, '198.18.50.1', 443);
    assert.equal(await mon.exited, 0);
    assert.deepEqual(mon.events.map((e) => [e.type, e.source]), [['new_flow', '198.18.200.8:40007']]);
  } finally {
    mon?.child.kill();
    h.close();
  }
});

test('socket: a refused connect() shows the process, its netns and the frontend; SIGINT stops the monitor and clears the flag', async () => {
  const sb = Sandbox.create('sluice-climon');
  let mon: Monitor | undefined;
  try {
    sh(sluiceBin, ['attach', '--cgroup', sb.cgroup, '--bpffs', sb.bpffs]);
    sh(sluiceBin, ['service', 'upsert', '--frontend', '198.18.96.81:80/tcp', '--backends', '', '--bpffs', sb.bpffs]);
    mon = startMonitor(sb.bpffs, '--type', 'refused');
    await waitFor('monitor to claim the listener flag', () => listenerOf(sb.bpffs) > 0);
    const out = JSON.parse(await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', '198.18.96.81', '80', '2'])) as { results: Array<{ error?: string }> };
    assert.deepEqual(out.results.map((r) => r.error), ['ECONNREFUSED', 'ECONNREFUSED']);
    await waitFor('two refusal events', () => mon!.events.length >= 2);
    mon.child.kill('SIGINT');
    assert.equal(await mon.exited, 0);
    const e = mon.events[0]!;
    assert.deepEqual([e.type, e.reason, e.frontend, e.proto, e.comm], ['refused', 'socket/no_backend/original', '198.18.96.81:80', 'tcp', 'node']);
    assert.ok(e.pid && e.pid > 1 && e.pid !== mon.child.pid, `pid ${e.pid}`);
    assert.match(e.netnsCookie ?? '', /^\d+$/);
    assert.equal(listenerOf(sb.bpffs), 0);
  } finally {
    mon?.child.kill();
    sb.close();
  }
});

test('TC, IPv6: source-range drops, new flows (with the backend) and no-backend drops of IPv6 frontends reach the monitor, as [address]:port; --address takes an IPv6 address', async () => {
  const h = TcHarness.create('sluice-climon6');
  const v6 = new Tc6Maps(h);
  let mon: Monitor | undefined;
  try {
    h.reset();
    v6.reset();
    v6.setSnat('fd00:18::1');
    v6.upsertFrontend({ address: 'fd00:50::1', port: 443, proto: 'tcp', flags: abi.LB_SVC_FLAG_LOADBALANCER | abi.LB_SVC_FLAG_SOURCE_RANGE, revNatId: 13, backends: [{ id: 11, address: 'fd00:18:1::1', port: 8443, local: false }] });
    v6.upsertFrontend({ address: 'fd00:18::1', port: 30081, proto: 'tcp', flags: abi.LB_SVC_FLAG_NODEPORT | abi.LB_SVC_FLAG_EXT_LOCAL | abi.LB_SVC_FLAG_DROP_NO_BACKEND, revNatId: 14, backends: [] });
    v6.addSourceRange(13, '2001:db8:200::/48');
    const send = (src: string, sport: number, dst: string, dport: number) => h.run('ingress', frame6({ proto: 'tcp', src, dst, sport, dport, tcpFlags: TCP_SYN }));

    mon = startMonitor(h.pinDir, '--count', '3');
    await waitFor('monitor to claim the listener flag', () => listenerOf(h.pinDir) > 0);
    send('2001:db8:9::9', 40001, 'fd00:50::1', 443); // outside the source ranges
    send('2001:db8:200::7', 40002, 'fd00:50::1', 443); // new flow, SNATed
    send('2001:db8:9::9', 40003, 'fd00:18::1', 30081); // Local without local backends: dropped
    assert.equal(await mon.exited, 0);
    assert.deepEqual(mon.events.map((e) => [e.type, e.reason, e.source, e.frontend, e.backend ?? null, e.revNatId]), [
      ['drop', 'north_south/source_range_drop/original', '[2001:db8:9::9]:40001', '[fd00:50::1]:443', null, 13],
      ['new_flow', 'north_south/new_flow/original', '[2001:db8:200::7]:40002', '[fd00:50::1]:443', '[fd00:18:1::1]:8443', 13],
      ['drop', 'north_south/no_backend/original', '[2001:db8:9::9]:40003', '[fd00:18::1]:30081', null, 14],
    ]);
    assert.equal(listenerOf(h.pinDir), 0, 'the monitor clears the flag on exit');

    // Filters on IPv6 ends: any spelling of the address, and the port.
    mon = startMonitor(h.pinDir, '--count', '1', '--type', 'new-flow', '--address', '2001:db8:200:0::8', '--port', '443');
    await waitFor('monitor to claim the listener flag', () => listenerOf(h.pinDir) > 0);
    send('2001:db8:200::7', 40006, 'fd00:50::1', 443);
    send('2001:db8:200::8', 40007, 'fd00:50::1', 443);
    assert.equal(await mon.exited, 0);
    assert.deepEqual(mon.events.map((e) => [e.type, e.source]), [['new_flow', '[2001:db8:200::8]:40007']]);
  } finally {
    mon?.child.kill();
    h.close();
  }
});

test('socket, IPv6: a refused connect() of an AF_INET6 socket shows the process, its netns and the IPv6 frontend (text and JSON)', async () => {
  const sb = Sandbox.create('sluice-climon6');
  let mon: Monitor | undefined;
  try {
    sh(sluiceBin, ['attach', '--cgroup', sb.cgroup, '--bpffs', sb.bpffs]);
    sh(sluiceBin, ['service', 'upsert', '--frontend', '[fd00:96::81]:80/tcp', '--backends', '', '--bpffs', sb.bpffs]);
    mon = startMonitor(sb.bpffs, '--type', 'refused');
    await waitFor('monitor to claim the listener flag', () => listenerOf(sb.bpffs) > 0);
    const out = JSON.parse(await sb.runInCgroup(['node', labScript('lbClient'), 'tcp', 'fd00:96::81', '80', '2'])) as { results: Array<{ error?: string }> };
    assert.deepEqual(out.results.map((r) => r.error), ['ECONNREFUSED', 'ECONNREFUSED']);
    await waitFor('two refusal events', () => mon!.events.length >= 2);
    mon.child.kill('SIGINT');
    assert.equal(await mon.exited, 0);
    const e = mon.events[0]!;
    assert.deepEqual([e.type, e.reason, e.frontend, e.proto, e.comm, e.source], ['refused', 'socket/no_backend/original', '[fd00:96::81]:80', 'tcp', 'node', undefined]);
    assert.equal((e as unknown as Record<string, unknown>).family, 'ipv6');
    assert.ok(e.pid && e.pid > 1 && e.pid !== mon.child.pid, `pid ${e.pid}`);
    assert.match(e.netnsCookie ?? '', /^\d+$/);
    assert.equal(listenerOf(sb.bpffs), 0);
  } finally {
    mon?.child.kill();
    sb.close();
  }
});

test('pod veth, IPv6: a pod\'s new flow to an IPv6 ClusterIP and a rejected one (no backends) reach the monitor on the pod path', async () => {
  const h = TcHarness.create('sluice-climon6p');
  const v6 = new Tc6Maps(h);
  let pod: PodPrograms | undefined;
  let mon: Monitor | undefined;
  try {
    h.reset();
    v6.reset();
    writeTcConfig(h.tc.config, {});
    pod = PodPrograms.load(h);
    v6.upsertFrontend({ address: 'fd00:10:96::10', port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 21, backends: [{ id: 31, address: 'fd00:10:1::20', port: 8080, local: true }] });
    v6.upsertFrontend({ address: 'fd00:10:96::11', port: 80, proto: 'tcp', flags: abi.LB_SVC_FLAG_CLUSTER_IP, revNatId: 22, backends: [] });
    mon = startMonitor(h.pinDir, '--count', '2');
    await waitFor('monitor to claim the listener flag', () => listenerOf(h.pinDir) > 0);
    pod.run('ingress', frame6({ proto: 'tcp', src: 'fd00:10:1::5', dst: 'fd00:10:96::10', sport: 41000, dport: 80, tcpFlags: TCP_SYN }));
    pod.run('ingress', frame6({ proto: 'tcp', src: 'fd00:10:1::5', dst: 'fd00:10:96::11', sport: 41001, dport: 80, tcpFlags: TCP_SYN }));
    assert.equal(await mon.exited, 0);
    assert.deepEqual(mon.events.map((e) => [e.type, e.reason, e.source, e.frontend, e.backend ?? null, e.revNatId]), [
      ['new_flow', 'pod/new_flow/original', '[fd00:10:1::5]:41000', '[fd00:10:96::10]:80', '[fd00:10:1::20]:8080', 21],
      ['refused', 'pod/no_backend/original', '[fd00:10:1::5]:41001', '[fd00:10:96::11]:80', null, 22],
    ]);
  } finally {
    mon?.child.kill();
    pod?.close();
    h.close();
  }
});
