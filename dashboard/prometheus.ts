/**
 * `/metrics` in Prometheus text: a prom-client Registry of the dashboard's own, filled on each
 * scrape from the same {@link QueueView}s the limiter page shows. Counters hold fleet-wide
 * totals read from Redis (set by reset-then-inc). The provider latency histogram's cumulative
 * buckets already live in Redis and prom-client's Histogram cannot be set, so that one family
 * is written here as text and appended.
 */

import { Counter, Gauge, Registry } from 'prom-client';
import { DIMENSIONS } from '../shared/dimensions.ts';
import { DEPLOYMENT_OUTCOMES } from '../shared/metrics.ts';
import { HISTOGRAMS, type HistogramName } from '../shared/telemetry/histograms.ts';
import type { QueueView } from './fleet-reader.ts';

const BREAKER_STATES = ['closed', 'open', 'half_open'] as const;
const LATENCY = 'llmq_provider_latency_seconds';

/** Escapes a label value for the text format (backslash, double quote, newline). */
function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

/** Exposition text of the provider latency histogram of every queue. */
export function latencyHistogramText(views: readonly QueueView[]): string {
  const lines = [
    `# HELP ${LATENCY} Latency of provider calls, fleet-wide (every worker process), from Redis.`,
    `# TYPE ${LATENCY} histogram`,
  ];
  for (const v of views) {
    const q = `queue="${escapeLabel(v.queue)}"`;
    const { buckets, sumMs, count } = v.provider.latency;
    for (const b of buckets) lines.push(`${LATENCY}_bucket{${q},le="${b.le / 1000}"} ${b.count}`);
    lines.push(`${LATENCY}_bucket{${q},le="+Inf"} ${count}`);
    lines.push(`${LATENCY}_sum{${q}} ${sumMs / 1000}`);
    lines.push(`${LATENCY}_count{${q}} ${count}`);
  }
  return `${lines.join('\n')}\n`;
}

/** The labelled histograms: Prometheus name, help, and the GenAI token type where one applies. */
const FAMILIES: Record<HistogramName, { name: string; help: string; tokenType?: string }> = {
  wait: {
    name: 'llmq_job_wait_seconds',
    help: "From enqueue (or the previous try's end) to the call's start, by model and tenant.",
  },
  call: {
    name: 'gen_ai_client_operation_duration_seconds',
    help: 'Provider calls by model and tenant (GenAI conventions), fleet-wide.',
  },
  input: {
    name: 'gen_ai_client_token_usage',
    help: 'Tokens per call by type, model and tenant (GenAI conventions), fleet-wide.',
    tokenType: 'input',
  },
  output: { name: 'gen_ai_client_token_usage', help: '', tokenType: 'output' },
};

/** Exposition text of the wait, call and token histograms labelled by model and tenant. */
export function labelledHistogramsText(views: readonly QueueView[]): string {
  const lines: string[] = [];
  const declared = new Set<string>();
  for (const name of Object.keys(HISTOGRAMS) as HistogramName[]) {
    const f = FAMILIES[name];
    const scale = HISTOGRAMS[name].unit === 'ms' ? 1 / 1000 : 1;
    if (!declared.has(f.name)) {
      declared.add(f.name);
      lines.push(`# HELP ${f.name} ${f.help}`, `# TYPE ${f.name} histogram`);
    }
    for (const v of views) {
      for (const h of v.histograms) {
        if (h.name !== name) continue;
        const labels = [
          `queue="${escapeLabel(v.queue)}"`,
          `gen_ai_request_model="${escapeLabel(h.model)}"`,
          `tenant="${escapeLabel(h.tenant)}"`,
          ...(f.tokenType ? [`gen_ai_token_type="${f.tokenType}"`] : []),
        ].join(',');
        for (const b of h.buckets)
          lines.push(`${f.name}_bucket{${labels},le="${b.le * scale}"} ${b.count}`);
        lines.push(`${f.name}_bucket{${labels},le="+Inf"} ${h.count}`);
        lines.push(`${f.name}_sum{${labels}} ${h.sum * scale}`);
        lines.push(`${f.name}_count{${labels}} ${h.count}`);
      }
    }
  }
  return `${lines.join('\n')}\n`;
}

