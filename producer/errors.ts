import { LlmqError, RedisUnavailableError } from '../shared/errors.ts';
import type { DeadLetter } from '../shared/job.ts';
import { namedRedisError } from '../shared/redis.ts';

/**
 * The job was dead-lettered: it will not produce a result unless someone retries it (`llmq dlq
 * retry <id>`). What `waitForResult` rejects with for a job that failed for good.
 *
 * @example
 * ```ts
 * try {
 *   await producer.waitForResult(id);
 * } catch (err) {
 *   if (err instanceof JobFailedError) console.error(err.jobId, err.status, err.reason);
 * }
 * ```
 */
export class JobFailedError extends LlmqError {
  /** The job's id. */
  readonly jobId: string;
  /** The dead letter's one-line reason (or BullMQ's failedReason when there is no dead letter). */
  readonly reason: string;
  /** The provider's error class (`BadRequestError`, …) or llmq's (`AttemptsExhausted`, …). */
  readonly errorClass: string | undefined;
  /** The provider's HTTP status, when it answered. */
  readonly status: number | undefined;
  /**
   * The whole dead letter, when the worker wrote one.
   * @internal
   */
  readonly deadLetter: DeadLetter | undefined;
  /** @internal */
  constructor(jobId: string, reason: string, deadLetter?: DeadLetter) {
    super(
      'JOB_FAILED',
      `job ${jobId} was dead-lettered: ${reason} (see \`llmq dlq show ${jobId}\`; \`llmq dlq retry\` runs it again)`,
    );
    this.jobId = jobId;
    this.reason = reason;
    this.deadLetter = deadLetter;
    this.errorClass = deadLetter?.errorClass;
    this.status = deadLetter?.status;
  }
}

/**
 * Waiting for a job's result took longer than the caller allowed; the job itself goes on, and
 * `waitForResult` may be called again.
 *
 * @example
 * ```ts
 * const result = await producer.waitForResult(id, { timeout: 5_000 }).catch(async (err) => {
 *   // Still queued or running: wait on.
 *   if (err instanceof WaitTimeoutError) return producer.waitForResult(id);
 *   throw err;
 * });
 * ```
 */
export class WaitTimeoutError extends LlmqError {
  /** The job waited for. */
  readonly jobId: string;
  /** The timeout it was given, ms. */
  readonly timeoutMs: number;
  /** @internal */
  constructor(jobId: string, timeoutMs: number) {
    super(
      'TIMEOUT',
      `job ${jobId} did not finish within ${timeoutMs} ms; it is still queued or running: wait again`,
    );
    this.jobId = jobId;
    this.timeoutMs = timeoutMs;
  }
}

/** No job has that id (never added, cancelled, or removed after its retention ran out). */
export class JobNotFoundError extends LlmqError {
  readonly jobId: string;
  constructor(jobId: string, detail = 'no such job') {
    super('JOB_NOT_FOUND', `job ${jobId}: ${detail} (jobs are kept 7 days after they finish)`);
    this.jobId = jobId;
  }
}

const CONNECTION_ERROR =
  /ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND|EHOSTUNREACH|EPIPE|Connection is closed|Stream isn't writeable|MaxRetriesPerRequest|Reached the max retries|connect ETIMEDOUT/i;

/** True for the errors ioredis raises when Redis does not answer (as opposed to a script error). */
export function isConnectionError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === 'MaxRetriesPerRequestError') return true;
  const code = (err as NodeJS.ErrnoException).code;
  return CONNECTION_ERROR.test(`${code ?? ''} ${err.message}`);
}

/**
 * True for {@link RedisUnavailableError} and for a connection error that reached an answer
 * unmapped (a read outside the producer, such as the gateway's breaker check): either way the
 * caller is told Redis is down, never an internal error.
 */
export function isRedisDown(err: unknown): boolean {
  return (err instanceof LlmqError && err.code === 'REDIS_UNAVAILABLE') || isConnectionError(err);
}

/**
 * Runs a Redis operation with a deadline; a connection failure or the deadline becomes a
 * {@link RedisUnavailableError} naming the URL, Redis out of memory a RedisOutOfMemoryError,
 * anything else is rethrown as is.
 */
export async function withRedis<T>(
  url: string,
  timeoutMs: number,
  op: () => Promise<T>,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new RedisUnavailableError(url, `no answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([op(), deadline]);
  } catch (err) {
    if (err instanceof LlmqError) throw err;
    const named = namedRedisError(err, url);
    if (named) throw named;
    if (isConnectionError(err))
      throw new RedisUnavailableError(url, (err as Error).message, { cause: err });
    throw err;
  } finally {
    clearTimeout(timer);
  }
}
