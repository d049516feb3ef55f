import { describe, expect, it } from 'vitest';
import type { DeploymentConfig } from '../shared/deployments.ts';
import { DeploymentPool, platformModelOf } from '../worker/pool.ts';
import { newRedis, testNames } from './helpers.ts';

const noCall = async () => {
  throw new Error('not called');
};
const entry = (config: Partial<DeploymentConfig> & { name: string }) => ({
  config: { kind: 'anthropic' as const, ...config },
  call: noCall,
});

/** A pool that never talks to Redis (its breakers are only built). */
function poolOf(...configs: (Partial<DeploymentConfig> & { name: string })[]) {
  const redis = newRedis();
  redis.disconnect();
  return new DeploymentPool(redis, testNames('choice'), configs.map(entry), undefined);
}

describe("the pool's choice of deployments", () => {
  it('orders them by preference, then by their place in the list', () => {
    const pool = poolOf({ name: 'a', preference: 2 }, { name: 'b' }, { name: 'c', preference: 2 });
    // b has none: its place (1) is its preference.
    expect(pool.list.map((d) => d.name)).toEqual(['b', 'a', 'c']);
    const c = pool.choose({ model: 'claude-x' });
    expect(c.ok && c.deployments.map((d) => d.name)).toEqual(['b', 'a', 'c']);
  });

  it('keeps only those that serve the model, under their platform ids', () => {
    const bedrock = { 'claude-sonnet-*': 'anthropic.claude-sonnet-v1:0' };
    const pool = poolOf(
      { name: 'api', models: { 'claude-haiku-1': 'claude-haiku-1' } },
      { name: 'br', kind: 'bedrock', models: bedrock },
    );
    const c = pool.choose({ model: 'claude-sonnet-4' });
    expect(c.ok && c.deployments.map((d) => d.name)).toEqual(['br']);
    expect(platformModelOf(pool.list[1]!.config, 'claude-sonnet-4')).toBe(
      'anthropic.claude-sonnet-v1:0',
    );
    expect(platformModelOf(pool.list[0]!.config, 'claude-sonnet-4')).toBeUndefined();
    // Message Batches: the Claude API's by default, not Bedrock's.
    expect(pool.forBatches().map((d) => d.name)).toEqual(['api']);
    const none = pool.choose({ model: 'claude-opus-9' });
    expect(none).toEqual({
      ok: false,
      reason: expect.stringContaining(
        'no deployment of the pool serves model "claude-opus-9" (api, br)',
      ),
    });
  });

  it('gives a pinned job its deployment only, and says why an unknown pin goes nowhere', () => {
    const pool = poolOf({ name: 'a' }, { name: 'b' });
    const c = pool.choose({ model: 'claude-x', deployment: 'b' });
    expect(c.ok && c.deployments.map((d) => d.name)).toEqual(['b']);
    expect(pool.choose({ model: 'claude-x', deployment: 'zz' })).toEqual({
      ok: false,
      reason: expect.stringContaining(
        'pins deployment "zz", which this worker\'s pool does not have (a, b)',
      ),
    });
  });

  it('refuses a pool with no deployment, a bad name or a name twice', () => {
    expect(() => poolOf()).toThrow(
      'Expected `deployments` to list at least one deployment, got none',
    );
    expect(() => poolOf({ name: 'a b' })).toThrow('got "a b"');
    expect(() => poolOf({ name: 'a' }, { name: 'a' })).toThrow('got "a" twice');
  });
});
