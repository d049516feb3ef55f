/**
 * The two shapes a provider's limit takes, which the limiter scenarios run against: `sliding`,
 * the mock's exact sliding window (the seed's), and `bucket`, a token bucket of the limit refilled
 * continuously (what Anthropic documents). Readings are rounded as the API rounds them.
 */
export const SHAPES = ['sliding', 'bucket'] as const;
export type Shape = (typeof SHAPES)[number];

/** The API rounds token readings to the nearest 1,000 of limits like 40,000: a 40th. */
export const roundingFor = (limit: number): number => Math.max(1, Math.round(limit / 40));

/** How a shape reads in a table's client column. */
export const shapeLabel = (shape: Shape): string =>
  shape === 'sliding' ? 'sliding window' : 'token bucket';
