// A small CNI runtime (spec 1.0.0) for the cluster's pods: runs the plugins of
// a network configuration list in order for ADD (each one gets the previous
// plugin's result as `prevResult`) and in reverse for DEL (each one gets the
// cached ADD result), with CNI_COMMAND/CNI_CONTAINERID/CNI_NETNS/CNI_IFNAME/
// CNI_PATH set. Plugins run inside the node's network namespace (the "host"
// side for them), so the bridge they create belongs to that node.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { run } from './proc';

export const DEFAULT_CNI_PATH = '/usr/lib/cni';

export interface PluginConf { type: string; [key: string]: unknown }
export interface NetConfList { cniVersion: string; name: string; plugins: PluginConf[] }

export interface CniIp { address: string; gateway?: string; interface?: number }
export interface CniResult {
  cniVersion: string;
  interfaces?: Array<{ name: string; mac?: string; sandbox?: string }>;
  ips?: CniIp[];
  routes?: Array<{ dst: string; gw?: string }>;
  dns?: unknown;
  [key: string]: unknown;
}

export interface CniInvocation {
  containerId: string;
  /** Path of the pod's netns, e.g. /run/netns/NAME. */
  netnsPath: string;
  ifName: string;
  /** Netns the plugins run in (the node); undefined = the caller's own. */
  hostNetns?: string;
  /** Colon-separated plugin directories; the first match of `type` wins. */
  cniPath?: string;
  /** CNI_ARGS, e.g. K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0 */
  args?: Record<string, string>;
}

/** Thrown when a plugin fails; carries the plugin's spec error (code, msg, details). */
export class CniError extends Error {
  constructor(readonly plugin: string, readonly command: string, readonly code: number | undefined, msg: string) {
    super(`CNI ${command} ${plugin}: ${msg}`);
  }
}

function findPlugin(type: string, cniPath: string): string {
  for (const dir of cniPath.split(':')) {
    const p = join(dir, type);
    if (existsSync(p)) return p;
  }
  throw new CniError(type, 'find', undefined, `no plugin binary '${type}' in CNI_PATH ${cniPath}`);
}

async function execPlugin(command: 'ADD' | 'DEL' | 'CHECK', list: NetConfList, plugin: PluginConf,
  prevResult: CniResult | undefined, inv: CniInvocation): Promise<CniResult | undefined> {
  const cniPath = inv.cniPath ?? DEFAULT_CNI_PATH;
  const binary = findPlugin(plugin.type, cniPath);
  const conf: Record<string, unknown> = { ...plugin, cniVersion: list.cniVersion, name: list.name };
  if (prevResult) conf.prevResult = prevResult;
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
    CNI_COMMAND: command,
    CNI_CONTAINERID: inv.containerId,
    CNI_NETNS: inv.netnsPath,
    CNI_IFNAME: inv.ifName,
    CNI_PATH: cniPath,
  };
  if (inv.args) env.CNI_ARGS = Object.entries(inv.args).map(([k, v]) => `${k}=${v}`).join(';');
  const argv = inv.hostNetns ? ['nsenter', `--net=/run/netns/${inv.hostNetns}`, binary] : [binary];
  let out: string;
  try {
    out = await run(argv, { input: JSON.stringify(conf), env, timeoutMs: 30_000 });
  } catch (err) {
    // Plugins print a spec error object on stdout when they fail.
    const stdout = (err as { stdout?: string }).stdout ?? '';
    try {
      const e = JSON.parse(stdout) as { code?: number; msg?: string; details?: string };
      throw new CniError(plugin.type, command, e.code, `${e.msg ?? 'failed'}${e.details ? ` (${e.details})` : ''}`);
    } catch (parseErr) {
      if (parseErr instanceof CniError) throw parseErr;
      throw new CniError(plugin.type, command, undefined, (err as Error).message);
    }
  }
  if (command !== 'ADD') return undefined;
  try {
    return JSON.parse(out) as CniResult;
  } catch {
    throw new CniError(plugin.type, command, undefined, `result is not JSON: ${out.slice(0, 200)}`);
  }
}

