import { z } from 'zod';
import { type BudgetLimits, type BudgetPolicy, budgetsSchema } from './budgets.ts';
import { deploymentsSchema, explainDeployments } from './config-deployments.ts';
import { loadConfigFile } from './config-file.ts';
import {
  durationSchema,
  jsonOf,
  modelsSchema,
  name,
  optionalLimit,
  retryForSchema,
  scopesSchema,
  sizeSchema,
  wholeAtLeast,
} from './config-schemas.ts';
import type { DeploymentConfig } from './deployments.ts';
import { ConfigError } from './errors.ts';
import { DEFAULT_RETRY_FOR_MS } from './job.ts';
import type { OutputAccounting } from './limiter/types.ts';
import { type ModelPrice, pricesSchema } from './prices.ts';
import { DEFAULT_FIRST_BYTE_MS, DEFAULT_IDLE_MS } from './response-timeouts.ts';

/**
 * Every setting of llmq, resolved once at the edge (CLI, server start) and passed inward as a
 * plain object. Precedence: flag > env > file > default. Make one with {@link resolveConfig}.
 *
 * @example
 * ```ts
 * const config: Config = resolveConfig({ env: { LLMQ_QUEUE: 'summaries', LLMQ_TPM: '80000' } });
 * config.queue; // 'summaries'
 * config.tpm; // 80000
 * ```
 */
