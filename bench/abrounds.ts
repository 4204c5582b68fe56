// Two builds of one BPF object measured alternated in one run (A then B,
// B then A on odd rounds), each build's figure the range of its round
// figures: the plumbing of the PROG_TEST_RUN A/B benches (tcrewrite.ts,
// podprogtime.ts), which differ only in what one round measures.

/** `--name value` from argv, or `fallback`; throws when neither is there. */
export function arg(argv: string[], name: string, fallback?: string): string {
  const i = argv.indexOf(`--${name}`);
  const v = i >= 0 ? argv[i + 1] : fallback;
  if (v === undefined) throw new Error(`--${name} is required`);
  return v;
}

export interface RoundResult {
  ns: Record<string, number>;
  verified: Record<string, number>;
}

/** Runs `measure` on A and B alternated `rounds` times and prints one JSON line per build. */
export function alternateAB(objects: { A: string; B: string }, rounds: number, measure: (object: string) => RoundResult, extra: Record<string, unknown>): void {
  const seen: Record<'A' | 'B', Array<Record<string, number>>> = { A: [], B: [] };
  const verified: Partial<Record<'A' | 'B', Record<string, number>>> = {};
  for (let round = 0; round < rounds; round++) {
    for (const which of (round % 2 ? ['B', 'A'] : ['A', 'B']) as Array<'A' | 'B'>) {
      const m = measure(objects[which]);
      seen[which].push(m.ns);
      verified[which] = m.verified;
    }
  }
  const range = (xs: number[]) => `${Math.min(...xs)}–${Math.max(...xs)}`;
  for (const which of ['A', 'B'] as const) {
    const row: Record<string, string> = {};
    for (const name of Object.keys(seen[which][0] ?? {})) row[name] = range(seen[which].map((s) => s[name]!));
    process.stdout.write(`${JSON.stringify({ build: which, object: objects[which], ...extra, rounds, medianNsPerPacket: row, verifiedInsns: verified[which] })}\n`);
  }
}
