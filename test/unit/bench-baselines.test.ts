// The bench's kube-proxy baselines must be kube-proxy's own layouts: chain
// names (hashes included) and rules are checked against the expected output
// in kubernetes/kubernetes pkg/proxy/{iptables,nftables}/proxier_test.go.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { iptablesRestoreInput, sepChain, svcChain } from '../../bench/kube-iptables';
import { endpointChain, nftBaseRuleset, nftServicesChunk, serviceChain } from '../../bench/kube-nftables';
import { makeServicePorts, ServicePort, vipFor } from '../../bench/services';
import { median, summarize } from '../../bench/stats';

const svc1: ServicePort = {
  name: 'ns1/svc1:p80', namespace: 'ns1', service: 'svc1', portName: 'p80',
  vip: '172.30.0.41', port: 80, proto: 'tcp', endpoints: [{ address: '10.180.0.1', port: 80 }],
};

test('iptables chain names are kube-proxy hashes', () => {
  assert.equal(svcChain(svc1), 'KUBE-SVC-XPGD46QRK7WJZT7O');
  assert.equal(sepChain(svc1, '10.180.0.1:80'), 'KUBE-SEP-SXIVWICOYRO3J4NJ');
});

test('iptables rules of one service are kube-proxy rules', () => {
  const text = iptablesRestoreInput([svc1]);
  for (const line of [
    '-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O',
    '-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ',
    '-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80',
    '-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j KUBE-SEP-SXIVWICOYRO3J4NJ',
    '-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000',
  ]) {
    assert.ok(text.split('\n').includes(line), `missing: ${line}`);
  }
  assert.equal(text.match(/^COMMIT$/gm)?.length, 2, 'filter and nat tables, each committed');
});

test('iptables endpoint choice uses 1/(n-i) probabilities, the last one unconditional', () => {
  const [sp] = makeServicePorts(1, ['tcp']);
  const lines = iptablesRestoreInput([sp!]).split('\n').filter((l) => l.startsWith(`-A ${svcChain(sp!)} `) && l.includes('KUBE-SEP-'));
  assert.equal(lines.length, 10);
  assert.match(lines[0]!, /--probability 0\.1000000000 /);
  assert.match(lines[8]!, /--probability 0\.5000000000 /);
  assert.doesNotMatch(lines[9]!, /statistic/);
});

test('nftables chain names are kube-proxy names', () => {
  assert.equal(serviceChain(svc1), 'service-ULMVA6XW-ns1/svc1/tcp/p80');
  assert.equal(endpointChain(svc1, '10.180.0.1', 80), 'endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80');
});

test('nftables rules of one service are kube-proxy rules, endpoint chains first', () => {
  const lines = nftServicesChunk([svc1]).trim().split('\n');
  const want = [
    'add chain ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80',
    'add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 ip saddr 10.180.0.1 jump mark-for-masquerade',
    'add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 meta l4proto tcp dnat to 10.180.0.1:80',
    'add chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80',
    // kube-proxy's test uses pod CIDR 10.0.0.0/8; the bench's is 198.18.0.0/24.
    'add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 ip daddr 172.30.0.41 ip saddr != 198.18.0.0/24 jump mark-for-masquerade',
    'add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 }',
    'add element ip kube-proxy cluster-ips { 172.30.0.41 }',
    'add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }',
  ];
  assert.deepEqual(lines, want);
});

test('service ports: unique (VIP, port, proto) up to 100 000 Services, inside 198.19.0.0/16', () => {
  const seen = new Set<string>();
  for (let i = 0; i < 100000; i++) {
    const { vip, port } = vipFor(i);
    assert.match(vip, /^198\.19\.\d+\.\d+$/);
    assert.ok(vip !== '198.19.0.0' && vip !== '198.19.255.255', `${vip}: network or broadcast address`);
    const key = `${vip}:${port}`;
    assert.ok(!seen.has(key), `duplicate ${key} at ${i}`);
    seen.add(key);
  }
});

