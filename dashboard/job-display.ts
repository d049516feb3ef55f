/**
 * How a job's data shows in Bull Board: credential-looking fields blanked, times as dates. An
 * edit made from that display ("update data") is turned back before it is stored: blanked fields
 * keep their value, dates become milliseconds again, so the worker reads what it wrote.
 */

/** Field names whose values are credentials: shown as `[redacted]` in job data. */
const SECRET_FIELDS = new Set([
  'apikey',
  'api_key',
  'x-api-key',
  'anthropic_api_key',
  'authorization',
  'password',
  'secret',
  'token',
  'access_token',
  'refresh_token',
]);

export const REDACTED = '[redacted]';

/** Fields of llmq's job data and dead letters that hold ms since the epoch. */
const TIME_FIELDS = new Set(['enqueuedAt', 'deadlineAt', 'deadAt', 'since', 'at', 'completedAt']);

/** Times from 2001 to 2286 in ms: a smaller number under one of these names is not a date. */
const isEpochMs = (v: unknown): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= 1e12 && v < 1e13;

/** `2026-01-05T12:00:00.000Z`, as Bull Board's JSON view shows a string. */
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,3})?Z$/;

function mapEntries(
  value: unknown,
  depth: number,
  each: (key: string, v: unknown, depth: number) => unknown,
): unknown {
  if (depth > 20 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v) => mapEntries(v, depth + 1, each));
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, each(k, v, depth + 1)]),
  );
}

/** A copy of job data with credential-looking fields blanked, however deep. */
export function redactSecrets(value: unknown, depth = 0): unknown {
  return mapEntries(value, depth, (k, v, d) =>
    SECRET_FIELDS.has(k.toLowerCase()) ? REDACTED : redactSecrets(v, d),
  );
}

/** Job data as Bull Board shows it: secrets blanked, epoch-ms times as ISO dates. */
export function displayData(value: unknown, depth = 0): unknown {
  return mapEntries(value, depth, (k, v, d) => {
    if (SECRET_FIELDS.has(k.toLowerCase())) return REDACTED;
    if (TIME_FIELDS.has(k) && isEpochMs(v)) return new Date(v).toISOString();
    return displayData(v, d);
  });
}

/**
 * Data edited from the display, made storable against the job's `original` data: a blanked
 * field keeps the original's value, a date under a time field is milliseconds again.
 */
export function restoreEdited(edited: unknown, original: unknown, depth = 0): unknown {
  if (depth > 20 || edited === null || typeof edited !== 'object') return edited;
  const from = (original ?? {}) as Record<string, unknown>;
  if (Array.isArray(edited)) {
    const list = Array.isArray(original) ? original : [];
    return edited.map((v, i) => restoreEdited(v, list[i], depth + 1));
  }
  return Object.fromEntries(
    Object.entries(edited as Record<string, unknown>).map(([k, v]) => {
      if (v === REDACTED && SECRET_FIELDS.has(k.toLowerCase()) && k in from) return [k, from[k]];
      if (TIME_FIELDS.has(k) && typeof v === 'string' && ISO.test(v)) return [k, Date.parse(v)];
      return [k, restoreEdited(v, from[k], depth + 1)];
    }),
  );
}
