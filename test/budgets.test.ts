import { afterEach, describe, expect, it } from 'vitest';
import { FleetReader } from '../dashboard/fleet-reader.ts';
import { PrometheusExporter } from '../dashboard/prometheus.ts';
import { Producer } from '../producer/producer.ts';
import { formatStatus } from '../scripts/cli/status.ts';
import {
  BudgetExhaustedError,
  BudgetLedger,
  type BudgetPolicy,
  type BudgetSettings,
} from '../shared/budgets.ts';
import { resolveConfig } from '../shared/config.ts';
import { budgetSettingsOf } from '../shared/config-views.ts';
import { llmqKey } from '../shared/keys.ts';
import { costMicros, formatUsd, priceOf } from '../shared/prices.ts';
import { getQueueStatus } from '../shared/status.ts';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

let pool: Pool | undefined;
afterEach(async () => {
  await pool?.cleanup();
  pool = undefined;
});

/** Budgets of a config: tenant a may spend 0.4 cent a day, b and the whole queue much more. */
function settings(policy: BudgetPolicy): BudgetSettings {
  return budgetSettingsOf(
    resolveConfig({
      env: {},
      file: {
        prices: { 'claude-test-*': { input: 3, output: 15, cacheWrite: 3.75, cacheRead: 0.3 } },
        budgets: { global: { day: 10, month: 100 }, 'tenant:a': { day: 0.004 } },
        budgetPolicy: policy,
      },
    }),
  )!;
}

async function run(policy: BudgetPolicy) {
  pool = await openPool(`budget-${policy}`, { latencyMs: 20 });
  const budgets = settings(policy);
  const producer = new Producer({ redis: pool.redis, names: pool.names, budgets });
  const a: string[] = [];
  const b: string[] = [];
  for (let i = 0; i < 12; i++) {
    a.push(await producer.enqueue(request(`a ${i}`, 50), { tenant: 'a' }));
    b.push(await producer.enqueue(request(`b ${i}`, 50), { tenant: 'b' }));
  }
  const worker = await pool.worker({ budgets, concurrency: 2 });
  // The other tenant carries on: every one of its jobs completes.
  await allCompleted(pool, b, 30_000);
  const ledger = new BudgetLedger(pool.redis, pool.names, budgets);
  return { producer, worker, a, b, ledger, budgets };
}

/** What the completed jobs' usage costs at the price table, in µ$. */
async function usageMicros(p: Pool, ids: string[]): Promise<{ micros: number; done: number }> {
  const price = priceOf('claude-test-1', settings('wait').prices)!;
  let micros = 0;
  let done = 0;
  for (const id of ids) {
    const job = await p.job(id);
    if (!job?.returnvalue) continue;
    done++;
    micros += costMicros(price, job.returnvalue.message.usage);
  }
  return { micros, done };
}

