// The node flags the agent runs with: the image's NODE_OPTIONS
// (deploy/Dockerfile; test/unit/node-flags.test.ts keeps the two equal) and
// the bench's and tests' agent processes (src/lab/agentProcess.ts).
//
// --max-semi-space-size=1 (MiB; node 20's default grows to 16): the young
// generation is most of the heap the agent commits and never uses again
// after its start. Measured at 10k Services x 10 endpoints (docs/bench.md,
// "agent memory"): RSS 232 -> 170 MiB, cold-start CPU and one-change sync
// time within the noise of a shared machine.
export const AGENT_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=1'];
