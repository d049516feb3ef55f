/**
 * Pools agree on their deployments: a worker whose deployment list (names, kinds, limits)
 * differs from the fleet's is refused at start, as one whose limits differ, unless it replaces
 * them with --replace-limits.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { readFleetLimits } from '../shared/fleet-limits.ts';
import { openPool, type Pool, type Proc } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

let pool: Pool;
const procs: Proc[] = [];
afterEach(async () => {
  await Promise.all(procs.splice(0).map((p) => p.kill('SIGTERM')));
  await pool?.cleanup();
});

const anthropic = (name: string, url: string, tpm?: number) => ({
  name,
  kind: 'anthropic',
  baseUrl: url,
  credentials: { apiKeyEnv: 'ANTHROPIC_API_KEY' },
  ...(tpm ? { limits: { tpm } } : {}),
});

/** Starts `llmq worker` with a deployment list; resolves once it runs or has exited. */
async function worker(list: object[], ...flags: string[]) {
  const env = pool.cliEnv({ LLMQ_DEPLOYMENTS: JSON.stringify(list) });
  const proc = pool.startCli(['worker', '--concurrency', '1', ...flags], env);
  procs.push(proc);
  let exited: number | string | undefined;
  void proc.exited().then((c) => {
    exited = c;
  });
  await until(() => exited !== undefined || proc.stderr().includes('worker started'), 30_000);
  return { proc, exited };
}

describe('a pool worker agrees with the fleet on its deployments', () => {
  it('a different list or other limits are refused; --replace-limits replaces them', async () => {
    pool = await openPool('fleetdeps');
    const url = pool.mock.url;
    const first = await worker([anthropic('a', url, 8000), anthropic('b', url)]);
    expect(first.exited).toBeUndefined();
    expect((await readFleetLimits(pool.redis, pool.names))?.limits.deployments).toEqual({
      a: { kind: 'anthropic', tpm: 8000 },
      b: { kind: 'anthropic' },
    });
    // The same list in another order is the same list.
    expect((await worker([anthropic('b', url), anthropic('a', url, 8000)])).exited).toBeUndefined();

    for (const other of [
      [anthropic('a', url, 8000)],
      [anthropic('a', url, 4000), anthropic('b', url)],
      [anthropic('a', url, 8000), anthropic('c', url)],
    ]) {
      const refused = await worker(other);
      expect(refused.exited).toBe(2);
      const lines = refused.proc.stderr().trim().split('\n');
      expect(lines.at(-1)).toMatch(
        /^llmq: this worker's limits differ from the fleet's .*deployments .* here, .* stored.*--replace-limits/,
      );
    }
    // A worker with no list of its own cannot take the pool's (it has no credentials for it).
    const plain = pool.startCli(['worker'], pool.cliEnv());
    procs.push(plain);
    expect(await plain.exited()).toBe(2);
    expect(plain.stderr()).toMatch(/deployments none here, a \(anthropic; tpm 8000\), b/);

    const replaced = await worker([anthropic('a', url, 4000)], '--replace-limits');
    expect(replaced.exited).toBeUndefined();
    expect((await readFleetLimits(pool.redis, pool.names))?.limits.deployments).toEqual({
      a: { kind: 'anthropic', tpm: 4000 },
    });
  });
});
