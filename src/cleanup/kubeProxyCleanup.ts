// `sluice cleanup-kube-proxy`: remove what kube-proxy left in the node's
// network namespace, as `kube-proxy --cleanup` does: its iptables chains
// (iptables and ipvs modes, IPv4 and IPv6, both the nft and the legacy iptables
// backends, since the kube-proxy image may have used either), its nftables
// tables (`ip kube-proxy`, `ip6 kube-proxy`), and the ipvs mode's dummy device
// and ipsets. Run it after kube-proxy is gone, or it writes them back.
//
// It acts on the network namespace it runs in: on a node that is the host's
// (hostNetwork), in tests a namespace the test created.
import { spawnSync } from 'node:child_process';
import { planIptablesCleanup } from './iptablesPlan';

export interface CleanupStep {
  /** What the step removes, for people. */
  what: string;
  argv: string[];
  /** stdin for the command (iptables-restore input). */
  input?: string;
}

export interface CleanupPlan {
  steps: CleanupStep[];
  /** Tools that were looked for and not found, and what that means. */
  notes: string[];
  /** Rules that could not be read (the command exits non-zero). */
  errors: string[];
}

export interface StepResult extends CleanupStep {
  ok: boolean;
  error?: string;
}

const TIMEOUT_MS = 60_000;

interface Run { status: number | null; stdout: string; stderr: string; missing: boolean }

function run(argv: string[], input?: string): Run {
  const r = spawnSync(argv[0]!, argv.slice(1), { input, encoding: 'utf8', timeout: TIMEOUT_MS, maxBuffer: 256 * 1024 * 1024 });
  const missing = (r.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';
  return { status: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? (r.error?.message ?? ''), missing };
}

/** The iptables save/restore pairs present: per backend and family. */
function iptablesFlavours(): Array<{ label: string; save: string; restore: string }> {
  const out: Array<{ label: string; save: string; restore: string }> = [];
  for (const family of ['iptables', 'ip6tables']) {
    let found = false;
    for (const backend of ['nft', 'legacy']) {
      const save = `${family}-${backend}-save`;
      if (!run([save, '--version']).missing) {
        out.push({ label: `${family} (${backend})`, save, restore: `${family}-${backend}-restore` });
        found = true;
      }
    }
    // Distributions without the -nft/-legacy names: the one default backend.
    if (!found && !run([`${family}-save`, '--version']).missing) {
      out.push({ label: family, save: `${family}-save`, restore: `${family}-restore` });
    }
  }
  return out;
}

/** Read the current rules and say what would be removed. Reads only. */
export function planKubeProxyCleanup(): CleanupPlan {
  const steps: CleanupStep[] = [];
  const notes: string[] = [];
  const errors: string[] = [];

  const flavours = iptablesFlavours();
  if (flavours.length === 0) notes.push('no iptables-save found: iptables rules not checked');
  for (const f of flavours) {
    const saved = run([f.save]);
    if (saved.status !== 0) {
      errors.push(`${f.save} failed (${saved.stderr.trim() || `exit ${saved.status}`}): ${f.label} rules not checked`);
      continue;
    }
    for (const t of planIptablesCleanup(saved.stdout)) {
      const jumps = t.jumpRules.length ? ` and ${t.jumpRules.length} jump rule(s) into them` : '';
      steps.push({
        what: `${f.label} table ${t.table}: flush and delete ${t.chains.length} kube-proxy chain(s)${jumps}`,
        argv: [f.restore, '--noflush', '--counters'],
        input: t.restoreInput,
      });
    }
  }

  const tables = run(['nft', 'list', 'tables']);
  if (tables.missing) notes.push('nft not found: nftables tables not checked');
  else if (tables.status !== 0) errors.push(`nft list tables failed (${tables.stderr.trim() || `exit ${tables.status}`}): nftables tables not checked`);
  else {
    for (const family of ['ip', 'ip6']) {
      if (new RegExp(`^table ${family} kube-proxy$`, 'm').test(tables.stdout)) {
        steps.push({ what: `nftables table ${family} kube-proxy`, argv: ['nft', 'delete', 'table', family, 'kube-proxy'] });
      }
    }
  }

  // ipvs mode: the dummy device holding every ClusterIP, the virtual servers, the ipsets.
  const dummy = run(['ip', '-o', 'link', 'show', 'dev', 'kube-ipvs0']);
  if (dummy.status === 0) {
    if (run(['ipvsadm', '--version']).missing) notes.push('kube-ipvs0 exists but ipvsadm is not installed: ipvs virtual servers not flushed');
    else steps.push({ what: 'ipvs virtual servers (kube-proxy ipvs mode)', argv: ['ipvsadm', '--clear'] });
    steps.push({ what: 'dummy device kube-ipvs0 (kube-proxy ipvs mode)', argv: ['ip', 'link', 'delete', 'dev', 'kube-ipvs0'] });
  }
  const sets = run(['ipset', 'list', '-n']);
  if (!sets.missing && sets.status === 0) {
    // ipsets go after the iptables rules that reference them (steps run in order).
    for (const name of sets.stdout.split('\n').map((s) => s.trim()).filter((s) => s.startsWith('KUBE-'))) {
      steps.push({ what: `ipset ${name} (kube-proxy ipvs mode)`, argv: ['ipset', 'destroy', name] });
    }
  }
  return { steps, notes, errors };
}

/** Run every step; one failing does not stop the others (as kube-proxy). */
export function applyKubeProxyCleanup(plan: CleanupPlan): StepResult[] {
  return plan.steps.map((step) => {
    const r = run(step.argv, step.input);
    const ok = r.status === 0;
    return ok ? { ...step, ok } : { ...step, ok, error: r.missing ? `${step.argv[0]} not found` : (r.stderr.trim() || `exit ${r.status}`) };
  });
}
