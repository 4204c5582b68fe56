// `sluice ct list [-o json]`: the TC path's connection tracking table, read
// from the pinned map (no agent needed).
import type { Command } from '../../cli/main';
import { DEFAULT_BPFFS } from '../maps';
import { formatConntrack, readConntrack } from './conntrack';

export const commands: Record<string, Command> = {
  ct: {
    summary: 'ct list [-o json]: flows the TC path tracks (NodePort/ExternalIP/LoadBalancer from outside), IPv4 and IPv6',
    values: ['bpffs', 'output'],
    run(args) {
      if (args.positional[0] !== 'list') throw new Error('usage: sluice ct list [-o json] [--bpffs DIR]');
      const rows = readConntrack(args.flags.get('bpffs') ?? DEFAULT_BPFFS);
      if (args.flags.get('output') === 'json') process.stdout.write(JSON.stringify(rows, null, 2) + '\n');
      else process.stdout.write((rows.length ? formatConntrack(rows) : 'no tracked flows') + '\n');
      return 0;
    },
  },
};
