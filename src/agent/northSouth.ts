// The north-south side of the agent: TC programs on the external devices,
// their configuration (SNAT address, conntrack timeouts), conntrack garbage
// collection, and the healthCheckNodePort servers of externalTrafficPolicy:
// Local Services. Off unless devices are configured.
import { execFileSync } from 'node:child_process';
import type { Logger } from 'pino';
import { snatAddresses, type AgentConfig } from './config';
import type { AgentMetrics } from './metrics';
import type { HealthCheckService } from '../model/frontend';
import { bpfObjectPath } from '../datapath/sockLb';
import { attachLoaded, loadTcObject } from '../datapath/tc/attachMain';
import { summarize } from '../datapath/migrate';
import { detachTc, deviceIndex, UnsupportedDeviceError } from '../datapath/tc/attach';
import { ip4ToNumber, ip6ToBytes, isIp6 } from '../datapath/addr';
import { readRoutes, readRoutes6, routeFor, routeFor6, type Route } from '../datapath/tc/routes';
import { openTcMaps, type TcMaps } from '../datapath/tc/maps';
import { TC_DEFAULTS, writeNodePortMode, writeTcConfig, writeTcConfig6 } from '../datapath/tc/config';
import { reserveSnatPorts } from '../datapath/tc/reservedPorts';
import { purgeBackends, startConntrackGc } from '../datapath/tc/conntrack';
import { HealthCheckServer } from '../datapath/tc/healthcheck';
import * as abi from '../abi/generated';
import { startSnatExhaustionLog } from './snatExhaustion';
import { startXdp } from './xdp';

const CONNTRACK_GC_INTERVAL_MS = 10_000;

export interface NorthSouth {
  devices: string[];
  snatAddress?: string;
  /** The IPv6 twin (--snat-address's IPv6 value, else the first external device's global IPv6 address). */
  snatAddress6?: string;
  /**
   * The addresses of this node's backends: their devices get the TC programs
   * too, so the reply of a flow SNATed to the node (externalTrafficPolicy
   * Cluster) is restored where it enters the host.
   */
  localBackends(addresses: Iterable<string>): void;
  /**
   * The addresses of backends on other nodes (both families): a device other
   * than the external ones that routes to them (a private node-to-node
   * network) gets the TC programs and its own SNAT address of that family,
   * as MASQUERADE picks the egress device's address, so the reply comes back
   * to it and is restored there.
   */
  remoteBackends(addresses: Iterable<string>): void;
  backendsDeleted(ids: number[]): void;
  healthChecks(checks: HealthCheckService[]): void;
  /** The programmed frontends (XDP's frontend-address set follows them). */
  frontends(list: Iterable<{ address: string; flags: number }>): void;
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
  return firstAddress(device, '-4');
}

/** The device's first global IPv6 address (not link-local, not still in DAD). */
export function firstIPv6(device: string): string | undefined {
  return firstAddress(device, '-6');
}

function firstAddress(device: string, family: '-4' | '-6'): string | undefined {
  const info = JSON.parse(execFileSync('ip', ['-j', family, 'addr', 'show', 'dev', device], { encoding: 'utf8' }) || '[]') as
    Array<{ addr_info?: Array<{ local?: string; scope?: string; tentative?: boolean; dadfailed?: boolean }> }>;
  return info[0]?.addr_info?.find((a) => a.scope === 'global' && !a.tentative && !a.dadfailed)?.local;
}

