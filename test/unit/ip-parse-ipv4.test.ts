// parseIPv4 (src/translate/ip.ts) scans the text instead of split() and a
// regex per group; it must accept and reject exactly what the split/regex
// version (kept here as the oracle) did, sloppy or strict.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseIP } from '../../src/translate/ip';

function splitParseIPv4(text: string, sloppy: boolean): number[] | undefined {
  const parts = text.split('.');
  if (parts.length !== 4) return undefined;
  const out: number[] = [];
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p)) return undefined;
    if (!sloppy && p.length > 1 && p[0] === '0') return undefined;
    const v = Number(p);
    if (v > 255) return undefined;
    out.push(v);
  }
  return out;
}

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

// Groups of 0-4 characters, mostly digits (leading zeros, values over 255), 3-5 of them, now and then another character.
const CHARS = ['0', '0', '1', '2', '5', '5', '9', '3', '7', '0', '2', '5', ' ', 'a', '-', '+', '١', 'e', '.', ':'];
function nearQuad(r: () => number): string {
  const groups: string[] = [];
  const n = r() < 0.8 ? 4 : 3 + Math.floor(r() * 3);
  for (let g = 0; g < n; g++) {
    let text = '';
    const len = r() < 0.9 ? 1 + Math.floor(r() * 3) : Math.floor(r() * 5);
    for (let c = 0; c < len; c++) text += r() < 0.95 ? CHARS[Math.floor(r() * 12)] : CHARS[12 + Math.floor(r() * 8)];
    groups.push(text);
  }
  return groups.join('.');
}

function check(text: string): void {
  for (const sloppy of [true, false]) {
    const want = splitParseIPv4(text, sloppy);
    const got = parseIP(text, sloppy);
    assert.deepEqual(got && [...got.bytes], want, `${JSON.stringify(text)} sloppy=${sloppy}`);
    if (want) assert.equal(got!.text, want.join('.'));
  }
}

test('parseIPv4: the scan agrees with split() + regex on 100 000 random near-quads, sloppy and strict', () => {
  const r = rng(7);
  let accepted = 0;
  for (let i = 0; i < 100_000; i++) {
    const text = nearQuad(r);
    if (text.includes(':')) continue; // parseIP reads it as IPv6
    check(text);
    if (splitParseIPv4(text, true)) accepted++;
  }
  assert.ok(accepted > 10_000, `valid addresses were among the cases (${accepted})`);
});

test('parseIPv4: edge spellings', () => {
  for (const text of ['0.0.0.0', '255.255.255.255', '256.0.0.1', '1.2.3.4', '01.2.3.4', '001.002.003.004', '0001.2.3.4', '1.2.3.00', '1.2.3', '1.2.3.4.', '.1.2.3', '1..2.3', '1.2.3.4.5', '1.2.3.1000', '999.1.1.1', '1.2.3.4 ', ' 1.2.3.4', '1.2.3.-4', '1.2.3.+4', '1.2.3.4e0']) {
    check(text);
  }
});
