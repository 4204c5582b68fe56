// The Sluice agent of one "node" namespace of the NodePort bench
// (bench/nodeport.ts): the real `sluice agent`, started inside the namespace,
// reaching the bench's API server through the cluster tier's unix-socket
// forwarder (so the namespace has no route anywhere), with a config file that
// sizes its maps for the bench's Services and serves NodePorts on the node's
// own address only. Used for the SNAT node and for both DSR nodes (the
// ingress node with --nodeport-mode dsr and the backend node that opens the
// IPIP packets).
import type { ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as abi from '../src/abi/generated';
import type { SockLbMaps } from '../src/datapath/maps';
import { AgentProcess } from '../src/lab/agentProcess';
import { type MasterKey, openWhenPinned, tick, waitMastersProgrammed } from './controlplane';
import { BACKEND_COUNT } from './services';

export interface BenchNodeAgentOptions {
  root: string;
  /** The node's namespace (ip netns name). */
  netns: string;
  nodeName: string;
  /** The address NodePorts are served on (nodePortAddresses /32) and health checks bind to. */
  nodeAddr: string;
  /** --devices of the agent. */
  devices: string;
  extraArgs?: string[];
  /** The unix socket the forwarder to the API server listens on (outside every namespace). */
  apiSock: string;
  tmp: string;
  /** Distinguishes this agent's files, cgroup and bpffs directory from the others'. */
  tag: string;
  nodePorts: number;
  makeCgroup: (tag: string) => string;
  makeBpffs: (tag: string) => string;
  /** Starts a helper process the caller stops at the end (the forwarder into the namespace). */
  spawn: (argv: string[]) => ChildProcess;
  /** Every started agent goes here first, so the caller stops it even when programming fails. */
  started: AgentProcess[];
}

export interface BenchNodeAgent {
  agent: AgentProcess;
  bpffs: string;
  maps: SockLbMaps;
}

const FORWARDER = (root: string) => path.join(root, 'dist', 'test', 'cluster', 'forwarder.js');

/** Starts the agent; resolves once its maps are pinned (not yet programmed: see waitProgrammed). */
export async function startBenchNodeAgent(o: BenchNodeAgentOptions, deadline: number): Promise<BenchNodeAgent> {
  // The forwarder listens on the namespace's own loopback: the agent's kubeconfig names 127.0.0.1:6443.
  o.spawn(['nsenter', `--net=/run/netns/${o.netns}`, process.execPath, FORWARDER(o.root), 'tcp-to-unix', '127.0.0.1:6443', o.apiSock]);
  await tick(200);
  const bpffs = o.makeBpffs(o.tag);
  // A NodePort Service has ClusterIP and NodePort frontends: 4 per Service
  // here, one master each, and x 10 backend ids in the range array =
  // 400 000 at 10 000 Services (the default holds 524 288). NodePorts on the
  // node address the clients use only: by default the agent serves them on
  // every local address (kube-proxy's iptables default), one frontend per
  // address, which outgrows maps sized here for one.
  const config = path.join(o.tmp, `agent-${o.tag}.yaml`);
  fs.writeFileSync(config, [
    'maxEntries:',
    `  ${abi.SLUICE_MAP_SERVICES4}: ${Math.max(262144, 2 ** Math.ceil(Math.log2(o.nodePorts * 2 * 1.1)))}`,
    `  ${abi.SLUICE_MAP_RANGES4}: ${Math.max(abi.SLUICE_MAX_RANGE4, 2 ** Math.ceil(Math.log2(o.nodePorts * 2 * BACKEND_COUNT * 1.25)))}`,
    'nodePortAddresses:',
    `  - ${o.nodeAddr}/32`,
    '',
  ].join('\n'));
  const agent = new AgentProcess(['--config', config,
    '--kubeconfig', path.join(o.tmp, 'kubeconfig'), '--k8s-api-server', '127.0.0.1:6443', '--node-name', o.nodeName,
    '--cgroup-path', o.makeCgroup(o.tag), '--bpffs', bpffs, '--devices', o.devices,
    '--healthz-bind-address', '127.0.0.1:0', '--metrics-bind-address', '127.0.0.1:0', '--healthcheck-addresses', o.nodeAddr,
    ...(o.extraArgs ?? []),
  ], { prefix: ['nsenter', `--net=/run/netns/${o.netns}`] });
  o.started.push(agent);
  return { agent, bpffs, maps: await openWhenPinned(bpffs, agent, deadline) };
}

/** Waits until every NodePort master (IPv4: one wildcard 0.0.0.0 master per port, bpf/lib/nodeport.h) has its backends. */
export async function waitProgrammed(a: BenchNodeAgent, keys: MasterKey[], deadline: number): Promise<void> {
  await waitMastersProgrammed(a.maps, keys, BACKEND_COUNT, a.agent, Math.min(deadline, Date.now() + 120_000));
}
