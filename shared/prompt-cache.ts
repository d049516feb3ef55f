import { createHash } from 'node:crypto';
import { estimateInputTokens } from './estimate.ts';
import type { MessagesRequest } from './request.ts';

/**
 * A request's cacheable prefix (prompt caching): everything up to and including its last block
 * marked `cache_control`, in the API's order (tools, then system, then messages). `key` names it
 * across requests (with the model: caches are per model); `tokens` is its input estimate.
 */
export interface CachePrefix {
  readonly key: string;
  readonly tokens: number;
}

/** The API caches no prefix shorter than this (Haiku: twice it). */
const MIN_CACHED_TOKENS = 1_024;
const leastCached = (model: string): number =>
  model.includes('haiku') ? 2 * MIN_CACHED_TOKENS : MIN_CACHED_TOKENS;

const marked = (block: unknown): boolean =>
  typeof block === 'object' && block !== null && 'cache_control' in block;

/**
 * The request's cached prefix, or undefined when it marks none, or one the API would not cache
 * (too short by the estimate, which errs high: the provider's count decides in the end).
 */
export function cachePrefixOf(request: MessagesRequest): CachePrefix | undefined {
  const tools = request.tools ?? [];
  const system = typeof request.system === 'string' ? [] : (request.system ?? []);
  const messages = request.messages;
  let prefix: Partial<MessagesRequest> | undefined;
  tools.forEach((t, i) => {
    if (marked(t)) prefix = { tools: tools.slice(0, i + 1) };
  });
  system.forEach((b, i) => {
    if (marked(b)) prefix = { tools, system: system.slice(0, i + 1) };
  });
  messages.forEach((m, i) => {
    if (typeof m.content === 'string') return;
    m.content.forEach((b, j) => {
      if (!marked(b)) return;
      const last = { ...m, content: m.content.slice(0, j + 1) };
      prefix = { tools, system: request.system, messages: [...messages.slice(0, i), last] };
    });
  });
  if (!prefix) return undefined;
  const tokens = estimateInputTokens({ messages: [], ...prefix } as MessagesRequest);
  if (tokens < leastCached(request.model)) return undefined;
  const key = createHash('sha1')
    .update(JSON.stringify({ model: request.model, ...prefix }))
    .digest('base64url')
    .slice(0, 22);
  return { key, tokens };
}

/**
 * A system prompt shared by many requests, marked for caching (`cache_control`) when it is long
 * enough for the API to cache; else as it is. Cache reads cost a tenth and do not count toward
 * the input limit, and llmq lets one request write the cache before the others read it.
 */
export function cacheableSystem(model: string, prompt: string): MessagesRequest['system'] {
  const tokens = estimateInputTokens({ model, max_tokens: 1, system: prompt, messages: [] });
  if (tokens < leastCached(model)) return prompt;
  return [{ type: 'text', text: prompt, cache_control: { type: 'ephemeral' } }];
}
