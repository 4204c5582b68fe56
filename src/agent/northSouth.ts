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
import { attachLoaded, loadTcObject } from '../datapath/tc/attachMain';
import { detachTc, deviceIndex } from '../datapath/tc/attach';
import { openTcMaps, type TcMaps } from '../datapath/tc/maps';
import { TC_DEFAULTS, writeTcConfig } from '../datapath/tc/config';
import { reserveSnatPorts } from '../datapath/tc/reservedPorts';
import { purgeBackends, startConntrackGc } from '../datapath/tc/conntrack';
import { HealthCheckServer } from '../datapath/tc/healthcheck';
import * as abi from '../abi/generated';

const CONNTRACK_GC_INTERVAL_MS = 10_000;

export interface NorthSouth {
  devices: string[];
  snatAddress?: string;
  /**
   * The addresses of this node's backends: their devices get the TC programs
   * too, so the reply of a flow SNATed to the node (externalTrafficPolicy
   * Cluster) is restored where it enters the host.
   */
  localBackends(addresses: Iterable<string>): void;
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

/** In this process's network namespace (sysfs may show another one's). */
function deviceExists(dev: string): boolean {
  try {
    deviceIndex(dev);
    return true;
  } catch {
    return false;
  }
}

/** The device the node routes an address through (`ip route get`). */
export function routeDevice(address: string): string | undefined {
  try {
    const routes = JSON.parse(execFileSync('ip', ['-j', 'route', 'get', address], { encoding: 'utf8' }) || '[]') as Array<{ dev?: string; type?: string }>;
    return routes[0]?.type === 'local' ? undefined : routes[0]?.dev;
  } catch {
    return undefined;
  }
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
  // Loaded once: external devices now, local backends' devices as pods appear.
  const tcObject = loadTcObject(bpfObjectPath('tc_lb.bpf.o'), config.bpffs);
  const attachments = attachLoaded(tcObject, config.bpffs, devices);
  const snatAddress = config.snatAddress ?? firstIPv4(devices[0]!);
  const maps: TcMaps = openTcMaps(config.bpffs);
  writeTcConfig(maps.config, {
    snatAddress,
    tcpEstablishedTimeout: config.conntrackTcpEstablishedSeconds,
    tcpSynTimeout: config.conntrackTcpSynSeconds,
    tcpClosingTimeout: config.conntrackTcpCloseWaitSeconds,
    udpTimeout: config.conntrackUdpSeconds,
  });
  try {
    const reserved = reserveSnatPorts(TC_DEFAULTS.snatPortMin, TC_DEFAULTS.snatPortMax);
    log.info({ reserved }, `SNAT ports ${TC_DEFAULTS.snatPortMin}-${TC_DEFAULTS.snatPortMax} reserved from the node's own connections (net.ipv4.ip_local_reserved_ports)`);
  } catch (err) {
    metrics.errors.inc({ reason: 'reserve_snat_ports_failed' });
    log.error({ error: (err as Error).message }, `${(err as Error).message}: the node's own connections may pick a SNAT port`);
  }
  if (!snatAddress) log.warn({ devices }, 'no IPv4 address on the first device: flows to backends on other nodes will be dropped; set --snat-address');
  log.info({ attachments, snatAddress }, 'TC attached to the external devices');
  const stopGc = startConntrackGc(tcObject.program(abi.SLUICE_PROG_CT_GC), CONNTRACK_GC_INTERVAL_MS);
  const health = new HealthCheckServer({
    addresses: config.healthCheckAddresses,
    proxyHealthy,
    onError: (service, err) => {
      metrics.errors.inc({ reason: 'healthcheck_listen_failed' });
      log.error({ service, error: err.message }, `healthCheckNodePort server for Service ${service} failed: ${err.message}`);
    },
  });
  const external = new Set(devices);
  const deviceOf = new Map<string, string | undefined>();
  const podDevices = new Set<string>();
  return {
    devices,
    snatAddress,
    localBackends(addresses) {
      for (const address of addresses) {
        if (deviceOf.has(address)) continue;
        const dev = routeDevice(address);
        deviceOf.set(address, dev);
        if (!dev || dev === 'lo' || external.has(dev) || podDevices.has(dev)) continue;
        try {
          attachLoaded(tcObject, config.bpffs, [dev]);
          podDevices.add(dev);
          log.info({ device: dev, backend: address }, 'TC attached to a local backend device (replies of SNATed flows)');
        } catch (err) {
          metrics.errors.inc({ reason: 'tc_attach_failed' });
          log.error({ device: dev, error: (err as Error).message }, `TC attach to ${dev} (local backend ${address}) failed: its flows from outside get no reply translation`);
        }
      }
      // Pods come and go: forget devices that are gone (their links went with them).
      for (const dev of podDevices) {
        if (deviceExists(dev)) continue;
        podDevices.delete(dev);
        for (const direction of ['ingress', 'egress'] as const) detachTc(config.bpffs, dev, direction);
        for (const [address, d] of deviceOf) if (d === dev) deviceOf.delete(address);
      }
    },
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
      tcObject.close(); // the links are pinned: nothing detaches
      await health.close();
      maps.close();
    },
  };
}