/**
 * ADD: plugins in order, each given the previous result; returns the last
 * result (the network's result). If a plugin fails, the ones already run are
 * deleted again (spec: the runtime cleans up a failed ADD with DEL).
 */
export async function cniAdd(list: NetConfList, inv: CniInvocation): Promise<CniResult> {
  let result: CniResult | undefined;
  for (const plugin of list.plugins) {
    try {
      result = await execPlugin('ADD', list, plugin, result, inv);
    } catch (err) {
      await cniDel(list, inv, result).catch(() => undefined);
      throw err;
    }
    if (!result) throw new CniError(plugin.type, 'ADD', undefined, 'returned no result');
  }
  if (!result) throw new Error(`CNI ADD ${list.name}: the configuration list has no plugins`);
  return result;
}

/** DEL: plugins in reverse order, each given the cached ADD result; keeps going past errors and reports them all. */
export async function cniDel(list: NetConfList, inv: CniInvocation, addResult?: CniResult): Promise<void> {
  const errors: string[] = [];
  for (const plugin of [...list.plugins].reverse()) {
    try {
      await execPlugin('DEL', list, plugin, addResult, inv);
    } catch (err) {
      errors.push((err as Error).message);
    }
  }
  if (errors.length > 0) throw new Error(`CNI DEL ${list.name} for ${inv.containerId}: ${errors.join('; ')}`);
}

/** The first IPv4 address (without prefix length) the network assigned to the pod's interface. */
export function podIPv4(result: CniResult): string {
  const ip = (result.ips ?? []).find((i) => !i.address.includes(':'));
  if (!ip) throw new Error(`CNI result has no IPv4 address: ${JSON.stringify(result.ips)}`);
  return ip.address.split('/')[0] ?? '';
}

/** The pod's IPv6 address (without prefix length), when the network gave it one (dual-stack). */
export function podIPv6(result: CniResult): string | undefined {
  return (result.ips ?? []).find((i) => i.address.includes(':'))?.address.split('/')[0];
}

/**
 * The node's pod network: the real `bridge` plugin (bridge = gateway, no
 * masquerade, no default route: only the service range and the cluster's pod
 * range are routed via the bridge) with `host-local` IPAM from the node's pod CIDR, then `loopback`.
 * `extraPlugins` are appended to the chain — where Sluice's chained plugin goes.
 */
export function podNetworkConfList(opts: {
  name: string; bridge: string; podCidr: string; ipamDataDir: string; serviceCidr: string; clusterCidr: string; nodeCidr: string;
  /** Dual-stack: the IPv6 twins (host-local with two ranges, as a dual-stack conflist has). */
  podCidr6?: string; serviceCidr6?: string; clusterCidr6?: string; nodeCidr6?: string;
  extraPlugins?: PluginConf[];
}): NetConfList {
  return {
    cniVersion: '1.0.0',
    name: opts.name,
    plugins: [
      {
        type: 'bridge', bridge: opts.bridge, isGateway: true, isDefaultGateway: false, ipMasq: false,
        hairpinMode: true, promiscMode: false,
        ipam: {
          type: 'host-local',
          ranges: [[{ subnet: opts.podCidr }], ...(opts.podCidr6 ? [[{ subnet: opts.podCidr6 }]] : [])],
          // Service VIPs, the other nodes' pods and the node addresses (NodePorts) go via the
          // bridge (the node); nothing else is routed.
          routes: [opts.serviceCidr, opts.clusterCidr, opts.nodeCidr, opts.serviceCidr6, opts.clusterCidr6, opts.nodeCidr6]
            .filter((dst): dst is string => !!dst).map((dst) => ({ dst })),
          dataDir: opts.ipamDataDir,
        },
      },
      { type: 'loopback' },
      ...(opts.extraPlugins ?? []),
    ],
  };
}
