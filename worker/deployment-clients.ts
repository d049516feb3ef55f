/**
 * The callers of a pool's deployments: one SDK client each (the Claude API's, Bedrock's, Vertex
 * AI's), SDK retries off as in {@link createProviderClient}, credentials read from the environment
 * variables the config names. The platform SDKs load only when a deployment needs them.
 */
import type { AnthropicVertex } from '@anthropic-ai/vertex-sdk';
import type { DeploymentConfig, DeploymentCredentials } from '../shared/deployments.ts';
import { ConfigError, ModelNotServedError } from '../shared/errors.ts';
import { type PoolEntry, platformModelOf, takesBatches } from './pool.ts';
import {
  callProvider,
  createProviderClient,
  type MessagesClient,
  type ProviderCaller,
} from './provider.ts';

/** One deployment, ready to call. */
export interface DeploymentCaller {
  /** Calls the deployment with the request's model mapped to the platform's id for it. */
  readonly caller: ProviderCaller;
  /** The id the platform calls `model` (by the deployment's `models`); undefined: not served. */
  platformModel(model: string): string | undefined;
  /** Whether it takes Message Batches (anthropic deployments only). */
  readonly batches: boolean;
  /** Its SDK client (for Message Batches on an anthropic deployment). */
  readonly client: MessagesClient;
}

/** Options of {@link createDeploymentCallers}. */
export interface DeploymentCallerOptions {
  /** Each call's timeout unless the call gives its own. @default 600000 */
  readonly timeoutMs?: number;
}

type Env = Readonly<Record<string, string | undefined>>;

const WHAT: Record<keyof DeploymentCredentials, string> = {
  apiKeyEnv: 'API key',
  awsAccessKeyEnv: 'AWS access key id',
  awsSecretKeyEnv: 'AWS secret access key',
  awsSessionTokenEnv: 'AWS session token',
  accessTokenEnv: 'Google OAuth access token',
};
const CLOUD_PLATFORM = 'https://www.googleapis.com/auth/cloud-platform';

/**
 * The value of the credential variable the deployment names for `field` (or `fallback`);
 * undefined when it names none. A named variable that is unset is an error naming it (never a
 * value).
 */
function credential(
  d: DeploymentConfig,
  field: keyof DeploymentCredentials,
  env: Env,
  fallback?: string,
): string | undefined {
  const name = d.credentials?.[field] ?? fallback;
  if (name === undefined) return undefined;
  const value = env[name];
  if (value === undefined || value === '')
    throw new ConfigError(
      `deployment ${d.name} (${d.kind}): the environment variable ${name} (credentials.${field}) ` +
        `is not set: set it to the ${WHAT[field]}, or name another variable in the config`,
    );
  return value;
}

async function bedrockClient(d: DeploymentConfig, env: Env, timeout: number) {
  const { AnthropicBedrock } = await import('@anthropic-ai/bedrock-sdk');
  const accessKey = credential(d, 'awsAccessKeyEnv', env);
  const secretKey = credential(d, 'awsSecretKeyEnv', env);
  const sessionToken = credential(d, 'awsSessionTokenEnv', env) ?? null;
  // apiKey null: sign with SigV4, never a bearer token from AWS_BEARER_TOKEN_BEDROCK.
  const common = {
    awsRegion: d.region,
    apiKey: null,
    maxRetries: 0,
    timeout,
    ...(d.baseUrl ? { baseURL: d.baseUrl } : {}),
  };
  // Without keys of its own: the AWS default credential chain (env, profile, role).
  return accessKey && secretKey
    ? new AnthropicBedrock({
        ...common,
        awsAccessKey: accessKey,
        awsSecretKey: secretKey,
        awsSessionToken: sessionToken,
      })
    : new AnthropicBedrock(common);
}

type VertexAuth = NonNullable<
  NonNullable<ConstructorParameters<typeof AnthropicVertex>[0]>['authClient']
>;

/** A fixed OAuth token as google-auth-library's client: what the Vertex SDK asks of one. */
function tokenAuth(token: string, projectId: string | undefined): VertexAuth {
  const auth = {
    projectId,
    getRequestHeaders: async () => new Headers({ authorization: `Bearer ${token}` }),
  };
  return auth as unknown as VertexAuth;
}

/** Google's application default credentials, found now so a worker without them stops at start. */
async function defaultGoogleAuth(d: DeploymentConfig): Promise<VertexAuth> {
  const { GoogleAuth } = await import('google-auth-library');
  try {
    return (await new GoogleAuth({ scopes: CLOUD_PLATFORM }).getClient()) as unknown as VertexAuth;
  } catch (err) {
    throw new ConfigError(
      `deployment ${d.name} (vertex): Google's application default credentials were not found ` +
        `(${(err as Error).message.split('\n')[0]}): set GOOGLE_APPLICATION_CREDENTIALS to a key ` +
        'file, run `gcloud auth application-default login`, or name a token variable in ' +
        'credentials.accessTokenEnv',
    );
  }
}

