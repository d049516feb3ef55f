/**
 * The parts of a resolved {@link Config} that the limiter, budgets and fair share take, in their
 * own terms (limits as the limiter's dimensions, prices as a table).
 */
import type { BudgetSettings } from './budgets.ts';
import type { Config, ScopeLimits } from './config.ts';
import { byPreference, deploymentScope, takesBatches } from './deployments.ts';
import { DIMENSIONS } from './dimensions.ts';
import type { DimensionLimits } from './limiter/types.ts';
import { modelScopeName } from './models.ts';
import { priceTable } from './prices.ts';

/** Limits named as in the config (rpm, tpm…) to the limiter's dimensions. */
export function toDimensionLimits(l: ScopeLimits): DimensionLimits {
  return Object.fromEntries(DIMENSIONS.map((d) => [d.name, l[d.limit]])) as DimensionLimits;
}

/** The global scope's limits of a config. */
export function globalLimits(c: Config): DimensionLimits {
  return toDimensionLimits(c);
}

/** The nested scopes' limits of a config, by scope name: tenants', features', models'. */
export function scopeLimitsOf(c: Config): Record<string, DimensionLimits> {
  return Object.fromEntries([
    ...Object.entries(c.scopes).map(([name, l]) => [name, toDimensionLimits(l)]),
    ...Object.entries(c.models).map(([p, l]) => [modelScopeName(p), toDimensionLimits(l)]),
  ]);
}

/** The limits the config gives its deployments, by scope `deployment:<name>`. */
export function deploymentLimitsOf(
  c: Pick<Config, 'deployments'>,
): Record<string, DimensionLimits> {
  return Object.fromEntries(
    c.deployments.map((d) => [deploymentScope(d.name), toDimensionLimits(d.limits ?? {})]),
  );
}

/** The pool's deployment names, for a producer to refuse a pin it lacks; undefined without one. */
export function poolNamesOf(c: Pick<Config, 'deployments'>): readonly string[] | undefined {
  return c.deployments.length > 0 ? c.deployments.map((d) => d.name) : undefined;
}

/**
 * Those of the pool's deployments that take Message Batches, best first, for a producer to
 * refuse a batch job none of them can take; undefined without a pool.
 */
export function batchDeploymentsOf(c: Pick<Config, 'deployments'>): readonly string[] | undefined {
  if (c.deployments.length === 0) return undefined;
  return byPreference(c.deployments.map((config) => ({ config })))
    .filter((e) => takesBatches(e.config))
    .map((e) => e.config.name);
}

/** What budgets need of a config; undefined when no budget is set (nothing to count). */
export function budgetSettingsOf(c: Config): BudgetSettings | undefined {
  if (Object.keys(c.budgets).length === 0) return undefined;
  return { budgets: c.budgets, policy: c.budgetPolicy, prices: priceTable(c.prices) };
}

/** Fair share's weights by tenant (`weight` of `tenant:<name>` scopes); undefined when off. */
export function fairShareOf(c: Config): { weights: Record<string, number> } | undefined {
  if (!c.fairShare) return undefined;
  const weights: Record<string, number> = {};
  for (const [name, l] of Object.entries(c.scopes)) {
    if (name.startsWith('tenant:') && l.weight !== undefined) weights[name.slice(7)] = l.weight;
  }
  return { weights };
}
