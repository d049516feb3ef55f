import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import {
  registerMockAnthropicCommand,
  resolveMockAnthropicFlags,
} from '../scripts/cli/mock-anthropic.ts';
import { ConfigError } from '../shared/errors.ts';
import {
  type MockStats,
  parseMockAnthropicOptions,
  startMockAnthropic,
} from '../testing/mock-anthropic/index.ts';
import { spawnMockCommand } from './fixtures/mock-command.ts';

const runCommand = (args: string[]) => spawnMockCommand(args);

describe('the mock-anthropic command', () => {
  it('prints the URL alone on the first line, serves, and exits 0 on SIGTERM or SIGINT', async () => {
    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      const child = runCommand([
        '--port',
        '0',
        '--tpm',
        '1000',
        '--window',
        '1.5',
        '--algo',
        'bucket',
      ]);
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
      const url = (await lines.next()).value as string;
      const summary = (await lines.next()).value as string;
      expect(url, stderr).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(url.endsWith(':0')).toBe(false);
      expect(summary).toContain('1,000 tokens per 1.5 seconds (bucket, output reserve)');

      const stats = (await (await fetch(`${url}/__stats`)).json()) as MockStats;
      expect(stats).toMatchObject({
        limits: { tokens: 1000 },
        windowMs: 1500,
        algorithm: 'bucket',
      });

      const exited = once(child, 'exit');
      child.kill(signal);
      const [exitCode] = await exited;
      expect(exitCode, stderr).toBe(0);
    }
  });

  it('turns flags into options: limits per window, seconds to ms, ranges and repeated keys', () => {
    const options = resolveMockAnthropicFlags({
      rpm: '50',
      tpm: '100000',
      itpm: '80000',
      otpm: '16000',
      window: '0.5',
      algo: 'bucket',
      outputAccounting: 'actual',
      charsPerToken: '3.6',
      perMessageTokens: '7',
      latency: '20',
      latencyPerToken: '0.5',
      outputShare: '0.2-0.4',
      faultOverloaded: '0.1',
      fault500: '0.05',
      faultDrop: '0.01',
      faultHang: '0.03',
      faultMidstream: '0.02',
      faultStall: '0.04',
      spendCappedKey: ['a', 'b'],
      seed: '7',
      roundReadings: '1000',
      maxOutputTokens: '8192',
      cacheTtl: '1.5',
    });
    expect(parseMockAnthropicOptions(options)).toEqual({
      host: '127.0.0.1',
      port: 0,
      windowMs: 500,
      limits: { requests: 50, input_tokens: 80_000, output_tokens: 16_000, tokens: 100_000 },
      modelLimits: {},
      algorithm: 'bucket',
      outputAccounting: 'actual',
      inputCounting: { charsPerToken: 3.6, perMessageTokens: 7 },
      latencyMs: 20,
      latencyPerOutputTokenMs: 0.5,
      outputShare: [0.2, 0.4],
      faults: {
        overloaded: 0.1,
        serverError: 0.05,
        drop: 0.01,
        hang: 0.03,
        midStreamError: 0.02,
        stall: 0.04,
      },
      spendCappedKeys: ['a', 'b'],
      seed: 7,
      roundReadings: 1000,
      maxOutputTokens: 8192,
      cacheTtlMs: 1500,
    });
    expect(resolveMockAnthropicFlags({ outputShare: '0.7' }).outputShare).toBe(0.7);
  });

  it.each([
    [{ algo: 'fixed' }, '--algo must be sliding or bucket, got "fixed"'],
    [{ rpm: 'abc' }, '--rpm must be a positive integer, got "abc"'],
    [{ otpm: '0' }, '--otpm must be a positive integer, got "0"'],
    [{ tpm: '1.5' }, '--tpm must be a positive integer, got "1.5"'],
    [{ window: '0' }, '--window must be a number of seconds from 0.001 to 86400, got "0"'],
    [
      { outputAccounting: 'lazy' },
      '--output-accounting must be reserve, actual or produced, got "lazy"',
    ],
    [{ outputShare: '0.9-0.3' }, '--output-share must be a share from 0 to 1, or a range'],
    [{ outputShare: 'half' }, '--output-share must be a share from 0 to 1, or a range'],
    [{ faultDrop: '1.5' }, '--fault-drop must be a rate from 0 to 1, got "1.5"'],
    [
      { faultOverloaded: '0.6', fault500: '0.6' },
      '--fault-overloaded + --fault-500 + --fault-drop + --fault-hang must be at most 1, got 1.2',
    ],
    [
      { faultMidstream: '0.5', faultStall: '0.7' },
      '--fault-midstream + --fault-stall must be at most 1, got 1.2',
    ],
    [{ port: '70000' }, '--port must be a port from 0 to 65535, got "70000"'],
    [{ latency: '-1' }, '--latency must be a number >= 0, got "-1"'],
    [{ seed: 'x' }, '--seed must be an integer, got "x"'],
    [
      { roundReadings: '-5' },
      '--round-readings must be a whole number of tokens >= 0 (0 for exact readings), got "-5"',
    ],
    [
      { maxOutputTokens: '1e12' },
      '--max-output-tokens must be a whole number of tokens from 1 to 1000000, got "1e12"',
    ],
    [{ cacheTtl: '0' }, '--cache-ttl must be a number of seconds from 0.001 to 86400, got "0"'],
    [
      { charsPerToken: '0' },
      '--chars-per-token must be a number of characters from 0.1 to 100, got "0"',
    ],
    [
      { charsPerToken: '4', perMessageTokens: '2.5' },
      '--per-message-tokens must be a whole number of tokens from 0 to 1000, got "2.5"',
    ],
    [{ perMessageTokens: '7' }, '--per-message-tokens must be given only with charsPerToken'],
  ])('refuses %o with a ConfigError naming the flag and the value', (flags, message) => {
    expect(() => resolveMockAnthropicFlags(flags)).toThrow(ConfigError);
    expect(() => resolveMockAnthropicFlags(flags)).toThrow(message);
  });

  it('throws the ConfigError out of the registered action, before listening', async () => {
    const program = new Command('llmq').exitOverride();
    registerMockAnthropicCommand(program);
    await expect(
      program.parseAsync(['mock-anthropic', '--algo', 'fixed'], { from: 'user' }),
    ).rejects.toThrow('--algo must be sliding or bucket, got "fixed"');
  });

  it('refuses bad programmatic options with the option path, and unknown options by name', async () => {
    await expect(startMockAnthropic({ limits: { requests: 0 } })).rejects.toThrow(
      'limits.requests must be a positive integer, got 0',
    );
    expect(() => parseMockAnthropicOptions({ latency: 5 })).toThrow(
      'unknown mock-anthropic option "latency": allowed are host, port',
    );
    expect(() => parseMockAnthropicOptions({ outputShare: [0.5, 2] })).toThrow(ConfigError);
  });
});
