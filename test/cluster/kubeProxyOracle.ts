// The oracle's reading side: turn the rules upstream kube-proxy wrote in a
// node namespace into backend sets, one per frontend, so they can be compared
// with what Sluice programs for the same node.
//
//   iptables mode (iptables-save):
//     nat KUBE-SERVICES  -d VIP --dport P -j KUBE-SVC-*|KUBE-SVL-*|KUBE-EXT-*|KUBE-FW-*
//     nat KUBE-NODEPORTS --dport N -j KUBE-EXT-*      (reached for the node addresses
//                                                      KUBE-SERVICES sends there)
//     KUBE-SVC-*/KUBE-SVL-* -> KUBE-SEP-* -> DNAT --to-destination podIP:port
//     KUBE-EXT-* -> the unconditional jump is the external path (KUBE-SVL-* for
//                   externalTrafficPolicy Local; the -s/--src-type jumps are
//                   kube-proxy's short-circuits for pod and node traffic)
//     filter "has no endpoints" REJECT / "has no local endpoints" DROP -> an empty
//     set, written ["<reject>"] or ["<drop>"] so the verdict is compared too
//   nftables mode (nft -j list ruleset, table ip|ip6 kube-proxy):
//     map service-ips  { addr . proto . port : goto service-*|local-*|external-* }
//     map service-nodeports { proto . port : goto external-* } on set nodeport-ips
//     endpoint-* chains: dnat to podIP:port
//     maps no-endpoint-services / no-endpoint-nodeports -> an empty set, its
//     verdict ("goto reject-chain" or "drop") kept as for iptables
//
// Keys are "<address>:<port>/<proto>" ("[v6]:port/proto"), backends
// "podIP:port", sorted; one record per frontend kind.
import { BlockList, isIP } from 'node:net';
import type { ClusterNode } from './nodes';
import { dumpRules, IP6TABLES_SEPARATOR, type KubeProxyMode } from './kubeProxy';

export type FrontendKind = 'clusterIP' | 'externalIP' | 'loadBalancerIP' | 'nodePort';
export const FRONTEND_KINDS: FrontendKind[] = ['clusterIP', 'externalIP', 'loadBalancerIP', 'nodePort'];

export interface OracleFrontend {
  kind: FrontendKind;
  address: string;
  port: number;
  protocol: string;
  /** "namespace/name:portName" when the rules say it. */
  service?: string;
  /** Sorted "ip:port". Empty: kube-proxy rejects or drops (no (local) endpoints), see noBackend. */
  backends: string[];
  /** With no backends: kube-proxy's filter verdict (REJECT: no endpoints at all; DROP: none usable from here). */
  noBackend?: 'reject' | 'drop';
}

/**
 * The REJECT/DROP column: an empty backend set is compared as one marker
 * entry, so a frontend that rejects where kube-proxy drops (or the other
 * way round) is a mismatch, not two equal empty sets.
 */
export function emptySetMarker(verdict: 'reject' | 'drop' | undefined): string[] {
  return verdict ? [`<${verdict}>`] : [];
}

export type BackendSets = Record<FrontendKind, Record<string, string[]>>;

export interface ParseOptions {
  /** Node addresses that NodePorts listen on when the rules say "every local address" (addrtype LOCAL). */
  nodeAddresses?: string[];
  /** Service CIDRs: an address inside one is a cluster IP (used where the rules do not say the kind). */
  serviceCidrs?: string[];
  /** Addresses known to be LoadBalancer ingress IPs (otherwise an external address counts as an externalIP). */
  loadBalancerIPs?: string[];
  /**
   * Which of kube-proxy's paths through an external chain (KUBE-EXT-* / nft
   * external-*) to follow: 'external' (default) is what traffic from outside
   * the cluster gets (KUBE-SVL-* for externalTrafficPolicy Local);
   * 'internal' is the short-circuit pod and node-local traffic gets (the
   * source-matching jumps, to the Cluster set). Where an external chain has
   * no short-circuit (externalTrafficPolicy Cluster) both paths are the same.
   */
  path?: 'external' | 'internal';
}

export function frontendKey(address: string, port: number, protocol: string): string {
  return `${address.includes(':') ? `[${address}]` : address}:${port}/${protocol.toLowerCase()}`;
}