describe('money budgets', () => {
  it('wait: a tenant whose daily budget runs out waits for the next day, the other carries on; spend settles to the usage × prices exactly', async () => {
    const r = await run('wait');
    // Tenant a's remaining jobs wait (delayed) until the day ends.
    await until(async () => (await pool!.queue.getDelayedCount()) > 0, 15_000);
    const aUsage = await usageMicros(pool!, r.a);
    const bUsage = await usageMicros(pool!, r.b);
    expect(aUsage.done).toBeGreaterThan(0);
    expect(aUsage.done).toBeLessThan(r.a.length);
    const waiting = await pool!.queue.getDelayed();
    expect(waiting.every((j) => j.data.tenant === 'a')).toBe(true);
    const tomorrow = new Date();
    tomorrow.setUTCHours(24, 0, 0, 0);
    // (BullMQ counts the delay from the move, the timestamp from the enqueue: a second apart.)
    for (const j of waiting)
      expect(j.delay + j.timestamp).toBeGreaterThanOrEqual(tomorrow.getTime() - 60_000);
    // Nothing in flight: what is spent is what the results' usage costs, to the micro-dollar.
    await until(async () => (await pool!.queue.getActiveCount()) === 0, 10_000);
    const spend = await r.ledger.spend();
    expect(spend.day['tenant:a']).toBe(aUsage.micros);
    expect(spend.day['global']).toBe(aUsage.micros + bUsage.micros);
    expect(spend.month['global']).toBe(aUsage.micros + bUsage.micros);
    expect(spend.day['model:claude-test-1']).toBe(aUsage.micros + bUsage.micros);
    expect(spend.day['tenant:a']).toBeLessThanOrEqual(4_000);
    expect(await pool!.deadLetters()).toEqual([]);
    // llmq status shows it against the budget.
    const text = formatStatus(await getQueueStatus(pool!.redis, pool!.names, undefined, r.ledger));
    expect(text).toContain(
      `spend tenant:a this day: ${formatUsd(aUsage.micros / 1e6)} of $0.0040 (resets ${tomorrow.toISOString()})`,
    );
    expect(text).toMatch(/spend model:claude-test-1 this month: \$0\.\d{4} \(resets/);
    // And the dashboard's view and /metrics.
    const reader = new FleetReader({
      redis: pool!.redis,
      prefix: pool!.names.prefix,
      budgets: r.budgets.budgets,
    });
    const view = await reader.read(pool!.names.queue);
    expect(view.spend).toContainEqual({
      name: 'tenant:a',
      period: 'day',
      spentUsd: aUsage.micros / 1e6,
      limitUsd: 0.004,
      resetsAt: tomorrow.getTime(),
    });
    const metrics = await new PrometheusExporter().render([view]);
    expect(metrics).toContain(
      `llmq_spend_usd{queue="${pool!.names.queue}",name="tenant:a",period="day"} ${aUsage.micros / 1e6}`,
    );
    expect(metrics).toContain(
      `llmq_budget_usd{queue="${pool!.names.queue}",name="tenant:a",period="day"} 0.004`,
    );
    await reader.close();
    await r.worker.stop(1_000);
    await r.producer.close();
  });

  it('dead-letter: the jobs past the budget go to the dead letters with budget_exhausted', async () => {
    const r = await run('dead-letter');
    await until(async () => {
      const { done } = await usageMicros(pool!, r.a);
      return done + (await pool!.deadLetters()).length === r.a.length;
    }, 20_000);
    const dead = await pool!.deadLetters();
    expect(dead.length).toBeGreaterThan(0);
    for (const d of dead) {
      expect(d.data.tenant).toBe('a');
      expect(d.reason).toMatch(/budget_exhausted: the daily budget "tenant:a" of \$0.004 is spent/);
    }
    await r.worker.stop(1_000);
    await r.producer.close();
  });

  it('refuse: once spent, enqueue refuses the tenant with budget_exhausted naming the budget and its reset; others are taken', async () => {
    const r = await run('refuse');
    // Jobs queued before the budget ran out wait for the next period.
    const err = await r.producer.enqueue(request('late', 50), { tenant: 'a' }).catch((e) => e);
    expect(err).toBeInstanceOf(BudgetExhaustedError);
    expect(err.code).toBe('BUDGET_EXHAUSTED');
    expect(err.message).toMatch(
      /"tenant:a" of \$0\.004 is spent .* it resets at \d{4}-\d\d-\d\dT00:00:00\.000Z/,
    );
    await expect(r.producer.enqueue(request('b late', 50), { tenant: 'b' })).resolves.toBeTruthy();
    await r.worker.stop(1_000);
    await r.producer.close();
  });

  it('with fair share, a job its budget holds back is acted on even when BullMQ would hand out another first; the others carry on', async () => {
    pool = await openPool('budget-fair');
    // b's jobs first in the queue, a's behind them (enqueued without budgets: a's worst case,
    // 0.45 cent, can never fit its 0.4 cent day); a is furthest behind in fair share's count,
    // so its job is the one picked.
    const b = [
      await pool.producer.enqueue(request('b 0', 50), { tenant: 'b' }),
      await pool.producer.enqueue(request('b 1', 50), { tenant: 'b' }),
    ];
    await pool.producer.enqueue(request('a big', 300), { tenant: 'a' });
    await pool.redis.hset(llmqKey(pool.names, 'fair'), 'b', 1_000_000);
    const worker = await pool.worker({
      budgets: settings('wait'),
      fairShare: {},
      concurrency: 1,
    });
    await allCompleted(pool, b, 20_000);
    await until(async () => (await pool!.deadLetters()).length === 1, 10_000);
    const [dead] = await pool.deadLetters();
    expect(dead?.data.tenant).toBe('a');
    expect(dead?.reason).toMatch(/worst-case cost exceeds the daily budget "tenant:a"/);
    await worker.stop(1_000);
  });

  it('a request the API refuses (400) is dead-lettered, and its worst case is not left spent', async () => {
    pool = await openPool('budget-refused', { latencyMs: 5 });
    const budgets = settings('wait');
    const producer = new Producer({ redis: pool.redis, names: pool.names, budgets });
    // Bytes that are no PDF: llmq reserves for it, the API answers 400 invalid_request_error.
    const bogus = {
      ...request('Summarize this.', 50),
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Summarize this.' },
            {
              type: 'document',
              source: { type: 'base64', media_type: 'application/pdf', data: 'bm90IGEgcGRm' },
            },
          ],
        },
      ],
    };
    const id = await producer.enqueue(bogus, { tenant: 'b' });
    await pool.worker({ budgets, concurrency: 1 });
    await until(async () => (await pool!.deadLetters()).length === 1, 15_000);
    expect((await pool.deadLetters())[0]).toMatchObject({ jobId: id });
    expect(pool.mock.stats().responses['400']).toBe(1);
    const spend = await new BudgetLedger(pool.redis, pool.names, budgets).spend();
    expect(Object.values(spend.day).every((micros) => micros === 0)).toBe(true);
    await producer.close();
  });

  it('refuses at enqueue a job that could never fit a budget', async () => {
    pool = await openPool('budget-never');
    const producer = new Producer({
      redis: pool.redis,
      names: pool.names,
      budgets: settings('wait'),
    });
    // 300 output tokens at $15 per million: 0.45 cent, more than tenant a's whole day.
    await expect(producer.enqueue(request('big', 300), { tenant: 'a' })).rejects.toThrow(
      /worst-case cost exceeds the daily budget "tenant:a" of \$0.004 however long it waits/,
    );
    await producer.close();
  });
});
