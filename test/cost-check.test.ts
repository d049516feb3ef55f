/**
 * What a job's request implies, against what its ticket claims (shared/cost-check.ts): never
 * less than the recomputed cost, whatever the claim; a producer's own ticket unchanged.
 */
import { describe, expect, it } from 'vitest';
import { JobBuilder } from '../producer/job-builder.ts';
import { impliedCost } from '../shared/cost-check.ts';
import { ESTIMATE_VERSION, estimateInputTokens } from '../shared/estimate.ts';
import type { JobData } from '../shared/job.ts';
import { type JobTicket, ticketOf } from '../shared/job-ticket.ts';
import { PDF_PAGE_TOKENS } from '../shared/media-estimate.ts';
import type { MessagesRequest } from '../shared/request.ts';
import { makePdf, pdfBlock } from '../testing/media.ts';
import { CostCheck } from '../worker/cost-check.ts';
import { LearnedCosts } from '../worker/learned-costs.ts';

const MODEL = 'claude-sonnet-4-5';
const ask = (content: unknown, maxTokens = 1_000): MessagesRequest =>
  ({
    model: MODEL,
    max_tokens: maxTokens,
    messages: [{ role: 'user', content }],
  }) as MessagesRequest;

const builder = new JobBuilder({ limits: {}, scopes: { 'model:claude-sonnet-*': {} } });
const forged = (request: MessagesRequest, c: [number, number, number], more = {}) => ({
  claim: { v: 2, c, m: MODEL, ...more } as JobTicket,
  data: {
    v: 1,
    request,
    cost: { requests: c[0], inputTokens: c[1], outputTokens: c[2] },
    priority: 1,
    enqueuedAt: 0,
  } as JobData,
});

const impliedTicket = (claim: JobTicket, data: JobData, patterns?: readonly string[]) =>
  impliedCost(claim, data, patterns).ticket;

describe('the cost a request implies', () => {
  it("leaves a producer's own ticket as it is", () => {
    const data = builder.prepare(ask('Summarise the attached report, please.'));
    const t = ticketOf(data);
    expect(impliedTicket(t, data, ['claude-sonnet-*'])).toEqual(t);
    expect(t.e).toBe(ESTIMATE_VERSION);
  });

  it('raises a claim below the estimate to it, output to max_tokens, and keeps a higher claim', () => {
    const request = ask('x'.repeat(30_000), 60_000);
    const est = estimateInputTokens(request);
    const low = forged(request, [0, 10, 1]);
    expect(impliedTicket(low.claim, low.data).c).toEqual([1, est, 60_000]);
    const high = forged(request, [1, est + 500, 70_000]);
    expect(impliedTicket(high.claim, high.data).c).toEqual([1, est + 500, 60_000]);
  });

  it("believes a provider's count down to a quarter of the estimate", () => {
    const request = ask('x'.repeat(30_000));
    const est = estimateInputTokens(request);
    const half = forged(request, [1, Math.floor(est / 2), 1_000], { x: 1 });
    expect(impliedTicket(half.claim, half.data).c[1]).toBe(Math.floor(est / 2));
    const tiny = forged(request, [1, 10, 1_000], { x: 1 });
    expect(impliedTicket(tiny.claim, tiny.data).c[1]).toBe(Math.ceil(est / 4));
  });

  it("counts a PDF's pages again, each at the most a page costs until the fleet says less", async () => {
    const request = ask([pdfBlock(await makePdf(5, 30, 1)), { type: 'text', text: 'Summarise.' }]);
    const f = forged(request, [1, 10, 1_000], { p: [1, 1] });
    const t = impliedTicket(f.claim, f.data);
    expect(t.p).toEqual([5, PDF_PAGE_TOKENS]);
    expect(t.c[1]).toBeGreaterThanOrEqual(5 * PDF_PAGE_TOKENS);
  });

  it('takes the model, its scope and the cached prefix from the request, not the claim', () => {
    const system = [
      { type: 'text', text: 'y'.repeat(6_000), cache_control: { type: 'ephemeral' } },
    ];
    const request = { ...ask('Hi'), system } as MessagesRequest;
    const f = forged(request, [1, 10, 1_000], {
      m: 'claude-haiku-4-5',
      s: ['tenant:acme', 'model:claude-haiku-*'],
      k: ['another', 9_999],
    });
    const t = impliedTicket(f.claim, f.data, ['claude-sonnet-*', 'claude-haiku-*']);
    expect(t.m).toBe(MODEL);
    expect(t.s).toEqual(['tenant:acme', 'model:claude-sonnet-*']);
    expect(t.k?.[0]).not.toBe('another');
    expect(t.k?.[1]).toBeLessThan(9_999);
  });
});

describe("a fetched job's verdict", () => {
  const warned: string[] = [];
  const check = new CostCheck(undefined as never, undefined as never, new LearnedCosts(undefined), {
    info() {},
    warn: (m) => warned.push(m),
  });
  const scoped = { s: [`model:${MODEL}`] };
  const fetched = (f: ReturnType<typeof forged>) =>
    ({ id: 'j1', opts: { priority: 1, llmq: f.claim }, data: f.data }) as never;

  it('sends a claim above the estimate as claimed, and learns from the estimate', () => {
    const request = ask('x'.repeat(3_000));
    const est = estimateInputTokens(request);
    const job = fetched(forged(request, [1, 10 * est, 1_000], scoped));
    expect(check.verdict(job)).toEqual({ kind: 'ok' });
    expect((job as { data: JobData }).data.cost).toEqual({
      requests: 1,
      inputTokens: est,
      outputTokens: 1_000,
    });
    expect(warned).toEqual([]);
  });

  it('sends back a claim below it, with the cost its request implies and the claim', () => {
    const request = ask('x'.repeat(3_000), 60_000);
    const verdict = check.verdict(fetched(forged(request, [1, 10, 1], scoped)));
    expect(verdict).toMatchObject({
      kind: 'raise',
      implied: { c: [1, estimateInputTokens(request), 60_000], w: [1, 10, 1] },
    });
    expect(warned).toEqual(['a job claimed less than its request costs: it waits for that cost']);
  });
});
