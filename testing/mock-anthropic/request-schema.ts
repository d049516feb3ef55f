/**
 * Validation of Messages request bodies, with errors worded like the real API's (which come from
 * pydantic): `max_tokens: Field required`, `messages.0.role: Input should be 'user' or
 * 'assistant'`. Content is text, image and document blocks (content-blocks.ts); unknown extra
 * fields are accepted and ignored.
 */

import { z } from 'zod';
import type { FieldIssue } from '../../shared/errors.ts';
import {
  cacheControlSchema,
  contentBlockSchema,
  expected,
  textBlockSchema,
} from './content-blocks.ts';

/** The most `cache_control` breakpoints one request may carry. */
export const MAX_CACHE_BREAKPOINTS = 4;

const contentSchema = z.union([z.string(), z.array(contentBlockSchema)], {
  error: expected('a valid string or a list of content blocks'),
});

const messageSchema = z.looseObject({
  role: z.enum(['user', 'assistant'], { error: expected("'user' or 'assistant'") }),
  content: contentSchema,
});

const messagesSchema = z
  .array(messageSchema, { error: expected('a valid list') })
  .min(1, { error: 'at least one message is required' })
  .check((ctx) => {
    // The real API refuses empty turns; only a final assistant message (a prefill) may be empty.
    const messages = ctx.value;
    messages.forEach((message, index) => {
      const isFinalAssistant = index === messages.length - 1 && message.role === 'assistant';
      if (typeof message.content === 'string') {
        if (message.content.length === 0 && !isFinalAssistant) {
          ctx.issues.push({
            code: 'custom',
            input: message.content,
            path: [index],
            message:
              'all messages must have non-empty content except for the optional final assistant message',
          });
        }
        return;
      }
      message.content.forEach((block, blockIndex) => {
        if (block.type === 'text' && block.text.length === 0) {
          ctx.issues.push({
            code: 'custom',
            input: block.text,
            path: [index, 'content', blockIndex, 'text'],
            message: 'text content blocks must be non-empty',
          });
        }
      });
    });
  });

const toolSchema = z.looseObject({
  name: z.string({ error: expected('a valid string') }),
  cache_control: cacheControlSchema.nullish(),
});

/** Fields shared by `/v1/messages` and `/v1/messages/count_tokens`. */
const commonFields = {
  model: z.string({ error: expected('a valid string') }),
  messages: messagesSchema,
  system: z
    .union([z.string(), z.array(textBlockSchema)], {
      error: expected('a valid string or a list of text blocks'),
    })
    .optional(),
  tools: z.array(toolSchema, { error: expected('a valid list') }).optional(),
};

/** Body of `POST /v1/messages/count_tokens`. */
export const countTokensRequestSchema = z
  .looseObject(commonFields, { error: expected('a valid dictionary') })
  .check(checkBreakpoints);

/** Body of `POST /v1/messages`. */
export const messagesRequestSchema = z
  .looseObject(
    {
      ...commonFields,
      max_tokens: z
        .int({ error: expected('a valid integer') })
        .min(1, { error: 'Input should be greater than or equal to 1' }),
      stream: z.boolean({ error: expected('a valid boolean') }).optional(),
      temperature: z
        .number({ error: expected('a valid number') })
        .min(0, { error: 'Input should be greater than or equal to 0' })
        .max(1, { error: 'Input should be less than or equal to 1' })
        .optional(),
      top_p: z
        .number({ error: expected('a valid number') })
        .min(0, { error: 'Input should be greater than or equal to 0' })
        .max(1, { error: 'Input should be less than or equal to 1' })
        .optional(),
      top_k: z
        .int({ error: expected('a valid integer') })
        .min(0, { error: 'Input should be greater than or equal to 0' })
        .optional(),
      stop_sequences: z
        .array(z.string({ error: expected('a valid string') }), { error: expected('a valid list') })
        .optional(),
      metadata: z
        .looseObject(
          { user_id: z.string({ error: expected('a valid string') }).nullish() },
          { error: expected('a valid dictionary') },
        )
        .optional(),
    },
    { error: expected('a valid dictionary') },
  )
  .check(checkBreakpoints);

/** The API refuses more than four `cache_control` blocks in one request. */
function checkBreakpoints(ctx: z.core.ParsePayload<z.infer<z.ZodObject<typeof commonFields>>>) {
  const request = ctx.value;
  let found = 0;
  const count = (blocks: readonly { cache_control?: unknown }[] | string | undefined) => {
    if (typeof blocks === 'string' || blocks === undefined) return;
    for (const block of blocks) if (block.cache_control) found++;
  };
  count(request.tools);
  count(request.system);
  for (const message of request.messages) count(message.content);
  if (found > MAX_CACHE_BREAKPOINTS) {
    ctx.issues.push({
      code: 'custom',
      input: found,
      path: [],
      message: `A maximum of ${MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found ${found}.`,
    });
  }
}

export type CountTokensRequest = z.infer<typeof countTokensRequestSchema>;
export type MessagesRequest = z.infer<typeof messagesRequestSchema>;

/**
 * The issue to report, as the real API reports one: its dotted path and message. A failed union
 * (string or list of blocks) is reported from inside the branch the value was meant for, so a bad
 * block says `messages.0.content.0.type: …` rather than a vague "string or list".
 */
export function firstIssue(issues: readonly z.core.$ZodIssue[]): FieldIssue {
  const issue = issues[0];
  if (!issue) return { field: 'body', message: 'Input is invalid' };
  if (issue.code === 'invalid_union') {
    const branch = issue.errors.find(
      (branchIssues) =>
        !branchIssues.some((inner) => inner.code === 'invalid_type' && inner.path.length === 0),
    );
    const inner = branch ? firstIssue(branch) : undefined;
    if (inner) {
      const field = [...issue.path.map(String), inner.field]
        .filter((part) => part !== '')
        .join('.');
      return { field, message: inner.message };
    }
  }
  return { field: issue.path.map(String).join('.'), message: issue.message };
}

/** `field: message`, or the bare message for a problem with the body as a whole. */
export function describeIssue(issue: FieldIssue): string {
  return issue.field === '' ? issue.message : `${issue.field}: ${issue.message}`;
}
