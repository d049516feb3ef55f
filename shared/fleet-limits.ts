/**
 * The fleet's configured limits of a queue, in one place: one JSON value in Redis under the
 * queue's hash tag. Workers write it when they start (their resolved limits) and so does
 * `llmq limits set`; every producer, `llmq enqueue`, `llmq serve` and `llmq batch summarize`
 * read it to refuse at enqueue what can never fit, and `llmq status` shows it. Limits read from
 * the provider's headers are another matter (they go beside these, not into them).
 */
import { hostname } from 'node:os';
import { z } from 'zod';
import type { Config, ScopeLimits } from './config.ts';
import { toDimensionLimits } from './config-views.ts';
import { DIMENSIONS } from './dimensions.ts';
import { ConfigError } from './errors.ts';
import {
  deploymentDifferences,
  describeDeployments,
  type FleetDeployments,
  fleetDeploymentsOf,
  fleetDeploymentsSchema,
  normalizeDeployments,
} from './fleet-deployments.ts';
import { fleetLimitsKey, type QueueNames } from './keys.ts';
import type { DimensionLimits } from './limiter/types.ts';
import { MODEL_PATTERN, modelScopeName } from './models.ts';
import type { RedisClient } from './redis.ts';

/** What the fleet is configured to stay under (the limit settings of {@link Config}). */
export interface FleetLimits {
  readonly rpm?: number | undefined;
  readonly tpm?: number | undefined;
  readonly itpm?: number | undefined;
  readonly otpm?: number | undefined;
  /** The provider's window, seconds. */
  readonly windowS: number;
  /** Calls in flight across every worker; unset for no cap. */
  readonly maxInFlight?: number | undefined;
  /** The share of each limit kept unused. */
  readonly headroom: number;
  /** Nested scopes' limits by name (`tenant:acme`), a tenant's fair-share weight too. */
  readonly scopes: Readonly<Record<string, ScopeLimits>>;
  /** Limits per model pattern. */
  readonly models: Readonly<Record<string, ScopeLimits>>;
  /** Only models matching a pattern of `models` are served. */
  readonly modelsStrict: boolean;
  /** The pool's deployments (names, kinds, limits); absent for the one default key. */
  readonly deployments?: FleetDeployments | undefined;
}

/** The stored value: the limits and who wrote them when. */
export interface StoredFleetLimits {
  readonly limits: FleetLimits;
  /** `worker <host> pid <pid>` or `llmq limits set on <host>`. */
  readonly setBy: string;
  /** ms since the epoch. */
  readonly setAt: number;
}

/** Limits as the producer and the limiter count them: by dimension, per scope. */
export interface LimitSet {
  readonly limits: DimensionLimits;
  /** Nested scopes (`tenant:acme`, `model:claude-sonnet-*`) by name. */
  readonly scopes: Readonly<Record<string, DimensionLimits>>;
  readonly modelsStrict: boolean;
  readonly headroom: number;
}

const count = z.number().int().min(1);
const scopeSchema = z.strictObject({
  weight: z.number().positive().optional(),
  rpm: count.optional(),
  tpm: count.optional(),
  itpm: count.optional(),
  otpm: count.optional(),
});
const storedSchema = z.strictObject({
  limits: z.strictObject({
    rpm: count.optional(),
    tpm: count.optional(),
    itpm: count.optional(),
    otpm: count.optional(),
    windowS: z.number().min(0.1).max(86_400),
    maxInFlight: count.optional(),
    headroom: z.number().min(0).max(0.5),
    scopes: z.record(z.string().regex(/^[^|,\s]{1,200}$/), scopeSchema),
    models: z.record(z.string().regex(MODEL_PATTERN), scopeSchema),
    modelsStrict: z.boolean(),
    deployments: fleetDeploymentsSchema.optional(),
  }),
  setBy: z.string().max(300),
  setAt: z.number(),
});

const LIMIT_NAMES = ['rpm', 'tpm', 'itpm', 'otpm'] as const;

/** The limit settings of a resolved config. */
export function fleetLimitsOf(c: Config): FleetLimits {
  return normalize({
    rpm: c.rpm,
    tpm: c.tpm,
    itpm: c.itpm,
    otpm: c.otpm,
    windowS: c.windowS,
    maxInFlight: c.maxInFlight,
    headroom: c.headroom,
    scopes: c.scopes,
    models: c.models,
    modelsStrict: c.modelsStrict,
    deployments: fleetDeploymentsOf(c.deployments),
  });
}

/** Whether any limit is set: a rate, the cap of calls in flight, a scope's or a model's. */
export function hasLimits(l: FleetLimits): boolean {
  return (
    LIMIT_NAMES.some((n) => l[n] !== undefined) ||
    l.maxInFlight !== undefined ||
    Object.keys(l.scopes).length > 0 ||
    Object.keys(l.models).length > 0 ||
    l.deployments !== undefined
  );
}

