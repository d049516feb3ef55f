import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type ConfigSources, resolveConfig } from '../shared/config.ts';
import { ConfigError } from '../shared/errors.ts';

describe('resolveConfig', () => {
  it('gives the documented defaults with nothing set', () => {
    const c = resolveConfig({ env: {} });
    expect(c).toMatchObject({
      redisUrl: 'redis://127.0.0.1:6379',
      queue: 'llmq',
      prefix: 'llmq',
      windowS: 60,
      outputAccounting: 'reserve',
      concurrency: 10,
      maxInFlight: undefined,
      headroom: 0,
      maxDepth: 10_000,
      firstByteTimeoutMs: 20_000,
      idleTimeoutMs: 30_000,
    });
    expect(c.tpm).toBeUndefined();
    expect(c.anthropicApiKey).toBeUndefined();
  });

  it('takes a flag over the environment, the environment over the file, the file over the default', () => {
    const file = { tpm: 1000, itpm: 500, otpm: 300, queue: 'from-file' };
    const env = { LLMQ_TPM: '2000', LLMQ_ITPM: '600' };
    const c = resolveConfig({ flags: { tpm: '3000' }, env, file });
    expect(c.tpm).toBe(3000);
    expect(c.itpm).toBe(600);
    expect(c.otpm).toBe(300);
    expect(c.queue).toBe('from-file');
  });

  it('reads a JSON config file named by LLMQ_CONFIG', () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmq-config-'));
    const path = join(dir, 'llmq.json');
    writeFileSync(path, JSON.stringify({ windowS: 10, outputAccounting: 'actual' }));
    expect(resolveConfig({ env: { LLMQ_CONFIG: path } })).toMatchObject({
      windowS: 10,
      outputAccounting: 'actual',
    });
  });

  it('names the source, the bad value and what is expected', () => {
    expect(() => resolveConfig({ env: { LLMQ_TPM: 'lots' } })).toThrow(
      'LLMQ_TPM must be a whole number from 1 up, got "lots"',
    );
    expect(() => resolveConfig({ flags: { outputAccounting: 'maybe' }, env: {} })).toThrow(
      '--output-accounting must be reserve, actual or produced, got "maybe"',
    );
    expect(() => resolveConfig({ env: { REDIS_URL: 'localhost:6379' } })).toThrow(
      /REDIS_URL must be a redis:\/\//,
    );
    expect(() => resolveConfig({ env: {}, file: { concurrency: 0 } })).toThrow(
      'concurrency in the config file must be a whole number from 1 to 10000, got 0',
    );
    expect(() => resolveConfig({ env: {}, file: '/nonexistent/llmq.json' })).toThrow(ConfigError);
    expect(() => resolveConfig({ env: { LLMQ_HEADROOM: '0.7' } })).toThrow(
      'LLMQ_HEADROOM must be a share from 0 to 0.5, got "0.7"',
    );
  });

  it("keeps a process's concurrency and the fleet-wide cap of calls apart", () => {
    const cases: [ConfigSources, number, number | undefined][] = [
      [{ env: {} }, 10, undefined],
      [{ flags: { concurrency: '5' }, env: {} }, 5, undefined],
      [{ flags: { maxInFlight: '12' }, env: { LLMQ_CONCURRENCY: '4' } }, 4, 12],
      [{ env: { LLMQ_MAX_IN_FLIGHT: '20' }, file: { maxInFlight: 8 } }, 10, 20],
      [{ env: {}, file: { maxInFlight: 8 } }, 10, 8],
    ];
    for (const [sources, concurrency, maxInFlight] of cases) {
      expect(resolveConfig(sources)).toMatchObject({ concurrency, maxInFlight });
    }
    expect(() => resolveConfig({ flags: { maxInFlight: '0' }, env: {} })).toThrow(
      '--max-in-flight must be a whole number from 1 up (leave it unset for no cap), got "0"',
    );
    expect(() => resolveConfig({ env: { LLMQ_MAX_IN_FLIGHT: 'many' } })).toThrow(
      'LLMQ_MAX_IN_FLIGHT must be a whole number from 1 up (leave it unset for no cap), got "many"',
    );
  });

  it("takes a dead worker's jobs up again after 30 s unless told, 2 s to 10 min", () => {
    expect(resolveConfig({ env: {} }).recoverAfterMs).toBe(30_000);
    expect(resolveConfig({ env: { LLMQ_RECOVER_AFTER: '5s' } }).recoverAfterMs).toBe(5_000);
    expect(() => resolveConfig({ env: { LLMQ_RECOVER_AFTER: '1s' } })).toThrow(
      'LLMQ_RECOVER_AFTER must be a duration from 2s to 10m, such as 10s or 1m, got "1s"',
    );
  });

  it('retries transient failures for 10 minutes unless told, as a duration', () => {
    expect(resolveConfig({ env: {} }).retryForMs).toBe(600_000);
    expect(resolveConfig({ env: { LLMQ_RETRY_FOR: '90s' } }).retryForMs).toBe(90_000);
    expect(
      resolveConfig({ flags: { retryFor: '2h' }, env: { LLMQ_RETRY_FOR: '1m' } }).retryForMs,
    ).toBe(7_200_000);
    expect(resolveConfig({ env: { LLMQ_RETRY_FOR: '0' } }).retryForMs).toBe(0);
    // A config file may give milliseconds, or a duration.
    expect(resolveConfig({ env: {}, file: { retryForMs: 45_000 } }).retryForMs).toBe(45_000);
    expect(resolveConfig({ env: {}, file: { retryForMs: '1.5m' } }).retryForMs).toBe(90_000);
    expect(() => resolveConfig({ env: { LLMQ_RETRY_FOR: '600' } })).toThrow(
      'LLMQ_RETRY_FOR must be a duration such as 90s, 10m or 2h (at most 7d; 0 makes transient failures spend attempts), got "600"',
    );
    expect(() => resolveConfig({ flags: { retryFor: '8d' }, env: {} })).toThrow(
      /^--retry-for must be a duration .* got "8d"$/,
    );
  });

  it('bounds a silent provider: 20 s to the first byte, 30 s of silence, as durations', () => {
    const c = resolveConfig({
      flags: { firstByteTimeout: '45s' },
      env: { LLMQ_FIRST_BYTE_TIMEOUT: '5s', LLMQ_IDLE_TIMEOUT: '1m' },
    });
    expect(c).toMatchObject({ firstByteTimeoutMs: 45_000, idleTimeoutMs: 60_000 });
    expect(resolveConfig({ env: {}, file: { idleTimeoutMs: '10s' } }).idleTimeoutMs).toBe(10_000);
    expect(() => resolveConfig({ env: { LLMQ_IDLE_TIMEOUT: '30' } })).toThrow(
      'LLMQ_IDLE_TIMEOUT must be a duration from 100ms to 1h, such as 30s, got "30"',
    );
    expect(() => resolveConfig({ flags: { firstByteTimeout: '2h' }, env: {} })).toThrow(
      '--first-byte-timeout must be a duration from 100ms to 1h, such as 20s, got "2h"',
    );
  });

  it('never repeats the provider key in an error', () => {
    try {
      resolveConfig({ env: { ANTHROPIC_API_KEY: 'sk-secret', ANTHROPIC_BASE_URL: 'not a url' } });
      expect.unreachable();
    } catch (err) {
      expect((err as Error).message).toContain('ANTHROPIC_BASE_URL');
      expect((err as Error).message).not.toContain('sk-secret');
    }
  });
});
