/**
 * How a pool's deployment is named among a call's limiter scopes (no imports: the limiter reads
 * it to find a call's pause, and shared/deployments.ts re-exports it).
 */
const PREFIX = 'deployment:';

/** The limiter scope of a deployment: its limits, readings, pause and breaker live there. */
export const deploymentScope = (name: string): string => `${PREFIX}${name}`;

/** The deployment scope among a call's scopes, if any (a pool's call has exactly one). */
export function deploymentScopeAmong(scopes: readonly string[]): string | undefined {
  return scopes.find((s) => s.startsWith(PREFIX));
}

/** The deployment's name of its scope. */
export const deploymentOfScope = (scope: string): string => scope.slice(PREFIX.length);