export function toBackendSets(frontends: OracleFrontend[]): BackendSets {
  const sets: BackendSets = { clusterIP: {}, externalIP: {}, loadBalancerIP: {}, nodePort: {} };
  for (const f of frontends) {
    sets[f.kind][frontendKey(f.address, f.port, f.protocol)] = f.backends.length > 0 ? f.backends : emptySetMarker(f.noBackend);
  }
  return sets;
}

/** Read the rules kube-proxy wrote in `node`'s namespace and return its backend sets. */
export async function kubeProxyBackendSets(node: ClusterNode, mode: KubeProxyMode, opts: ParseOptions = {}): Promise<BackendSets> {
  const text = await dumpRules(node, mode);
  const withNode: ParseOptions = { ...opts, nodeAddresses: opts.nodeAddresses ?? [node.ip, node.ip6] };
  return toBackendSets(mode === 'iptables' ? parseIptablesSave(text, withNode) : parseNftJson(text, withNode));
}

// ---------------------------------------------------------------- helpers

function stripPrefixLen(cidr: string): string {
  return cidr.replace(/\/(32|128)$/, '');
}

/** Either family (a dual-stack cluster has an IPv4 and an IPv6 Service CIDR). */
function inCidr(address: string, cidr: string): boolean {
  const [net, lenText] = cidr.split('/');
  const family = isIP(address);
  if (family === 0 || isIP(net ?? '') !== family) return false;
  const list = new BlockList();
  list.addSubnet(net!, Number(lenText), family === 6 ? 'ipv6' : 'ipv4');
  return list.check(address, family === 6 ? 'ipv6' : 'ipv4');
}

/** The address families of a node's address list, for "every local address" NodePorts of one family's rules. */
function ofFamily(addresses: string[] | undefined, family: 4 | 6): string[] | undefined {
  return addresses?.filter((a) => (isIP(a) === 6) === (family === 6));
}

function kindOfAddress(address: string, opts: ParseOptions): FrontendKind {
  if ((opts.serviceCidrs ?? []).some((c) => inCidr(address, c))) return 'clusterIP';
  if ((opts.loadBalancerIPs ?? []).includes(address)) return 'loadBalancerIP';
  return 'externalIP';
}

function sortedUnique(xs: Iterable<string>): string[] {
  return [...new Set(xs)].sort();
}

function mergeFrontends(list: OracleFrontend[]): OracleFrontend[] {
  const byKey = new Map<string, OracleFrontend>();
  for (const f of list) {
    const key = `${f.kind} ${frontendKey(f.address, f.port, f.protocol)}`;
    const prev = byKey.get(key);
    if (prev) {
      prev.backends = sortedUnique([...prev.backends, ...f.backends]);
      prev.noBackend ??= f.noBackend;
    } else byKey.set(key, { ...f, backends: sortedUnique(f.backends) });
  }
  return [...byKey.values()];
}

// ---------------------------------------------------------------- iptables

interface IptRule {
  chain: string;
  /** Option name -> value ("" for flags); a "!" before the option is kept as "!value". */
  opts: Map<string, string>;
  target?: string;
}

/** Split an iptables-save rule line into words, honouring "double quotes" and backslash escapes. */
export function splitIptablesWords(line: string): string[] {
  const words: string[] = [];
  let cur = '';
  let inWord = false;
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quoted) {
      if (c === '\\' && i + 1 < line.length) { cur += line[++i]; continue; }
      if (c === '"') { quoted = false; continue; }
      cur += c;
    } else if (c === '"') { quoted = true; inWord = true; }
    else if (c === ' ' || c === '\t') { if (inWord) { words.push(cur); cur = ''; inWord = false; } }
    else { cur += c; inWord = true; }
  }
  if (inWord) words.push(cur);
  return words;
}

function parseIptRule(line: string): IptRule | undefined {
  const words = splitIptablesWords(line);
  if (words[0] !== '-A' || !words[1]) return undefined;
  const rule: IptRule = { chain: words[1], opts: new Map() };
  let negate = false;
  for (let i = 2; i < words.length; i++) {
    const w = words[i]!;
    if (w === '!') { negate = true; continue; }
    if (!w.startsWith('-')) continue;
    const next = words[i + 1];
    const value = next !== undefined && !next.startsWith('-') && next !== '!' ? next : '';
    if (value !== '') i++;
    if (w === '-j' || w === '--jump' || w === '-g' || w === '--goto') rule.target = value;
    // -m may repeat; keep the rest: a later option of the same name wins, which is fine for the ones read here.
    rule.opts.set(w, negate ? `!${value}` : value);
    negate = false;
  }
  return rule;
}

