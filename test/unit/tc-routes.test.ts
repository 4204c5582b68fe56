// The agent finds each remote backend's device from one read of the routing
// table (src/datapath/tc/routes.ts): the longest prefix wins, the default
// route is 0/0, a blackhole route matches like any other (and is no device).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseRoutes, parseRoutes6, routeFor, routeFor6 } from '../../src/datapath/tc/routes';

const TABLE = JSON.stringify([
  { dst: 'default', gateway: '198.18.20.254', dev: 'eth0', flags: [] },
  { dst: '198.18.20.0/24', dev: 'eth0', protocol: 'kernel', scope: 'link', prefsrc: '198.18.20.1', flags: [] },
  { dst: '198.18.21.0/24', dev: 'eth1', protocol: 'kernel', scope: 'link', prefsrc: '198.18.21.1', flags: [] },
  { dst: '198.18.22.0/24', gateway: '198.18.21.2', dev: 'eth1', flags: [] },
  { dst: '198.18.23.10', dev: 'vp1', scope: 'link', prefsrc: '198.18.20.1', flags: [] },
  { type: 'blackhole', dst: '198.18.24.0/24', flags: [] },
]);

test('longest prefix match over `ip -j -4 route show`', () => {
  const routes = parseRoutes(TABLE);
  assert.equal(routes.length, 6);
  assert.equal(routeFor(routes, '198.18.22.20')?.dev, 'eth1');
  assert.equal(routeFor(routes, '198.18.21.2')?.prefsrc, '198.18.21.1');
  assert.equal(routeFor(routes, '198.18.23.10')?.dev, 'vp1', 'a /32 host route');
  assert.equal(routeFor(routes, '198.18.23.11')?.dev, 'eth0', 'falls back to the default route');
  assert.deepEqual([routeFor(routes, '198.18.24.1')?.type, routeFor(routes, '198.18.24.1')?.dev], ['blackhole', ''], 'blackholed: no device');
  assert.equal(routeFor(parseRoutes('[]'), '198.18.22.20'), undefined);
});

const TABLE6 = JSON.stringify([
  { dst: 'fd00:20::/64', dev: 'eth0', protocol: 'kernel', metric: 256, flags: [], pref: 'medium' },
  { dst: 'fd00:21::/64', dev: 'eth1', protocol: 'kernel', metric: 256, flags: [], pref: 'medium' },
  { dst: 'fd00:22::/64', gateway: 'fd00:21::2', dev: 'eth1', metric: 1024, flags: [], pref: 'medium' },
  { dst: 'fd00:22::/64', gateway: 'fd00:20::2', dev: 'eth0', metric: 2048, flags: [], pref: 'medium' },
  { dst: 'fd00:23::10', dev: 'vp1', metric: 1024, flags: [], pref: 'medium' },
  { dst: 'fd00:25::/64', dev: 'eth1', prefsrc: 'fd00:21::1', metric: 1024, flags: [], pref: 'medium' },
  { dst: 'fe80::/64', dev: 'eth0', protocol: 'kernel', metric: 256, flags: [], pref: 'medium' },
  { type: 'blackhole', dst: 'fd00:24::/64', dev: 'lo', metric: 1024, flags: [], pref: 'medium' },
  { dst: 'fd00:26::/64', metric: 1024, flags: [], nexthops: [{ gateway: 'fd00:21::2', dev: 'eth1' }, { gateway: 'fd00:20::2', dev: 'eth0' }] },
  { dst: 'default', gateway: 'fd00:20::fe', dev: 'eth0', metric: 1024, flags: [], pref: 'medium' },
]);

test('longest prefix match over `ip -j -6 route show`: lowest metric among equal prefixes', () => {
  const routes = parseRoutes6(TABLE6);
  assert.equal(routes.length, 9, 'the multipath route (no single device) is left out');
  assert.equal(routeFor6(routes, 'fd00:22::20')?.dev, 'eth1', 'metric 1024 beats 2048');
  assert.equal(routeFor6(routes, 'fd00:23::10')?.dev, 'vp1', 'a /128 host route');
  assert.equal(routeFor6(routes, 'fd00:23::11')?.dev, 'eth0', 'falls back to the default route');
  assert.equal(routeFor6(routes, 'fd00:25::9')?.prefsrc, 'fd00:21::1');
  assert.equal(routeFor6(routes, 'fd00:24::1')?.type, 'blackhole');
  assert.equal(routeFor6(routes, 'fd00:26::1')?.dev, 'eth0', 'the multipath route is not a device: the default wins');
  assert.equal(routeFor6(parseRoutes6('[]'), 'fd00:22::20'), undefined);
});