test('medians over rounds', () => {
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 2, 3]), 2.5);
  assert.ok(Number.isNaN(median([])));
  const base = { proto: 'tcp' as const, attempted: 10, timeouts: 0, refused: 0, other_errors: 0, last_errno: 0, wrong_peer: 0, warmup_failed: 0, elapsed_s: 1, p90_us: 0, max_us: 0, mean_us: 0, client_cpu_s: 0, ops_total: 10, client_cpu_total_s: 0 };
  const s = summarize([
    { ...base, ok: 10, per_s: 100, p50_us: 10, p99_us: 50, host_cpu_ms_per_1000: 1 },
    { ...base, ok: 9, timeouts: 1, per_s: 90, p50_us: 30, p99_us: 70, host_cpu_ms_per_1000: 3 },
    { ...base, ok: 10, per_s: 110, p50_us: 20, p99_us: 60, host_cpu_ms_per_1000: 2 },
  ]);
  assert.deepEqual([s.p50_us, s.p99_us, s.per_s, s.failed, s.ok], [20, 60, 100, 1, 29]);
});

// Issue 14: the IPv6 rows load the same cluster as kube-proxy writes it per family.
const svc6: ServicePort = {
  name: 'ns1/svc1:p80', namespace: 'ns1', service: 'svc1', portName: 'p80',
  vip: 'fd00:172:30::41', port: 80, proto: 'tcp', endpoints: [{ address: 'fd00:10:180::1', port: 80 }], family: 6,
};

test('ip6tables rules: [address]:port endpoints, the IPv6 pod CIDR', () => {
  const text = iptablesRestoreInput([svc6]).split('\n');
  const sep = sepChain(svc6, '[fd00:10:180::1]:80');
  for (const line of [
    `-A ${svcChain(svc6)} -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d fd00:172:30::41 --dport 80 ! -s fd00:18::/64 -j KUBE-MARK-MASQ`,
    `-A ${sep} -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination [fd00:10:180::1]:80`,
  ]) assert.ok(text.includes(line), `missing: ${line}`);
});

test('nftables ip6: table ip6 kube-proxy, ip6 matches, colons of the endpoint chain name as dots', () => {
  const lines = nftServicesChunk([svc6]).trim().split('\n');
  const epc = endpointChain(svc6, 'fd00:10:180::1', 80);
  assert.match(epc, /^endpoint-[A-Z2-7]{8}-ns1\/svc1\/tcp\/p80__fd00\.10\.180\.\.1\/80$/);
  assert.ok(lines.includes(`add rule ip6 kube-proxy ${epc} ip6 saddr fd00:10:180::1 jump mark-for-masquerade`));
  assert.ok(lines.includes(`add rule ip6 kube-proxy ${epc} meta l4proto tcp dnat to [fd00:10:180::1]:80`));
  assert.ok(lines.includes('add element ip6 kube-proxy service-ips { fd00:172:30::41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }'));
  const base = nftBaseRuleset('fd00:18::1', 6);
  assert.match(base, /add map ip6 kube-proxy service-ips \{ type ipv6_addr \. inet_proto \. inet_service : verdict/);
  assert.match(base, /services ip6 daddr \. meta l4proto \. th dport vmap @service-ips/);
  assert.doesNotMatch(base, / ip daddr|ipv4_addr/);
});

test('IPv6 service ports: the IPv4 ports\' names and ports, ULA addresses', () => {
  const v4 = makeServicePorts(3, ['tcp', 'udp']);
  const v6 = makeServicePorts(3, ['tcp', 'udp'], 6);
  assert.deepEqual(v6.map((p) => [p.name, p.port, p.proto]), v4.map((p) => [p.name, p.port, p.proto]));
  assert.deepEqual(v6.slice(0, 2).map((p) => p.vip), ['fd00:19::1', 'fd00:19::1']);
  assert.equal(v6[0]!.endpoints[9]!.address, 'fd00:18:1::a');
  assert.equal(vipFor(65533, 6).vip, 'fd00:19::fffe');
  assert.deepEqual(vipFor(65534, 6), { vip: 'fd00:19::1', port: 81 });
});