interface IptTables { nat: Map<string, IptRule[]>; filter: Map<string, IptRule[]> }

function parseIptTables(text: string): IptTables {
  const tables: IptTables = { nat: new Map(), filter: new Map() };
  let current: Map<string, IptRule[]> | undefined;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('*')) {
      const name = line.slice(1);
      current = name === 'nat' ? tables.nat : name === 'filter' ? tables.filter : undefined;
      continue;
    }
    if (!current || !line.startsWith('-A ')) continue;
    const rule = parseIptRule(line);
    if (!rule) continue;
    const list = current.get(rule.chain) ?? [];
    list.push(rule);
    current.set(rule.chain, list);
  }
  return tables;
}

const SERVICE_CHAIN = /^KUBE-(SVC|SVL|EXT|FW|SEP)-/;

/** Backends a nat chain leads to, following kube-proxy's chain structure. */
function iptBackends(nat: Map<string, IptRule[]>, chain: string, seen = new Set<string>(), path: ParseOptions['path'] = 'external'): string[] {
  if (seen.has(chain)) return [];
  seen.add(chain);
  const rules = nat.get(chain) ?? [];
  if (chain.startsWith('KUBE-SEP-')) {
    return rules.filter((r) => r.target === 'DNAT').map((r) => r.opts.get('--to-destination') ?? '').filter((d) => d !== '');
  }
  let jumps = rules.filter((r) => r.target !== undefined && SERVICE_CHAIN.test(r.target));
  if (chain.startsWith('KUBE-EXT-')) {
    // The external path is the jump with no source condition; the others short-circuit pod/node-local traffic.
    // With externalTrafficPolicy Local and no local endpoint there is no unconditional jump at
    // all (outside traffic is dropped in filter): the external path is then empty, not the short-circuit.
    const bySource = (r: IptRule): boolean => r.opts.has('-s') || r.opts.has('--src-type');
    const shortCircuit = jumps.filter(bySource);
    jumps = path === 'internal' && shortCircuit.length > 0 ? shortCircuit : jumps.filter((r) => !bySource(r));
  }
  return jumps.flatMap((r) => iptBackends(nat, r.target!, seen, path));
}

function commentService(comment: string | undefined): string | undefined {
  if (!comment) return undefined;
  return comment.split(' ')[0];
}

/**
 * Parse `iptables-save` output (nat and filter tables) into frontends with
 * their backend sets. A dual-stack dump (kubeProxy.ts dumpRules) is the
 * iptables-save output, IP6TABLES_SEPARATOR, then the ip6tables-save output:
 * each half is parsed on its own (kube-proxy names both families' chains alike).
 */
export function parseIptablesSave(text: string, opts: ParseOptions = {}): OracleFrontend[] {
  const [v4, v6] = text.split(IP6TABLES_SEPARATOR);
  const out = parseIptablesFamily(v4 ?? '', { ...opts, nodeAddresses: ofFamily(opts.nodeAddresses, 4) });
  if (v6 !== undefined) out.push(...parseIptablesFamily(v6, { ...opts, nodeAddresses: ofFamily(opts.nodeAddresses, 6) }));
  return out;
}

