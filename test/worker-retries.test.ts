import { describe, expect, it } from 'vitest';
import type { FaultRates } from '../testing/mock-anthropic/index.ts';
import type { WorkerOptions } from '../worker/worker-options.ts';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

const fast = {
  backoff: { baseMs: 50, capMs: 200 },
  // High enough that the breaker stays out of these tests.
  breaker: { threshold: 1_000 },
  limiter: { windowMs: 5_000, limits: { tokens: 100_000 } },
};

/** Short bounds on a silent provider: the calls of `hang` and `stall` are aborted at them. */
const silent = { firstByteTimeoutMs: 1_000, idleTimeoutMs: 1_000 };

const faults: {
  kind: keyof FaultRates;
  status: number | undefined;
  errorClass: string;
  label?: string;
  options?: Partial<WorkerOptions>;
  reason?: RegExp;
}[] = [
  { kind: 'overloaded', status: 529, errorClass: 'OverloadedError' },
  { kind: 'serverError', status: 500, errorClass: 'InternalServerError' },
  { kind: 'drop', status: undefined, errorClass: 'APIConnectionError' },
  { kind: 'midStreamError', status: undefined, errorClass: 'APIError' },
  {
    kind: 'hang',
    label: 'hang (a stream whose first byte never comes)',
    status: undefined,
    errorClass: 'ResponseTimeoutError',
    options: silent,
    reason: /^no first byte within 1s/,
  },
  {
    kind: 'hang',
    label: 'hang (a plain call whose headers never come)',
    status: undefined,
    errorClass: 'ResponseTimeoutError',
    options: { ...silent, stream: 'auto' },
    reason: /^no first byte within \d/,
  },
  {
    kind: 'stall',
    label: 'stall (a stream that goes silent midway)',
    status: undefined,
    errorClass: 'ResponseTimeoutError',
    options: silent,
    reason: /^the answer went silent for 1s midway/,
  },
];

describe('retryable failures back off and retry', () => {
  for (const f of faults) {
    it(`${f.label ?? f.kind}: retried with backoff, no attempt spent, completed once the fault clears`, async () => {
      const pool = await openTestPool(`retry-${f.kind}`, { faults: { [f.kind]: 1 } });
      const ids = [
        await pool.producer.enqueue(request('First job.'), { attempts: 2 }),
        await pool.producer.enqueue(request('Second job.'), { attempts: 2 }),
      ];
      const worker = await pool.worker({ ...fast, ...f.options });
      await until(() => pool!.mock.stats().faults[f.kind] >= 4, 15_000);
      pool.mock.setFaults({});
      await allCompleted(pool, ids, 15_000);

      let failures = 0;
      for (const id of ids) {
        const job = (await pool.job(id))!;
        const history = job.data.history ?? [];
        for (const h of history) {
          expect(h).toMatchObject({
            outcome: 'retryable',
            counted: false,
            transient: true,
            errorClass: f.errorClass,
          });
          expect(h.status).toBe(f.status);
          if (f.reason) expect(h.message).toMatch(f.reason);
        }
        failures += history.length;
        // Transient: more failures than its attempts would allow, none of them spending one.
        expect(job.returnvalue.attempts).toBe(1);
      }
      expect(failures).toBe(pool.mock.stats().faults[f.kind]);
      expect(await pool.deadLetters()).toEqual([]);
      // No call holds its slot past the bound: none is left in flight.
      await until(
        async () => worker.inFlight() === 0 && (await worker.limiter.snapshot()).inFlight === 0,
        5_000,
      );
    });
  }

  it('with retryFor 0, gives up after the job’s attempts while the fault stays, and says so', async () => {
    const pool = await openTestPool('retry-giveup', { faults: { overloaded: 1 } });
    const id = await pool.producer.enqueue(request('Doomed.'), { attempts: 3, retryForMs: 0 });
    await pool.worker(fast);
    await until(async () => (await pool!.queue.getJobState(id)) === 'failed', 15_000);

    const [letter, ...rest] = await pool.deadLetters();
    expect(rest).toEqual([]);
    expect(letter).toMatchObject({ jobId: id, errorClass: 'OverloadedError', status: 529 });
    expect(letter!.reason).toBe('gave up after 3 attempts: 529 overloaded_error: Overloaded');
    expect(letter!.attempts).toHaveLength(3);
    expect(letter!.attempts.every((a) => a.outcome === 'retryable' && a.counted)).toBe(true);
    // The attempts were spread out by the backoff, not fired back to back.
    const at = letter!.attempts.map((a) => a.at);
    expect(at[2]! - at[0]!).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 300));
    expect(pool.mock.stats().attempts).toBe(3);
  });
});
