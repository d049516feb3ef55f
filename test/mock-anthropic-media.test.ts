/** What PDFs, text documents and images cost the mock, and which ones it refuses, via the SDK. */
import Anthropic, { type APIError, BadRequestError } from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import {
  base64,
  gif,
  type ImageType,
  imageBlock,
  jpeg,
  makePdf,
  pdfBlock,
  png,
  webp,
} from '../testing/media.ts';
import type { MockAnthropicHandle } from '../testing/mock-anthropic/index.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';

const start = eachTestMocks();
type Block = Anthropic.ContentBlockParam;

function sdk(mock: MockAnthropicHandle): Anthropic {
  return new Anthropic({ apiKey: 'k', baseURL: mock.url, maxRetries: 0 });
}

const ask = (content: Block[]) => ({
  model: 'claude-mock-1',
  messages: [{ role: 'user' as const, content }],
});
const question: Block = { type: 'text', text: 'Summarize this.' };

/** The tokens `blocks` add to a one-message request, as count_tokens reports them. */
async function costOf(mock: MockAnthropicHandle, blocks: Block[]): Promise<number> {
  const client = sdk(mock);
  const alone = await client.messages.countTokens(ask([question]));
  const withBlocks = await client.messages.countTokens(ask([...blocks, question]));
  return withBlocks.input_tokens - alone.input_tokens;
}

describe('PDF documents', () => {
  it('cost 1,500 to 3,000 tokens a page, read from the file, and usage says the same', async () => {
    const mock = await start();
    const costs: number[] = [];
    for (const pages of [1, 5, 30]) {
      const cost = await costOf(mock, [pdfBlock(await makePdf(pages))]);
      expect(cost).toBeGreaterThanOrEqual(1_500 * pages);
      expect(cost).toBeLessThanOrEqual(3_000 * pages);
      costs.push(cost);
    }
    expect(costs[2]! / costs[1]!).toBeCloseTo(6, 0);
    const pdf = pdfBlock(await makePdf(3));
    const counted = await sdk(mock).messages.countTokens(ask([pdf, question]));
    const message = await sdk(mock).messages.create({ ...ask([pdf, question]), max_tokens: 20 });
    expect(message.usage.input_tokens).toBe(counted.input_tokens);
    expect(mock.stats().spent.input_tokens).toBe(counted.input_tokens);
  });

  it('cost more for a page with more text on it, and the same for the same file', async () => {
    const mock = await start();
    const blank = await costOf(mock, [pdfBlock(await makePdf(4, 0))]);
    const dense = await costOf(mock, [pdfBlock(await makePdf(4, 50))]);
    expect(blank).toBe(4 * 1_500);
    expect(dense).toBeGreaterThan(blank);
    expect(await costOf(mock, [pdfBlock(await makePdf(4, 50))])).toBe(dense);
  });

  it('are refused as the API refuses them: not a PDF, or over 100 pages in a request', async () => {
    const mock = await start();
    const notPdf = {
      type: 'document' as const,
      source: {
        type: 'base64' as const,
        media_type: 'application/pdf' as const,
        data: base64(Buffer.from('just some text, no PDF here')),
      },
    };
    const tooMany = [pdfBlock(await makePdf(60, 1)), pdfBlock(await makePdf(41, 1, 2))];
    for (const [content, message] of [
      [[notPdf, question], 'messages.0.content.0.source.data: The PDF specified was not valid.'],
      [[...tooMany, question], 'A maximum of 100 PDF pages may be provided.'],
    ] as const) {
      const error = await sdk(mock)
        .messages.create({ ...ask([...content]), max_tokens: 20 })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BadRequestError);
      expect((error as APIError).message).toContain(message);
    }
    expect(mock.stats()).toMatchObject({ admitted: 0, responses: { '400': 2 } });
  });
});

describe('text documents', () => {
  it('cost as the same text in a text block', async () => {
    const mock = await start();
    const text = 'The fleet ran 1,200 jobs overnight; none was lost, three were retried. '.repeat(
      40,
    );
    const asDocument = await costOf(mock, [
      { type: 'document', source: { type: 'text', media_type: 'text/plain', data: text } },
    ]);
    expect(asDocument).toBe(await costOf(mock, [{ type: 'text', text }]));
    expect(asDocument).toBeGreaterThan(400);
  });
});

describe('images', () => {
  it.each([
    ['image/png', png(200, 100), Math.ceil((200 * 100) / 750)],
    ['image/gif', gif(300, 150), Math.ceil((300 * 150) / 750)],
    ['image/webp', webp(640, 480), Math.ceil((640 * 480) / 750)],
    ['image/jpeg', jpeg(1000, 1000), Math.ceil((1000 * 1000) / 750)],
  ] as const)('a %s costs width × height / 750 tokens', async (type, bytes, tokens) => {
    const mock = await start();
    expect(await costOf(mock, [imageBlock(bytes, type as ImageType)])).toBe(tokens);
  });

  it('are scaled down above 1.15 megapixels, so none costs more than about 1,600', async () => {
    const mock = await start();
    for (const [w, h] of [
      [4000, 3000],
      [8000, 8000],
      [1568, 734],
    ]) {
      const cost = await costOf(mock, [imageBlock(jpeg(w!, h!), 'image/jpeg')]);
      expect(cost).toBeGreaterThan(1_400);
      expect(cost).toBeLessThanOrEqual(1_600);
    }
  });

  it('are refused when the bytes are no image, not the type they claim, or too large', async () => {
    const mock = await start();
    for (const [block, message] of [
      [imageBlock(Buffer.from('no image'), 'image/png'), 'Could not process image'],
      [imageBlock(png(10, 10), 'image/jpeg'), 'Image does not match the provided media type'],
      [imageBlock(png(9000, 10), 'image/png'), 'image dimensions exceed max allowed size'],
    ] as const) {
      const error = await sdk(mock)
        .messages.create({ ...ask([block, question]), max_tokens: 20 })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BadRequestError);
      expect((error as APIError).message).toContain(`messages.0.content.0.source.data: ${message}`);
    }
  });
});

describe('the body limit', () => {
  it('answers a body over 32 MB with 413 request_too_large in the API shape', async () => {
    const mock = await start();
    const big = 'x'.repeat(32 * 1024 * 1024 + 1);
    const body = JSON.stringify(ask([{ type: 'text', text: big }]));
    const response = await fetch(`${mock.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': 'k', 'content-type': 'application/json' },
      body,
    });
    expect(response.status).toBe(413);
    expect(await response.json()).toMatchObject({
      type: 'error',
      error: { type: 'request_too_large' },
      request_id: expect.stringMatching(/^req_/),
    });
    // Just below the limit is read and answered.
    const near = JSON.stringify({
      ...ask([{ type: 'text', text: 'x'.repeat(31 * 1024 * 1024) }]),
      max_tokens: 5,
    });
    const ok = await fetch(`${mock.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': 'k', 'content-type': 'application/json' },
      body: near,
    });
    expect(ok.status).toBe(200);
  });
});