function parseIptablesFamily(text: string, opts: ParseOptions): OracleFrontend[] {
  const { nat, filter } = parseIptTables(text);
  const out: OracleFrontend[] = [];
  const nodePortAddresses: string[] = [];

  for (const r of nat.get('KUBE-SERVICES') ?? []) {
    if (r.target === 'KUBE-NODEPORTS') {
      const d = r.opts.get('-d');
      if (d && !d.startsWith('!')) nodePortAddresses.push(stripPrefixLen(d));
      else nodePortAddresses.push(...(opts.nodeAddresses ?? ['0.0.0.0']));
      continue;
    }
    if (!r.target || !SERVICE_CHAIN.test(r.target)) continue;
    const d = r.opts.get('-d');
    const port = Number(r.opts.get('--dport'));
    const proto = r.opts.get('-p');
    if (!d || !proto || !Number.isInteger(port)) continue;
    const comment = r.opts.get('--comment') ?? '';
    const address = stripPrefixLen(d);
    const kind: FrontendKind = comment.endsWith(' cluster IP') ? 'clusterIP'
      : comment.endsWith(' external IP') ? 'externalIP'
        : comment.endsWith(' loadbalancer IP') ? 'loadBalancerIP' : kindOfAddress(address, opts);
    out.push({ kind, address, port, protocol: proto, service: commentService(comment), backends: iptBackends(nat, r.target, new Set(), opts.path) });
  }

  for (const r of nat.get('KUBE-NODEPORTS') ?? []) {
    if (!r.target || !SERVICE_CHAIN.test(r.target)) continue;
    const port = Number(r.opts.get('--dport'));
    const proto = r.opts.get('-p');
    if (!proto || !Number.isInteger(port)) continue;
    const d = r.opts.get('-d');
    // A rule restricted to one destination (e.g. 127.0.0.0/8 for localhost NodePorts) is not a node address frontend.
    if (d && !d.startsWith('!')) continue;
    const backends = iptBackends(nat, r.target, new Set(), opts.path);
    for (const address of sortedUnique(nodePortAddresses)) {
      out.push({ kind: 'nodePort', address, port, protocol: proto, service: commentService(r.opts.get('--comment')), backends });
    }
  }

  // Frontends with nothing to send to: kube-proxy writes a filter REJECT/DROP instead of nat rules.
  for (const chain of ['KUBE-SERVICES', 'KUBE-EXTERNAL-SERVICES', 'KUBE-NODEPORTS']) {
    for (const r of filter.get(chain) ?? []) {
      const comment = r.opts.get('--comment') ?? '';
      if (!/ has no (local )?endpoints$/.test(comment) || (r.target !== 'REJECT' && r.target !== 'DROP')) continue;
      const port = Number(r.opts.get('--dport'));
      const proto = r.opts.get('-p');
      if (!proto || !Number.isInteger(port)) continue;
      const d = r.opts.get('-d');
      const service = commentService(comment);
      const noBackend = r.target === 'DROP' ? 'drop' as const : 'reject' as const;
      if (d && !d.startsWith('!')) {
        const address = stripPrefixLen(d);
        const kind: FrontendKind = chain === 'KUBE-SERVICES' ? 'clusterIP'
          : (opts.loadBalancerIPs ?? []).includes(address) ? 'loadBalancerIP' : 'externalIP';
        out.push({ kind, address, port, protocol: proto, service, backends: [], noBackend });
      } else if (r.opts.get('--dst-type') === 'LOCAL' || chain === 'KUBE-NODEPORTS') {
        for (const address of sortedUnique(nodePortAddresses.length ? nodePortAddresses : (opts.nodeAddresses ?? ['0.0.0.0']))) {
          out.push({ kind: 'nodePort', address, port, protocol: proto, service, backends: [], noBackend });
        }
      }
    }
  }
  // A "has no local endpoints" DROP can coexist with nat rules for the same
  // frontend (which still serve pod and node-local traffic); merging by key
  // keeps the nat rules' external path, which is what external clients get.
  return mergeFrontends(out);
}

// ---------------------------------------------------------------- nftables

type Json = unknown;

interface NftRuleset {
  chains: Map<string, Json[][]>;
  maps: Map<string, Json[]>;
  sets: Map<string, Json[]>;
}

function asRecord(v: Json): Record<string, Json> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, Json>) : undefined;
}

/** kube-proxy's table of one family ('ip' or 'ip6'): both name their chains, maps and sets alike. */
function parseNftRuleset(text: string, family: 'ip' | 'ip6'): NftRuleset {
  const doc = asRecord(JSON.parse(text));
  const items = Array.isArray(doc?.nftables) ? (doc.nftables as Json[]) : [];
  const rs: NftRuleset = { chains: new Map(), maps: new Map(), sets: new Map() };
  const ours = (o: Record<string, Json>): boolean => o.table === 'kube-proxy' && o.family === family;
  for (const item of items) {
    const rec = asRecord(item);
    if (!rec) continue;
    const rule = asRecord(rec.rule);
    const map = asRecord(rec.map);
    const set = asRecord(rec.set);
    if (rule && ours(rule) && typeof rule.chain === 'string') {
      const list = rs.chains.get(rule.chain) ?? [];
      list.push(Array.isArray(rule.expr) ? (rule.expr as Json[]) : []);
      rs.chains.set(rule.chain, list);
    } else if (map && ours(map) && typeof map.name === 'string') {
      rs.maps.set(map.name, [...(rs.maps.get(map.name) ?? []), ...(Array.isArray(map.elem) ? (map.elem as Json[]) : [])]);
    } else if (set && ours(set) && typeof set.name === 'string') {
      rs.sets.set(set.name, [...(rs.sets.get(set.name) ?? []), ...(Array.isArray(set.elem) ? (set.elem as Json[]) : [])]);
    }
  }
  return rs;
}

