// `sluice demo` (what `make demo` runs).
import type { Command } from '../cli/main';
import { runDemo } from './demo';

export const commands: Record<string, Command> = {
  demo: {
    summary: 'run Sluice end to end on an embedded default: built-in API, agent, backends in a netns, real traffic',
    values: ['duration'],
    async run(args) {
      const d = args.flags.get('duration');
      const duration = d === undefined ? undefined : Number(d);
      if (duration !== undefined && (!Number.isFinite(duration) || duration < 0)) throw new Error(`--duration ${d}: seconds, 0 or more`);
      await runDemo({ duration });
      return 0;
    },
  },
};
