// `sluice apiserver`: the built-in Kubernetes API on its own, for trying
// Sluice without a cluster (docs/builtin-api.md says what it implements).
import type { Command } from '../../cli/main';
import { parseHostPort } from '../../agent/config';
import { startApiServer } from './server';

export const commands: Record<string, Command> = {
  apiserver: {
    summary: 'serve the built-in Kubernetes API (Services, EndpointSlices, Nodes) for tests and demos',
    values: ['listen', 'service-cidr', 'node-port-range', 'kubeconfig-out'],
    booleans: ['strict-validation', 'allow-non-loopback'],
    async run(args) {
      const { host, port } = parseHostPort(args.flags.get('listen') ?? '127.0.0.1:6443', '--listen');
      const api = await startApiServer({
        host, port,
        serviceCIDR: args.flags.get('service-cidr'),
        nodePortRange: args.flags.get('node-port-range'),
        strictValidation: args.flags.get('strict-validation') === 'true',
        allowNonLoopback: args.flags.get('allow-non-loopback') === 'true',
      });
      const out = args.flags.get('kubeconfig-out');
      if (out) await api.writeKubeconfig(out);
      process.stdout.write(`built-in API server at ${api.url}${out ? `; kubeconfig: ${out}` : ''}\n`);
      await new Promise<void>((resolve) => {
        process.once('SIGTERM', resolve);
        process.once('SIGINT', resolve);
      });
      await api.close();
      return 0;
    },
  },
};
