import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../shared/config.ts';
import { budgetSettingsOf, scopeLimitsOf } from '../shared/config-views.ts';
import { ConfigError } from '../shared/errors.ts';
import { costMicros, listPriceUsd, PRICES, priceOf } from '../shared/prices.ts';

const bad = (file: Record<string, unknown>) => () => resolveConfig({ env: {}, file });

describe('models, prices and budgets in the config', () => {
  it('gives each model pattern a scope of its own, from the file or LLMQ_MODELS', () => {
    const c = resolveConfig({
      env: { LLMQ_MODELS: '{"claude-sonnet-*":{"itpm":400000,"otpm":80000,"rpm":4000}}' },
    });
    expect(scopeLimitsOf(c)).toEqual({
      'model:claude-sonnet-*': {
        requests: 4000,
        inputTokens: 400000,
        outputTokens: 80000,
        tokens: undefined,
      },
    });
    expect(c.modelsStrict).toBe(false);
    expect(resolveConfig({ env: { LLMQ_MODELS_STRICT: 'true' } }).modelsStrict).toBe(true);
  });

  it('refuses bad settings in one line naming the setting', () => {
    expect(bad({ models: { 'claude-*-sonnet': { rpm: 1 } } })).toThrow(
      /^models in the config file must be an object of model pattern to limits.*got \{"claude-\*-sonnet"/,
    );
    expect(bad({ prices: { 'claude-x-*': { input: -1, output: 15 } } })).toThrow(
      /^prices in the config file must be .* \(each price a number from 0 up\), got/,
    );
    expect(bad({ budgets: { 'tenant:acme': {} } })).toThrow(
      /^budgets in the config file must be .*each budget needs day and\/or month.*got \{"tenant:acme":\{\}\}/,
    );
    expect(bad({ budgets: { global: { week: 5 } } })).toThrow(ConfigError);
    expect(() => resolveConfig({ env: { LLMQ_BUDGET_POLICY: 'later' } })).toThrow(
      'LLMQ_BUDGET_POLICY must be wait, refuse or dead-letter, got "later"',
    );
  });

  it('prices usage from the shipped table with cache writes and reads, a config overriding it', () => {
    expect(priceOf('claude-sonnet-4-5-20250929')).toEqual(PRICES['claude-sonnet-4-5*']);
    const usage = {
      input_tokens: 1000,
      output_tokens: 200,
      cache_creation_input_tokens: 100,
      cache_read_input_tokens: 1000,
    };
    // 1000 × 3 + 200 × 15 + 100 × 3.75 + 1000 × 0.3 µ$
    expect(costMicros(priceOf('claude-sonnet-4-5')!, usage)).toBe(6_675);
    expect(listPriceUsd('unknown-model', usage)).toBe(0);
    const c = resolveConfig({
      env: {},
      file: {
        prices: { 'claude-sonnet-4-5*': { input: 1, output: 1 } },
        budgets: { global: { day: 1 } },
      },
    });
    expect(budgetSettingsOf(c)!.prices['claude-sonnet-4-5*']).toEqual({ input: 1, output: 1 });
    expect(budgetSettingsOf(resolveConfig({ env: {} }))).toBeUndefined();
  });
});
