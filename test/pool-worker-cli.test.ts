/**
 * `llmq worker` with LLMQ_DEPLOYMENTS: a pool of a Bedrock and a Vertex AI deployment, each
 * reached through its SDK with the credentials the config names; a credential variable that is
 * not set stops it at start, by name.
 */
import { describe, expect, it } from 'vitest';
import type { DeploymentConfig } from '../shared/deployments.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { allCompleted, poolsPerTest, request, runCli } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();
const startMock = eachTestMocks();
const SECRETS = {
  AWS_KEY_ID: 'AKIDCLITEST',
  AWS_SECRET: 'cli-secret-value',
  VERTEX_TOKEN: 'ya29.cli-token',
};

const deployments = (aws: string, gcp: string): DeploymentConfig[] => [
  {
    name: 'aws',
    kind: 'bedrock',
    region: 'us-east-1',
    baseUrl: aws,
    credentials: { awsAccessKeyEnv: 'AWS_KEY_ID', awsSecretKeyEnv: 'AWS_SECRET' },
    models: { 'claude-test-*': 'anthropic.claude-test-1-v1:0' },
    limits: { rpm: 3 },
  },
  {
    name: 'gcp',
    kind: 'vertex',
    region: 'us-east5',
    projectId: 'mock-project',
    baseUrl: `${gcp}/v1`,
    credentials: { accessTokenEnv: 'VERTEX_TOKEN' },
    models: { 'claude-test-*': 'claude-test-1@2026' },
  },
];

describe('llmq worker with a pool of deployments', () => {
  it('runs jobs on Bedrock and Vertex AI under their platform ids, and logs no credential', async () => {
    const [aws, gcp] = await Promise.all([startMock(), startMock()]);
    const pool = await openTestPool('pool-cli');
    const env = pool.cliEnv({
      ...SECRETS,
      LLMQ_DEPLOYMENTS: JSON.stringify(deployments(aws.url, gcp.url)),
    });
    const proc = pool.startCli(['worker', '--window', '60'], env);
    await until(() => proc.stderr().includes('worker started'), 30_000);
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push(await pool.producer.enqueue(request(`Job ${i}: hi.`, 20)));
    await allCompleted(pool, ids, 30_000);
    const where = await Promise.all(
      ids.map(async (id) => {
        const r = (await pool.job(id))!.returnvalue;
        return `${r.deployment} ${r.message.model}`;
      }),
    );
    // aws, preferred, takes what its 3 requests a minute allow (less its headroom); gcp the rest.
    const onAws = where.filter((w) => w === 'aws anthropic.claude-test-1-v1:0').length;
    expect(onAws).toBeGreaterThan(0);
    expect(onAws).toBeLessThanOrEqual(3);
    expect(where.filter((w) => w === 'gcp claude-test-1@2026')).toHaveLength(6 - onAws);
    expect([aws.stats().responses, gcp.stats().responses]).toEqual([
      { '200': onAws },
      { '200': 6 - onAws },
    ]);
    for (const secret of Object.values(SECRETS)) expect(proc.stderr()).not.toContain(secret);
  });

  it('stops at start, naming the credential variable that is not set', async () => {
    const pool = await openTestPool('pool-cli-missing');
    const { VERTEX_TOKEN: _, ...some } = SECRETS;
    const env = pool.cliEnv({
      ...some,
      LLMQ_DEPLOYMENTS: JSON.stringify(deployments('http://127.0.0.1:9', 'http://127.0.0.1:9')),
    });
    const r = await runCli(['worker'], env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(
      'deployment gcp (vertex): the environment variable VERTEX_TOKEN (credentials.accessTokenEnv) is not set',
    );
    for (const secret of Object.values(SECRETS)) expect(r.stderr).not.toContain(secret);
  });

  it('llmq enqueue --deployment pins a job to one deployment; one the pool lacks is refused', async () => {
    const pool = await openTestPool('pool-cli-pin');
    const env = pool.cliEnv({
      LLMQ_DEPLOYMENTS: JSON.stringify(deployments('http://127.0.0.1:9', 'http://127.0.0.1:9')),
    });
    const input = JSON.stringify(request('Hi.', 20));
    const pinned = await runCli(['enqueue', '--deployment', 'gcp'], env, input);
    expect(pinned.code, pinned.stderr).toBe(0);
    expect((await pool.job(pinned.stdout.trim()))!.data.deployment).toBe('gcp');
    const refused = await runCli(['enqueue', '--deployment', 'azure'], env, input);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/deployment.*"azure".*aws, gcp/);
    expect(refused.stdout).toBe('');
  });
});
