import type { Cost } from '../shared/estimate.ts';
import type { PdfPages } from '../shared/job.ts';
import { readTicket } from '../shared/job-ticket.ts';

/** The job BullMQ would hand out next, as much of it as the gate needs. */
export interface HeadJob {
  readonly id: string;
  /** The job's estimate; the gate reserves it scaled by what the fleet learned (learned-costs). */
  readonly cost: Cost;
  readonly model: string;
  /** Its input was counted by count_tokens: reserved as is. */
  readonly counted: boolean;
  /** Its PDF pages and the tokens the producer reserved each at (JobData.pdfPages). */
  readonly pdfPages?: PdfPages | undefined;
  readonly priority: number;
  readonly scopes: readonly string[];
  readonly tenant: string | undefined;
  /** The deployment of the pool it pins, if any. */
  readonly deployment?: string | undefined;
  /**
   * Its cached prefix, if it marks one: key, and its share of the input estimate (so that it
   * scales with the estimate's learning; see shared/prompt-cache.ts).
   */
  readonly cache?: { readonly key: string; readonly share: number } | undefined;
  /**
   * In a pool, its prefix is readable on this deployment only: `cost` is what that one counts,
   * `fullCost` what any other does (set by the prompt-cache plan).
   */
  readonly warm?: { readonly on: string; readonly fullCost: Cost } | undefined;
  /**
   * The job cannot be scheduled: its ticket or data is not an llmq job's (it is dead-lettered
   * with the reason), or of a newer format (left for a worker that knows it).
   */
  readonly problem?: { readonly newer: boolean; readonly reason: string } | undefined;
  /** What it claimed before a worker's check raised its cost (see worker/cost-check.ts). */
  readonly claimed?: Cost | undefined;
}

/** A peeked job from its id, options and (a format-1 job's) data; a `problem` when unreadable. */
export function headOf(id: string, optsJson: string, dataJson: string | undefined): HeadJob {
  const r = readTicket(optsJson, dataJson);
  const priority = r.ok ? r.priority : 100;
  if (!r.ok) {
    const none = { requests: 0, inputTokens: 0, outputTokens: 0 };
    const problem = { newer: r.newer, reason: r.reason };
    return {
      id,
      cost: none,
      model: '',
      counted: false,
      priority,
      scopes: [],
      tenant: undefined,
      problem,
    };
  }
  const inputTokens = r.ticket.c[1];
  return {
    id,
    cost: costOf(r.ticket.c),
    model: r.ticket.m,
    counted: r.ticket.x === 1,
    priority,
    scopes: r.ticket.s ?? [],
    tenant: r.ticket.t,
    ...(r.ticket.d !== undefined ? { deployment: r.ticket.d } : {}),
    ...(r.ticket.p ? { pdfPages: { pages: r.ticket.p[0], perPage: r.ticket.p[1] } } : {}),
    ...(r.ticket.w ? { claimed: costOf(r.ticket.w) } : {}),
    ...(r.ticket.k
      ? {
          cache: {
            key: r.ticket.k[0],
            share: Math.min(1, r.ticket.k[1] / Math.max(1, inputTokens)),
          },
        }
      : {}),
  };
}

const costOf = ([requests, inputTokens, outputTokens]: readonly [number, number, number]) => ({
  requests,
  inputTokens,
  outputTokens,
});
