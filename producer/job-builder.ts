import { type BudgetLedger, worstCaseMicros } from '../shared/budgets.ts';
import { amountOf, DIMENSION_NAMES, type Dimension } from '../shared/dimensions.ts';
import {
  CostExceedsLimitError,
  PriorityNotAllowedError,
  RequestValidationError,
} from '../shared/errors.ts';
import { type Cost, estimateCost, estimateInput } from '../shared/estimate.ts';
import { capLimitSet, type FleetLimits, type LimitSet } from '../shared/fleet-limits.ts';
import { type JobData, MAX_RETRY_FOR_MS, type PdfPages } from '../shared/job.ts';
import { type DimensionLimits, GLOBAL_SCOPE } from '../shared/limiter/types.ts';
import { PDF_PAGE_TOKENS } from '../shared/media-estimate.ts';
import { contextTokensOf, isModelScope, modelScopeOf, patternOfScope } from '../shared/models.ts';
import type { PageCosts } from '../shared/page-costs.ts';
import { resolvePriority } from '../shared/priority.ts';
import { type MessagesRequest, parseMessagesRequest } from '../shared/request.ts';
import { requestDigest } from '../shared/request-digest.ts';
import { checkIdempotencyKey } from './idempotency.ts';
import type { EnqueueOptions, TokenCounter } from './producer-options.ts';

const TENANT = /^[A-Za-z0-9_.@-]{1,100}$/;

export interface JobBuilderOptions {
  readonly limits?: DimensionLimits | undefined;
  readonly scopes?: Readonly<Record<string, DimensionLimits>> | undefined;
  readonly modelsStrict?: boolean | undefined;
  readonly headroom?: number | undefined;
  readonly ledger?: BudgetLedger | undefined;
  readonly tokenCounter?: TokenCounter | undefined;
  /** The pool's deployments by name, when known: a job pinning another is refused. */
  readonly deployments?: readonly string[] | undefined;
  /** Those of them taking Message Batches, when known: a batch job going elsewhere is refused. */
  readonly batchDeployments?: readonly string[] | undefined;
  /** What PDF pages cost, as learned (read by the caller before it builds: see `cached`). */
  readonly pageCosts?: PageCosts | undefined;
}

/**
 * Turns a request and its enqueue options into a job's data: validated, costed, given its
 * scopes, and refused when it could never fit a limit or a budget. Writes nothing.
 */
export class JobBuilder {
  /** The limits given to this builder; {@link useFleet} caps them with the fleet's. */
  private readonly own: LimitSet;
  private current: LimitSet;
  /** The model patterns of the `model:` scopes. */
  private patterns: readonly string[];
  /** The provider's limits read from its headers, by scope (a model's): they cap `current`. */
  private read: Readonly<Record<string, DimensionLimits>> = {};
  private readonly ledger: BudgetLedger | undefined;
  private readonly tokenCounter: TokenCounter | undefined;
  private readonly pool: KnownPool;
  private readonly pageCosts: PageCosts | undefined;

  constructor(options: JobBuilderOptions) {
    const headroom = options.headroom ?? 0;
    if (!(headroom >= 0 && headroom <= 0.5)) {
      throw new TypeError(`headroom must be a share from 0 to 0.5, got ${headroom}`);
    }
    this.own = {
      limits: options.limits ?? {},
      scopes: options.scopes ?? {},
      modelsStrict: options.modelsStrict ?? false,
      headroom,
    };
    this.current = this.own;
    this.patterns = modelPatterns(this.own);
    this.ledger = options.ledger;
    this.tokenCounter = options.tokenCounter;
    this.pool = { names: options.deployments, batches: options.batchDeployments };
    this.pageCosts = options.pageCosts;
  }

  /** Caps the given limits with the fleet's stored ones (none: the given limits alone). */
  useFleet(fleet: FleetLimits | undefined): void {
    this.current = capLimitSet(this.own, fleet);
    this.patterns = modelPatterns(this.current);
  }

  /** Takes the provider's limits as read, by scope: each caps the configured one of its scope. */
  useReadings(read: Readonly<Record<string, DimensionLimits>>): void {
    this.read = { ...this.read, ...read };
  }

  /** The limits jobs are checked against now (the readings aside). */
  get limits(): LimitSet {
    return this.current;
  }

  /** The scopes a job of `model` is charged to besides the global one (none for an unsafe name). */
  scopesOf(model: string, tenant?: string): string[] {
    const scopes = tenant ? [`tenant:${tenant}`] : [];
    const modelScope = modelScopeOf(this.patterns, model, false);
    if (modelScope) scopes.push(modelScope);
    return scopes;
  }