/** The same limits with unset fields left out and names in order, so equal limits compare equal. */
function normalize(l: FleetLimits): FleetLimits {
  const scope = (s: ScopeLimits): ScopeLimits =>
    Object.fromEntries(
      (['weight', ...LIMIT_NAMES] as const).flatMap((k) => (s[k] === undefined ? [] : [[k, s[k]]])),
    );
  const table = (t: Readonly<Record<string, ScopeLimits>>) =>
    Object.fromEntries(
      Object.keys(t)
        .sort()
        .map((k) => [k, scope(t[k]!)]),
    );
  return {
    ...Object.fromEntries(LIMIT_NAMES.flatMap((n) => (l[n] === undefined ? [] : [[n, l[n]]]))),
    windowS: l.windowS,
    ...(l.maxInFlight === undefined ? {} : { maxInFlight: l.maxInFlight }),
    headroom: l.headroom,
    scopes: table(l.scopes),
    models: table(l.models),
    modelsStrict: l.modelsStrict,
    ...(l.deployments ? { deployments: normalizeDeployments(l.deployments) } : {}),
  };
}

/** One scope's limits as text: `tpm 4000, rpm 50` (`weight 2` too). */
function scopeText(s: ScopeLimits): string {
  const parts = LIMIT_NAMES.flatMap((n) => (s[n] === undefined ? [] : [`${n} ${s[n]}`]));
  if (s.weight !== undefined) parts.push(`weight ${s.weight}`);
  return parts.join(', ') || 'no limits';
}

/** The limits in one line: `tpm 4000, window 10 s, headroom 0.01; tenant:acme tpm 2000`. */
export function describeLimits(l: FleetLimits): string {
  const head = [
    ...LIMIT_NAMES.flatMap((n) => (l[n] === undefined ? [] : [`${n} ${l[n]}`])),
    `window ${l.windowS} s`,
    ...(l.maxInFlight === undefined ? [] : [`max in flight ${l.maxInFlight}`]),
    `headroom ${l.headroom}`,
    ...(l.modelsStrict ? ['models strict'] : []),
  ].join(', ');
  const nested = [
    ...Object.entries(l.scopes).map(([name, s]) => `${name} ${scopeText(s)}`),
    ...Object.entries(l.models).map(([p, s]) => `${modelScopeName(p)} ${scopeText(s)}`),
  ];
  if (l.deployments) nested.push(`deployments ${describeDeployments(l.deployments)}`);
  return [head, ...nested].join('; ');
}

/**
 * Where two sets of limits differ, each as `tpm 8000 here, 4000 stored` (`here` being `a`);
 * empty when they are the same.
 */
export function limitDifferences(here: FleetLimits, stored: FleetLimits): string[] {
  const a = normalize(here);
  const b = normalize(stored);
  const shown = (v: unknown) => (v === undefined ? 'none' : String(v));
  const out: string[] = [];
  for (const n of [...LIMIT_NAMES, 'maxInFlight', 'headroom', 'modelsStrict'] as const) {
    if (a[n] !== b[n]) out.push(`${n} ${shown(a[n])} here, ${shown(b[n])} stored`);
  }
  if (a.windowS !== b.windowS) out.push(`window ${a.windowS} s here, ${b.windowS} s stored`);
  for (const kind of ['scopes', 'models'] as const) {
    const names = [...new Set([...Object.keys(a[kind]), ...Object.keys(b[kind])])].sort();
    for (const name of names) {
      const x = a[kind][name];
      const y = b[kind][name];
      if (JSON.stringify(x) === JSON.stringify(y)) continue;
      const label = kind === 'models' ? modelScopeName(name) : name;
      out.push(`${label} ${x ? scopeText(x) : 'none'} here, ${y ? scopeText(y) : 'none'} stored`);
    }
  }
  out.push(...deploymentDifferences(a.deployments, b.deployments));
  return out;
}

/** The stored limits of a queue, or undefined when none are stored. Reads only. */
export async function readFleetLimits(
  redis: RedisClient,
  names: QueueNames,
): Promise<StoredFleetLimits | undefined> {
  const raw = await redis.get(fleetLimitsKey(names));
  if (raw === null) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    parsed = undefined;
  }
  const checked = storedSchema.safeParse(parsed);
  if (!checked.success) {
    throw new ConfigError(
      `the fleet's limits stored at ${fleetLimitsKey(names)} cannot be read (${raw.slice(0, 80)}): ` +
        'replace them with `llmq limits set …` or remove them with `llmq limits clear`',
    );
  }
  return checked.data as StoredFleetLimits;
}

/** Who this process is, for `setBy`. */
export function describeWriter(role: string): string {
  return `${role} on ${hostname()} pid ${process.pid}`;
}

function stored(limits: FleetLimits, setBy: string): string {
  return JSON.stringify({ limits: normalize(limits), setBy, setAt: Date.now() });
}

