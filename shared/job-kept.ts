import type { JobData } from './job.ts';
import { requestDigest } from './request-digest.ts';

/**
 * What a completed job keeps of its data: everything but its request, which it lets go once
 * its result is stored (the result is what a caller reads from then on). Its request is named
 * by its digest (what tells an idempotency key's second request from its first), its model
 * and its size.
 */
export interface FinishedJobData extends Omit<JobData, 'request' | 'digest'> {
  /** Let go: a completed job holds no request. */
  readonly request?: undefined;
  readonly digest: string;
  /** The request's model. */
  readonly model: string;
  /** The request's max_tokens. */
  readonly maxTokens: number;
  /** The request's size as stored (bytes of its JSON). */
  readonly requestBytes: number;
}

/** A job's data at any state: the full request while it may run, its record once completed. */
export type StoredJobData = JobData | FinishedJobData;

/**
 * The record a completed job keeps in place of its data. A job of an older producer (no
 * digest) gets its digest here.
 */
export function finishedData(data: JobData): FinishedJobData {
  const { request, digest, providerHeaders: _headers, ...rest } = data;
  return {
    ...rest,
    digest: digest ?? requestDigest(request),
    model: request.model,
    maxTokens: request.max_tokens,
    requestBytes: Buffer.byteLength(JSON.stringify(request)),
  };
}

/** Whether a job's stored data still holds its request (not yet completed, or written before). */
export function holdsRequest(data: StoredJobData): data is JobData {
  return data.request !== undefined;
}

/** The max_tokens of a job's request, whether it still holds the request or only its record. */
export function maxTokensOf(data: StoredJobData | undefined): number | undefined {
  if (!data) return undefined;
  return holdsRequest(data) ? data.request.max_tokens : data.maxTokens;
}

/** The model of a job's request, whether it still holds the request or only its record. */
export function modelOf(data: StoredJobData | undefined): string | undefined {
  if (!data) return undefined;
  return holdsRequest(data) ? data.request.model : data.model;
}