  /**
   * The most input tokens a request of `model` with `maxTokens` can have and still fit every
   * limit of its scopes; Infinity when no limit bounds it, below 0 when max_tokens alone never fits.
   */
  inputRoom(model: string, maxTokens: number, tenant?: string): number {
    const scopes = this.scopesOf(model, tenant);
    let room = Number.POSITIVE_INFINITY;
    for (const scope of [GLOBAL_SCOPE, ...scopes]) {
      const limits = this.scopeLimits(scope);
      const cap = (dim: Dimension) => {
        const raw = limits[dim];
        return raw === undefined || raw <= 0 ? Number.POSITIVE_INFINITY : this.usable(raw);
      };
      if (maxTokens > cap('outputTokens')) return -1;
      room = Math.min(room, cap('inputTokens'), cap('tokens') - maxTokens);
    }
    return room;
  }

  /** The job's data from the estimate, or a typed error. */
  prepare(request: unknown, options: EnqueueOptions = {}): JobData {
    return this.estimated(parseMessagesRequest(request), options);
  }

  /** Like {@link prepare}, at a count of its input the provider gave (reserved as is). */
  prepareCounted(request: unknown, options: EnqueueOptions, counted: number): JobData {
    const req = parseMessagesRequest(request);
    return { ...this.build(req, options, estimateCost(req, counted)), inputCounted: true };
  }

  /** Like {@link prepare}, counting input tokens with the provider when `exactCount` is set. */
  async prepareAsync(request: unknown, options: EnqueueOptions = {}): Promise<JobData> {
    const req = parseMessagesRequest(request);
    if (!options.exactCount) return this.estimated(req, options);
    return {
      ...this.build(req, options, estimateCost(stripStream(req), await this.countInputTokens(req))),
      inputCounted: true,
    };
  }

  /**
   * The job's data for a parsed request at a given cost, of which `pdfPages` PDF pages at
   * `PDF_PAGE_TOKENS` each: those are checked against the limits at what the fleet learned a
   * page costs, as the gate will reserve them.
   */
  build(req: MessagesRequest, options: EnqueueOptions, cost: Cost, pdfPages = 0): JobData {
    const tenant = options.tenant;
    if (tenant !== undefined && !TENANT.test(tenant)) {
      throw new RequestValidationError([
        {
          field: 'tenant',
          message: `must be 1 to 100 letters, digits, "_", ".", "@" or "-" (got ${JSON.stringify(tenant)})`,
        },
      ]);
    }
    const priority = resolvePriority(options.priority);
    if (options.maxPriority !== undefined && priority < options.maxPriority)
      throw new PriorityNotAllowedError(priority, options.maxPriority);
    if (options.idempotencyKey !== undefined)
      checkIdempotencyKey(options.idempotencyKey, 'idempotencyKey');
    if (
      options.timeoutMs !== undefined &&
      !(Number.isInteger(options.timeoutMs) && options.timeoutMs >= 1_000)
    ) {
      throw new RequestValidationError([
        {
          field: 'timeoutMs',
          message: `must be a whole number of ms from 1000 up (got ${JSON.stringify(options.timeoutMs)})`,
        },
      ]);
    }
    const r = options.retryForMs;
    if (r !== undefined && !(Number.isInteger(r) && r >= 0 && r <= MAX_RETRY_FOR_MS)) {
      throw new RequestValidationError([
        {
          field: 'retryForMs',
          message: `must be a whole number of ms from 0 to ${MAX_RETRY_FOR_MS} (7 days; 0 makes transient failures spend attempts) (got ${JSON.stringify(r)})`,
        },
      ]);
    }
    checkMeta(options.meta);
    checkProviderHeaders(options.providerHeaders);
    checkDeployment(options.deployment, this.pool);
    if (options.via === 'batches') checkBatchDeployment(options.deployment, this.pool);
    const scopes = tenant ? [`tenant:${tenant}`] : [];
    const modelScope = modelScopeOf(this.patterns, req.model, this.current.modelsStrict);
    if (modelScope) scopes.push(modelScope);
    const pages = this.pagesOf(req.model, pdfPages);
    this.refuseWhatNeverFits(req.model, reservedCost(cost, pages), scopes, options);
    const request = stripStream(req);
    return {
      v: 1,
      request,
      digest: requestDigest(request),
      cost,
      priority,
      tenant,
      scopes: scopes.length > 0 ? scopes : undefined,
      stream: options.relayEvents ? true : (options.stream ?? req.stream),
      relayEvents: options.relayEvents || undefined,
      providerHeaders: options.providerHeaders,
      timeoutMs: options.timeoutMs,
      retryForMs: options.retryForMs,
      idempotencyKey: options.idempotencyKey,
      enqueuedAt: Date.now(),
      meta: options.meta,
      deployment: options.deployment,
      pdfPages: pages,
    };
  }

