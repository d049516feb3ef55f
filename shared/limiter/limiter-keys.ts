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
  'ext',
  'stats',
  'hist',
  'config',
] as const;

/** Every key of one queue's limiter, by part (`log`: the window's reservations by stamp, …). */
export type LimiterKeys = Readonly<Record<(typeof PARTS)[number], string>>;

export function limiterKeys(names: QueueNames): LimiterKeys {
  return Object.fromEntries(PARTS.map((p) => [p, llmqKey(names, 'limiter', p)])) as LimiterKeys;
}

/** The channel settles, releases and probe readings publish on, so waiters wake. */
export function wakeChannel(names: QueueNames): string {
  return llmqKey(names, 'limiter', 'wake');
}
