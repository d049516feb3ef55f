/**
 * A pool of deployments: more than one key, organization or platform (Claude API, Bedrock,
 * Vertex AI) serving one queue. One key and no list is a pool of one, named `default`.
 * See docs/deployments.md.
 */
/** Where a deployment's calls go. */
export type DeploymentKind = 'anthropic' | 'bedrock' | 'vertex';

/**
 * The names of the environment variables holding a deployment's credentials: never the secrets
 * themselves, so a config file can be committed.
 * @inline
 */
export interface DeploymentCredentials {
  /** anthropic: the API key's variable. @default 'ANTHROPIC_API_KEY' */
  readonly apiKeyEnv?: string | undefined;
  /** bedrock: access key id, secret key, session token; unset for the AWS default chain. */
  readonly awsAccessKeyEnv?: string | undefined;
  readonly awsSecretKeyEnv?: string | undefined;
  readonly awsSessionTokenEnv?: string | undefined;
  /** vertex: an OAuth access token's variable; unset for Google's application default credentials. */
  readonly accessTokenEnv?: string | undefined;
}

/**
 * A deployment's limits per window, named like the global ones.
 * @inline
 */
export interface DeploymentLimits {
  readonly rpm?: number | undefined;
  readonly tpm?: number | undefined;
  readonly itpm?: number | undefined;
  readonly otpm?: number | undefined;
}

/** One deployment as configured (`deployments` in the config file, or `LLMQ_DEPLOYMENTS`). */
export interface DeploymentConfig {
  /** Its name, in scopes, logs, status and metrics: letters, digits, `_`, `-`, up to 40. */
  readonly name: string;
  readonly kind: DeploymentKind;
  readonly credentials?: DeploymentCredentials | undefined;
  /** The API's base URL (anthropic: without `/v1`); else the platform's own. */
  readonly baseUrl?: string | undefined;
  /** bedrock and vertex: the region. */
  readonly region?: string | undefined;
  /** vertex: the Google Cloud project. */
  readonly projectId?: string | undefined;
  /**
   * The models it serves, by llmq's model name or pattern (`claude-sonnet-*`), each to the id
   * the platform calls it (Bedrock's `anthropic.claude-…-v1:0`, Vertex's `claude-…@date`); the
   * same id for the Claude API. Absent: every model, under its own name.
   */
  readonly models?: Readonly<Record<string, string>> | undefined;
  /** Its limits per window; absent ones are read from its headers (Bedrock and Vertex send none). */
  readonly limits?: DeploymentLimits | undefined;
  /** Lower goes first among deployments with room. @default its place in the list */
  readonly preference?: number | undefined;
  /** Whether it takes Message Batches. @default true for anthropic, false otherwise */
  readonly batches?: boolean | undefined;
  /**
   * Its wait for a call's first byte, for a small request (a large input adds to it), in ms;
   * `"40s"` in the config. @default the worker's (`--first-byte-timeout`)
   */
  readonly firstByteTimeoutMs?: number | undefined;
  /**
   * The longest silence between two reads of its answers, in ms; `"30s"` in the config.
   * @default the worker's (`--idle-timeout`)
   */
  readonly idleTimeoutMs?: number | undefined;
  /**
   * The share of the slots its calls may hold while they wait for their first byte: of each
   * worker's `--concurrency`, and of the fleet's `--max-in-flight` when set. Below 1, a
   * deployment that accepts calls and never answers cannot take every slot before its breaker
   * opens. @default 0.5 in a pool of two or more, 1 alone
   */
  readonly slotShare?: number | undefined;
}

export { deploymentScope } from './deployment-scope.ts';

/**
 * A deployment in a few words, for the worker's start line: `eu (bedrock eu-west-1; tpm 3000)`,
 * `main (anthropic; limits from its headers)`. Never its credentials.
 */
export function describeDeployment(config: DeploymentConfig): string {
  const where = [config.kind, config.region].filter(Boolean).join(' ');
  const limits = Object.entries(config.limits ?? {})
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  return `${config.name} (${where}; ${limits || 'limits from its headers'})`;
}

/** Whether a deployment takes Message Batches: as configured, else the Claude API's only. */
export const takesBatches = (config: DeploymentConfig): boolean =>
  config.batches ?? config.kind === 'anthropic';

/** A deployment's rank: its `preference`, else its place in the list; lower goes first. */
export const rankOf = (config: DeploymentConfig, place: number): number =>
  config.preference ?? place;

/** Deployments best first: by `preference`, then by their place in the list. */
export function byPreference<T extends { readonly config: DeploymentConfig }>(
  entries: readonly T[],
): T[] {
  return entries
    .map((e, i) => ({ e, rank: rankOf(e.config, i), i }))
    .sort((a, b) => a.rank - b.rank || a.i - b.i)
    .map(({ e }) => e);
}

/** The deployment llmq has when none is configured: the one key. */
export const DEFAULT_DEPLOYMENT = 'default';