/** The dashboard's metrics; {@link render} turns views into exposition text. */
export class PrometheusExporter {
  readonly registry = new Registry();
  private queue: Promise<unknown> = Promise.resolve();

  private gauge<L extends string>(name: string, help: string, labelNames: readonly L[]) {
    return new Gauge<L>({ name, help, labelNames, registers: [this.registry] });
  }

  private counter<L extends string>(name: string, help: string, labelNames: readonly L[]) {
    return new Counter<L>({ name, help, labelNames, registers: [this.registry] });
  }

  private readonly m = {
    jobs: this.gauge('llmq_jobs', 'Jobs in the queue by BullMQ state.', ['queue', 'state']),
    deadLetters: this.gauge('llmq_dead_letters', 'Jobs in the dead-letter queue.', ['queue']),
    depth: this.gauge('llmq_queue_depth', 'Waiting jobs (prioritized + wait + delayed).', [
      'queue',
    ]),
    heldBytes: this.gauge(
      'llmq_redis_bytes',
      "Redis bytes the queue's jobs hold, by what they keep: waiting, running, finished, dead.",
      ['queue', 'state'],
    ),
    heldBound: this.gauge(
      'llmq_redis_bytes_bound',
      'Bound on those bytes (waiting, finished, dead); 0 is unbounded.',
      ['queue', 'state'],
    ),
    depthBound: this.gauge('llmq_queue_depth_bound', 'Bound on waiting jobs; 0 is unbounded.', [
      'queue',
    ]),
    windowSeconds: this.gauge('llmq_window_seconds', "Length of the limiter's sliding window.", [
      'queue',
    ]),
    windowUsed: this.gauge(
      'llmq_window_used',
      'Spent in the current window, per scope and dimension.',
      ['queue', 'scope', 'dimension'],
    ),
    windowLimit: this.gauge('llmq_window_limit', 'Limit per window (absent: unlimited).', [
      'queue',
      'scope',
      'dimension',
    ]),
    providerRoom: this.gauge(
      'llmq_provider_room',
      "The provider's room now, projected from its latest rate-limit reading (absent: none fresh).",
      ['queue', 'scope', 'dimension'],
    ),
    reserved: this.counter(
      'llmq_tokens_reserved_total',
      'Tokens reserved at admission (estimates).',
      ['queue', 'direction'],
    ),
    used: this.counter(
      'llmq_tokens_used_total',
      'Tokens the provider reported as used, at settle.',
      ['queue', 'direction'],
    ),
    settledReserved: this.counter(
      'llmq_tokens_settled_reserved_total',
      'Tokens reserved by the calls that settled (the denominator of the estimate accuracy).',
      ['queue', 'direction'],
    ),
    accuracy: this.gauge(
      'llmq_estimate_accuracy_ratio',
      'Actual over reserved tokens of settled calls.',
      ['queue', 'direction'],
    ),
    admitted: this.counter('llmq_limiter_admitted_total', 'Calls the limiter admitted.', ['queue']),
    deniedSlots: this.counter(
      'llmq_limiter_denied_slots_total',
      'Attempts refused for want of a concurrency slot.',
      ['queue'],
    ),
    rateLimited: this.counter(
      'llmq_rate_limited_total',
      "429s by source: refused by llmq's own limits (source=llmq) or returned by the provider.",
      ['queue', 'source', 'kind'],
    ),
    providerCalls: this.counter('llmq_provider_calls_total', 'Calls made to the provider.', [
      'queue',
    ]),
    providerOutcomes: this.counter('llmq_provider_responses_total', 'Provider call outcomes.', [
      'queue',
      'outcome',
    ]),
    providerTokens: this.counter(
      'llmq_provider_tokens_total',
      'Tokens in provider usage, as the workers counted.',
      ['queue', 'direction'],
    ),
    retries: this.counter('llmq_retries_total', 'Retries scheduled by workers.', ['queue']),
    deadLettered: this.counter('llmq_dead_lettered_total', 'Jobs moved to the dead-letter queue.', [
      'queue',
    ]),
    deadLettersDropped: this.counter(
      'llmq_dead_letters_dropped_total',
      'Dead letters dropped by the dead-letter bounds (age, bytes per queue, bytes per tenant), oldest first.',
      ['queue'],
    ),
    deadLetterBytesDropped: this.counter(
      'llmq_dead_letter_bytes_dropped_total',
      'Bytes of the dead letters the bounds dropped.',
      ['queue'],
    ),
    resultsDropped: this.counter(
      'llmq_results_dropped_total',
      "Finished jobs dropped by the results' bytes bound, oldest first.",
      ['queue'],
    ),
    completed: this.counter('llmq_completed_total', 'Jobs completed by workers.', ['queue']),
    duplicateCalls: this.counter(
      'llmq_duplicate_calls_total',
      'Calls made twice: a worker stalled past its lock found another had taken its job (paid twice).',
      ['queue'],
    ),
    breaker: this.gauge(
      'llmq_breaker_state',
      "The circuit breaker's state (1 for the current one).",
      ['queue', 'state'],
    ),
    breakerFailures: this.gauge(
      'llmq_breaker_failures',
      'Consecutive failures the breaker counted.',
      ['queue'],
    ),
    deploymentBreaker: this.gauge(
      'llmq_deployment_breaker_state',
      'A pool deployment\'s circuit breaker state (1 for the current one); its use and limits are llmq_window_*{scope="deployment:<name>"}.',
      ['queue', 'deployment', 'state'],
    ),
    deploymentBreakerFailures: this.gauge(
      'llmq_deployment_breaker_failures',
      "Consecutive failures a pool deployment's breaker counted.",
      ['queue', 'deployment'],
    ),
    deploymentCalls: this.counter(
      'llmq_deployment_calls_total',
      'Calls the workers made on a pool deployment, by outcome (5xx takes the 529s, 429 both kinds).',
      ['queue', 'deployment', 'outcome'],
    ),
    deploymentPause: this.gauge(
      'llmq_deployment_pause_remaining_seconds',
      "Time left of a pool deployment's own pause (0: not paused).",
      ['queue', 'deployment'],
    ),
    pause: this.gauge(
      'llmq_pause_remaining_seconds',
      'Time left of the shared pause (0: not paused).',
      ['queue'],
    ),
    inFlight: this.gauge('llmq_slots_in_flight', 'Calls in flight across every worker process.', [
      'queue',
    ]),
    slotCap: this.gauge('llmq_slots_cap', 'Cap on calls in flight (absent: no cap).', ['queue']),
    spend: this.gauge('llmq_spend_usd', 'Money spent this UTC day or month, by budget or model.', [
      'queue',
      'name',
      'period',
    ]),
    budget: this.gauge('llmq_budget_usd', 'Money budget of this UTC day or month.', [
      'queue',
      'name',
      'period',
    ]),
    waiters: this.gauge('llmq_limiter_waiters', 'Workers waiting in line for budget or a slot.', [
      'queue',
    ]),
  };

