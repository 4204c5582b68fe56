// The agent finds each remote backend's device from one read of the routing
// table (src/datapath/tc/routes.ts): the longest prefix wins, the default
// route is 0/0, a blackhole route matches like any other (and is no device).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseRoutes, routeFor } from '../../src/datapath/tc/routes';

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
