/**
 * `llmq mock-anthropic`: runs the mock server in the foreground. The URL goes alone on the first
 * line of stdout (scripts read it), a one-line summary of the limits on the second; SIGINT or
 * SIGTERM closes the server and the command returns, so the process exits 0.
 */

import type { Command } from 'commander';
import { ConfigError } from '../../shared/errors.ts';
import { untilStopSignal } from '../../shared/signals.ts';
import {
  type MockAnthropicOptions,
  type OptionLabel,
  parseMockAnthropicOptions,
  type ResolvedMockAnthropicOptions,
} from '../../testing/mock-anthropic/options.ts';
import { describeWindow } from '../../testing/mock-anthropic/rate-limit-responses.ts';
import { startMockAnthropic } from '../../testing/mock-anthropic/server.ts';

/** The flags as commander hands them over: strings, and a list for the repeatable key flag. */
export interface MockAnthropicFlags {
  port?: string;
  host?: string;
  rpm?: string;
  tpm?: string;
  itpm?: string;
  otpm?: string;
  modelLimits?: string;
  window?: string;
  algo?: string;
  outputAccounting?: string;
  charsPerToken?: string;
  perMessageTokens?: string;
  latency?: string;
  latencyPerToken?: string;
  outputShare?: string;
  faultOverloaded?: string;
  fault500?: string;
  faultDrop?: string;
  faultHang?: string;
  faultMidstream?: string;
  faultStall?: string;
  spendCappedKey?: string[];
  seed?: string;
  roundReadings?: string;
  maxOutputTokens?: string;
  cacheTtl?: string;
}

/** Adds the `mock-anthropic` subcommand to `program`. */
export function registerMockAnthropicCommand(program: Command): void {
  program
    .command('mock-anthropic')
    .description(
      'Serve a mock of the Anthropic Messages API (rate limits, latency, faults) until SIGINT/SIGTERM',
    )
    .option('--port <n>', 'port to listen on; 0 picks a free one', '0')
    .option('--host <host>', 'interface to bind', '127.0.0.1')
    .option('--rpm <n>', 'requests per window')
    .option('--tpm <n>', 'total (input + output) tokens per window')
    .option('--itpm <n>', 'input tokens per window')
    .option('--otpm <n>', 'output tokens per window')
    .option(
      '--model-limits <json>',
      'limits by model name prefix, such as {"claude-sonnet-":{"requests":50,"inputTokens":30000}}',
    )
    .option('--window <seconds>', 'rate-limit window in seconds (decimals allowed)', '60')
    .option('--algo <algorithm>', 'sliding (exact window log) or bucket (token bucket)', 'sliding')
    .option(
      '--output-accounting <mode>',
      'reserve (max_tokens stays charged), actual (the unused part given back) or produced (output charged as produced, as the API does today)',
      'reserve',
    )
    .option(
      '--chars-per-token <n>',
      'count input as characters / n + a per-message overhead (default: the mock tokenizer)',
    )
    .option('--per-message-tokens <n>', 'tokens a message costs with --chars-per-token')
    .option('--latency <ms>', 'base latency in ms', '0')
    .option('--latency-per-token <ms>', 'extra latency per output token in ms', '0')
    .option('--output-share <share>', 'share of max_tokens produced: X or LO-HI', '0.3-0.9')
    .option('--fault-overloaded <rate>', 'rate of 529 overloaded_error answers')
    .option('--fault-500 <rate>', 'rate of 500 api_error answers')
    .option('--fault-drop <rate>', 'rate of connections dropped without an answer')
    .option(
      '--fault-hang <rate>',
      'rate of requests read and never answered, the connection left open (no headers)',
    )
    .option('--fault-midstream <rate>', 'rate of streams that fail midway with an error event')
    .option(
      '--fault-stall <rate>',
      'rate of streams that go silent midway, the connection left open',
    )
    .option(
      '--spend-capped-key <key>',
      'x-api-key that gets the spend-cap 429 (repeatable)',
      (key: string, keys: string[]) => [...keys, key],
      [] as string[],
    )
    .option('--seed <n>', 'seed of the fault generator', '1')
    .option(
      '--round-readings <n>',
      'round token -remaining headers to the nearest multiple of n (the API: 1000); 0 exact',
      '0',
    )
    .option('--max-output-tokens <n>', 'the most max_tokens a request may ask for', '64000')
    .option(
      '--cache-ttl <seconds>',
      'prompt-cache lifetime after last use ("ttl":"1h" entries: 12x)',
      '300',
    )
    .action(async (flags: MockAnthropicFlags) => {
      const options = resolveMockAnthropicFlags(flags);
      const mock = await listen(options);
      process.stdout.write(`${mock.url}\n${summarize(parseMockAnthropicOptions(options))}\n`);
      await untilStopSignal();
      await mock.close();
    });
}

