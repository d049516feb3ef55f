/**
 * The content blocks the mock reads, as the API shapes them: `text`, `image` (base64 PNG, JPEG,
 * GIF or WebP) and `document` (a base64 PDF, plain text, or a list of text blocks), each of them
 * with an optional `cache_control` breakpoint. Errors are worded like the API's (pydantic's).
 */

import { z } from 'zod';

type IssueInput = { input?: unknown };

/** A zod error function: "Field required" when absent, else "Input should be <expected>". */
export function expected(what: string) {
  return (issue: IssueInput) =>
    issue.input === undefined ? 'Field required' : `Input should be ${what}`;
}

/** `{"type": "ephemeral"}`, optionally with `"ttl": "5m" | "1h"`: a prompt-cache breakpoint. */
export const cacheControlSchema = z.looseObject(
  {
    type: z.literal('ephemeral', { error: expected("'ephemeral'") }),
    ttl: z.enum(['5m', '1h'], { error: expected("'5m' or '1h'") }).optional(),
  },
  { error: expected('a valid dictionary') },
);

export type CacheControl = z.infer<typeof cacheControlSchema>;

const cacheControl = { cache_control: cacheControlSchema.nullish() };

export const textBlockSchema = z.looseObject({
  type: z.literal('text'),
  text: z.string({ error: expected('a valid string') }),
  ...cacheControl,
});

/** The image formats the API takes. */
export const IMAGE_MEDIA_TYPES = ['image/jpeg', 'image/png', 'image/gif', 'image/webp'] as const;

const base64Data = z.string({ error: expected('a valid string') });

const imageSourceSchema = z.discriminatedUnion(
  'type',
  [
    z.looseObject({
      type: z.literal('base64'),
      media_type: z.enum(IMAGE_MEDIA_TYPES, {
        error: expected("'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"),
      }),
      data: base64Data,
    }),
    z.looseObject({ type: z.literal('url'), url: z.string({ error: expected('a valid string') }) }),
  ],
  { error: tagError(['base64', 'url']) },
);

export const imageBlockSchema = z.looseObject({
  type: z.literal('image'),
  source: imageSourceSchema,
  ...cacheControl,
});

const documentSourceSchema = z.discriminatedUnion(
  'type',
  [
    z.looseObject({
      type: z.literal('base64'),
      media_type: z.literal('application/pdf', { error: expected("'application/pdf'") }),
      data: base64Data,
    }),
    z.looseObject({
      type: z.literal('text'),
      media_type: z.literal('text/plain', { error: expected("'text/plain'") }),
      data: z.string({ error: expected('a valid string') }),
    }),
    z.looseObject({
      type: z.literal('content'),
      content: z.union([z.string(), z.array(textBlockSchema)], {
        error: expected('a valid string or a list of text blocks'),
      }),
    }),
    z.looseObject({ type: z.literal('url'), url: z.string({ error: expected('a valid string') }) }),
  ],
  { error: tagError(['base64', 'text', 'content', 'url']) },
);

export const documentBlockSchema = z.looseObject({
  type: z.literal('document'),
  source: documentSourceSchema,
  title: z.string({ error: expected('a valid string') }).nullish(),
  context: z.string({ error: expected('a valid string') }).nullish(),
  ...cacheControl,
});

/** A block of a message's content. */
export const contentBlockSchema = z.discriminatedUnion(
  'type',
  [textBlockSchema, imageBlockSchema, documentBlockSchema],
  {
    error: tagError(
      ['text', 'image', 'document'],
      ' (the mock supports text, image and document blocks)',
    ),
  },
);

export type TextBlock = z.infer<typeof textBlockSchema>;
export type ImageBlock = z.infer<typeof imageBlockSchema>;
export type DocumentBlock = z.infer<typeof documentBlockSchema>;
export type ContentBlock = z.infer<typeof contentBlockSchema>;

/** The error of a tagged union whose `type` matches none of `tags`, in pydantic's words. */
function tagError(tags: readonly string[], note = '') {
  return (issue: IssueInput) => {
    if (issue.input === undefined) return 'Field required';
    if (issue.input === null || typeof issue.input !== 'object') {
      return 'Input should be a valid dictionary';
    }
    const tag = (issue.input as { type?: unknown }).type;
    if (tag === undefined) return 'Field required';
    const list = tags.map((t) => `'${t}'`).join(', ');
    return `Input tag '${String(tag)}' found using 'type' does not match any of the expected tags: ${list}${note}`;
  };
}
