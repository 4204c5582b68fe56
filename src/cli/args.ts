// A small, strict command-line parser: positional words, --flag value,
// --flag=value, -o json, and boolean --flags. Unknown flags are errors.
export interface ParsedArgs {
  positional: string[];
  flags: Map<string, string>;
}

export class UsageError extends Error {}

export function parseArgs(argv: string[], known: { values: string[]; booleans?: string[] }): ParsedArgs {
  const positional: string[] = [];
  const flags = new Map<string, string>();
  const values = new Set(known.values);
  const booleans = new Set(known.booleans ?? []);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '-o') {
      const v = argv[++i];
      if (v === undefined) throw new UsageError('-o needs a value (json or table)');
      flags.set('output', v);
      continue;
    }
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    if (booleans.has(name)) {
      flags.set(name, eq === -1 ? 'true' : arg.slice(eq + 1));
    } else if (values.has(name)) {
      const v = eq === -1 ? argv[++i] : arg.slice(eq + 1);
      if (v === undefined) throw new UsageError(`--${name} needs a value`);
      flags.set(name, v);
    } else {
      throw new UsageError(`unknown flag --${name}`);
    }
  }
  return { positional, flags };
}

/** Render rows as an aligned text table. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd();
  return [line(header), ...rows.map(line)].join('\n') + '\n';
}