/** `--model-limits` as JSON; the options' schema checks its shape. */
function parseModelLimits(raw: string | undefined): unknown {
  if (raw === undefined) return undefined;
  try {
    return JSON.parse(raw);
  } catch {
    throw new ConfigError(
      `--model-limits must be a JSON object of model name prefix to limits, such as {"claude-sonnet-":{"requests":50}}, got ${JSON.stringify(raw)}`,
    );
  }
}

/**
 * Turns the command's flags into validated options.
 *
 * @throws ConfigError naming the flag, the value typed and what is allowed, e.g.
 *   `--algo must be sliding or bucket, got "fixed"`.
 */
export function resolveMockAnthropicFlags(flags: MockAnthropicFlags): MockAnthropicOptions {
  // Every option is named by its flag in errors, even one the user did not type (fault sums).
  const labels: Record<string, OptionLabel> = Object.fromEntries(
    Object.entries(FLAG_NAMES).map(([path, name]) => [path, { name }]),
  );
  labels['windowMs'] = { name: '--window', allowed: 'a number of seconds from 0.001 to 86400' };
  labels['cacheTtlMs'] = {
    name: '--cache-ttl',
    allowed: 'a number of seconds from 0.001 to 86400',
  };
  const typed = (path: string, raw: string | undefined) => {
    if (raw !== undefined) labels[path] = { ...labels[path]!, raw };
    return raw;
  };
  const number = (path: string, raw: string | undefined, scale = 1) => {
    const text = typed(path, raw);
    return text === undefined ? undefined : parseDecimal(text) * scale;
  };

  const options = dropUndefined({
    host: typed('host', flags.host),
    port: number('port', flags.port),
    windowMs: number('windowMs', flags.window, 1000),
    limits: dropUndefined({
      requests: number('limits.requests', flags.rpm),
      tokens: number('limits.tokens', flags.tpm),
      inputTokens: number('limits.inputTokens', flags.itpm),
      outputTokens: number('limits.outputTokens', flags.otpm),
    }),
    modelLimits: parseModelLimits(typed('modelLimits', flags.modelLimits)),
    algorithm: typed('algorithm', flags.algo),
    outputAccounting: typed('outputAccounting', flags.outputAccounting),
    charsPerToken: number('charsPerToken', flags.charsPerToken),
    perMessageTokens: number('perMessageTokens', flags.perMessageTokens),
    latencyMs: number('latencyMs', flags.latency),
    latencyPerOutputTokenMs: number('latencyPerOutputTokenMs', flags.latencyPerToken),
    outputShare: parseShare(typed('outputShare', flags.outputShare)),
    faults: dropUndefined({
      overloaded: number('faults.overloaded', flags.faultOverloaded),
      serverError: number('faults.serverError', flags.fault500),
      drop: number('faults.drop', flags.faultDrop),
      hang: number('faults.hang', flags.faultHang),
      midStreamError: number('faults.midStreamError', flags.faultMidstream),
      stall: number('faults.stall', flags.faultStall),
    }),
    spendCappedKeys: flags.spendCappedKey,
    seed: number('seed', flags.seed),
    roundReadings: number('roundReadings', flags.roundReadings),
    maxOutputTokens: number('maxOutputTokens', flags.maxOutputTokens),
    cacheTtlMs: number('cacheTtlMs', flags.cacheTtl, 1000),
  });
  parseMockAnthropicOptions(options, labels);
  return options as MockAnthropicOptions;
}