  /** Exposition text of the given views. Concurrent scrapes take turns (the registry is shared). */
  render(views: readonly QueueView[]): Promise<string> {
    const run = this.queue.then(async () => {
      this.registry.resetMetrics();
      for (const v of views) this.fill(v);
      return (
        (await this.registry.metrics()) +
        latencyHistogramText(views) +
        labelledHistogramsText(views)
      );
    });
    this.queue = run.catch(() => {});
    return run;
  }

  private fill(v: QueueView): void {
    const m = this.m;
    const queue = v.queue;
    for (const [state, n] of Object.entries(v.jobs)) m.jobs.set({ queue, state }, n);
    m.deadLetters.set({ queue }, v.deadLetters);
    m.depth.set({ queue }, v.depth.waiting);
    m.depthBound.set({ queue }, v.depth.bound ?? 0);
    for (const state of ['waiting', 'running', 'finished', 'dead'] as const)
      m.heldBytes.set({ queue, state }, v.held[state]);
    for (const state of ['waiting', 'finished', 'dead'] as const)
      m.heldBound.set({ queue, state }, v.held.bounds[state] ?? 0);
    m.windowSeconds.set({ queue }, v.windowMs / 1000);
    for (const s of v.scopes) {
      for (const d of DIMENSIONS) {
        const use = s.dimensions[d.name];
        const labels = { queue, scope: s.scope, dimension: d.metric };
        m.windowUsed.set(labels, use.used);
        if (use.providerRoom !== undefined) m.providerRoom.set(labels, use.providerRoom);
        else m.providerRoom.remove(labels);
        if (use.limit !== undefined) m.windowLimit.set(labels, use.limit);
      }
    }
    const c = v.counters;
    const total = (counter: Counter<string>, labels: Record<string, string>, value: number) =>
      counter.inc(labels, Math.max(0, value));
    total(m.reserved, { queue, direction: 'input' }, c.reservedIn);
    total(m.reserved, { queue, direction: 'output' }, c.reservedOut);
    total(m.used, { queue, direction: 'input' }, c.actualIn);
    total(m.used, { queue, direction: 'output' }, c.actualOut);
    total(m.settledReserved, { queue, direction: 'input' }, c.settledReservedIn);
    total(m.settledReserved, { queue, direction: 'output' }, c.settledReservedOut);
    if (v.accuracy.input !== null) m.accuracy.set({ queue, direction: 'input' }, v.accuracy.input);
    if (v.accuracy.output !== null)
      m.accuracy.set({ queue, direction: 'output' }, v.accuracy.output);
    total(m.admitted, { queue }, c.admitted);
    total(m.deniedSlots, { queue }, c.deniedSlots);
    total(m.rateLimited, { queue, source: 'llmq', kind: 'budget' }, v.rateLimited.llmq);
    total(
      m.rateLimited,
      { queue, source: 'provider', kind: 'retry_after' },
      v.rateLimited.providerRetryAfter,
    );
    total(m.rateLimited, { queue, source: 'provider', kind: 'final' }, v.rateLimited.providerFinal);
    const p = v.provider;
    total(m.providerCalls, { queue }, p.calls);
    total(m.providerOutcomes, { queue, outcome: 'ok' }, p.ok);
    total(
      m.providerOutcomes,
      { queue, outcome: '429_retry_after' },
      v.rateLimited.providerRetryAfter,
    );
    total(m.providerOutcomes, { queue, outcome: '429_final' }, v.rateLimited.providerFinal);
    total(m.providerOutcomes, { queue, outcome: '5xx' }, p.serverErrors);
    total(m.providerOutcomes, { queue, outcome: '4xx' }, p.clientErrors);
    total(m.providerOutcomes, { queue, outcome: 'connection_error' }, p.connectionErrors);
    total(m.providerTokens, { queue, direction: 'input' }, p.tokensIn);
    total(m.providerTokens, { queue, direction: 'output' }, p.tokensOut);
    total(m.retries, { queue }, p.retries);
    total(m.deadLettered, { queue }, p.deadLettered);
    total(m.deadLettersDropped, { queue }, p.deadLettersDropped);
    total(m.deadLetterBytesDropped, { queue }, p.deadLetterBytesDropped);
    total(m.resultsDropped, { queue }, p.resultsDropped);
    total(m.completed, { queue }, p.completed);
    total(m.duplicateCalls, { queue }, p.duplicateCalls);
    for (const state of BREAKER_STATES)
      m.breaker.set({ queue, state }, v.breaker.state === state ? 1 : 0);
    m.breakerFailures.set({ queue }, v.breaker.failures);
    for (const d of v.deployments) {
      const labels = { queue, deployment: d.name };
      for (const state of BREAKER_STATES)
        m.deploymentBreaker.set({ ...labels, state }, d.breaker.state === state ? 1 : 0);
      m.deploymentBreakerFailures.set(labels, d.breaker.failures);
      m.deploymentPause.set(labels, d.pause.remainingMs / 1000);
      for (const outcome of DEPLOYMENT_OUTCOMES)
        total(m.deploymentCalls, { ...labels, outcome }, d.calls[outcome]);
    }
    m.pause.set({ queue }, v.pause.remainingMs / 1000);
    m.inFlight.set({ queue }, v.slots.inFlight);
    if (v.slots.cap !== null) m.slotCap.set({ queue }, v.slots.cap);
    m.waiters.set({ queue }, v.waiters);
    for (const l of v.spend) {
      const labels = { queue, name: l.name, period: l.period };
      m.spend.set(labels, l.spentUsd);
      if (l.limitUsd !== undefined) m.budget.set(labels, l.limitUsd);
    }
  }
}
