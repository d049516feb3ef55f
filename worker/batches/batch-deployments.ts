/**
 * Where the batch submitter sends each job in a pool of deployments (docs/deployments.md):
 * only deployments taking Message Batches; a pinned job to its pin, the others to the first by
 * preference. A job none of them may take is refused with the reason its dead letter gives.
 */
import type Anthropic from '@anthropic-ai/sdk';
import type { Job } from 'bullmq';
import type { JobData, JobResult } from '../../shared/job.ts';

/** What the submitter needs of the SDK: `client.messages.batches` (an `Anthropic` fits). */
export interface BatchesClient {
  readonly messages: { readonly batches: Anthropic['messages']['batches'] };
}

/** A deployment of the pool that takes Message Batches, with its client. */
export interface BatchDeployment {
  readonly name: string;
  readonly client: BatchesClient;
}

type BatchJob = Job<JobData, JobResult>;

/** The jobs of one destination: a deployment (undefined without a pool). */
export interface Destination {
  readonly deployment: string | undefined;
  readonly jobs: BatchJob[];
}

/** Jobs by destination, in the pool's order, and those no destination may take, with why. */
export interface Routes {
  readonly destinations: Destination[];
  readonly refused: { readonly job: BatchJob; readonly reason: string }[];
}

/** Why a job cannot go to any deployment taking batches; undefined when it can. */
function refusal(pin: string | undefined, takers: readonly BatchDeployment[]): string | undefined {
  const names = takers.map((d) => d.name).join(', ');
  if (pin === undefined)
    return takers.length > 0
      ? undefined
      : 'no deployment of the pool takes Message Batches (only anthropic ones can): enqueue it via messages, or add an anthropic deployment to the pool';
  if (takers.some((d) => d.name === pin)) return undefined;
  return `the job pins deployment ${JSON.stringify(pin)}, which takes no Message Batches in this pool (${names ? `those that do: ${names}` : 'none does'}): enqueue it via messages, or pin one that does`;
}

/**
 * Routes jobs to the deployments taking batches (`takers`, best first), or to the one client
 * without a pool (`takers` undefined: every job together, pins aside, as before pools).
 */
export function routeBatchJobs(
  jobs: readonly BatchJob[],
  takers: readonly BatchDeployment[] | undefined,
): Routes {
  if (!takers) return { destinations: [{ deployment: undefined, jobs: [...jobs] }], refused: [] };
  const by = new Map<string, BatchJob[]>(takers.map((d) => [d.name, []]));
  const refused: Routes['refused'] = [];
  for (const job of jobs) {
    const pin = job.data.deployment;
    const reason = refusal(pin, takers);
    if (reason) refused.push({ job, reason });
    else by.get(pin ?? takers[0]!.name)!.push(job);
  }
  const destinations = [...by].map(([deployment, list]) => ({ deployment, jobs: list }));
  return { destinations: destinations.filter((d) => d.jobs.length > 0), refused };
}

/** Splits jobs into batches within the provider's limits of requests and bytes per batch. */
export function batchGroups(
  jobs: readonly BatchJob[],
  maxRequests: number,
  maxBytes: number,
): BatchJob[][] {
  const out: BatchJob[][] = [];
  let cur: BatchJob[] = [];
  let bytes = 0;
  for (const j of jobs) {
    const size = Buffer.byteLength(JSON.stringify(j.data.request)) + 100;
    if (cur.length > 0 && (cur.length >= maxRequests || bytes + size > maxBytes)) {
      out.push(cur);
      cur = [];
      bytes = 0;
    }
    cur.push(j);
    bytes += size;
  }
  if (cur.length > 0) out.push(cur);
  return out;
}