export async function startNorthSouth(config: AgentConfig, proxyHealthy: () => boolean, metrics: AgentMetrics, log: Logger): Promise<NorthSouth | undefined> {
  const devices = resolveDevices(config.devices);
  if (devices.length === 0) {
    log.info('no --devices: traffic from outside the node to NodePorts, ExternalIPs and LoadBalancer IPs is not handled (socket LB only)');
    return undefined;
  }
  // Loaded once: external devices now, local backends' devices as pods appear.
  const tcObject = loadTcObject(bpfObjectPath('tc_lb.bpf.o'), config.bpffs, {
    maxEntries: config.maxEntries,
    onMigrated: (migrated) => log.info({ migrated: summarize(migrated) }, 'TC maps migrated to their new capacity or layout; TC links switched in place'),
  });
  const attachments = attachExternal(tcObject, config.bpffs, devices, metrics, log);
  const served = [...new Set(attachments.map((a) => a.device))];
  const wanted = snatAddresses(config.snatAddress);
  const snatAddress = wanted.v4 ?? (served[0] ? firstIPv4(served[0]) : undefined);
  const snatAddress6 = wanted.v6 ?? (served[0] ? firstIPv6(served[0]) : undefined);
  const maps: TcMaps = openTcMaps(config.bpffs);
  writeTcConfig(maps.config, {
    snatAddress,
    tcpEstablishedTimeout: config.conntrackTcpEstablishedSeconds,
    tcpSynTimeout: config.conntrackTcpSynSeconds,
    tcpClosingTimeout: config.conntrackTcpCloseWaitSeconds,
    udpTimeout: config.conntrackUdpSeconds,
  });
  // IPv6 flows SNAT to --snat-address's IPv6 value, else the first device's global IPv6 address (issue 14).
  if (maps.config6) writeTcConfig6(maps.config6, snatAddress6);
  // --nodeport-mode (issue 17 item 2, docs/dsr.md): read by the data path per new flow.
  if (maps.dsr) writeNodePortMode(maps.dsr, config.nodePortMode);
  else if (config.nodePortMode !== 'snat') throw new Error(`--nodeport-mode ${config.nodePortMode}: the TC object has no ${abi.SLUICE_MAP_DSR_CFG}`);
  log.info({ nodePortMode: config.nodePortMode }, `NodePort mode ${config.nodePortMode}${config.nodePortMode === 'snat' ? '' : ' (Direct Server Return to backends on other nodes, docs/dsr.md)'}`);
  try {
    const reserved = reserveSnatPorts(TC_DEFAULTS.snatPortMin, TC_DEFAULTS.snatPortMax);
    log.info({ reserved }, `SNAT ports ${TC_DEFAULTS.snatPortMin}-${TC_DEFAULTS.snatPortMax} reserved from the node's own connections (net.ipv4.ip_local_reserved_ports)`);
  } catch (err) {
    metrics.errors.inc({ reason: 'reserve_snat_ports_failed' });
    log.error({ error: (err as Error).message }, `${(err as Error).message}: the node's own connections may pick a SNAT port`);
  }
  if (!snatAddress) log.warn({ devices }, 'no IPv4 address on the first device: flows to backends on other nodes will be dropped; set --snat-address');
  // After TC (its maps are the ones XDP shares), on the devices TC serves.
  // XDP only accelerates: if it cannot load at all, TC serves alone.
  let xdp: ReturnType<typeof startXdp>;
  try {
    xdp = startXdp(config.xdpMode, config.bpffs, served, config.maxEntries, metrics, log);
  } catch (err) {
    metrics.errors.inc({ reason: 'xdp_attach_failed' });
    log.error({ mode: config.xdpMode, error: (err as Error).message }, `XDP not started (${(err as Error).message}): TC serves the devices alone`);
  }
  log.info({ attachments, snatAddress, snatAddress6 }, 'TC attached to the external devices');
  const stopGc = startConntrackGc(tcObject.program(abi.SLUICE_PROG_CT_GC), CONNTRACK_GC_INTERVAL_MS);
  const stopSnatLog = startSnatExhaustionLog(tcObject.map(abi.SLUICE_MAP_COUNTERS), `${TC_DEFAULTS.snatPortMin}-${TC_DEFAULTS.snatPortMax}`, log);
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
  const nodeDevices = new NodeDevices(tcObject, config.bpffs, maps, external, metrics, log);
  return {
    devices,
    snatAddress,
    snatAddress6,
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
    remoteBackends(addresses) {
      nodeDevices.sync(addresses);
    },
    backendsDeleted(ids) {
      const purged = purgeBackends(maps.conntrack, ids) + (maps.conntrack6 ? purgeBackends(maps.conntrack6, ids) : 0);
      if (purged > 0) log.debug({ backends: ids.length, flows: purged }, 'forgot the flows of deleted backends');
    },
    frontends(list) {
      xdp?.frontends(list);
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
      stopSnatLog();
      xdp?.stop();
      tcObject.close(); // the links are pinned: nothing detaches
      await health.close();
      maps.close();
    },
  };
}

/**
 * Attach to the external devices one by one: a device the programs cannot
 * parse (not Ethernet) is refused with an error log and a metric, the others
 * are served.
 */
function attachExternal(tcObject: ReturnType<typeof loadTcObject>, bpffs: string, devices: string[], metrics: AgentMetrics, log: Logger) {
  return devices.flatMap((device) => {
    try {
      return attachLoaded(tcObject, bpffs, [device]);
    } catch (err) {
      if (!(err instanceof UnsupportedDeviceError)) throw err;
      metrics.errors.inc({ reason: 'tc_device_not_ethernet' });
      log.error({ device, linkType: err.linkType }, err.message);
      return [];
    }
  });
}

/**
 * Node-to-node devices of a multi-homed node: devices other than the
 * external ones through which the main routing table reaches backends on
 * other nodes (IPv4 routes for IPv4 backends, IPv6 routes for IPv6 ones).
 * Each gets the TC programs (the reply of a SNATed flow comes back on it)
 * and, per family it routes backends of, an entry in that family's
 * per-device SNAT map (sluice_snatdev4 / sluice_snatdev6) with the address
 * the kernel would pick there (the route's `src`, else the device's first
 * global address of the family). Routes are read once per sync; each
 * address is matched once until the routes change.
 */
