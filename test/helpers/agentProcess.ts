// The real agent entry point for the e2e tier: src/lab/agentProcess.ts with
// the tier's rules applied to every agent a test starts.
import { AgentProcess as LabAgentProcess, AGENT_CAPS, withCaps, type AgentProcessOptions } from '../../src/lab/agentProcess';

export { AGENT_CAPS, withCaps };
export type { AgentLine as AgentLogLine } from '../../src/lab/agentProcess';

export class AgentProcess extends LabAgentProcess {
  /**
   * Exactly AGENT_CAPS unless the test asks for others (and says why); and
   * the machine's /run/netns holds other tests' namespaces, so an agent under
   * test walks only the ones its test names (stale-socket termination).
   */
  constructor(args: string[], opts: AgentProcessOptions = {}) {
    const netns = args.some((a) => a.startsWith('--stale-socket-netns')) ? [] : ['--stale-socket-netns='];
    super([...args, ...netns], { ...opts, caps: opts.caps ?? AGENT_CAPS });
  }
}
