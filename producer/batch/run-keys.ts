/**
 * How a batch run keys its jobs: the idempotency key of a file (its content and every parameter
 * that shapes the summary), and what an earlier run's lines for it mean.
 */
import { createHash } from 'node:crypto';
import { jobIdForKey } from '../idempotency.ts';
import type { ResultLine } from './results-file.ts';

/**
 * The idempotency key of one file's job: its content and every parameter that shapes the
 * summary. How it is cut into parts follows the limits and what llmq learned, which change
 * from run to run: a rerun re-attaches to the parts already there, whatever it would cut now.
 * Only a part size the user chose (`--chunk-tokens`) is part of the key.
 */
export function idempotencyKey(p: {
  model: string;
  maxTokens: number;
  prompt: string;
  text: string;
  chunkTokens?: number | undefined;
}): string {
  const fields = ['llmq-batch-summarize/v1', p.model, p.maxTokens, p.prompt, p.text];
  if (p.chunkTokens !== undefined) fields.push(`parts:${p.chunkTokens}`);
  const h = createHash('sha256').update(JSON.stringify(fields));
  return `batch:${h.digest('hex')}`;
}

export type Decision = { kind: 'done'; line: ResultLine } | { kind: 'enqueue'; key: string };

/**
 * What to do with a file given the lines earlier runs wrote for it. A line counts only when its
 * id is one this content's keys map to (the base key, or a retry's key), so an edited file is
 * summarized again. A summary means done; an error or a refusal means done too, unless
 * `retryFailed`, which enqueues under the next retry key (the same key on a rerun until that
 * retry's line exists).
 */
export function decide(
  baseKey: string,
  lines: readonly ResultLine[],
  tenant: string | undefined,
  retryFailed: boolean,
): Decision {
  const keyOf = (n: number) => (n === 0 ? baseKey : `${baseKey}:retry-${n}`);
  const mine: ResultLine[] = [];
  for (let n = 0; n <= lines.length; n++) {
    const id = jobIdForKey(keyOf(n), tenant);
    for (const l of lines) if (l.id === id) mine.push(l);
  }
  const success = mine.find((l) => 'summary' in l);
  if (success) return { kind: 'done', line: success };
  const errors = mine.filter((l) => 'error' in l || 'refused' in l);
  const last = errors.at(-1);
  if (last && !retryFailed) return { kind: 'done', line: last };
  return { kind: 'enqueue', key: keyOf(errors.length) };
}