/** The flag behind each option path. */
const FLAG_NAMES: Record<string, string> = {
  host: '--host',
  port: '--port',
  windowMs: '--window',
  'limits.requests': '--rpm',
  'limits.tokens': '--tpm',
  'limits.inputTokens': '--itpm',
  'limits.outputTokens': '--otpm',
  algorithm: '--algo',
  outputAccounting: '--output-accounting',
  charsPerToken: '--chars-per-token',
  perMessageTokens: '--per-message-tokens',
  latencyMs: '--latency',
  latencyPerOutputTokenMs: '--latency-per-token',
  outputShare: '--output-share',
  'faults.overloaded': '--fault-overloaded',
  'faults.serverError': '--fault-500',
  'faults.drop': '--fault-drop',
  'faults.hang': '--fault-hang',
  'faults.midStreamError': '--fault-midstream',
  'faults.stall': '--fault-stall',
  spendCappedKeys: '--spend-capped-key',
  seed: '--seed',
  roundReadings: '--round-readings',
  maxOutputTokens: '--max-output-tokens',
  cacheTtlMs: '--cache-ttl',
};

/** A plain decimal such as `12`, `0.25` or `1e3`; anything else is NaN (which the schema refuses). */
function parseDecimal(raw: string): number {
  return /^\s*[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?\s*$/i.test(raw) ? Number(raw) : Number.NaN;
}

/** `0.5` → 0.5, `0.3-0.9` → [0.3, 0.9]; anything else is passed on for the schema to refuse. */
function parseShare(raw: string | undefined): unknown {
  if (raw === undefined) return undefined;
  const range = /^\s*([^-\s]+)\s*-\s*([^-\s]+)\s*$/.exec(raw);
  if (range) return [parseDecimal(range[1]!), parseDecimal(range[2]!)];
  const value = parseDecimal(raw);
  return Number.isNaN(value) ? raw : value;
}

function dropUndefined<T extends Record<string, unknown>>(object: T): Partial<T> {
  return Object.fromEntries(
    Object.entries(object).filter(([, value]) => value !== undefined),
  ) as Partial<T>;
}

async function listen(options: MockAnthropicOptions) {
  try {
    return await startMockAnthropic(options);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL') {
      throw new ConfigError(
        `--host ${options.host ?? '127.0.0.1'} --port ${options.port ?? 0} cannot be used (${code}): ` +
          'pick another port, or --port 0 for a free one',
        { cause: error },
      );
    }
    throw error;
  }
}

/** One line: the limits per window, the algorithm, latency and faults. */
export function summarize(options: ResolvedMockAnthropicOptions): string {
  const { limits } = options;
  const parts = [
    limits.requests !== undefined ? `${fmt(limits.requests)} requests` : '',
    limits.input_tokens !== undefined ? `${fmt(limits.input_tokens)} input tokens` : '',
    limits.output_tokens !== undefined ? `${fmt(limits.output_tokens)} output tokens` : '',
    limits.tokens !== undefined ? `${fmt(limits.tokens)} tokens` : '',
  ].filter((part) => part !== '');
  const limitText =
    parts.length > 0
      ? `limits ${parts.join(', ')} ${describeWindow(options.windowMs)}`
      : 'no limits';
  const faults = Object.entries(options.faults)
    .filter(([, rate]) => rate > 0)
    .map(([kind, rate]) => `${kind} ${rate}`);
  const share = options.outputShare;
  const { charsPerToken, perMessageTokens } = options.inputCounting;
  const counting =
    charsPerToken === undefined
      ? 'input by the tokenizer'
      : `input characters / ${charsPerToken} + ${perMessageTokens} a message`;
  return (
    `${limitText} (${options.algorithm}, output ${options.outputAccounting}); ${counting}; ` +
    `latency ${options.latencyMs} ms + ${options.latencyPerOutputTokenMs} ms/token; ` +
    `output share ${typeof share === 'number' ? share : share.join('-')}; ` +
    `faults ${faults.length > 0 ? faults.join(', ') : 'none'}; seed ${options.seed}; ` +
    `readings ${options.roundReadings > 0 ? `rounded to ${fmt(options.roundReadings)}` : 'exact'}`
  );
}

function fmt(value: number): string {
  return value.toLocaleString('en-US');
}