/** Every jump/goto target anywhere inside a JSON expression. */
function verdictTargets(v: Json, out: string[] = []): string[] {
  if (Array.isArray(v)) { for (const x of v) verdictTargets(x, out); return out; }
  const rec = asRecord(v);
  if (!rec) return out;
  for (const [k, x] of Object.entries(rec)) {
    const t = asRecord(x)?.target;
    if ((k === 'goto' || k === 'jump') && typeof t === 'string') out.push(t);
    else verdictTargets(x, out);
  }
  return out;
}

/** Every dnat destination "addr:port" inside a rule's expressions. */
function dnatTargets(exprs: Json[]): string[] {
  const out: string[] = [];
  for (const e of exprs) {
    const dnat = asRecord(asRecord(e)?.dnat);
    if (!dnat) continue;
    const addr = typeof dnat.addr === 'string' ? dnat.addr : undefined;
    const port = typeof dnat.port === 'number' ? dnat.port : undefined;
    if (addr && port !== undefined) out.push(addr.includes(':') ? `[${addr}]:${port}` : `${addr}:${port}`);
  }
  return out;
}

const NFT_SERVICE_CHAIN = /^(service|local|external|endpoint|firewall)-/;

/** Does a rule match on the packet's source (kube-proxy's short-circuits for pod and node-local traffic)? */
function matchesSource(exprs: Json[]): boolean {
  return exprs.some((e) => {
    const left = asRecord(asRecord(asRecord(e)?.match)?.left);
    const payload = asRecord(left?.payload);
    const fib = asRecord(left?.fib);
    return payload?.field === 'saddr' || (fib !== undefined && JSON.stringify(fib).includes('saddr'));
  });
}

function nftBackends(rs: NftRuleset, chain: string, seen = new Set<string>(), path: ParseOptions['path'] = 'external'): string[] {
  if (seen.has(chain)) return [];
  seen.add(chain);
  const rules = rs.chains.get(chain) ?? [];
  if (chain.startsWith('endpoint-')) return rules.flatMap(dnatTargets);
  let candidates = rules;
  if (chain.startsWith('external-')) {
    // As for iptables: no unconditional goto (eTP Local, no local endpoint) means an empty external path.
    const toService = rules.filter((r) => verdictTargets(r).some((t) => NFT_SERVICE_CHAIN.test(t)));
    const shortCircuit = toService.filter(matchesSource);
    candidates = path === 'internal' && shortCircuit.length > 0 ? shortCircuit : toService.filter((r) => !matchesSource(r));
  }
  return candidates.flatMap((r) => verdictTargets(r)).filter((t) => NFT_SERVICE_CHAIN.test(t))
    .flatMap((t) => nftBackends(rs, t, seen, path));
}

/** Map element -> [key parts, value]; nft -j writes elements as [key, value] or {elem: {val: [key, value]}}. */
function mapEntry(elem: Json): { key: Json[]; value: Json } | undefined {
  let e: Json = elem;
  const wrapped = asRecord(asRecord(e)?.elem);
  if (wrapped) e = wrapped.val;
  if (!Array.isArray(e) || e.length !== 2) return undefined;
  let key: Json = e[0];
  const keyElem = asRecord(asRecord(key)?.elem);
  if (keyElem) key = keyElem.val;
  const concat = asRecord(key)?.concat;
  return { key: Array.isArray(concat) ? concat : [key], value: e[1] };
}

function setAddresses(elems: Json[]): string[] {
  return elems.map((e) => {
    const inner = asRecord(asRecord(e)?.elem)?.val ?? e;
    return typeof inner === 'string' ? inner : '';
  }).filter((a) => a !== '');
}

