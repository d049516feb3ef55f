import { z } from 'zod';
import { type FieldIssue, RequestValidationError } from './errors.ts';
import { checkJsonDepth } from './json-bounds.ts';

/**
 * The subset of an Anthropic Messages request that llmq checks before it enqueues. Fields it
 * does not know pass through untouched, so new API features need no llmq release.
 */
const textBlock = z.looseObject({ type: z.literal('text'), text: z.string() });
const anyBlock = z.looseObject({ type: z.string().min(1) });
const content = z.union([z.string().min(1), z.array(anyBlock).min(1)]);

export const MessagesRequestSchema = z.looseObject({
  model: z.string().min(1, 'must be a model name such as "claude-sonnet-4-5"'),
  max_tokens: z
    .number('must be a whole number from 1 up')
    .int('must be a whole number from 1 up')
    .min(1, 'must be a whole number from 1 up'),
  messages: z
    .array(
      z.looseObject({
        role: z.enum(['user', 'assistant'], "must be 'user' or 'assistant'"),
        content,
      }),
    )
    .min(1, 'must hold at least one message'),
  system: z.union([z.string(), z.array(textBlock)]).optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.number().int().min(0).optional(),
  stop_sequences: z.array(z.string()).optional(),
  stream: z.boolean().optional(),
  tools: z.array(z.looseObject({ name: z.string().min(1) })).optional(),
  metadata: z.looseObject({}).optional(),
});

export type MessagesRequest = z.infer<typeof MessagesRequestSchema>;

/** Turns zod's issues into `field: message` pairs that name the path and the bad value. */
export function toFieldIssues(error: z.ZodError, input: unknown): FieldIssue[] {
  return error.issues.map((issue) => {
    const field = issue.path.map(String).join('.') || '(body)';
    const bad = valueAt(input, issue.path);
    const shown = bad === undefined ? 'missing' : `got ${truncate(JSON.stringify(bad))}`;
    return { field, message: `${issue.message} (${shown})` };
  });
}

/** The value at a path of a parsed body (undefined where it is missing). */
export function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = input;
  for (const p of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[p];
  }
  return v;
}

function truncate(s: string | undefined, max = 60): string {
  if (s === undefined) return 'undefined';
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/**
 * Validates a Messages request; throws a {@link RequestValidationError} naming the field. Its
 * nesting is bounded first, before anything that recurses sees it.
 */
export function parseMessagesRequest(input: unknown): MessagesRequest {
  checkJsonDepth(input);
  const parsed = MessagesRequestSchema.safeParse(input);
  if (!parsed.success) throw new RequestValidationError(toFieldIssues(parsed.error, input));
  return parsed.data;
}