  private estimated(req: MessagesRequest, options: EnqueueOptions): JobData {
    const estimate = estimateInput(stripStream(req));
    return this.build(req, options, estimateCost(req, estimate.tokens), estimate.pdfPages);
  }

  /**
   * Refuses a cost (as it will be reserved) that can never fit: a limit of its scopes, or with
   * Message Batches (outside the per-minute limits) the model's context; a money budget.
   */
  private refuseWhatNeverFits(
    model: string,
    reserved: Cost,
    scopes: readonly string[],
    options: EnqueueOptions,
  ): void {
    if (options.via === 'batches') refuseOverContext(model, reserved);
    else this.refuseNeverFits(reserved, scopes);
    if (!this.ledger) return;
    const micros = worstCaseMicros(this.ledger.settings, model, reserved);
    const over = this.ledger.neverFits(options.tenant, micros);
    if (over) throw over;
  }

  /** A request's PDF pages at what the fleet learned a page costs (last read), if it has any. */
  private pagesOf(model: string, pages: number): PdfPages | undefined {
    if (pages === 0) return undefined;
    return { pages, perPage: this.pageCosts?.cached(model).perPage ?? PDF_PAGE_TOKENS };
  }

  /** The limiter refuses what exceeds a limit less its headroom at once; so does the producer. */
  private refuseNeverFits(cost: Cost, scopes: readonly string[]): void {
    for (const scope of [GLOBAL_SCOPE, ...scopes]) {
      const limits = this.scopeLimits(scope);
      for (const dim of DIMENSION_NAMES) {
        const raw = limits[dim];
        if (raw === undefined || raw <= 0) continue;
        const limit = this.usable(raw);
        const need = amountOf(cost, dim);
        if (need > limit) throw new CostExceedsLimitError(scope, dim, need, limit, cost);
      }
    }
  }

  /** A scope's limits: the configured ones, each capped by the provider's as read. */
  private scopeLimits(scope: string): DimensionLimits {
    const own = scope === GLOBAL_SCOPE ? this.current.limits : (this.current.scopes[scope] ?? {});
    const read = this.read[scope];
    if (!read) return own;
    const out: Partial<Record<Dimension, number>> = { ...own };
    for (const dim of DIMENSION_NAMES) {
      const r = read[dim];
      const c = own[dim];
      if (r !== undefined) out[dim] = c === undefined || c <= 0 ? r : Math.min(c, r);
    }
    return out;
  }

  /** What the limiter admits of a limit: the limit less its headroom. */
  private usable(limit: number): number {
    return Math.max(1, Math.floor(limit * (1 - this.current.headroom)));
  }

  private async countInputTokens(req: MessagesRequest): Promise<number> {
    if (!this.tokenCounter) {
      throw new TypeError(
        'exactCount needs a tokenCounter (an Anthropic client) in the producer options',
      );
    }
    const counted = await this.tokenCounter.messages.countTokens(countParams(req) as never);
    return counted.input_tokens;
  }
}

/** What `count_tokens` takes of a request: what makes its input (no max_tokens). */
export function countParams(req: MessagesRequest): Record<string, unknown> {
  const { model, messages, system, tools, tool_choice, thinking } = req as MessagesRequest &
    Record<string, unknown>;
  return Object.fromEntries(
    Object.entries({ model, messages, system, tools, tool_choice, thinking }).filter(
      ([, v]) => v !== undefined,
    ),
  );
}

function modelPatterns(l: LimitSet): string[] {
  return Object.keys(l.scopes).filter(isModelScope).map(patternOfScope);
}

/** What a job is reserved at: its PDF pages at their learned cost rather than the most. */
export function reservedCost(cost: Cost, pages: PdfPages | undefined): Cost {
  if (!pages) return cost;
  const saved = pages.pages * (PDF_PAGE_TOKENS - pages.perPage);
  return { ...cost, inputTokens: Math.max(1, cost.inputTokens - saved) };
}

