import { afterEach, describe, expect, it } from 'vitest';
import { countMockTokens } from '../testing/mock-anthropic/index.ts';
import {
  allCompleted,
  openPool,
  type Pool,
  type Proc,
  type RecordingProxy,
  request,
  startCli,
  startRecordingProxy,
} from './fixtures/worker-harness.ts';

let pool: Pool | undefined;
let workers: Proc[] = [];
let proxies: RecordingProxy[] = [];
afterEach(async () => {
  await Promise.all(workers.map((w) => w.kill('SIGKILL')));
  workers = [];
  await Promise.all(proxies.map((p) => p.close()));
  proxies = [];
  await pool?.cleanup();
  pool = undefined;
});

// The published scenario (seed 000): 60 calls of about 207 tokens against 4,000 tokens per
// sliding 10 s window. The best published client finished 60/60 with zero 429s.
const WINDOW_S = 10;
const TPM = 4_000;
const CALL = request('Hi', 200);

async function runScenario(accounting: 'reserve' | 'actual'): Promise<void> {
  pool = await openPool(
    `published-${accounting}`,
    {
      windowMs: WINDOW_S * 1_000,
      limits: { tokens: TPM },
      algorithm: 'sliding',
      outputAccounting: accounting,
    },
    { tokens: TPM },
  );
  expect(countMockTokens(CALL) + CALL.max_tokens).toBe(207);
  const ids: string[] = [];
  for (let i = 0; i < 60; i++) ids.push(await pool.producer.enqueue(CALL));

  // Each process reaches the provider through its own recording proxy, to show all three worked.
  proxies = await Promise.all([0, 1, 2].map(() => startRecordingProxy(pool!.mock.url)));
  const args = [
    'worker',
    '--tpm',
    String(TPM),
    '--window',
    String(WINDOW_S),
    '--output-accounting',
    accounting,
  ];
  workers = proxies.map((p) => startCli(args, pool!.cliEnv({ ANTHROPIC_BASE_URL: p.url })));
  await allCompleted(pool, ids, 80_000);

  const stats = pool.mock.stats();
  expect(stats.admitted).toBe(60);
  expect(stats.responses['429'] ?? 0).toBe(0);
  expect(Object.values(stats.rateLimited).every((n) => n === 0)).toBe(true);
  expect(stats.worstWindow.tokens).toBeLessThanOrEqual(TPM);
  for (const p of proxies) expect(p.calls.length).toBeGreaterThan(0);
  expect(await pool.counts()).toMatchObject({ completed: 60, failed: 0, active: 0 });
  for (const w of workers) expect(await w.kill('SIGTERM'), w.stderr()).toBe(0);
}

describe('the published scenario with three worker processes', () => {
  it('reserve accounting: 60/60 completed, zero 429s, no window above the limit', async () => {
    await runScenario('reserve');
  }, 120_000);

  it('actual accounting with reconciliation: 60/60 completed, zero 429s', async () => {
    await runScenario('actual');
  }, 120_000);
});