/** Parse `nft -j list ruleset` (kube-proxy's ip and ip6 tables, each on its own) into frontends with their backend sets. */
export function parseNftJson(text: string, opts: ParseOptions = {}): OracleFrontend[] {
  return [
    ...parseNftFamily(parseNftRuleset(text, 'ip'), { ...opts, nodeAddresses: ofFamily(opts.nodeAddresses, 4) }),
    ...parseNftFamily(parseNftRuleset(text, 'ip6'), { ...opts, nodeAddresses: ofFamily(opts.nodeAddresses, 6) }),
  ];
}

function parseNftFamily(rs: NftRuleset, opts: ParseOptions): OracleFrontend[] {
  const out: OracleFrontend[] = [];
  const classify = (address: string, target: string): FrontendKind =>
    target.startsWith('external-') ? (kindOfAddress(address, opts) === 'loadBalancerIP' ? 'loadBalancerIP' : 'externalIP')
      : 'clusterIP';

  for (const elem of rs.maps.get('service-ips') ?? []) {
    const entry = mapEntry(elem);
    const [addr, proto, port] = entry?.key ?? [];
    const target = verdictTargets(entry?.value)[0];
    if (typeof addr !== 'string' || typeof proto !== 'string' || typeof port !== 'number' || !target) continue;
    out.push({ kind: classify(addr, target), address: addr, port, protocol: proto, service: serviceFromChain(target), backends: nftBackends(rs, target, new Set(), opts.path) });
  }

  const nodeIps = setAddresses(rs.sets.get('nodeport-ips') ?? []);
  const nodePortAddrs = nodeIps.length > 0 ? nodeIps : (opts.nodeAddresses ?? ['0.0.0.0']);
  for (const elem of rs.maps.get('service-nodeports') ?? []) {
    const entry = mapEntry(elem);
    const [proto, port] = entry?.key ?? [];
    const target = verdictTargets(entry?.value)[0];
    if (typeof proto !== 'string' || typeof port !== 'number' || !target) continue;
    for (const address of nodePortAddrs) {
      out.push({ kind: 'nodePort', address, port, protocol: proto, service: serviceFromChain(target), backends: nftBackends(rs, target, new Set(), opts.path) });
    }
  }

  for (const elem of rs.maps.get('no-endpoint-services') ?? []) {
    const entry = mapEntry(elem);
    const [addr, proto, port] = entry?.key ?? [];
    if (typeof addr !== 'string' || typeof proto !== 'string' || typeof port !== 'number') continue;
    out.push({ kind: kindOfAddress(addr, opts), address: addr, port, protocol: proto, backends: [], noBackend: nftNoBackendVerdict(entry?.value) });
  }
  for (const elem of rs.maps.get('no-endpoint-nodeports') ?? []) {
    const entry = mapEntry(elem);
    const [proto, port] = entry?.key ?? [];
    if (typeof proto !== 'string' || typeof port !== 'number') continue;
    for (const address of nodePortAddrs) out.push({ kind: 'nodePort', address, port, protocol: proto, backends: [], noBackend: nftNoBackendVerdict(entry?.value) });
  }
  return mergeFrontends(out);
}

/** A no-endpoint map element's value: "goto reject-chain" rejects, a bare "drop" verdict drops. */
function nftNoBackendVerdict(value: Json): 'reject' | 'drop' {
  return verdictTargets(value).some((t) => t.includes('reject')) ? 'reject' : JSON.stringify(value ?? null).includes('drop') ? 'drop' : 'reject';
}

/** kube-proxy's nft chain names end in "<namespace>/<name>/<proto>/<portName>". */
function serviceFromChain(chain: string): string | undefined {
  const m = /^[a-z]+-[A-Z0-9]+-(.+)\/(.+)\/(tcp|udp|sctp)\/(.*)$/.exec(chain);
  return m ? `${m[1]}/${m[2]}:${m[4]}` : undefined;
}

// ---------------------------------------------------------------- loadBalancerSourceRanges

