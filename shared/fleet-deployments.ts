/**
 * The fleet's deployment list, as the workers of a queue must agree on it: each deployment's
 * name, kind and limits (never its credentials or address). Stored beside the fleet's limits
 * (fleet-limits.ts); a worker whose list differs is refused like one whose limits differ.
 */
import { z } from 'zod';
import type { DeploymentConfig } from './deployments.ts';

/** What the fleet agrees on of one deployment. */
export interface FleetDeployment {
  readonly kind: string;
  readonly rpm?: number | undefined;
  readonly tpm?: number | undefined;
  readonly itpm?: number | undefined;
  readonly otpm?: number | undefined;
}

export type FleetDeployments = Readonly<Record<string, FleetDeployment>>;

const LIMIT_NAMES = ['rpm', 'tpm', 'itpm', 'otpm'] as const;

const count = z.number().int().min(1);
export const fleetDeploymentsSchema = z.record(
  z.string().regex(/^[A-Za-z0-9_-]{1,40}$/),
  z.strictObject({
    kind: z.string().max(20),
    rpm: count.optional(),
    tpm: count.optional(),
    itpm: count.optional(),
    otpm: count.optional(),
  }),
);

/** The list of a config's deployments, by name; undefined for none (the one default key). */
export function fleetDeploymentsOf(
  list: readonly DeploymentConfig[],
): FleetDeployments | undefined {
  if (list.length === 0) return undefined;
  return normalizeDeployments(
    Object.fromEntries(list.map((d) => [d.name, { kind: d.kind, ...(d.limits ?? {}) }])),
  );
}

/** Names in order and unset limits left out, so equal lists compare equal. */
export function normalizeDeployments(list: FleetDeployments): FleetDeployments {
  return Object.fromEntries(
    Object.keys(list)
      .sort()
      .map((name) => {
        const d = list[name]!;
        const limits = LIMIT_NAMES.flatMap((n) => (d[n] === undefined ? [] : [[n, d[n]]]));
        return [name, { kind: d.kind, ...Object.fromEntries(limits) }];
      }),
  );
}

/** One deployment as text: `aws (bedrock; rpm 50)`. */
function deploymentText(name: string, d: FleetDeployment): string {
  const limits = LIMIT_NAMES.flatMap((n) => (d[n] === undefined ? [] : [`${n} ${d[n]}`]));
  return `${name} (${d.kind}; ${limits.join(', ') || 'limits from its headers'})`;
}

/** The list in one line, or `none`. */
export function describeDeployments(list: FleetDeployments | undefined): string {
  if (!list || Object.keys(list).length === 0) return 'none';
  return Object.entries(list)
    .map(([name, d]) => deploymentText(name, d))
    .join(', ');
}

/** Where two lists differ, as `deployments aws (…) here, aws (…), gcp (…) stored`; empty when the same. */
export function deploymentDifferences(
  here: FleetDeployments | undefined,
  stored: FleetDeployments | undefined,
): string[] {
  const a = normalizeDeployments(here ?? {});
  const b = normalizeDeployments(stored ?? {});
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  return [`deployments ${describeDeployments(a)} here, ${describeDeployments(b)} stored`];
}
