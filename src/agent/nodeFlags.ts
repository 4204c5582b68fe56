// The node flags and environment the agent runs with: bin/sluice's first line
// (`env -S`), the image's ENV (deploy/Dockerfile) and the bench's and tests'
// agent processes (src/lab/agentProcess.ts); test/unit/node-flags.test.ts
// keeps them equal.
//
// --max-semi-space-size=1 (MiB; node 20's default grows to 16): the young
// generation is most of the heap the agent commits and never uses again
// after its start. Measured at 10k Services x 10 endpoints (docs/bench.md,
// "agent memory"): RSS 232 -> 170 MiB, cold-start CPU and one-change sync
// time within the noise of a shared machine.
export const AGENT_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=1'];

/**
 * MALLOC_ARENA_MAX=2: glibc gives threads that malloc arenas of their own (up
 * to 8 per CPU), and V8's and libuv's helper threads keep freed memory in
 * them. Measured at 10k Services x 10 endpoints, built-in API, alternated
 * with the default (docs/bench.md, "agent memory"): RSS 132-145 -> 120-125
 * MiB, peak 281-310 -> 268-296 MiB. glibc reads it before node starts, so it
 * is environment, not something the agent can set for itself.
 */
export const AGENT_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2' };

/** What the agent runs with, for its `starting` line: node's flags (command line and NODE_OPTIONS) and the arena limit. */
export function memorySettings(): { nodeFlags: string[]; mallocArenaMax: string } {
  const fromEnv = (process.env['NODE_OPTIONS'] ?? '').split(' ').filter(Boolean);
  return { nodeFlags: [...fromEnv, ...process.execArgv], mallocArenaMax: process.env['MALLOC_ARENA_MAX'] ?? 'glibc default' };
}
