// A LIST page decoded one item at a time (issue 12 item 3).
//
// JSON.parse of a whole page (500 realistic EndpointSlices, ~2.5 MB) builds
// every item before the first one is projected into its slim record, so the
// whole parsed page is alive through the young generation's collections and
// gets copied, then promoted: with the agent's 1 MiB semi-space
// (nodeFlags.ts) that was most of the list's CPU (10k Services x 10: GC
// 1.3 s of 1.4 s decode CPU, measured in-process). Here the page is scanned
// once for the byte span of each element of its top-level "items" array
// (strings skipped with memchr, nesting counted), and each item is parsed
// and handed over on its own, so only one item is alive at a time.
//
// The scan only finds spans; JSON.parse still validates every byte. A page
// the scan cannot follow (not an object, no "items" list) is parsed whole,
// as before, so its error message is JSON.parse's own.

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJ = 0x7b;
const CLOSE_OBJ = 0x7d;
const OPEN_LIST = 0x5b;
const CLOSE_LIST = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

class Unfollowable extends Error {}

function skipSpace(b: Buffer, i: number): number {
  while (i < b.length && isSpace(b[i]!)) i++;
  return i;
}

/** i at an opening quote: the index just past its closing quote. */
function skipString(b: Buffer, i: number): number {
  let j = i + 1;
  for (;;) {
    const q = b.indexOf(QUOTE, j);
    if (q < 0) throw new Unfollowable('unterminated string');
    // An odd run of backslashes before it escapes the quote.
    let n = 0;
    for (let k = q - 1; k > i && b[k] === BACKSLASH; k--) n++;
    if (n % 2 === 0) return q + 1;
    j = q + 1;
  }
}

/** i at the start of a value: the index just past it. */
function skipValue(b: Buffer, i: number): number {
  const c = b[i];
  if (c === QUOTE) return skipString(b, i);
  if (c !== OPEN_OBJ && c !== OPEN_LIST) {
    // A number, true, false or null: up to the next delimiter.
    while (i < b.length) {
      const d = b[i]!;
      if (d === COMMA || d === CLOSE_OBJ || d === CLOSE_LIST || isSpace(d)) break;
      i++;
    }
    return i;
  }
  let depth = 0;
  while (i < b.length) {
    const d = b[i]!;
    if (d === QUOTE) {
      i = skipString(b, i);
      continue;
    }
    if (d === OPEN_OBJ || d === OPEN_LIST) depth++;
    else if (d === CLOSE_OBJ || d === CLOSE_LIST) {
      depth--;
      if (depth === 0) return i + 1;
    }
    i++;
  }
  throw new Unfollowable('unterminated value');
}

export interface DecodedPage<T> {
  /** The page without its items (kind, apiVersion, metadata). */
  head: { metadata?: { resourceVersion?: string; continue?: string } };
  /** Each item parsed when the iteration reaches it. */
  items: Iterable<T>;
  count: number;
}

/** Splits a list page into its head and its items' spans; JSON.parse of the whole page when it cannot. */
export function decodeListPage<T>(body: Buffer): DecodedPage<T> {
  let spans: Int32Array | undefined;
  let count = 0;
  const head: Record<string, unknown> = {};
  try {
    let i = skipSpace(body, 0);
    if (body[i] !== OPEN_OBJ) throw new Unfollowable('not an object');
    i = skipSpace(body, i + 1);
    let sawItems = false;
    while (body[i] !== CLOSE_OBJ) {
      if (body[i] !== QUOTE) throw new Unfollowable('key expected');
      const keyEnd = skipString(body, i);
      const key = JSON.parse(body.toString('utf8', i, keyEnd)) as string;
      i = skipSpace(body, keyEnd);
      if (body[i] !== COLON) throw new Unfollowable('colon expected');
      i = skipSpace(body, i + 1);
      if (key === 'items' && body[i] === OPEN_LIST) {
        sawItems = true;
        let cap = 64;
        spans = new Int32Array(cap * 2);
        i = skipSpace(body, i + 1);
        while (body[i] !== CLOSE_LIST) {
          const end = skipValue(body, i);
          if (count === cap) {
            const grown = new Int32Array((cap *= 2) * 2);
            grown.set(spans);
            spans = grown;
          }
          spans[count * 2] = i;
          spans[count * 2 + 1] = end;
          count++;
          i = skipSpace(body, end);
          if (body[i] === COMMA) i = skipSpace(body, i + 1);
          else if (body[i] !== CLOSE_LIST) throw new Unfollowable('comma expected');
        }
        i = skipSpace(body, i + 1);
      } else {
        const end = skipValue(body, i);
        head[key] = JSON.parse(body.toString('utf8', i, end));
        i = skipSpace(body, end);
      }
      if (body[i] === COMMA) i = skipSpace(body, i + 1);
      else if (body[i] !== CLOSE_OBJ) throw new Unfollowable('comma expected');
    }
    if (skipSpace(body, i + 1) !== body.length) throw new Unfollowable('trailing bytes');
    if (!sawItems) throw new Unfollowable('no items list');
  } catch (err) {
    if (!(err instanceof Unfollowable) && !(err instanceof SyntaxError)) throw err;
    // Parsed whole: the items are then all in memory at once, as before.
    const page = JSON.parse(body.toString('utf8')) as DecodedPage<T>['head'] & { items?: T[] };
    const items = page.items ?? [];
    return { head: page, items, count: items.length };
  }
  const at = spans!;
  const n = count;
  const items: Iterable<T> = {
    *[Symbol.iterator]() {
      for (let k = 0; k < n; k++) yield JSON.parse(body.toString('utf8', at[k * 2]!, at[k * 2 + 1]!)) as T;
    },
  };
  return { head, items, count: n };
}
