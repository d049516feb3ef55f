/**
 * Exponential backoff with full jitter: a random wait in [0, min(cap, base · 2^(n−1))].
 * @inline
 */
export interface BackoffOptions {
  /** @default 1_000 */
  readonly baseMs?: number;
  /** @default 60_000 */
  readonly capMs?: number;
}

export function fullJitterBackoff(
  attempt: number,
  { baseMs = 1_000, capMs = 60_000 }: BackoffOptions = {},
  random = Math.random,
): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.floor(random() * ceiling);
}
