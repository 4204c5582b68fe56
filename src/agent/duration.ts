// Go's time.ParseDuration syntax, as kube-proxy's flags and config file take
// durations ("30s", "1m", "500ms", "1h30m", "0"): a sequence of decimal
// numbers, each with a unit (ns, us, µs, ms, s, m, h).

const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, 'μs': 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds, or an error naming what was wrong. */
export function parseDurationMs(text: string, what: string): number {
  const s = text.trim();
  if (s === '0') return 0;
  let sign = 1;
  let rest = s;
  if (rest.startsWith('-') || rest.startsWith('+')) {
    sign = rest.startsWith('-') ? -1 : 1;
    rest = rest.slice(1);
  }
  if (rest === '') throw new Error(`${what}: ${JSON.stringify(text)} is not a duration (e.g. 30s, 1m, 500ms)`);
  let total = 0;
  const part = /^(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/;
  while (rest !== '') {
    const m = part.exec(rest);
    if (!m) throw new Error(`${what}: ${JSON.stringify(text)} is not a duration (e.g. 30s, 1m, 500ms)`);
    total += Number(m[1]) * UNIT_MS[m[2]!]!;
    rest = rest.slice(m[0].length);
  }
  return sign * total;
}

/**
 * A flag value: a Go duration, or (as Sluice's flags always took) a bare
 * number in `bareUnit`s.
 */
export function parseDurationFlagMs(text: string, what: string, bareUnitMs: number): number {
  if (/^\d+(\.\d+)?$/.test(text.trim())) return Number(text) * bareUnitMs;
  return parseDurationMs(text, what);
}
