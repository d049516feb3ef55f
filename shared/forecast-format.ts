import { type Forecast, formatDuration } from './forecast.ts';
import type { Dimension } from './limiter/types.ts';

const DIM_WORDS: Record<Dimension, string> = {
  requests: 'requests',
  inputTokens: 'input tokens',
  outputTokens: 'output tokens',
  tokens: 'tokens',
};

/** The forecast as `llmq status` prints it: one line per priority class. */
export function formatForecast(f: Forecast): string[] {
  if (f.classes.length === 0) return ['  forecast: nothing waiting'];
  const lines = [`  forecast at the current limits (window ${f.windowMs / 1000} s):`];
  for (const c of f.classes) {
    const name = c.lane ? `${c.lane} (${c.priority})` : `priority ${c.priority}`;
    const when =
      c.binding === null
        ? 'starts now (no limit holds it back)'
        : `started within ${formatDuration(c.drainMs)}, bound by ${DIM_WORDS[c.binding]}`;
    lines.push(`    ${name}: ${c.jobs} job${c.jobs === 1 ? '' : 's'}, ${when}`);
  }
  return lines;
}
