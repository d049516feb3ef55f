import { type ChaosReport, runChaos } from '../chaos/run-chaos.ts';
import type { ScenarioContext, ScenarioResult, Target } from '../report.ts';
import { count, seconds } from '../table.ts';

/** What the run's figures say, for the table and the test alike. */
export interface ChaosSummary {
  readonly acknowledged: Readonly<Record<'library' | 'http' | 'batch', number>>;
  readonly completed: number;
  readonly completedTwice: number;
  /** Acknowledged, yet not completed with a result. */
  readonly lost: number;
  readonly outage503: number;
  /** Outage answers other than 503 redis_unavailable and the 202 that ended it (a 500 is a bug). */
  readonly outageOther: Readonly<Record<string, number>>;
  /** Documents without exactly one summary line. */
  readonly documentsNotOnce: number;
}

export function summarizeChaos(r: ChaosReport): ChaosSummary {
  const acknowledged = { library: 0, http: 0, batch: 0 };
  for (const j of r.jobs) acknowledged[j.source]++;
  const ok = (j: ChaosReport['jobs'][number]) =>
    j.state === 'completed' && j.completions >= 1 && j.hasResult;
  const outageOther: Record<string, number> = {};
  for (const [k, n] of Object.entries(r.outage.answers))
    if (k !== '503 redis_unavailable' && k !== '202') outageOther[k] = n;
  const summaries = r.batch.perDocument;
  return {
    acknowledged,
    completed: r.jobs.filter(ok).length,
    completedTwice: r.jobs.filter((j) => j.completions > 1).length,
    lost: r.jobs.filter((j) => !ok(j)).length,
    outage503: r.outage.answers['503 redis_unavailable'] ?? 0,
    outageOther,
    documentsNotOnce: r.batch.documents.filter((d) => summaries[d] !== 1).length + r.batch.errors,
  };
}

/**
 * `chaos`: kills during a run (two workers, the HTTP API, the batch command, Redis restarted
 * from its AOF) and what they cost: jobs lost or completed twice, provider calls repeated, the
 * worst window against the limit, the API's answers while Redis was down and how soon it
 * recovered.
 */
export async function chaosScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const workload = ctx.smoke
    ? { libraryJobs: 40, httpJobs: 10, documents: 5 }
    : ctx.quick
      ? { libraryJobs: 60, httpJobs: 15, documents: 8 }
      : { libraryJobs: 320, httpJobs: 50, documents: 30 };
  // Quick: killed workers' jobs are taken up after 5 s rather than BullMQ's 30 s.
  const quick = ctx.quick && !ctx.smoke ? { recoverAfterMs: 5_000 } : {};
  const r = await runChaos({ ...workload, ...quick, log: ctx.log });
  const sum = summarizeChaos(r);
  const p = r.provider;
  const acked = sum.acknowledged.library + sum.acknowledged.http + sum.acknowledged.batch;
  const others = Object.entries(sum.outageOther).map(([k, n]) => `${n} × ${k}`);
  const rows: string[][] = [
    [
      'jobs acknowledged',
      `${count(acked)} (${sum.acknowledged.library} enqueueMany, ${sum.acknowledged.http} HTTP, ${sum.acknowledged.batch} batch)`,
    ],
    ['completed exactly once, with a result', count(sum.completed - sum.completedTwice)],
    ['completed twice', count(sum.completedTwice)],
    ['lost', count(sum.lost)],
    ['dead-lettered', count(r.deadLettered)],
    ['jobs completed in the queue (acknowledged or not)', count(r.completedInQueue)],
    ['provider calls admitted', count(p.admitted)],
    ['provider calls repeated (admitted − jobs completed)', count(p.repeated)],
    [
      'calls in flight in the killed workers',
      `${r.cutCalls.inFlight} (${r.cutCalls.answered} answered)`,
    ],
    ['worst window / limit', `${count(p.worstWindowTokens)} / ${count(p.limitTokens)} tokens`],
    ['provider 429s', count(p.rateLimited)],
    ['Redis down for', seconds(r.outage.downMs, 1)],
    ['503 redis_unavailable during the outage', count(sum.outage503)],
    ['other answers during the outage', others.length > 0 ? others.join(', ') : 'none'],
    ['retry-after of the 503', r.outage.retryAfter ?? '-'],
    ['API accepts jobs again after', seconds(r.outage.recoverMs, 2)],
    ['first completion after the restart', seconds(r.outage.firstCompletionMs, 2)],
    [
      'batch documents / with one summary line',
      `${r.batch.documents.length} / ${r.batch.documents.length - sum.documentsNotOnce}`,
    ],
    ['batch runs (exit statuses)', r.batch.runs.join(', ')],
    ['processes that died unasked', count(r.unexpectedExits.length)],
    ['wall', seconds(r.elapsedMs, 1)],
  ];
  const targets: Target[] = [
    {
      name: 'every acknowledged job completed exactly once, with its result',
      met: sum.lost === 0 && sum.completedTwice === 0 && r.incomplete === undefined,
      detail: `${sum.lost} lost, ${sum.completedTwice} completed twice of ${acked}`,
    },
    {
      name: 'the worst window stayed within the limit, re-run calls included',
      met: p.worstWindowTokens <= p.limitTokens && p.rateLimited === 0,
      detail: `${p.worstWindowTokens} of ${p.limitTokens} tokens, ${p.rateLimited} 429s`,
    },
    {
      name: 'the API answered 503 redis_unavailable while Redis was down, and recovered by itself',
      met: sum.outage503 > 0 && others.length === 0 && r.outage.recoverMs !== undefined,
      detail: `${sum.outage503} × 503${others.length ? `, ${others.join(', ')}` : ''}; accepted again after ${seconds(r.outage.recoverMs, 2)}`,
    },
    {
      name: "the batch run's results file has every document exactly once",
      met: sum.documentsNotOnce === 0,
      detail: `${sum.documentsNotOnce} of ${r.batch.documents.length} documents not once`,
    },
  ];
  return {
    name: 'chaos',
    title: `kills during a run of ${acked} jobs: 3 workers, serve, batch summarize, Redis with an AOF`,
    settings: { ...r.settings },
    headers: ['what', 'figure'],
    rows,
    figures: [{ summary: sum, report: { ...r, jobs: undefined } }],
    targets,
    notes: [
      `the mock limits ${r.settings.limitTokens} tokens per sliding ${r.settings.windowMs / 1000} s window, answers after ${r.settings.latencyMs} ms; the workers (llmq worker, 30 s locks) budget the same`,
      `steps: ${r.events.map((e) => `${seconds(e.at, 1)} ${e.what}`).join('; ')}`,
      ...r.unexpectedExits.map((e) => `died unasked: ${e}`),
      ...(r.incomplete ? [`incomplete: ${r.incomplete}`] : []),
    ],
  };
}
