/**
 * The four dimensions a provider limits, defined once. Each has one name, written in the case
 * of the place it appears: `inputTokens` in TypeScript and JSON, `input_tokens` in metrics;
 * its limit goes by the provider's own abbreviation (`--itpm`, `LLMQ_ITPM`, `itpm` in a
 * config file); Lua keys its totals by a short field (`scope|in`). The order is the one every
 * script and table uses.
 */
export const DIMENSIONS = [
  {
    name: 'requests',
    limit: 'rpm',
    env: 'LLMQ_RPM',
    lua: 'req',
    metric: 'requests',
    label: 'requests',
    help: 'Requests per window',
  },
  {
    name: 'inputTokens',
    limit: 'itpm',
    env: 'LLMQ_ITPM',
    lua: 'in',
    metric: 'input_tokens',
    label: 'input tokens',
    help: 'Input tokens per window',
  },
  {
    name: 'outputTokens',
    limit: 'otpm',
    env: 'LLMQ_OTPM',
    lua: 'out',
    metric: 'output_tokens',
    label: 'output tokens',
    help: 'Output tokens per window',
  },
  {
    name: 'tokens',
    limit: 'tpm',
    env: 'LLMQ_TPM',
    lua: 'tok',
    metric: 'tokens',
    label: 'tokens (in + out)',
    help: 'Total (input + output) tokens per window',
  },
] as const;

export type DimensionInfo = (typeof DIMENSIONS)[number];
/** A dimension's name: `requests`, `inputTokens`, `outputTokens`, `tokens` (input plus output). */
export type Dimension = DimensionInfo['name'];
/** A dimension's limit as configured: `rpm`, `itpm`, `otpm`, `tpm`. */
export type LimitName = DimensionInfo['limit'];

export const DIMENSION_NAMES: readonly Dimension[] = DIMENSIONS.map((d) => d.name);

const BY_LUA = new Map<string, DimensionInfo>(DIMENSIONS.map((d) => [d.lua, d]));

/** The dimension of a Lua field (`in` → inputTokens). */
export function dimensionOfLua(field: string): Dimension | undefined {
  return BY_LUA.get(field)?.name;
}

/** What a cost spends of one dimension (tokens: input plus output). */
export function amountOf(
  cost: { readonly requests: number; readonly inputTokens: number; readonly outputTokens: number },
  d: Dimension,
): number {
  return d === 'tokens' ? cost.inputTokens + cost.outputTokens : cost[d];
}