export interface Config {
  /** @default 'redis://127.0.0.1:6379' (env REDIS_URL) */
  readonly redisUrl: string;
  /** Provider key; never logged, never stored in job data. (env ANTHROPIC_API_KEY) */
  readonly anthropicApiKey: string | undefined;
  /** Provider base URL without `/v1`. (env ANTHROPIC_BASE_URL) */
  readonly anthropicBaseUrl: string | undefined;
  /** @default 'llmq' (flag --queue, env LLMQ_QUEUE) */
  readonly queue: string;
  /** Prefix of every Redis key. @default 'llmq' (env LLMQ_PREFIX) */
  readonly prefix: string;
  /** Requests per window, global scope. (flag --rpm, env LLMQ_RPM) */
  readonly rpm: number | undefined;
  /** Total (input + output) tokens per window. (flag --tpm, env LLMQ_TPM) */
  readonly tpm: number | undefined;
  /** Input tokens per window. (flag --itpm, env LLMQ_ITPM) */
  readonly itpm: number | undefined;
  /** Output tokens per window. (flag --otpm, env LLMQ_OTPM) */
  readonly otpm: number | undefined;
  /** The provider's window length in seconds. @default 60 (flag --window, env LLMQ_WINDOW_S) */
  readonly windowS: number;
  /**
   * How the provider charges output tokens: `reserve` (the whole `max_tokens`, kept), `actual`
   * (the unused part given back when the call ends) or `produced` (as it is produced); see
   * docs/limiter.md. @default 'reserve' (flag --output-accounting, env LLMQ_OUTPUT_ACCOUNTING)
   * @inlineType OutputAccounting
   */
  readonly outputAccounting: OutputAccounting;
  /** Calls this worker process runs at once. @default 10 (flag --concurrency, env LLMQ_CONCURRENCY) */
  readonly concurrency: number;
  /**
   * Calls in flight across every worker process of the queue; unset for no cap.
   * @default undefined (flag --max-in-flight, env LLMQ_MAX_IN_FLIGHT)
   */
  readonly maxInFlight: number | undefined;
  /**
   * Share of each limit kept unused, 0 to 0.5, for what neither our window nor the provider's
   * latest reading sees (another client's spend since). @default 0.01 (env LLMQ_HEADROOM)
   */
  readonly headroom: number;
  /**
   * How long a job's transient failures (529, 5xx, timeouts, dropped connections) are retried,
   * in ms from its first; the job's own `retryForMs` wins. 0 makes them spend attempts like other
   * retryable failures. @default 600000, 10 minutes (flag --retry-for, env LLMQ_RETRY_FOR: a
   * duration such as 90s, 10m or 2h)
   */
  readonly retryForMs: number;
  /**
   * How soon a job whose worker died is taken up again (BullMQ's lock; the stalled check runs
   * twice as often). Shorter costs a lock renewal more often. @default 30000 (env
   * LLMQ_RECOVER_AFTER: a duration such as 10s or 1m)
   */
  readonly recoverAfterMs: number;
  /**
   * The wait for a call's first byte, for a small request (a large input adds a second per 4,000
   * tokens); past it, or past `idleTimeoutMs` of silence midway, the call is aborted and its job
   * retried by time, or moved in a pool (docs/deployments.md). @default 20000 (flag
   * --first-byte-timeout, env LLMQ_FIRST_BYTE_TIMEOUT: a duration such as 20s)
   */
  readonly firstByteTimeoutMs: number;
  /** The longest silence midway. @default 30000 (flag --idle-timeout, env LLMQ_IDLE_TIMEOUT) */
  readonly idleTimeoutMs: number;
  /** Waiting jobs allowed in the queue; 0 means unbounded. @default 10000 (env LLMQ_MAX_DEPTH) */
  readonly maxDepth: number;
  /** Bytes of waiting requests' JSON in the queue; 0 is unbounded. @default 1gb (LLMQ_MAX_DEPTH_BYTES) */
  readonly maxDepthBytes: number;
  /** A dead letter older than this is dropped; 0 keeps them. @default 30d (LLMQ_DEAD_LETTER_MAX_AGE) */
  readonly deadLetterMaxAgeMs: number;
  /** Bytes of a queue's dead letters; the oldest over it are dropped. @default 256mb (LLMQ_DEAD_LETTER_MAX_BYTES) */
  readonly deadLetterMaxBytes: number;
  /** Bytes of one tenant's dead letters. @default 64mb (LLMQ_DEAD_LETTER_TENANT_MAX_BYTES) */
  readonly deadLetterTenantMaxBytes: number;
  /** Bytes of finished jobs' results and records; the oldest over it go. @default 512mb (LLMQ_RESULTS_MAX_BYTES) */
  readonly resultsMaxBytes: number;
  /** The largest body `llmq serve` reads, as the API's. @default 32mb (--body-limit, LLMQ_BODY_LIMIT) */
  readonly bodyLimit: number;
  /**
   * Limits of nested scopes inside the global one, per window, by scope name:
   * `{ "tenant:acme": { "tpm": 20000, "rpm": 100 } }` (config file `scopes`, or env LLMQ_SCOPES
   * as JSON). A job of tenant `acme` is charged to `tenant:acme` too. @default {}
   */
  readonly scopes: Readonly<Record<string, ScopeLimits>>;
  /**
   * Limits per model class, by model pattern (a name, or a prefix ending in `*`):
   * `{ "claude-sonnet-*": { "itpm": 400000, "otpm": 80000, "rpm": 4000 } }` (config file
   * `models`, or env LLMQ_MODELS as JSON). A job is charged to `model:<pattern>` too. @default {}
   */
  readonly models: Readonly<Record<string, ScopeLimits>>;
  /**
   * Refuse at enqueue a job whose model matches no pattern of `models`; when off, such a job
   * has the global (and tenant) limits only. @default false (env LLMQ_MODELS_STRICT)
   */
  readonly modelsStrict: boolean;
  /**
   * Prices overriding or adding to the shipped table (shared/prices.json), by model pattern, in
   * dollars per million tokens: `{ "claude-x-*": { "input": 3, "output": 15, "cacheWrite":
   * 3.75, "cacheRead": 0.3 } }` (config file `prices`, or env LLMQ_PRICES as JSON). @default {}
   * @inlineType ModelPrice
   */
  readonly prices: Readonly<Record<string, ModelPrice>>;
  /**
   * Money budgets in dollars per UTC day and/or month, by `global` or `tenant:<name>`:
   * `{ "global": { "month": 500 }, "tenant:acme": { "day": 5 } }` (config file `budgets`, or
   * env LLMQ_BUDGETS as JSON). @default {}
   */
  readonly budgets: Readonly<Record<string, BudgetLimits>>;
  /**
   * A job whose budget is spent: `wait` for the next period, `refuse` at enqueue
   * (budget_exhausted), or `dead-letter` it. @default 'wait' (env LLMQ_BUDGET_POLICY)
   */
  readonly budgetPolicy: BudgetPolicy;
  /**
   * Fair share between tenants within a priority class: deficit round robin over tokens,
   * weighted by `weight` in the tenant's scope (`scopes: { "tenant:a": { "weight": 3 } }`,
   * default 1). @default false (env LLMQ_FAIR_SHARE)
   */
  readonly fairShare: boolean;
  /**
   * Tenants the dashboard's `/metrics` names, the busiest first; every other tenant's series are
   * summed into one `tenant="other"` (scope `tenant:other`), so a scrape stays small with
   * thousands of tenants. @default 10 (env LLMQ_METRICS_TENANTS)
   */
  readonly metricsTenants: number;
  /**
   * The pool: more than one key, organization or platform serving the queue, each a scope
   * `deployment:<name>` with its own limits, pause and breaker (config file `deployments`, or
   * env LLMQ_DEPLOYMENTS as JSON; see docs/deployments.md). Empty: the one key,
   * `ANTHROPIC_API_KEY` at `ANTHROPIC_BASE_URL`. @default []
   */
  readonly deployments: readonly DeploymentConfig[];
}

