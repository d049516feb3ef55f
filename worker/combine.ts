import type { Job } from 'bullmq';
import { answerText, combineRequest } from '../shared/combine.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import type { MessagesRequest } from '../shared/request.ts';

/**
 * The request a job sends. A flow's combine job (its parts all completed, or BullMQ would not
 * have released it) gets its template filled with its parts' answers, read from the values
 * BullMQ keeps with it; any other job sends its own.
 */
export async function requestOf(job: Job<JobData, JobResult>): Promise<MessagesRequest> {
  const spec = job.data.combine;
  if (!spec) return job.data.request;
  const values = await job.getChildrenValues<JobResult>();
  // Keys are the children's job keys, `<prefix>:<queue>:<id>`: index them by id.
  const byId = new Map(
    Object.entries(values).map(([k, v]) => [k.slice(k.lastIndexOf(':') + 1), v]),
  );
  const answers = spec.parts.map((id) => {
    const v = byId.get(id);
    if (!v) throw new Error(`part ${id} of combine job ${job.id} has no result`);
    return answerText(v);
  });
  return combineRequest(job.data.request, answers);
}
