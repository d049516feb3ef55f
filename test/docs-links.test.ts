/**
 * The docs a reader follows: every relative link of README.md and docs/*.md leads to a file that
 * exists, and the gateway's page sends readers to the page that explains the key options and the
 * wrong-key lockout (it once said "see the README", which does not explain them).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = new URL('../', import.meta.url).pathname;
const pages = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
const read = (page: string) => readFileSync(join(ROOT, page), 'utf8');

/** The sentence (up to its full stop) of a page that holds `words`. */
function sentenceWith(text: string, words: string): string {
  const flat = text.replace(/\s+/g, ' ');
  const at = flat.indexOf(words);
  if (at < 0) return '';
  const start = flat.lastIndexOf('. ', at) + 1;
  const end = flat.indexOf('. ', at);
  return flat.slice(start, end < 0 ? undefined : end);
}

describe('the docs', () => {
  it('every relative link leads to a file that exists', () => {
    const broken: string[] = [];
    for (const page of pages) {
      for (const [, target] of read(page).matchAll(/\]\(([^)#\s]+)(#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue;
        if (!existsSync(join(ROOT, dirname(page), target!))) broken.push(`${page} → ${target}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('the gateway page points to http-api.md for the key options and the wrong-key lockout', () => {
    const gateway = read('docs/gateway.md');
    expect(sentenceWith(gateway, 'count-tokens-rpm=N')).toContain('(http-api.md)');
    expect(sentenceWith(gateway, '5 wrong keys')).toContain('(http-api.md)');
    expect(gateway).not.toMatch(/see the README/);
    // And that page does explain them.
    const api = read('docs/http-api.md');
    for (const option of ['max-waiting', 'max-bytes', 'max-priority', 'count-tokens-rpm'])
      expect(api).toContain(option);
    expect(api).toMatch(/After 5 wrong keys from one address/);
  });
});
