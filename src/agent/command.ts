// `sluice agent` on the command line.
import type { Command } from '../cli/main';
import { AGENT_FLAGS, resolveConfig } from './config';
import { makeLogger, startAgent } from './agent';

export const commands: Record<string, Command> = {
  agent: {
    summary: 'run the agent: watch the API server and keep the maps in sync (kube-proxy replacement)',
    values: AGENT_FLAGS,
    async run(args) {
      const config = resolveConfig(args.flags);
      const log = makeLogger(config.logLevel);
      log.info({ config: { ...config } }, 'starting');
      const agent = await startAgent(config, log);
      await new Promise<void>((resolve) => {
        const stop = (signal: string) => {
          log.info({ signal }, 'shutting down (maps and programs stay attached)');
          agent.stop().then(resolve, resolve);
        };
        process.once('SIGTERM', () => stop('SIGTERM'));
        process.once('SIGINT', () => stop('SIGINT'));
      });
      return 0;
    },
  },
};