function stripStream(req: MessagesRequest): MessagesRequest {
  const { stream: _ignored, ...clean } = req;
  return clean as MessagesRequest;
}

function refuseOverContext(model: string, cost: Cost): void {
  const need = cost.inputTokens + cost.outputTokens;
  const context = contextTokensOf(model);
  if (need <= context) return;
  throw new RequestValidationError([
    {
      field: 'messages',
      message: `the request needs an estimated ${need} tokens (input and max_tokens), more than the model's context of ${context}: shorten the input, lower max_tokens, or split it (llmq batch summarize --chunk-tokens)`,
    },
  ]);
}

export function checkAttempts(n: number | undefined): number {
  if (n === undefined) return 5;
  if (!Number.isInteger(n) || n < 1 || n > 100) {
    throw new RequestValidationError([
      {
        field: 'attempts',
        message: `must be a whole number from 1 to 100 (got ${JSON.stringify(n)})`,
      },
    ]);
  }
  return n;
}

export function checkChunk(n: number | undefined): number {
  if (n === undefined) return 1_000;
  if (!Number.isInteger(n) || n < 1 || n > 100_000) {
    throw new TypeError(
      `chunkSize must be a whole number from 1 to 100000, got ${JSON.stringify(n)}`,
    );
  }
  return n;
}

const PROVIDER_HEADERS = new Set(['anthropic-version', 'anthropic-beta']);

function checkProviderHeaders(headers: Readonly<Record<string, string>> | undefined): void {
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (!PROVIDER_HEADERS.has(name)) {
      throw new RequestValidationError([
        {
          field: name,
          message: 'is not a header llmq sends on (only anthropic-version and anthropic-beta)',
        },
      ]);
    }
    if (typeof value !== 'string' || !/^[\x21-\x7e]([\x20-\x7e]{0,254}[\x21-\x7e])?$/.test(value)) {
      throw new RequestValidationError([
        {
          field: name,
          message: `must be 1 to 256 printable characters (got ${JSON.stringify(value)?.slice(0, 60)})`,
        },
      ]);
    }
  }
}

function checkMeta(meta: unknown): void {
  if (meta === undefined) return;
  const bad = (message: string) => new RequestValidationError([{ field: 'meta', message }]);
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta)) {
    throw bad(`must be an object of strings (got ${JSON.stringify(meta)})`);
  }
  const entries = Object.entries(meta);
  if (entries.length > 50) throw bad(`must hold at most 50 labels (got ${entries.length})`);
  for (const [k, v] of entries) {
    if (typeof v !== 'string' || v.length > 4_096 || k.length > 100) {
      throw new RequestValidationError([
        {
          field: `meta.${k}`,
          message: `must be a string of at most 4096 characters (got ${JSON.stringify(v)?.slice(0, 60)})`,
        },
      ]);
    }
  }
}

/** What a producer knows of the pool: its deployments' names, and those taking batches. */
interface KnownPool {
  readonly names?: readonly string[] | undefined;
  readonly batches?: readonly string[] | undefined;
}

/** A pinned deployment: a valid name, and one of the pool's when the pool is known here. */
function checkDeployment(name: string | undefined, pool: KnownPool): void {
  if (name === undefined) return;
  const known = pool.names;
  const message = !/^[A-Za-z0-9_-]{1,40}$/.test(name)
    ? `must be a deployment's name: letters, digits, "_" or "-", up to 40 (got ${JSON.stringify(name)})`
    : known && !known.includes(name)
      ? `names no deployment of the pool (got ${JSON.stringify(name)}; the pool has ${known.join(', ') || 'none'})`
      : undefined;
  if (message) throw new RequestValidationError([{ field: 'deployment', message }]);
}

/** A batch job needs a deployment taking Message Batches (its pin's, or any), when known here. */
function checkBatchDeployment(name: string | undefined, pool: KnownPool): void {
  const takers = pool.batches;
  if (!takers || (name === undefined ? takers.length > 0 : takers.includes(name))) return;
  const issue =
    name === undefined
      ? {
          field: 'via',
          message: `is batches, but no deployment of the pool (${pool.names?.join(', ')}) takes Message Batches: send it via messages, or add an anthropic deployment`,
        }
      : {
          field: 'deployment',
          message: `${JSON.stringify(name)} takes no Message Batches (${takers.length > 0 ? `those that do: ${takers.join(', ')}` : 'no deployment of the pool does'}): pin another, or send it via messages`,
        };
  throw new RequestValidationError([issue]);
}
