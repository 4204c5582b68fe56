// The node flags the agent runs with (the image's NODE_OPTIONS, and the
// bench's and tests' agent processes: src/lab/agentProcess.ts). Empty until
// a flag is measured to help (docs/bench.md, "agent memory").
export const AGENT_NODE_FLAGS: readonly string[] = [];
