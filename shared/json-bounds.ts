import { RequestValidationError } from './errors.ts';

/**
 * How deep a request's JSON may nest. Far above what any Messages request needs (a tool's
 * schema, a tool call's input), far below what recursive code (JSON.stringify, ~5,000 levels)
 * overflows on.
 */
export const MAX_JSON_DEPTH = 64;

/** Path segments shown of a field nested too deep; the rest is counted. */
const SHOWN = 8;

/**
 * The path of the first value nested deeper than `maxDepth` levels (the root's fields are at
 * level 1), or undefined. Walks with a stack of its own: never recurses, whatever the depth.
 */
export function tooDeepAt(value: unknown, maxDepth = MAX_JSON_DEPTH): string[] | undefined {
  interface Frame {
    readonly v: unknown;
    readonly depth: number;
    readonly key: string;
    readonly up: Frame | undefined;
  }
  const stack: Frame[] = [{ v: value, depth: 0, key: '', up: undefined }];
  while (stack.length > 0) {
    const f = stack.pop()!;
    if (f.v === null || typeof f.v !== 'object') continue;
    if (f.depth >= maxDepth) {
      const path: string[] = [];
      for (let at: Frame | undefined = f; at?.up; at = at.up) path.push(at.key);
      return path.reverse();
    }
    const entries = Array.isArray(f.v) ? f.v.entries() : Object.entries(f.v);
    for (const [k, v] of entries) {
      if (v !== null && typeof v === 'object')
        stack.push({ v, depth: f.depth + 1, key: String(k), up: f });
    }
  }
  return undefined;
}

/** A path for a message: its first segments, then how many more. */
export function shownPath(path: readonly string[], under = ''): string {
  const head = path.slice(0, SHOWN).join('.');
  const more = path.length > SHOWN ? `.… (${path.length} levels)` : '';
  return `${under}${head}${more}` || '(body)';
}

/**
 * Throws a {@link RequestValidationError} naming the field when `value` nests deeper than
 * `maxDepth`; `under` prefixes the field (`request.`).
 */
export function checkJsonDepth(value: unknown, under = '', maxDepth = MAX_JSON_DEPTH): void {
  const path = tooDeepAt(value, maxDepth);
  if (path === undefined) return;
  throw new RequestValidationError([
    {
      field: shownPath(path, under),
      message: `is nested more than ${maxDepth} levels deep: flatten it`,
    },
  ]);
}
