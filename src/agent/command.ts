// `sluice agent` on the command line.
import type { Command } from '../cli/main';
import { AGENT_FLAGS, resolveConfigWithNotes } from './config';
import { makeLogger, startAgent } from './agent';
import { installRejectionGuard } from './crashGuard';
import { memorySettings } from './nodeFlags';

export const commands: Record<string, Command> = {
  agent: {
    summary: 'run the agent: watch the API server and keep the maps in sync (kube-proxy replacement)',
    values: AGENT_FLAGS,
    async run(args) {
      const { config, ignored } = resolveConfigWithNotes(args.flags);
      const log = makeLogger(config.logLevel);
      // Counted once the metrics exist; until then the log line is the record.
      let count: (reason: string) => void = () => undefined;
      installRejectionGuard(log, (reason) => count(reason));
      log.info({ config: { ...config }, memory: memorySettings() }, 'starting');
      if (ignored.length > 0) {
        log.info({ ignored }, `KubeProxyConfiguration: ${ignored.length} fields have no meaning for Sluice and are ignored: ${ignored.map((f) => f.field).join(', ')}`);
      }
      const agent = await startAgent(config, log);
      count = (reason) => agent.metrics.errors.inc({ reason });
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
