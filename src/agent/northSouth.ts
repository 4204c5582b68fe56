// The north-south side of the agent: TC programs on the external devices,
// their configuration (SNAT address, conntrack timeouts), conntrack garbage
// collection, and the healthCheckNodePort servers of externalTrafficPolicy:
// Local Services. Off unless devices are configured.
import { execFileSync } from 'node:child_process';
import type { Logger } from 'pino';
import type { AgentConfig } from './config';
import type { AgentMetrics } from './metrics';
import type { HealthCheckService } from '../model/frontend';
import { bpfObjectPath } from '../datapath/sockLb';
import { attachTcDevices } from '../datapath/tc/attachMain';
import { openTcMaps, type TcMaps } from '../datapath/tc/maps';
import { writeTcConfig } from '../datapath/tc/config';
import { purgeBackends, startConntrackGc } from '../datapath/tc/conntrack';
import { HealthCheckServer } from '../datapath/tc/healthcheck';

const CONNTRACK_GC_INTERVAL_MS = 10_000;

export interface NorthSouth {
  devices: string[];
  snatAddress?: string;
  backendsDeleted(ids: number[]): void;
  healthChecks(checks: HealthCheckService[]): void;
  stop(): Promise<void>;
}

/** "auto" -> the device of the default route. */
export function resolveDevices(devices: string[]): string[] {
  return devices.flatMap((d) => {
    if (d !== 'auto') return [d];
    const routes = JSON.parse(execFileSync('ip', ['-j', 'route', 'show', 'default'], { encoding: 'utf8' }) || '[]') as Array<{ dev?: string }>;
    const dev = routes[0]?.dev;
    if (!dev) throw new Error('--devices auto: there is no default route to take the device from; name the devices');
    return [dev];
  });
}

export function firstIPv4(device: string): string | undefined {
  const info = JSON.parse(execFileSync('ip', ['-j', '-4', 'addr', 'show', 'dev', device], { encoding: 'utf8' }) || '[]') as Array<{ addr_info?: Array<{ local?: string; scope?: string }> }>;
  return info[0]?.addr_info?.find((a) => a.scope === 'global')?.local;
}

export async function startNorthSouth(config: AgentConfig, proxyHealthy: () => boolean, metrics: AgentMetrics, log: Logger): Promise<NorthSouth | undefined> {
  const devices = resolveDevices(config.devices);
  if (devices.length === 0) {
    log.info('no --devices: traffic from outside the node to NodePorts, ExternalIPs and LoadBalancer IPs is not handled (socket LB only)');
    return undefined;
  }
  const attachments = attachTcDevices(bpfObjectPath('tc_lb.bpf.o'), config.bpffs, devices);
  const snatAddress = config.snatAddress ?? firstIPv4(devices[0]!);
  const maps: TcMaps = openTcMaps(config.bpffs);
  writeTcConfig(maps.config, {
    snatAddress,
    tcpEstablishedTimeout: config.conntrackTcpEstablishedSeconds,
    tcpClosingTimeout: config.conntrackTcpCloseWaitSeconds,
    udpTimeout: config.conntrackUdpSeconds,
  });
  if (!snatAddress) log.warn({ devices }, 'no IPv4 address on the first device: flows to backends on other nodes will be dropped; set --snat-address');
  log.info({ attachments, snatAddress }, 'TC attached to the external devices');
  const stopGc = startConntrackGc(maps.conntrack, CONNTRACK_GC_INTERVAL_MS);
  const health = new HealthCheckServer({
    addresses: config.healthCheckAddresses,
    proxyHealthy,
    onError: (service, err) => {
      metrics.errors.inc({ reason: 'healthcheck_listen_failed' });
      log.error({ service, error: err.message }, `healthCheckNodePort server for Service ${service} failed: ${err.message}`);
    },
  });
  return {
    devices,
    snatAddress,
    backendsDeleted(ids) {
      const purged = purgeBackends(maps.conntrack, ids);
      if (purged > 0) log.debug({ backends: ids.length, flows: purged }, 'forgot the flows of deleted backends');
    },
    healthChecks(checks) {
      const services = checks.map((c) => {
        const [namespace, name] = c.service.split('/') as [string, string];
        return { namespace, name, port: c.nodePort };
      });
      health.syncEndpoints(new Map(checks.map((c) => [c.service, c.localEndpoints])));
      health.syncServices(services).catch((err: Error) => log.error({ error: err.message }, 'healthCheckNodePort servers'));
    },
    async stop() {
      stopGc();
      await health.close();
      maps.close();
    },
  };
}