/**
 * A nested scope's limits, named like the global ones.
 * @inline
 */
export interface ScopeLimits {
  /** A tenant's weight under fair share. @default 1 */
  readonly weight?: number | undefined;
  readonly rpm?: number | undefined;
  readonly tpm?: number | undefined;
  readonly itpm?: number | undefined;
  readonly otpm?: number | undefined;
}

/**
 * Where {@link resolveConfig} reads settings from; a flag wins over the environment, which wins
 * over the file.
 *
 * @example
 * ```ts
 * const sources: ConfigSources = {
 *   flags: { concurrency: '4' },
 *   env: process.env,
 *   file: './llmq.json',
 * };
 * ```
 */
export interface ConfigSources {
  /** Parsed CLI flags, camelCase (`{ tpm: '4000' }`); undefined values are ignored. */
  readonly flags?: Record<string, unknown>;
  /** Usually `process.env`; tests pass `{}`. */
  readonly env?: Record<string, string | undefined>;
  /** A config file's parsed content, or a path to a JSON file. */
  readonly file?: Record<string, unknown> | string;
}

type Key = keyof Config;

interface Setting {
  readonly env?: string;
  readonly flag?: string;
  readonly schema: z.ZodType;
  readonly default: unknown;
  /** What the value must be, for the error message. */
  readonly expect: string;
  /** The error message of a refused value, when it says more than `expect` (and hides secrets). */
  readonly explain?: (error: z.ZodError, from: string) => string;
}

/** A bound on a silent provider: a duration from 100 ms to an hour. */
const silence = (env: string, flag: string, ms: number): Setting => ({
  ...{ env, flag, schema: durationSchema(100, 3_600_000), default: ms },
  expect: `a duration from 100ms to 1h, such as ${ms / 1000}s`,
});

/** A bytes bound on what Redis keeps (dead letters, results): a size, or 0 for none. */
const keptBytes = (env: string, bytes: number): Setting => ({
  ...{ env, schema: sizeSchema(0), default: bytes },
  expect: 'a size such as 256mb or 1gb, or 0 (unbounded)',
});

