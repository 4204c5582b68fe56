// `sluice`: the command line. Every command that reads state reads the pinned
// maps under --bpffs, so it works with no agent running.
import { parseArgs, table, UsageError, type ParsedArgs } from './args';
import { statusView, withMaps, backendFlagNames } from './inspect';
import * as fs from 'node:fs';
import { servicesCommand } from './servicesCommand';
import { traceCommand } from './traceCommand';
import { monitorCommand } from './monitor';
import { DEFAULT_BPFFS, type SockLbMaps } from '../datapath/maps';
import { installSockLb, detachSockLb, uninstall } from '../datapath/sockLb';
import { LbProgrammer, type FrontendSpec } from '../datapath/programmer';
import { parseEndpoint, formatEndpoint, isIp6 } from '../datapath/addr';
import * as abi from '../abi/generated';
import { parseLbAlgorithm } from '../translate/algorithm';
import { ALGORITHM_CODE } from '../agent/toSpecs';
import { lcBackendIds, readLcCounts } from '../datapath/lcCounts';

type Command = { summary: string; values: string[]; booleans?: string[]; run(args: ParsedArgs): Promise<number> | number };

const bpffsOf = (a: ParsedArgs) => a.flags.get('bpffs') ?? DEFAULT_BPFFS;
const json = (a: ParsedArgs) => {
  const o = a.flags.get('output') ?? 'table';
  if (o !== 'json' && o !== 'table') throw new UsageError(`-o ${o}: use json or table`);
  return o === 'json';
};
const print = (s: string) => process.stdout.write(s);
const printJson = (v: unknown) => print(JSON.stringify(v, null, 2) + '\n');

function requireFlag(a: ParsedArgs, name: string): string {
  const v = a.flags.get(name);
  if (v === undefined || v === '') throw new UsageError(`--${name} is required`);
  return v;
}

