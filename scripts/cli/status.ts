import type { Command } from 'commander';
import { BudgetLedger } from '../../shared/budgets.ts';
import type { Config } from '../../shared/config.ts';
import { budgetSettingsOf, deploymentLimitsOf } from '../../shared/config-views.ts';
import {
  type DeploymentCalls,
  type DeploymentStatus,
  isDeploymentScope,
  readPublishedDeploymentScopes,
} from '../../shared/deployment-status.ts';
import { DIMENSIONS } from '../../shared/dimensions.ts';
import { formatBytes } from '../../shared/errors.ts';
import {
  describeLimits,
  fleetLimitsOf,
  hasLimits,
  limitSetOf,
  readFleetLimits,
} from '../../shared/fleet-limits.ts';
import { formatForecast } from '../../shared/forecast-format.ts';
import { heldBoundsOf } from '../../shared/held.ts';
import { Limiter } from '../../shared/limiter/limiter.ts';
import type { ScopeSnapshot } from '../../shared/limiter/types.ts';
import { DEPLOYMENT_OUTCOMES } from '../../shared/metrics.ts';
import { formatUsd } from '../../shared/prices.ts';
import { listQueueNames } from '../../shared/queues.ts';
import { getQueueStatus, type QueueStatus } from '../../shared/status.ts';
import { configFrom, namesOf, queueOptions, withRedis } from './common.ts';

/** The fleet's limits: the configured ones (stored) and, beside them, the ones read from the provider. */
function formatLimits(l: QueueStatus['limits']): string[] {
  const c = l.configured;
  const configured = c
    ? `${describeLimits(c.limits)} (set by ${c.setBy} at ${new Date(c.setAt).toISOString()})`
    : 'none stored (`llmq limits set`, or a worker with limit flags)';
  const read = l.read
    ? Object.entries(l.read)
        .map(([scope, d]) => {
          const shown = DIMENSIONS.flatMap((x) =>
            d[x.name] === undefined ? [] : [`${x.limit} ${d[x.name]}`],
          );
          return `${scope} ${shown.join(', ')}`;
        })
        .join('; ')
    : 'none yet (taken from the rate-limit headers of the answers)';
  return [`  limits configured: ${configured}`, `  limits read: ${read}`];
}

/**
 * A scope's use against its limits, what a call may take now (`free`) and the provider's limit and
 * room, with its shape: `global [bucket]: …`.
 */
function formatScope(scope: ScopeSnapshot, name = scope.scope): string {
  const parts = DIMENSIONS.map((d) => {
    const u = scope.dimensions[d.name];
    if (u.limit === undefined && u.providerLimit === undefined && u.used === 0) return undefined;
    const provider =
      u.providerLimit === undefined
        ? ''
        : ` (provider: limit ${u.providerLimit}${u.providerRoom === undefined ? '' : `, room ${Math.floor(u.providerRoom)} now`})`;
    // What a call may take now, by the admission's rule (view-4.lua).
    const free = u.room === undefined ? '' : ` ${Math.max(0, u.room)} free`;
    return `${d.label} ${u.used}${u.limit !== undefined ? `/${u.limit}` : ''}${free}${provider}`;
  }).filter(Boolean);
  const shape = scope.shape === 'unknown' ? '' : ` [${scope.shape}]`;
  return `${name}${shape}: ${parts.length ? parts.join(', ') : 'no use, no limits'}`;
}

const iso = (ms: number) => new Date(ms).toISOString();

/** A deployment of the pool: its scope's use, then its pause and breaker. */
function formatDeployment(d: DeploymentStatus): string {
  const b = d.breaker;
  const breaker =
    b.state === 'closed'
      ? 'closed'
      : `${b.state} (${b.failures} failures${b.openUntil ? `, trial call from ${iso(b.openUntil)}` : ''})`;
  const pause = d.pausedUntil ? `until ${iso(d.pausedUntil)}` : 'none';
  return `    ${formatScope(d.scope, d.name)}  pause ${pause}  breaker ${breaker}${formatCalls(d.calls)}`;
}

/** A deployment's calls, by outcome (those it had); nothing before its first. */
function formatCalls(c: DeploymentCalls): string {
  if (c.calls === 0) return '';
  const by = DEPLOYMENT_OUTCOMES.filter((o) => c[o] > 0).map(
    (o) => `${c[o]} ${o.replace('_', ' ')}`,
  );
  return `  calls ${c.calls} (${by.join(', ')})`;
}

