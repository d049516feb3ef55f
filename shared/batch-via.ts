import { ConfigError } from './errors.ts';

/**
 * The path a job takes: `messages` (one call each, now) or `batches` (Message Batches, half price).
 * @inline
 */
export type Via = 'messages' | 'batches';

/**
 * `auto` takes `batches` when the deadline leaves at least this much: most batches end within
 * the hour (the provider guarantees 24 h).
 */
export const BATCH_ROOM_MS = 3_600_000;

const UNITS: Readonly<Record<string, number>> = {
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/** Parses a duration such as `90m`, `6h`, `1.5h` or `2d` into ms. @throws ConfigError */
export function parseDeadline(text: string, flag = '--deadline'): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$/.exec(text);
  const ms = m ? Number(m[1]) * UNITS[m[2]!]! : Number.NaN;
  if (!(ms >= 1_000)) {
    throw new ConfigError(
      `${flag} must be a duration such as 90m, 6h or 2d (s, m, h, d), got ${JSON.stringify(text)}`,
    );
  }
  return ms;
}

/** Resolves `messages|batches|auto` against a deadline (ms from now). @throws ConfigError */
export function resolveVia(via: string, deadlineMs: number | undefined): Via {
  if (via === 'messages' || via === 'batches') return via;
  if (via === 'auto')
    return deadlineMs !== undefined && deadlineMs >= BATCH_ROOM_MS ? 'batches' : 'messages';
  throw new ConfigError(`--via must be messages, batches or auto, got ${JSON.stringify(via)}`);
}