const commands: Record<string, Command> = {
  services: { ...servicesCommand, run: (a) => servicesCommand.run(a, bpffsOf(a)) },
  trace: { ...traceCommand, run: (a) => traceCommand.run(a, bpffsOf(a)) },
  monitor: { ...monitorCommand, run: (a) => monitorCommand.run(a, bpffsOf(a)) },
  backends: {
    summary: 'list backends by id (ACTIVE: connections counted by least-connection)',
    values: ['bpffs', 'output'],
    run(a) {
      const bpffs = bpffsOf(a);
      const { rows, lcIds } = withMaps(bpffs, (maps) => {
        const p = LbProgrammer.adopt(maps);
        return { rows: p.programmedBackends().sort((x, y) => x.id - y.id), lcIds: lcBackendIds(p.programmedFrontends()) };
      });
      // Active counts only where least-connection is on: other algorithms do not count.
      const active = lcIds.size > 0 ? readLcCounts(bpffs, lcIds) : undefined;
      const view = rows.map((b) => ({
        id: b.id, family: isIp6(b.address) ? 'IPv6' : 'IPv4', address: b.address, port: b.port, protocol: b.proto, flags: backendFlagNames(b.flags), zone: b.zone,
        ...(active?.has(b.id) ? { active: active.get(b.id)! } : {}),
      }));
      if (json(a)) printJson(view);
      else if (active) {
        print(table(['ID', 'BACKEND', 'FLAGS', 'ACTIVE'], view.map((b) => [String(b.id), formatEndpoint({ ...b, proto: b.protocol }), b.flags.join(',') || '-', b.active === undefined ? '-' : String(b.active)])));
      } else print(table(['ID', 'BACKEND', 'FLAGS'], view.map((b) => [String(b.id), formatEndpoint({ ...b, proto: b.protocol }), b.flags.join(',') || '-'])));
      return 0;
    },
  },
  status: {
    summary: 'last sync, programs attached and where, map fill levels, data-path counters',
    values: ['bpffs', 'output', 'cgroup-root'],
    run(a) {
      const bpffs = bpffsOf(a);
      // In a container the node's cgroup tree is mounted elsewhere (e.g. /host/sys/fs/cgroup).
      const view = withMaps(bpffs, (maps) => statusView(bpffs, maps, a.flags.get('cgroup-root')));
      if (json(a)) {
        printJson(view);
        return 0;
      }
      print(`bpffs: ${view.bpffs}\n`);
      const ag = view.agent;
      print(ag
        ? `last sync: ${ag.lastSync} (${ag.lastSyncAgoSeconds} s ago, agent pid ${ag.agentPid} ${ag.agentRunning ? 'running' : 'not running'}); ` +
          `last full resync: ${ag.lastFullSync ?? 'never'}; ${ag.services} Services, ${ag.frontends} frontends, ${ag.backends} backends` +
          `${ag.lastSyncFailures ? `; ${ag.lastSyncFailures} frontends failed in the last sync` : ''}\n\n`
        : 'last sync: never (no agent has synced these maps; `sluice service upsert` does not count)\n\n');
      const ss = view.staleSockets;
      print(ss.enabled
        ? `stale sockets: destroyed on backend removal (${ss.protocols.join(', ')})\n\n`
        : `stale sockets: NOT destroyed on backend removal: ${ss.reason}\n\n`);
      if (view.nodePortMode) {
        const dsr = { snat: 'flows to other nodes SNATed', dsr: 'Direct Server Return (IPIP, ip6ip6 for IPv6) for TCP and UDP', hybrid: 'Direct Server Return (IPIP, ip6ip6 for IPv6) for TCP, SNAT for UDP' };
        print(`nodeport mode: ${view.nodePortMode} (${dsr[view.nodePortMode]})\n\n`);
      }
      print(table(['HOOK', 'PROGRAM', 'ATTACHED', 'CGROUP', 'LINK'], view.attachments.map((s) => [
        s.hook, s.program, s.attached ? 'yes' : 'no', s.cgroupPath ?? (s.cgroupId !== undefined ? `id ${s.cgroupId}` : '-'), s.linkId !== undefined ? String(s.linkId) : '-',
      ])));
      print('\n');
      print(table(['MAP', 'ENTRIES', 'MAX', 'FILL'], view.maps.map((m) => [m.name, String(m.entries), String(m.maxEntries), `${((100 * m.entries) / m.maxEntries).toFixed(1)}%`])));
      print('\n');
      print(table(['COUNTER', 'VALUE'], Object.entries(view.counters)));
      if (view.xdp.length > 0) {
        print('\n');
        print(table(['XDP DEVICE', 'MODE', 'IFINDEX', 'LINK', 'PROGRAM', 'PACKETS', 'PASSED', 'TX', 'REDIRECTED', 'DROPPED', 'FALLBACK'], view.xdp.map((x) => [
          x.device, x.mode, String(x.ifindex), x.linkId !== undefined ? String(x.linkId) : '-', x.programId !== undefined ? String(x.programId) : '-',
          x.packets, x.passed, x.tx, x.redirected, x.dropped, x.fallback,
        ])));
      }
      return 0;
    },
  },
  service: {
    summary: 'service upsert --frontend A:P/proto|[A6]:P/proto --backends A:P,... | service delete --frontend A:P/proto (refused on a running agent\'s maps unless --force)',
    values: ['bpffs', 'frontend', 'backends', 'affinity-timeout', 'algorithm'],
    booleans: ['force'],
    run(a) {
      const verb = a.positional[0];
      const frontend = parseEndpoint(requireFlag(a, 'frontend'));
      return withMaps(bpffsOf(a), (maps) => {
        if (a.flags.get('force') !== 'true') refuseIfAgentOwns(maps, bpffsOf(a));
        const programmer = LbProgrammer.adopt(maps);
        if (verb === 'delete') {
          const { frontends } = programmer.remove(frontend.address, frontend.port, frontend.proto);
          if (frontends === 0) throw new Error(`no frontend ${formatEndpoint(frontend)} in ${bpffsOf(a)}`);
          print(`deleted ${formatEndpoint(frontend)}\n`);
          return 0;
        }
        if (verb !== 'upsert') throw new UsageError('service needs a verb: upsert or delete');
        const list = a.flags.get('backends') ?? '';
        const backends = list === '' ? [] : list.split(',').map((b) => parseEndpoint(b, frontend.proto));
        for (const b of backends) {
          if (b.proto !== frontend.proto) throw new UsageError(`backend ${formatEndpoint(b)}: protocol differs from the frontend's`);
        }
        const affinity = Number(a.flags.get('affinity-timeout') ?? '0');
        if (!Number.isInteger(affinity) || affinity < 0) throw new UsageError('--affinity-timeout takes whole seconds');
        const spec: FrontendSpec = {
          ...frontend,
          scope: 'external',
          flags: abi.LB_SVC_FLAG_CLUSTER_IP | (affinity > 0 ? abi.LB_SVC_FLAG_AFFINITY : 0),
          affinityTimeout: affinity,
          algorithm: algorithmFlag(a.flags.get('algorithm')),
          backends,
          owner: `frontend ${formatEndpoint(frontend)}`,
        };
        const result = programmer.apply([spec], { prune: false });
        const failure = result.failures[0];
        if (failure) throw failure.error;
        print(`${formatEndpoint(frontend)} -> ${backends.length ? backends.map(formatEndpoint).join(', ') : '(no backends: connections refused)'}\n`);
        return 0;
      });
    },
  },
  attach: {
    summary: 'load the socket-LB programs, pin maps and attach them to --cgroup',
    values: ['bpffs', 'cgroup'],
    run(a) {
      const r = installSockLb({ bpffs: bpffsOf(a), cgroupPath: requireFlag(a, 'cgroup') });
      print(`attached: ${r.attached.join(', ') || '-'}; replaced in place: ${r.replaced.join(', ') || '-'}\n`);
      return 0;
    },
  },
  detach: {
    summary: 'detach the socket-LB programs (maps stay pinned)',
    values: ['bpffs'],
    run(a) {
      const removed = detachSockLb(bpffsOf(a));
      print(removed.length ? `detached: ${removed.join(', ')}\n` : 'nothing attached\n');
      return 0;
    },
  },
  uninstall: {
    summary: 'detach everything and remove the pinned maps under --bpffs',
    values: ['bpffs'],
    run(a) {
      uninstall(bpffsOf(a));
      print(`removed ${bpffsOf(a)}\n`);
      return 0;
    },
  },
};