type Family = 4 | 6;

class NodeDevices {
  private readonly attached = new Map<string, number>(); // device -> ifindex
  private readonly snat = { 4: new Set<string>(), 6: new Set<string>() }; // devices with a SNAT entry per family
  private readonly refused = new Set<string>(); // "<family> <device>" failed once: logged and counted once
  private readonly deviceOf = new Map<string, string | undefined>();
  private routesKey = '';
  private routes: Route[] = [];
  private routes6: ReturnType<typeof readRoutes6> = [];
  private routes6Failed = false;

  constructor(
    private readonly tcObject: ReturnType<typeof loadTcObject>,
    private readonly bpffs: string,
    private readonly maps: TcMaps,
    private readonly external: Set<string>,
    private readonly metrics: AgentMetrics,
    private readonly log: Logger,
  ) {}

  sync(addresses: Iterable<string>): void {
    let routes: Route[];
    let routes6: ReturnType<typeof readRoutes6> = [];
    try {
      routes = readRoutes();
    } catch (err) {
      this.log.error({ error: (err as Error).message }, 'reading the routing table failed: node-to-node devices not updated');
      return;
    }
    try {
      if (this.maps.snatDevices6) routes6 = readRoutes6();
      this.routes6Failed = false;
    } catch (err) {
      // A node without IPv6 still serves IPv4: its IPv6 backends then match no device (logged once).
      if (!this.routes6Failed) this.log.error({ error: (err as Error).message }, 'reading the IPv6 routing table failed: IPv6 node-to-node devices not updated');
      this.routes6Failed = true;
    }
    const key = JSON.stringify([routes, routes6], (_, v: unknown) => (typeof v === 'bigint' ? v.toString(16) : v));
    if (key !== this.routesKey) {
      this.routesKey = key;
      this.routes = routes;
      this.routes6 = routes6;
      this.deviceOf.clear();
      this.refused.clear(); // a changed table may make a failed device worth another try
    }
    for (const address of addresses) {
      if (this.deviceOf.has(address)) continue;
      const family: Family = isIp6(address) ? 6 : 4;
      // Without sluice_snatdev6 (an older object) IPv6 flows have the one SNAT address: nothing to do.
      if (family === 6 && !this.maps.snatDevices6) continue;
      const route = family === 6 ? routeFor6(this.routes6, address) : routeFor(this.routes, address);
      const dev = route && route.type === 'unicast' ? route.dev : undefined;
      this.deviceOf.set(address, dev);
      if (!dev || dev === 'lo' || this.external.has(dev) || this.snat[family].has(dev) || this.refused.has(`${family} ${dev}`)) continue;
      this.attach(dev, route!.prefsrc, address, family);
    }
    for (const [dev, ifindex] of this.attached) {
      if (deviceExists(dev)) continue;
      this.attached.delete(dev);
      if (this.snat[4].delete(dev)) this.maps.snatDevices.delete(ifindex);
      if (this.snat[6].delete(dev)) this.maps.snatDevices6?.delete(ifindex);
      for (const [address, d] of this.deviceOf) if (d === dev) this.deviceOf.delete(address);
      for (const direction of ['ingress', 'egress'] as const) detachTc(this.bpffs, dev, direction);
    }
  }

  private attach(dev: string, prefsrc: string | undefined, backend: string, family: Family): void {
    const address = prefsrc ?? (family === 6 ? firstIPv6(dev) : firstIPv4(dev));
    try {
      if (!address) throw new Error(`it has no ${family === 6 ? 'global IPv6' : 'IPv4'} address to SNAT to`);
      let ifindex = this.attached.get(dev);
      if (ifindex === undefined) {
        attachLoaded(this.tcObject, this.bpffs, [dev]);
        ifindex = deviceIndex(dev);
        this.attached.set(dev, ifindex);
      }
      if (family === 6) this.maps.snatDevices6!.set(ifindex, { address: ip6ToBytes(address) });
      else this.maps.snatDevices.set(ifindex, { address: ip4ToNumber(address) });
      this.snat[family].add(dev);
      this.log.info({ device: dev, ifindex, family: `IPv${family}`, snatAddress: address, backend }, 'TC attached to a node-to-node device (flows to other nodes leave by it: SNAT to its address, replies restored there)');
    } catch (err) {
      this.refused.add(`${family} ${dev}`);
      this.metrics.errors.inc({ reason: err instanceof UnsupportedDeviceError ? 'tc_device_not_ethernet' : 'tc_attach_failed' });
      this.log.error({ device: dev, backend, error: (err as Error).message }, `TC attach to node-to-node device ${dev} (backend ${backend}) failed: flows to backends behind it may get no reply: ${(err as Error).message}`);
    }
  }
}
