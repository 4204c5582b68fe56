// Which iptables chains kube-proxy leaves behind, and the iptables-restore
// input that removes them. Pure functions over `iptables-save` text, so the
// plan is testable on a saved ruleset and printable with --dry-run.
//
// The chain set is kube-proxy's own (v1.34 pkg/proxy/iptables and ipvs
// CleanupLeftovers): its fixed chains per table, plus the per-service
// KUBE-SVC-/SVL-/SEP-/FW-/EXT- chains. kubelet's chains (KUBE-FIREWALL,
// KUBE-KUBELET-CANARY, KUBE-MARK-DROP) are kubelet's, and stay.
//
// kube-proxy deletes its jump rules by their exact text; we delete every rule
// in a surviving chain that jumps into a chain we remove, which covers the same
// rules plus the ones older kube-proxy versions wrote with other comments (a
// chain that is still referenced cannot be deleted, and the whole restore
// would fail).

/** Fixed chains per table: iptables mode and ipvs mode together. */
export const KUBE_PROXY_CHAINS: Record<string, readonly string[]> = {
  nat: [
    'KUBE-SERVICES', 'KUBE-NODEPORTS', 'KUBE-POSTROUTING', 'KUBE-MARK-MASQ', 'KUBE-PROXY-CANARY',
    'KUBE-NODE-PORT', 'KUBE-LOAD-BALANCER', // ipvs mode
  ],
  filter: [
    'KUBE-SERVICES', 'KUBE-EXTERNAL-SERVICES', 'KUBE-FORWARD', 'KUBE-NODEPORTS', 'KUBE-PROXY-FIREWALL', 'KUBE-PROXY-CANARY',
    'KUBE-NODE-PORT', 'KUBE-SOURCE-RANGES-FIREWALL', 'KUBE-IPVS-FILTER', 'KUBE-IPVS-OUT-FILTER', // ipvs mode
  ],
  mangle: ['KUBE-PROXY-CANARY'],
};

/** Per-service chains (nat table) are named by a prefix and a hash. */
export const KUBE_PROXY_CHAIN_PREFIXES = ['KUBE-SVC-', 'KUBE-SVL-', 'KUBE-SEP-', 'KUBE-FW-', 'KUBE-EXT-'] as const;

export interface SavedTable {
  name: string;
  chains: string[];
  /** Rules as iptables-save prints them: "-A CHAIN match... -j TARGET". */
  rules: string[];
}

/** Parse `iptables-save` output (any number of tables). */
export function parseIptablesSave(text: string): SavedTable[] {
  const tables: SavedTable[] = [];
  let current: SavedTable | undefined;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    if (line.startsWith('*')) {
      current = { name: line.slice(1), chains: [], rules: [] };
      tables.push(current);
    } else if (line === 'COMMIT') {
      current = undefined;
    } else if (current && line.startsWith(':')) {
      current.chains.push(line.slice(1).split(/\s+/)[0]!);
    } else if (current && line.startsWith('-A ')) {
      current.rules.push(line);
    }
  }
  return tables;
}

export function isKubeProxyChain(table: string, chain: string): boolean {
  if (KUBE_PROXY_CHAINS[table]?.includes(chain)) return true;
  return table === 'nat' && KUBE_PROXY_CHAIN_PREFIXES.some((p) => chain.startsWith(p));
}

const chainOfRule = (rule: string): string => rule.split(/\s+/)[1] ?? '';
/** The -j (jump) or -g (goto) target of a rule, if any. */
export function targetOfRule(rule: string): string | undefined {
  return /(?:^|\s)-[jg]\s+(\S+)/.exec(rule)?.[1];
}

export interface TableCleanup {
  table: string;
  /** Chains flushed and deleted. */
  chains: string[];
  /** Rules in other chains that jump into them, deleted first. */
  jumpRules: string[];
  /** Input for `iptables-restore --noflush`: one atomic commit. */
  restoreInput: string;
}

/** What to remove from one `iptables-save` output; empty when nothing of kube-proxy's is there. */
export function planIptablesCleanup(saveOutput: string): TableCleanup[] {
  const plans: TableCleanup[] = [];
  for (const table of parseIptablesSave(saveOutput)) {
    const chains = table.chains.filter((c) => isKubeProxyChain(table.name, c));
    if (chains.length === 0) continue;
    const doomed = new Set(chains);
    const jumpRules = table.rules.filter((r) => !doomed.has(chainOfRule(r)) && doomed.has(targetOfRule(r) ?? ''));
    // In --noflush mode a chain line flushes that chain; -D then -X run in
    // the same commit, so the table changes all at once or not at all.
    const restoreInput = [
      `*${table.name}`,
      ...chains.map((c) => `:${c} - [0:0]`),
      ...jumpRules.map((r) => `-D ${r.slice(3)}`),
      ...chains.map((c) => `-X ${c}`),
      'COMMIT',
      '',
    ].join('\n');
    plans.push({ table: table.name, chains, jumpRules, restoreInput });
  }
  return plans;
}
