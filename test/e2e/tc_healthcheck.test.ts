// The healthCheckNodePort server on its own (loopback): kube-proxy's
// response shape and the declarative syncServices/syncEndpoints.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import * as http from 'node:http';
import * as net from 'node:net';
import { HealthCheckServer } from '../../src/datapath/tc/healthcheck';
import { Sandbox } from '../helpers/sandbox';

const hc = new HealthCheckServer({ addresses: ['127.0.0.1'] });
after(() => hc.close());

function get(port: number): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/healthz', agent: false }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    }).on('error', reject);
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

test('200 with local endpoints, 503 without; body and headers as kube-proxy', async () => {
  const port = await freePort();
  await hc.syncServices([{ namespace: 'shop', name: 'web', port }]);
  let r = await get(port);
  assert.equal(r.status, 503);
  assert.equal(r.body, '{\n\t"service": {\n\t\t"namespace": "shop",\n\t\t"name": "web"\n\t},\n\t"localEndpoints": 0,\n\t"serviceProxyHealthy": true\n}');
  hc.syncEndpoints({ 'shop/web': 2 });
  r = await get(port);
  assert.equal(r.status, 200);
  assert.equal(r.headers['content-type'], 'application/json');
  assert.equal(r.headers['x-content-type-options'], 'nosniff');
  assert.equal(r.headers['x-load-balancing-endpoint-weight'], '2');
  assert.deepEqual(JSON.parse(r.body), { service: { namespace: 'shop', name: 'web' }, localEndpoints: 2, serviceProxyHealthy: true });
});

test('syncServices is declarative: a changed port moves the listener, a removed service closes it', async () => {
  const [p1, p2] = [await freePort(), await freePort()];
  await hc.syncServices([{ namespace: 'a', name: 's', port: p1 }]);
  hc.syncEndpoints({ 'a/s': 1 });
  assert.equal((await get(p1)).status, 200);
  await hc.syncServices([{ namespace: 'a', name: 's', port: p2 }]);
  assert.equal((await get(p2)).status, 200);
  await assert.rejects(get(p1), /ECONNREFUSED/);
  await hc.syncServices([]);
  await assert.rejects(get(p2), /ECONNREFUSED/);
  assert.equal(hc.ports().size, 0);
});

test('an unhealthy proxy answers 503 even with endpoints', async () => {
  const sick = new HealthCheckServer({ addresses: ['127.0.0.1'], proxyHealthy: () => false });
  try {
    const port = await freePort();
    await sick.syncServices([{ namespace: 'a', name: 'b', port }]);
    sick.syncEndpoints(new Map([['a/b', 3]]));
    const r = await get(port);
    assert.equal(r.status, 503);
    assert.equal(JSON.parse(r.body).serviceProxyHealthy, false);
  } finally {
    await sick.close();
  }
});

test('with the agent\'s default addresses a healthCheckNodePort answers on IPv4 and IPv6 (kube-proxy listens on both families)', async () => {
  // In a throwaway namespace: the server and the probes run there, never in the root namespace.
  const sb = Sandbox.create('sluice-hc6');
  try {
    const script = `
const http = require('http');
const { HealthCheckServer } = require(${JSON.stringify(require.resolve('../../src/datapath/tc/healthcheck'))});
const { defaultConfig } = require(${JSON.stringify(require.resolve('../../src/agent/config'))});
const get = (host) => new Promise((r) => http.get({ host, port: 10997, agent: false }, (res) => { res.resume(); r(res.statusCode); }).on('error', (e) => r(e.code)));
(async () => {
  const hc = new HealthCheckServer({ addresses: defaultConfig().healthCheckAddresses });
  await hc.syncServices([{ namespace: 'v6', name: 'web', port: 10997 }]);
  hc.syncEndpoints({ 'v6/web': 1 });
  const out = { ipv4: await get('127.0.0.1'), ipv6: await get('::1') };
  await hc.close();
  process.stdout.write(JSON.stringify(out));
})();`;
    assert.deepEqual(JSON.parse(sb.execInNetns(['node', '-e', script])), { ipv4: 200, ipv6: 200 });
  } finally {
    sb.close();
  }
});
