/**
 * A pool of a Bedrock and a Vertex AI deployment, each called through its real SDK (built by
 * createDeploymentCallers) against a mock of its platform: jobs spread over both under their
 * platform ids; Bedrock's throttling 429 (no retry-after) pauses only it, and status shows it.
 */
import { describe, expect, it } from 'vitest';
import { formatStatus } from '../scripts/cli/status.ts';
import { type DeploymentConfig, deploymentScope } from '../shared/deployments.ts';
import { getQueueStatus } from '../shared/status.ts';
import { createDeploymentCallers } from '../worker/deployment-clients.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';

const openTestPool = poolsPerTest();
const startMock = eachTestMocks();
const ENV = { AWS_KEY_ID: 'AKIDMOCKTEST', AWS_SECRET: 'mock-secret', VERTEX_TOKEN: 'ya29.mock' };

const platforms = (
  aws: string,
  gcp: string,
  awsLimits: DeploymentConfig['limits'],
): DeploymentConfig[] => [
  {
    name: 'aws',
    kind: 'bedrock',
    region: 'us-east-1',
    baseUrl: aws,
    credentials: { awsAccessKeyEnv: 'AWS_KEY_ID', awsSecretKeyEnv: 'AWS_SECRET' },
    models: { 'claude-test-*': 'anthropic.claude-test-1-v1:0' },
    limits: awsLimits,
  },
  {
    name: 'gcp',
    kind: 'vertex',
    region: 'us-east5',
    projectId: 'mock-project',
    baseUrl: `${gcp}/v1`,
    credentials: { accessTokenEnv: 'VERTEX_TOKEN' },
    models: { 'claude-test-*': 'claude-test-1@2026' },
    preference: 1,
  },
];

async function entries(configs: DeploymentConfig[]) {
  const callers = await createDeploymentCallers(configs, ENV);
  return configs.map((config) => ({ config, call: callers.get(config.name)!.caller }));
}

describe('a pool on Bedrock and Vertex AI', () => {
  it('spreads jobs over both by their room, each under its platform id', async () => {
    const windowMs = 2_000;
    const [ma, mb] = await Promise.all([
      startMock({ windowMs, limits: { tokens: 1_500 }, latencyMs: 20 }),
      startMock({ windowMs, limits: { tokens: 3_000 }, latencyMs: 20 }),
    ]);
    const pool = await openTestPool('pool-platforms');
    const configs = platforms(ma.url, mb.url, { tpm: 1_500 });
    await pool.worker({
      concurrency: 8,
      deployments: await entries(configs),
      limiter: { windowMs },
    });
    const ids: string[] = [];
    for (let i = 0; i < 16; i++)
      ids.push(await pool.producer.enqueue(request(`Job ${i}: hi.`, 200)));
    await allCompleted(pool, ids, 30_000);
    const done = await Promise.all(ids.map(async (id) => (await pool!.job(id))!.returnvalue));
    const models = new Set(done.map((r) => `${r.deployment} ${r.message.model}`));
    expect(models).toEqual(new Set(['aws anthropic.claude-test-1-v1:0', 'gcp claude-test-1@2026']));
    expect(ma.stats().responses['429'] ?? 0).toBe(0);
    expect(mb.stats().responses['429'] ?? 0).toBe(0);
    expect(await pool.deadLetters()).toEqual([]);
  });

  it("Bedrock's throttling pauses only it; its jobs complete on Vertex AI; status shows the pause", async () => {
    const [ma, mb] = await Promise.all([
      startMock({ windowMs: 10_000, limits: { requests: 2 }, latencyMs: 50 }),
      startMock({ latencyMs: 20 }),
    ]);
    const pool = await openTestPool('pool-throttle');
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) ids.push(await pool.producer.enqueue(request(`Job ${i}: hi.`, 50)));
    // aws is configured (wrongly) for far more than its quota of 2 requests per 10 s.
    const configs = platforms(ma.url, mb.url, { rpm: 100 });
    const w = await pool.worker({
      concurrency: 8,
      deployments: await entries(configs),
      limiter: { windowMs: 10_000, limits: { tokens: 1_000_000 } },
    });
    await allCompleted(pool, ids, 30_000);
    expect(ma.stats().responses['429']).toBeGreaterThan(0);
    expect(await w.limiter.pausedUntil([deploymentScope('aws')])).toBeGreaterThan(0);
    expect(await w.limiter.pausedUntil([deploymentScope('gcp')])).toBe(0);
    expect(await pool.deadLetters()).toEqual([]);
    const status = formatStatus(await getQueueStatus(pool.redis, pool.names, w.limiter));
    // Each line ends with the deployment's calls by outcome: Bedrock's 429s among them.
    expect(status).toMatch(
      /^ {4}aws: requests \d+\/100 \d+ free, .* pause until \S+ {2}breaker closed {2}calls \d+ \(.*\d+ 429\)$/m,
    );
    expect(status).toMatch(/^ {4}gcp: .* pause none {2}breaker closed( {2}calls .*)?$/m);
  });
});
