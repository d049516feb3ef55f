/**
 * A refused Messages request, said in the API's words. The producer decides what is valid
 * (shared/request.ts); the gateway only rewords the first problem as the API's validator (pydantic)
 * says it: `messages: Field required`, `max_tokens: Input should be a valid integer`,
 * `messages.0.role: Input should be 'user' or 'assistant'`.
 */
import type { z } from 'zod';
import { MessagesRequestSchema, valueAt } from '../../shared/request.ts';
import { type ApiErrorAnswer, apiError } from './anthropic-errors.ts';

/** Fields the API types as integers (zod knows them as numbers). */
const INTEGER_FIELDS = new Set(['max_tokens', 'top_k']);

/** What the API expects, by the type zod expected. */
const EXPECTED: Readonly<Record<string, string>> = {
  array: 'a valid list',
  string: 'a valid string',
  number: 'a valid number',
  boolean: 'a valid boolean',
  object: 'a valid dictionary',
};

/** `'user' or 'assistant'`, `'a', 'b' or 'c'`: the choices as pydantic lists them. */
function choices(values: readonly unknown[]): string {
  const quoted = values.map((v) => `'${String(v)}'`);
  return quoted.length < 2
    ? quoted.join('')
    : `${quoted.slice(0, -1).join(', ')} or ${quoted.at(-1)}`;
}

/** The API's words for one issue, or undefined when it has none llmq knows. */
function wordsFor(issue: z.core.$ZodIssue, field: string, value: unknown): string | undefined {
  if (value === undefined) return 'Field required';
  switch (issue.code) {
    case 'invalid_type': {
      if (issue.expected === 'int')
        return 'Input should be a valid integer, got a number with a fractional part';
      if (INTEGER_FIELDS.has(field)) return 'Input should be a valid integer';
      const what = EXPECTED[issue.expected];
      return what ? `Input should be ${what}` : undefined;
    }
    case 'too_small':
      if (field === 'messages') return 'at least one message is required';
      if (issue.origin === 'number')
        return `Input should be greater than or equal to ${issue.minimum}`;
      if (issue.origin === 'string')
        return `String should have at least ${issue.minimum} character`;
      if (issue.origin === 'array') {
        const got = Array.isArray(value) ? value.length : 0;
        return `List should have at least ${issue.minimum} item after validation, not ${got}`;
      }
      return undefined;
    case 'too_big':
      return issue.origin === 'number'
        ? `Input should be less than or equal to ${issue.maximum}`
        : undefined;
    case 'invalid_value':
      return `Input should be ${choices(issue.values)}`;
    default:
      return undefined;
  }
}

/**
 * The API's 400 for a body whose shape the producer refuses (its first problem, in the API's
 * words); undefined when the shape is sound or llmq knows no such words for the problem.
 */
export function apiValidationError(body: unknown): ApiErrorAnswer | undefined {
  const parsed = MessagesRequestSchema.safeParse(body);
  const issue = parsed.success ? undefined : parsed.error.issues[0];
  if (!issue) return undefined;
  const field = issue.path.map(String).join('.');
  const words = wordsFor(issue, field, valueAt(body, issue.path));
  return field && words ? apiError('invalid_request_error', `${field}: ${words}`) : undefined;
}