/**
 * The source-ranges column: for every LoadBalancer frontend kube-proxy
 * firewalls, the CIDRs it lets through, keyed "<address>:<port>/<proto>".
 *   iptables: KUBE-SERVICES -d LBIP -j KUBE-FW-*; KUBE-FW-* "-s CIDR -j KUBE-EXT-*" per range
 *   nftables: map firewall-ips { addr . proto . port : goto firewall-* }; firewall-*:
 *             "ip saddr != { CIDR, ... } drop"
 * kube-proxy also lets the LoadBalancer IPs themselves through when a range
 * holds the node's address (its comment: a node's request to a VIP that is a
 * local address loops back with the VIP as source); that is an artefact of
 * carrying node traffic through netfilter, not a range of the Service, and
 * Sluice has no such path (node traffic is balanced at connect()). Those
 * entries (any address of opts.loadBalancerIPs, as /32) are left out.
 */
export function parseSourceRanges(text: string, mode: KubeProxyMode, opts: ParseOptions = {}): Record<string, string[]> {
  const host = (ip: string): string => `${ip}/${isIP(ip) === 6 ? 128 : 32}`;
  const lbHosts = new Set((opts.loadBalancerIPs ?? []).map(host));
  const clean = (cidrs: string[]): string[] => sortedUnique(cidrs.map((c) => (c.includes('/') ? c : host(c))).filter((c) => !lbHosts.has(c)));
  const out: Record<string, string[]> = {};
  if (mode === 'iptables') {
    // Frontend keys differ by family: the two halves (see parseIptablesSave) can go into one record.
    for (const half of text.split(IP6TABLES_SEPARATOR)) Object.assign(out, iptSourceRanges(half, clean));
    return out;
  }
  for (const family of ['ip', 'ip6'] as const) Object.assign(out, nftSourceRanges(parseNftRuleset(text, family), clean));
  return out;
}

function iptSourceRanges(text: string, clean: (cidrs: string[]) => string[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  {
    const { nat } = parseIptTables(text);
    for (const r of nat.get('KUBE-SERVICES') ?? []) {
      if (!r.target?.startsWith('KUBE-FW-')) continue;
      const d = r.opts.get('-d');
      const port = Number(r.opts.get('--dport'));
      const proto = r.opts.get('-p');
      if (!d || !proto || !Number.isInteger(port)) continue;
      const ranges = (nat.get(r.target) ?? []).filter((x) => x.target && SERVICE_CHAIN.test(x.target) && x.opts.has('-s'))
        .map((x) => x.opts.get('-s')!).filter((s) => !s.startsWith('!'));
      out[frontendKey(stripPrefixLen(d), port, proto)] = clean(ranges);
    }
  }
  return out;
}

function nftSourceRanges(rs: NftRuleset, clean: (cidrs: string[]) => string[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const elem of rs.maps.get('firewall-ips') ?? []) {
    const entry = mapEntry(elem);
    const [addr, proto, port] = entry?.key ?? [];
    const target = verdictTargets(entry?.value)[0];
    if (typeof addr !== 'string' || typeof proto !== 'string' || typeof port !== 'number' || !target) continue;
    const ranges: string[] = [];
    for (const exprs of rs.chains.get(target) ?? []) {
      for (const e of exprs) {
        const match = asRecord(asRecord(e)?.match);
        if (asRecord(asRecord(match?.left)?.payload)?.field !== 'saddr') continue;
        const right = asRecord(match?.right)?.set ?? match?.right;
        for (const v of Array.isArray(right) ? right : [right]) ranges.push(...nftAddress(v));
      }
    }
    out[frontendKey(addr, port, proto)] = clean(ranges);
  }
  return out;
}

/** An nft set element as CIDRs: "a.b.c.d", {prefix: {addr, len}}, or a wrapped {elem: {val}}. */
function nftAddress(v: Json): string[] {
  const inner = asRecord(asRecord(v)?.elem)?.val ?? v;
  if (typeof inner === 'string') return [inner];
  const prefix = asRecord(asRecord(inner)?.prefix);
  if (prefix && typeof prefix.addr === 'string' && typeof prefix.len === 'number') return [`${prefix.addr}/${prefix.len}`];
  return [];
}

/** Read kube-proxy's rules in `node`'s namespace and return its source ranges per LoadBalancer frontend. */
export async function kubeProxySourceRanges(node: ClusterNode, mode: KubeProxyMode, opts: ParseOptions = {}): Promise<Record<string, string[]>> {
  return parseSourceRanges(await dumpRules(node, mode), mode, opts);
}