/** Stores `limits` as the fleet's, replacing what was there. */
export async function writeFleetLimits(
  redis: RedisClient,
  names: QueueNames,
  limits: FleetLimits,
  setBy: string,
): Promise<void> {
  await redis.set(fleetLimitsKey(names), stored(limits, setBy));
}

/** Removes the stored limits; resolves whether there were any. */
export async function clearFleetLimits(redis: RedisClient, names: QueueNames): Promise<boolean> {
  return (await redis.del(fleetLimitsKey(names))) > 0;
}

/** A worker's limits disagree with the fleet's: it does not start. */
export class FleetLimitsConflictError extends ConfigError {
  readonly differences: readonly string[];
  constructor(differences: readonly string[], existing: StoredFleetLimits) {
    super(
      `this worker's limits differ from the fleet's (set by ${existing.setBy} at ` +
        `${new Date(existing.setAt).toISOString()}): ${differences.join('; ')}: ` +
        'start it with --replace-limits to replace them, without limit settings to use them, ' +
        'or change them with `llmq limits set`',
    );
    this.differences = differences;
  }
}

/** What a starting worker did about the fleet's limits. */
export interface SettledLimits {
  /** The limits it runs with; undefined when neither it nor the store has any. */
  readonly limits: FleetLimits | undefined;
  /** `stored` (none were there), `matched`, `replaced`, `adopted` (it had none), `none`. */
  readonly action: 'stored' | 'matched' | 'replaced' | 'adopted' | 'none';
}

/**
 * Agrees a starting worker's limits with the fleet's. With limits of its own: stores them when
 * none are stored (atomically: of two workers starting at once, the second compares with the
 * first's), runs when they match, throws {@link FleetLimitsConflictError} when they differ,
 * unless `replace`. Without any: takes the stored limits.
 */
export async function settleWorkerLimits(o: {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  readonly own: FleetLimits;
  readonly replace: boolean;
  readonly setBy: string;
}): Promise<SettledLimits> {
  const key = fleetLimitsKey(o.names);
  if (!hasLimits(o.own)) {
    const existing = await readFleetLimits(o.redis, o.names);
    if (!existing) return { limits: undefined, action: 'none' };
    // Limits can be adopted; a pool's deployments cannot (this worker has no credentials for them).
    const differences = deploymentDifferences(undefined, existing.limits.deployments);
    if (differences.length > 0 && !o.replace)
      throw new FleetLimitsConflictError(differences, existing);
    return { limits: existing.limits, action: 'adopted' };
  }
  if (o.replace) {
    await writeFleetLimits(o.redis, o.names, o.own, o.setBy);
    return { limits: normalize(o.own), action: 'replaced' };
  }
  if ((await o.redis.set(key, stored(o.own, o.setBy), 'NX')) === 'OK') {
    return { limits: normalize(o.own), action: 'stored' };
  }
  const existing = await readFleetLimits(o.redis, o.names);
  if (!existing) return settleWorkerLimits(o);
  const differences = limitDifferences(o.own, existing.limits);
  if (differences.length > 0) throw new FleetLimitsConflictError(differences, existing);
  return { limits: normalize(o.own), action: 'matched' };
}

/** Fleet limits by dimension and scope, as the producer and the limiter count them. */
export function limitSetOf(l: FleetLimits): LimitSet {
  return {
    limits: toDimensionLimits(l),
    scopes: Object.fromEntries([
      ...Object.entries(l.scopes).map(([name, s]) => [name, toDimensionLimits(s)]),
      ...Object.entries(l.models).map(([p, s]) => [modelScopeName(p), toDimensionLimits(s)]),
    ]),
    modelsStrict: l.modelsStrict,
    headroom: l.headroom,
  };
}

/** The lower of two limits, either possibly unset. */
function lower(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return Math.min(a, b);
}

function capDimensions(a: DimensionLimits, b: DimensionLimits): DimensionLimits {
  return Object.fromEntries(
    DIMENSIONS.flatMap((d) => {
      const v = lower(a[d.name], b[d.name]);
      return v === undefined ? [] : [[d.name, v]];
    }),
  );
}

/**
 * A producer's own limits capped by the fleet's: each limit the lower of the two, every scope
 * of either, models strict when either says so, and the fleet's headroom (the workers' own).
 */
export function capLimitSet(own: LimitSet, fleet: FleetLimits | undefined): LimitSet {
  if (!fleet) return own;
  const f = limitSetOf(fleet);
  const names = new Set([...Object.keys(own.scopes), ...Object.keys(f.scopes)]);
  return {
    limits: capDimensions(own.limits, f.limits),
    scopes: Object.fromEntries(
      [...names].map((n) => [n, capDimensions(own.scopes[n] ?? {}, f.scopes[n] ?? {})]),
    ),
    modelsStrict: own.modelsStrict || f.modelsStrict,
    headroom: f.headroom,
  };
}
