/**
 * A worker's pool from the config's deployments (docs/deployments.md): each deployment's SDK
 * client (createDeploymentCallers), called with the request as the pool hands it over (the
 * pool maps the model to the platform's id itself, worker/call.ts).
 */
import type { DeploymentConfig } from '../shared/deployments.ts';
import { createDeploymentCallers, type DeploymentCallerOptions } from './deployment-clients.ts';
import type { PoolEntry } from './pool.ts';
import { callProvider } from './provider.ts';

/**
 * The `deployments` of a worker's options for a config's list, credentials read from `env`.
 * @throws ConfigError naming a credential variable that is not set.
 *
 * @example
 * ```ts
 * const deployments = await poolEntriesOf(config.deployments);
 * await startWorker({ redis, names, deployments, limiter: { windowMs: 60_000 } });
 * ```
 */
export async function poolEntriesOf(
  deployments: readonly DeploymentConfig[],
  env: Readonly<Record<string, string | undefined>> = process.env,
  options: DeploymentCallerOptions = {},
): Promise<PoolEntry[]> {
  const callers = await createDeploymentCallers(deployments, env, options);
  return deployments.map((config) => {
    const { client } = callers.get(config.name)!;
    return { config, call: (request, o) => callProvider(client, request, o) };
  });
}