const SETTINGS: Record<Key, Setting> = {
  redisUrl: {
    env: 'REDIS_URL',
    flag: 'redisUrl',
    schema: z.string().regex(/^rediss?(\+cluster|\+sentinel)?:\/\//i),
    default: 'redis://127.0.0.1:6379',
    expect:
      'a redis:// or rediss:// URL, redis+cluster://host:port,host:port or ' +
      'redis+sentinel://host:port,host:port/mastername',
  },
  anthropicApiKey: {
    env: 'ANTHROPIC_API_KEY',
    schema: z.string().min(1).optional(),
    default: undefined,
    expect: 'a non-empty key',
  },
  anthropicBaseUrl: {
    env: 'ANTHROPIC_BASE_URL',
    schema: z.url().optional(),
    default: undefined,
    expect: 'an http(s) URL without /v1',
  },
  queue: {
    env: 'LLMQ_QUEUE',
    flag: 'queue',
    schema: name,
    default: 'llmq',
    expect: 'a name of letters, digits, ".", "_" or "-" (at most 100)',
  },
  prefix: {
    env: 'LLMQ_PREFIX',
    flag: 'prefix',
    schema: name,
    default: 'llmq',
    expect: 'a name of letters, digits, ".", "_" or "-" (at most 100)',
  },
  rpm: {
    env: 'LLMQ_RPM',
    flag: 'rpm',
    schema: optionalLimit,
    default: undefined,
    expect: 'a whole number from 1 up',
  },
  tpm: {
    env: 'LLMQ_TPM',
    flag: 'tpm',
    schema: optionalLimit,
    default: undefined,
    expect: 'a whole number from 1 up',
  },
  itpm: {
    env: 'LLMQ_ITPM',
    flag: 'itpm',
    schema: optionalLimit,
    default: undefined,
    expect: 'a whole number from 1 up',
  },
  otpm: {
    env: 'LLMQ_OTPM',
    flag: 'otpm',
    schema: optionalLimit,
    default: undefined,
    expect: 'a whole number from 1 up',
  },
  windowS: {
    env: 'LLMQ_WINDOW_S',
    flag: 'window',
    schema: z.coerce.number().refine((n) => Number.isFinite(n) && n >= 0.1 && n <= 86_400),
    default: 60,
    expect: 'a number of seconds from 0.1 to 86400',
  },
  outputAccounting: {
    env: 'LLMQ_OUTPUT_ACCOUNTING',
    flag: 'outputAccounting',
    schema: z.enum(['reserve', 'actual', 'produced']),
    default: 'reserve',
    expect: 'reserve, actual or produced',
  },
  concurrency: {
    env: 'LLMQ_CONCURRENCY',
    flag: 'concurrency',
    schema: wholeAtLeast(1).refine((n) => n <= 10_000),
    default: 10,
    expect: 'a whole number from 1 to 10000',
  },
  maxInFlight: {
    env: 'LLMQ_MAX_IN_FLIGHT',
    flag: 'maxInFlight',
    schema: optionalLimit,
    default: undefined,
    expect: 'a whole number from 1 up (leave it unset for no cap)',
  },
  headroom: {
    env: 'LLMQ_HEADROOM',
    flag: 'headroom',
    schema: z.coerce.number().refine((n) => Number.isFinite(n) && n >= 0 && n <= 0.5),
    default: 0,
    expect: 'a share from 0 to 0.5',
  },
  retryForMs: {
    env: 'LLMQ_RETRY_FOR',
    flag: 'retryFor',
    schema: retryForSchema,
    default: DEFAULT_RETRY_FOR_MS,
    expect:
      'a duration such as 90s, 10m or 2h (at most 7d; 0 makes transient failures spend attempts)',
  },
  recoverAfterMs: {
    env: 'LLMQ_RECOVER_AFTER',
    flag: 'recoverAfter',
    schema: durationSchema(2_000, 600_000),
    default: 30_000,
    expect: 'a duration from 2s to 10m, such as 10s or 1m',
  },
  firstByteTimeoutMs: silence('LLMQ_FIRST_BYTE_TIMEOUT', 'firstByteTimeout', DEFAULT_FIRST_BYTE_MS),
  idleTimeoutMs: silence('LLMQ_IDLE_TIMEOUT', 'idleTimeout', DEFAULT_IDLE_MS),
  maxDepth: {
    env: 'LLMQ_MAX_DEPTH',
    flag: 'maxDepth',
    schema: wholeAtLeast(0),
    default: 10_000,
    expect: 'a whole number from 0 (unbounded) up',
  },
  maxDepthBytes: {
    env: 'LLMQ_MAX_DEPTH_BYTES',
    flag: 'maxDepthBytes',
    schema: sizeSchema(0),
    default: 1024 ** 3,
    expect: 'a size such as 512mb or 2gb, or 0 (unbounded)',
  },
  deadLetterMaxAgeMs: {
    env: 'LLMQ_DEAD_LETTER_MAX_AGE',
    schema: durationSchema(0, 3_650 * 86_400_000),
    default: 30 * 86_400_000,
    expect: 'a duration such as 7d or 12h, or 0 (kept until purged)',
  },
  deadLetterMaxBytes: keptBytes('LLMQ_DEAD_LETTER_MAX_BYTES', 256 * 1024 ** 2),
  deadLetterTenantMaxBytes: keptBytes('LLMQ_DEAD_LETTER_TENANT_MAX_BYTES', 64 * 1024 ** 2),
  resultsMaxBytes: keptBytes('LLMQ_RESULTS_MAX_BYTES', 512 * 1024 ** 2),
  bodyLimit: {
    env: 'LLMQ_BODY_LIMIT',
    flag: 'bodyLimit',
    schema: sizeSchema(1),
    default: 32 * 1024 ** 2,
    expect: 'a size such as 32mb or 512kb',
  },
  scopes: {
    env: 'LLMQ_SCOPES',
    schema: scopesSchema,
    default: {},
    expect:
      'an object of scope name to limits, such as {"tenant:acme":{"tpm":20000,"rpm":100}} ' +
      '(names without "|", "," or spaces; limits rpm, tpm, itpm, otpm, whole numbers from 1 up; ' +
      "a tenant's weight under fair share, a number above 0)",
  },
  models: {
    env: 'LLMQ_MODELS',
    schema: modelsSchema,
    default: {},
    expect:
      'an object of model pattern to limits, such as {"claude-sonnet-*":{"itpm":400000,"rpm":4000}} ' +
      '(a pattern is a lowercase model name, or a prefix ending in one "*"; limits rpm, tpm, itpm, otpm, whole numbers from 1 up)',
  },
  modelsStrict: {
    env: 'LLMQ_MODELS_STRICT',
    schema: z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]),
    default: false,
    expect: 'true or false',
  },
  prices: {
    env: 'LLMQ_PRICES',
    schema: jsonOf(pricesSchema),
    default: {},
    expect:
      'an object of model pattern to prices in dollars per million tokens, such as ' +
      '{"claude-x-*":{"input":3,"output":15,"cacheWrite":3.75,"cacheRead":0.3}} (each price a number from 0 up)',
  },
  budgets: {
    env: 'LLMQ_BUDGETS',
    schema: jsonOf(budgetsSchema),
    default: {},
    expect:
      'an object of budget name ("global" or "tenant:<name>") to dollars per period, such as ' +
      '{"global":{"month":500},"tenant:acme":{"day":5}} (each budget needs day and/or month, numbers above 0)',
  },
  fairShare: {
    env: 'LLMQ_FAIR_SHARE',
    schema: z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]),
    default: false,
    expect: 'true or false',
  },
  metricsTenants: {
    env: 'LLMQ_METRICS_TENANTS',
    schema: wholeAtLeast(0).refine((n) => n <= 1_000),
    default: 10,
    expect: 'a whole number from 0 (every tenant as "other") to 1000',
  },
  budgetPolicy: {
    env: 'LLMQ_BUDGET_POLICY',
    schema: z.enum(['wait', 'refuse', 'dead-letter']),
    default: 'wait',
    expect: 'wait, refuse or dead-letter',
  },
  deployments: {
    env: 'LLMQ_DEPLOYMENTS',
    schema: deploymentsSchema,
    default: Object.freeze([]),
    expect: 'a list of deployments (see docs/deployments.md)',
    explain: explainDeployments,
  },
};