/**
 * A running agent owns its maps: it holds their state in memory, so a write
 * behind its back is undone at its next full sync, or worse, takes an id the
 * agent believes free. Its status entry names its pid; a pid that no longer
 * exists (/proc/<pid>) means no agent, and the maps are the operator's.
 */
function refuseIfAgentOwns(maps: SockLbMaps, bpffs: string): void {
  const pid = maps.agent?.get(0)?.agent_pid ?? 0;
  if (pid === 0 || pid === process.pid || !fs.existsSync(`/proc/${pid}`)) return;
  throw new Error(
    `refused: the agent (pid ${pid}) owns ${bpffs}; change the Service in the API instead, ` +
      'or pass --force to write anyway (the agent undoes it at its next full sync)',
  );
}

/** Commands registered by other modules (agent, apiserver, demo, ct). */
export function registerCommand(name: string, command: Command): void {
  commands[name] = command;
}

function usage(): string {
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(12)} ${c.summary}`);
  return `usage: sluice COMMAND [flags]\n\ncommands:\n${lines.join('\n')}\n\nflags: --bpffs DIR (default ${DEFAULT_BPFFS}), -o json|table\n`;
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  loadExtraCommands();
  if (!name || name === 'help' || name === '--help' || name === '-h') {
    print(usage());
    return name ? 0 : 2;
  }
  const command = commands[name];
  if (!command) {
    process.stderr.write(`sluice: unknown command ${JSON.stringify(name)}\n${usage()}`);
    return 2;
  }
  try {
    const args = parseArgs(rest, { values: command.values, booleans: command.booleans });
    return await command.run(args);
  } catch (err) {
    const e = err as Error;
    process.stderr.write(`sluice ${name}: ${e.message}\n`);
    return e instanceof UsageError ? 2 : 1;
  }
}

/** Commands that live with their feature; loaded only when present. */
function loadExtraCommands(): void {
  for (const mod of ['../agent/command', '../k8s/apiserver/command', '../demo/command', '../datapath/tc/command', '../cleanup/command']) {
    try {
      // eslint-disable-next-line @typescript-eslint/no-var-requires
      const m = require(mod) as { commands?: Record<string, Command> };
      for (const [n, c] of Object.entries(m.commands ?? {})) commands[n] = c;
    } catch (err) {
      const missing = (err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' && (err as Error).message.includes(mod.slice(3));
      if (!missing) throw err;
    }
  }
}

export type { Command };

if (require.main === module || process.argv[1]?.endsWith('bin/sluice')) {
  main(process.argv.slice(2)).then(
    // Exit once stdout is flushed: a pipe takes large output (-o json of a
    // big Service) asynchronously, and process.exit() would cut it short.
    (code) => process.stdout.write('', () => process.exit(code)),
    (err) => {
      process.stderr.write(`sluice: ${(err as Error).stack ?? err}\n`);
      process.exit(1);
    },
  );
}

/** --algorithm of `service upsert`: the annotation's names (rr, sh too). */
function algorithmFlag(value: string | undefined): number {
  if (value === undefined) return abi.LB_ALG_RANDOM;
  const r = parseLbAlgorithm(value);
  if ('error' in r) throw new UsageError(`--algorithm ${r.error}`);
  return ALGORITHM_CODE[r.algorithm];
}