async function vertexClient(d: DeploymentConfig, env: Env, timeout: number) {
  const { AnthropicVertex } = await import('@anthropic-ai/vertex-sdk');
  const token = credential(d, 'accessTokenEnv', env);
  return new AnthropicVertex({
    region: d.region ?? null,
    projectId: d.projectId ?? null,
    authClient: token ? tokenAuth(token, d.projectId) : await defaultGoogleAuth(d),
    maxRetries: 0,
    timeout,
    ...(d.baseUrl ? { baseURL: d.baseUrl } : {}),
  });
}

function anthropicClient(d: DeploymentConfig, env: Env, timeout = 600_000) {
  const apiKey = credential(d, 'apiKeyEnv', env, 'ANTHROPIC_API_KEY')!;
  return createProviderClient({ apiKey, baseURL: d.baseUrl, timeoutMs: timeout });
}

async function clientOf(d: DeploymentConfig, env: Env, timeout: number): Promise<MessagesClient> {
  if (d.kind === 'bedrock') return bedrockClient(d, env, timeout);
  if (d.kind === 'vertex') return vertexClient(d, env, timeout);
  return anthropicClient(d, env, timeout);
}

/**
 * The client Message Batches are submitted with: the first deployment by preference that takes
 * them (the Claude API's only). A pool with none is a ConfigError saying so.
 */
export function batchesClientOf(deployments: readonly DeploymentConfig[], env: Env = process.env) {
  const ranked = deployments
    .map((d, i) => ({ d, rank: d.preference ?? i }))
    .filter(({ d }) => d.kind === 'anthropic' && takesBatches(d))
    .sort((a, b) => a.rank - b.rank);
  const first = ranked[0]?.d;
  if (!first)
    throw new ConfigError(
      `Message Batches need a deployment that takes them (kind anthropic, batches not false); ` +
        `the pool has none (${deployments.map((d) => `${d.name}: ${d.kind}`).join(', ')}): ` +
        'add one, or send these jobs via messages',
    );
  return anthropicClient(first, env);
}

/**
 * Builds a caller per deployment, by name, in the list's order. A credential variable the config
 * names but the environment lacks, or Vertex AI without credentials, is a ConfigError naming it.
 *
 * @example
 * ```ts
 * const callers = await createDeploymentCallers(config.deployments, process.env);
 * const eu = callers.get('eu');
 * eu?.platformModel('claude-sonnet-4-5'); // 'anthropic.claude-sonnet-4-5-20250929-v1:0' on Bedrock
 * ```
 */
export async function createDeploymentCallers(
  deployments: readonly DeploymentConfig[],
  env: Env = process.env,
  options: DeploymentCallerOptions = {},
): Promise<ReadonlyMap<string, DeploymentCaller>> {
  const out = new Map<string, DeploymentCaller>();
  for (const d of deployments) {
    const client = await clientOf(d, env, options.timeoutMs ?? 600_000);
    const platformModel = (model: string) => platformModelOf(d, model);
    const ids = new Set(Object.values(d.models ?? {}));
    const caller: ProviderCaller = (request, callOptions) => {
      // A model already named by its platform id (the pool's worker maps it first) goes as it is.
      const id = ids.has(request.model) ? request.model : platformModel(request.model);
      if (id === undefined) {
        const served = Object.keys(d.models ?? {}).join(', ');
        return Promise.reject(
          new ModelNotServedError(request.model, `deployment ${d.name} serves only ${served}`),
        );
      }
      return callProvider(
        client,
        id === request.model ? request : { ...request, model: id },
        callOptions,
      );
    };
    out.set(d.name, {
      caller,
      platformModel,
      batches: takesBatches(d),
      client,
    });
  }
  return out;
}

/**
 * The pool a worker is given (`WorkerOptions.deployments`): each deployment with its caller.
 * @example
 * ```ts
 * const deployments = await createPoolEntries(config.deployments, process.env);
 * await startWorker({ redis, names, deployments, limiter: {} });
 * ```
 */
export async function createPoolEntries(
  deployments: readonly DeploymentConfig[],
  env: Env = process.env,
  options: DeploymentCallerOptions = {},
): Promise<PoolEntry[]> {
  const callers = await createDeploymentCallers(deployments, env, options);
  return deployments.map((config) => ({ config, call: callers.get(config.name)!.caller }));
}
