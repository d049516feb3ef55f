import { estimateInputTokens, estimateTextTokens } from './estimate.ts';
import type { JobResult } from './job.ts';
import type { MessagesRequest } from './request.ts';

/** Tokens a part's wrapper (`<part n="12">…</part>`) may add, erring high. */
const PART_WRAPPER_TOKENS = 16;

const wrap = (text: string, i: number) => `<part n="${i + 1}">\n${text}\n</part>`;

/** The text of an answer: its text blocks, joined. */
export function answerText(result: JobResult): string {
  return result.message.content
    .map((b) => (b.type === 'text' ? b.text : ''))
    .join('')
    .trim();
}

/**
 * The combine request: the template with the parts' answers, in order and each wrapped, added
 * to the end of its last message (the user's).
 */
export function combineRequest(
  template: MessagesRequest,
  answers: readonly string[],
): MessagesRequest {
  const messages = [...template.messages];
  const last = messages.at(-1);
  const body = answers.map(wrap).join('\n\n');
  if (last?.role !== 'user') {
    messages.push({ role: 'user', content: body });
  } else if (typeof last.content === 'string') {
    messages[messages.length - 1] = { ...last, content: `${last.content}\n\n${body}` };
  } else {
    messages[messages.length - 1] = {
      ...last,
      content: [...last.content, { type: 'text', text: body }],
    };
  }
  return { ...template, messages };
}

/**
 * The input tokens to reserve for a combine request before its parts have answered: an upper
 * bound, since an answer is at most its part's max_tokens (the wrappers counted high).
 */
export function combineInputTokens(
  template: MessagesRequest,
  partMaxTokens: readonly number[],
): number {
  return (
    estimateInputTokens(template) +
    partMaxTokens.reduce((s, n) => s + n + PART_WRAPPER_TOKENS, 0) +
    estimateTextTokens('\n\n')
  );
}
