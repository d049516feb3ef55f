/**
 * Seeing the pool: `llmq status`, the limiter page's JSON and `/metrics` show each deployment
 * (scope `deployment:<name>`) with its use against its limits, its pause and its breaker, and
 * never a credential.
 */
import { spawnSync } from 'node:child_process';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHandle, startDashboard } from '../dashboard/server.ts';
import { Producer } from '../producer/producer.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { CircuitBreaker } from '../worker/breaker.ts';
import { deleteKeys, llmqFromSource, newRedis, REDIS_URL, testNames } from './helpers.ts';

const SECRETS = {
  ANTHROPIC_API_KEY_EU: 'sk-ant-api03-status-test-secret',
  AWS_KEY_ID: 'AKIASTATUSTESTKEY01',
  AWS_SECRET: 'status-test-aws-secret-value',
};
const DEPLOYMENTS = [
  { name: 'eu', kind: 'anthropic', credentials: { apiKeyEnv: 'ANTHROPIC_API_KEY_EU' } },
  {
    name: 'aws',
    kind: 'bedrock',
    region: 'us-east-1',
    credentials: { awsAccessKeyEnv: 'AWS_KEY_ID', awsSecretKeyEnv: 'AWS_SECRET' },
    limits: { rpm: 10 },
  },
  // Configured here only, never used: status shows it with its limit.
  {
    name: 'gcp',
    kind: 'vertex',
    region: 'us-east5',
    projectId: 'my-project',
    limits: { tpm: 9000 },
  },
];

describe('the pool in status, the limiter page and /metrics', () => {
  let redis: Redis;
  const names = testNames('poolstat');
  let producer: Producer;
  let dashboard: DashboardHandle;
  let pausedUntil: number;
  const TOKEN = 'pool-status-token';

  beforeAll(async () => {
    redis = newRedis();
    producer = new Producer({ redis, names });
    await producer.enqueue({
      model: 'claude-sonnet-4-6',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'hi' }],
    });
    // The workers' limiter: each deployment a scope; one call in eu, none in aws.
    const limiter = new Limiter({
      redis,
      names,
      windowMs: 60_000,
      headroom: 0,
      scopes: { 'deployment:eu': { tokens: 4_000 }, 'deployment:aws': { requests: 10 } },
    });
    await limiter.publishConfig();
    await limiter.acquire(
      { requests: 1, inputTokens: 100, outputTokens: 100 },
      { scopes: ['deployment:eu'] },
    );
    // aws answered a 429 (its own pause) and 529s (its own breaker open, after 5 failures).
    pausedUntil = await limiter.pauseFor(120_000, ['deployment:aws']);
    const breaker = new CircuitBreaker(redis, names, { threshold: 5, cooldownMs: 30_000 }, 'aws');
    for (let i = 0; i < 5; i++) await breaker.failure();
    dashboard = await startDashboard({
      redis,
      prefix: names.prefix,
      port: 0,
      auth: { token: TOKEN },
    });
  });

  afterAll(async () => {
    await dashboard?.close();
    await producer?.close();
    await deleteKeys(redis, names.prefix);
    redis.disconnect();
  });

  const status = (...flags: string[]) => {
    const r = spawnSync(
      process.execPath,
      llmqFromSource(['status', '--queue', names.queue, '--prefix', names.prefix, ...flags]),
      {
        encoding: 'utf8',
        env: {
          ...process.env,
          ...SECRETS,
          REDIS_URL,
          LLMQ_DEPLOYMENTS: JSON.stringify(DEPLOYMENTS),
        },
      },
    );
    expect(r.status, r.stderr).toBe(0);
    return r.stdout + r.stderr;
  };
  const noSecret = (text: string) => {
    for (const secret of Object.values(SECRETS)) expect(text).not.toContain(secret);
  };

  it('llmq status lists each deployment with its use, its pause and its breaker', () => {
    const out = status();
    expect(out).toContain('deployments (3):');
    expect(out).toMatch(
      /^ {4}eu: requests 1, input tokens 100, output tokens 100, tokens \(in \+ out\) 200\/4000 3800 free {2}pause none {2}breaker closed$/m,
    );
    expect(out).toContain(
      `    aws: requests 0/10 10 free  pause until ${new Date(pausedUntil).toISOString()}  breaker open (5 failures, trial call from `,
    );
    expect(out).toMatch(
      /^ {4}gcp: tokens \(in \+ out\) 0\/9000 9000 free {2}pause none {2}breaker closed$/m,
    );
    // A deployment's scope is shown once, as a deployment.
    expect(out).not.toContain('deployment:eu');
    noSecret(out);
    const json = JSON.parse(status('--json')) as {
      deployments: { name: string; breaker: { state: string } }[];
    };
    expect(json.deployments.map((d) => [d.name, d.breaker.state])).toEqual([
      ['eu', 'closed'],
      ['aws', 'open'],
      ['gcp', 'closed'],
    ]);
  });

  it("the limiter page's JSON and /metrics show each deployment the workers published", async () => {
    const get = (path: string) =>
      fetch(`${dashboard.baseUrl}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const body = (await (await get(`/api/limiter?queue=${names.queue}`)).json()) as {
      view: {
        deployments: {
          name: string;
          pause: { until: number | null };
          breaker: { state: string; failures: number };
        }[];
      };
    };
    expect(
      body.view.deployments.map((d) => [
        d.name,
        d.pause.until,
        d.breaker.state,
        d.breaker.failures,
      ]),
    ).toEqual([
      ['eu', null, 'closed', 0],
      ['aws', pausedUntil, 'open', 5],
    ]);
    const text = await (await get('/metrics')).text();
    const q = `queue="${names.queue}"`;
    expect(text).toContain(`llmq_deployment_breaker_state{${q},deployment="aws",state="open"} 1`);
    expect(text).toContain(`llmq_deployment_breaker_state{${q},deployment="eu",state="closed"} 1`);
    expect(text).toContain(`llmq_deployment_breaker_failures{${q},deployment="aws"} 5`);
    const pause = new RegExp(
      `llmq_deployment_pause_remaining_seconds\\{${q},deployment="aws"\\} ([\\d.]+)`,
    );
    expect(Number(pause.exec(text)?.[1])).toBeGreaterThan(60);
    expect(text).toContain(`llmq_deployment_pause_remaining_seconds{${q},deployment="eu"} 0`);
    expect(text).toContain(
      `llmq_window_limit{${q},scope="deployment:aws",dimension="requests"} 10`,
    );
    expect(text).toContain(`llmq_window_used{${q},scope="deployment:eu",dimension="tokens"} 200`);
    noSecret(text + JSON.stringify(body));
  });
});
