// `sluice cleanup-kube-proxy [--dry-run] [-o json]` on the command line.
import type { Command } from '../cli/main';
import { UsageError } from '../cli/args';
import { applyKubeProxyCleanup, planKubeProxyCleanup } from './kubeProxyCleanup';

export const commands: Record<string, Command> = {
  'cleanup-kube-proxy': {
    summary: "remove kube-proxy's iptables chains, nftables tables and ipvs leftovers (like kube-proxy --cleanup); --dry-run prints them",
    values: ['output'],
    booleans: ['dry-run'],
    run(a) {
      const output = a.flags.get('output') ?? 'table';
      if (output !== 'json' && output !== 'table') throw new UsageError(`-o ${output}: use json or table`);
      const dryRun = a.flags.get('dry-run') === 'true';
      const plan = planKubeProxyCleanup();
      const results = dryRun ? undefined : applyKubeProxyCleanup(plan);
      const failed = results?.filter((r) => !r.ok) ?? [];

      if (output === 'json') {
        process.stdout.write(JSON.stringify({ dryRun, steps: results ?? plan.steps, notes: plan.notes, errors: plan.errors }, null, 2) + '\n');
      } else {
        const out: string[] = [];
        if (plan.steps.length === 0 && plan.errors.length === 0) out.push('no kube-proxy rules found: nothing to do');
        for (const step of results ?? plan.steps) {
          const r = step as Partial<(typeof failed)[number]>;
          const mark = dryRun ? 'would remove' : r.ok ? 'removed' : 'FAILED';
          out.push(`${mark}: ${step.what}${r.error ? ` (${r.error})` : ''}`);
          if (dryRun) {
            out.push(`  $ ${step.argv.join(' ')}${step.input ? ' <<EOF' : ''}`);
            if (step.input) out.push(...step.input.trimEnd().split('\n').map((l) => `  ${l}`), '  EOF');
          }
        }
        for (const note of plan.notes) out.push(`note: ${note}`);
        for (const error of plan.errors) out.push(`error: ${error}`);
        process.stdout.write(out.join('\n') + '\n');
      }
      return failed.length || plan.errors.length ? 1 : 0;
    },
  },
};