const truncate = (s: string, max = 120) => (s.length > max ? `${s.slice(0, max)}…` : s);

const present = (v: unknown) => v !== undefined && v !== null && v !== '';

/**
 * Resolves llmq's settings from flags, environment and a config file (in that precedence),
 * validating each value. A bad value throws an {@link LlmqError} with code `CONFIG_INVALID`
 * naming the source, the bad value and what was expected.
 *
 * @example
 * ```ts
 * const config = resolveConfig({ env: process.env, file: 'llmq.json' });
 * const strict = resolveConfig({ env: {}, flags: { tpm: '80000', queue: 'summaries' } });
 * ```
 */
export function resolveConfig(sources: ConfigSources = {}): Config {
  const flags = sources.flags ?? {};
  const env = sources.env ?? {};
  const fileSource = sources.file ?? env['LLMQ_CONFIG'];
  const file = loadConfigFile(fileSource);
  const out: Record<string, unknown> = {};
  for (const [key, s] of Object.entries(SETTINGS) as [Key, Setting][]) {
    let raw: unknown;
    let from: string;
    if (s.flag && present(flags[s.flag])) {
      raw = flags[s.flag];
      from = `--${s.flag.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
    } else if (s.env && present(env[s.env])) {
      raw = env[s.env];
      from = s.env;
    } else if (present(file[key])) {
      raw = file[key];
      from = `${key} in the config file`;
    } else {
      out[key] = s.default;
      continue;
    }
    const parsed = s.schema.safeParse(raw);
    if (!parsed.success) {
      if (s.explain) throw new ConfigError(s.explain(parsed.error, from));
      const shown = key === 'anthropicApiKey' ? '(hidden)' : truncate(JSON.stringify(raw));
      throw new ConfigError(`${from} must be ${s.expect}, got ${shown}`);
    }
    out[key] = parsed.data;
  }
  return Object.freeze(out) as unknown as Config;
}