/** What the queue's jobs hold in Redis, against the bounds. */
function formatHeld(h: QueueStatus['held']): string {
  const part = (name: 'waiting' | 'running' | 'finished' | 'dead') => {
    const bound = name === 'running' ? 0 : (h.bounds[name] ?? 0);
    return `${name} ${formatBytes(h[name])}${bound > 0 ? ` of ${formatBytes(bound)}` : ''}`;
  };
  return `  redis holds: ${(['waiting', 'running', 'finished', 'dead'] as const).map(part).join('  ')}`;
}

export function formatStatus(s: QueueStatus): string {
  const c = s.counts;
  const lines = [
    `queue ${s.queue} (prefix ${s.prefix})`,
    `  waiting ${c.waiting}  active ${c.active}  delayed ${c.delayed}  completed ${c.completed}  failed ${c.failed}  dead ${c.dead}`,
    `  window ${s.limiter.windowMs / 1000} s  in flight ${s.limiter.inFlight}${s.limiter.concurrency ? ` of ${s.limiter.concurrency}` : ''}  waiters ${s.limiter.waiters}`,
    `  pause ${s.limiter.pausedUntil ? `until ${iso(s.limiter.pausedUntil)}` : 'none'}  breaker ${s.breaker.state}`,
  ];
  for (const scope of s.limiter.scopes) {
    if (!isDeploymentScope(scope.scope)) lines.push(`  ${formatScope(scope)}`);
  }
  if (s.deployments.length > 0) {
    lines.push(`  deployments (${s.deployments.length}):`);
    lines.push(...s.deployments.map(formatDeployment));
  }
  lines.push(formatHeld(s.held));
  lines.push(...formatLimits(s.limits));
  lines.push(...formatForecast(s.forecast));
  for (const l of s.spend ?? []) {
    const of = l.limitUsd === undefined ? '' : ` of ${formatUsd(l.limitUsd)}`;
    lines.push(
      `  spend ${l.name} this ${l.period}: ${formatUsd(l.spentUsd)}${of} (resets ${iso(l.resetsAt)})`,
    );
  }
  return lines.join('\n');
}

export function registerStatusCommand(program: Command): void {
  queueOptions(
    program
      .command('status')
      .description('counts per state, the limiter’s use per scope, the pause, slots in flight')
      .option('--json', 'print one JSON object'),
  ).action(async (flags: Record<string, unknown>) => {
    const config: Config = configFrom(flags);
    await withRedis(config, async (redis) => {
      const names = namesOf(config);
      const own = fleetLimitsOf(config);
      // Without limits of its own, status shows the fleet's stored ones, else what workers published.
      const fleet = hasLimits(own) ? own : (await readFleetLimits(redis, names))?.limits;
      const set = fleet && limitSetOf(fleet);
      // The pool's deployments (this config's, the workers') show with their limits while unused.
      // What the workers published wins: it is what they admit by.
      const scopes = {
        ...set?.scopes,
        ...deploymentLimitsOf(config),
        ...(await readPublishedDeploymentScopes(redis, names)),
      };
      const limiter = new Limiter({
        redis,
        names,
        scopes,
        ...(fleet && set ? { limits: set.limits, windowMs: fleet.windowS * 1000 } : {}),
      });
      const budgets = budgetSettingsOf(config);
      const ledger = budgets && new BudgetLedger(redis, names, budgets);
      const status = await getQueueStatus(redis, names, limiter, ledger, heldBoundsOf(config));
      process.stdout.write(
        flags['json'] ? `${JSON.stringify(status)}\n` : `${formatStatus(status)}\n`,
      );
      const { live, gone } = await listQueueNames(redis, names.prefix);
      if (!live.includes(names.queue) && !gone.includes(names.queue)) {
        const known = live.length ? `; known: ${live.join(', ')}` : '';
        process.stderr.write(
          `llmq: no queue ${JSON.stringify(names.queue)} is registered under prefix ${names.prefix} ` +
            `(nothing was enqueued to it and no worker ran on it: check --queue and --prefix${known})\n`,
        );
      }
    });
  });
}
