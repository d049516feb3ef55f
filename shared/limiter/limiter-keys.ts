import { deploymentScopeAmong } from '../deployment-scope.ts';
import { llmqKey, type QueueNames } from '../keys.ts';

const PARTS = [
  'log',
  'res',
  'slots',
  'waiters',
  'waitexp',
  'seq',
  'pause',
  'tot',
  'view',
  'stats',
  'config',
  'takers',
] as const;

/**
 * Every key of one queue's limiter, by part (`log`: the window's reservations by stamp, …), and
 * the money budgets' two, which admission writes with them: `spend` (µ$ by period and budget or
 * model) and `held` (the money each open reservation holds).
 */
export type LimiterKeys = Readonly<Record<Part | 'spend' | 'held', string>>;
type Part = (typeof PARTS)[number];

export function limiterKeys(names: QueueNames): LimiterKeys {
  const keys = Object.fromEntries(PARTS.map((p) => [p, llmqKey(names, 'limiter', p)]));
  return { ...(keys as Record<Part, string>), ...moneyKeys(names) };
}

/** The money budgets' keys of a queue (see `LimiterKeys`). */
export function moneyKeys(names: QueueNames): { spend: string; held: string } {
  return { spend: llmqKey(names, 'budget', 'spend'), held: llmqKey(names, 'budget', 'held') };
}

/** The channel ends that give budget or a slot back publish on, so waiters wake. */
export function wakeChannel(names: QueueNames): string {
  return llmqKey(names, 'limiter', 'wake');
}

/**
 * The pause a call's 429 sets and its admission waits for: its deployment's in a pool (a 429
 * from one key says nothing of the others), else the queue's own.
 */
export function pauseKeyOf(keys: LimiterKeys, scopes: readonly string[]): string {
  const d = deploymentScopeAmong(scopes);
  return d ? `${keys.pause}:${d}` : keys.pause;
}
