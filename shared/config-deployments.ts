/**
 * `deployments` (config file) / `LLMQ_DEPLOYMENTS` (env, JSON): the pool's list, checked, with
 * errors that name the deployment and field. A credential is given by its environment variable's
 * name; a value that looks like the secret itself is refused and never repeated.
 */
import { z } from 'zod';
import { jsonOf } from './config-schemas.ts';
import type { DeploymentConfig, DeploymentCredentials, DeploymentKind } from './deployments.ts';
import { durationMs } from './duration.ts';
import { MODEL_PATTERN } from './models.ts';

const KINDS = ['anthropic', 'bedrock', 'vertex'] as const;

/** The credential variables each kind takes. */
export const CREDENTIAL_FIELDS: Readonly<
  Record<DeploymentKind, readonly (keyof DeploymentCredentials)[]>
> = {
  anthropic: ['apiKeyEnv'],
  bedrock: ['awsAccessKeyEnv', 'awsSecretKeyEnv', 'awsSessionTokenEnv'],
  vertex: ['accessTokenEnv'],
};

/** What a secret looks like, to refuse one given where its variable's name belongs. */
const SECRETS: readonly (readonly [RegExp, string])[] = [
  [/^sk-ant-/i, 'an Anthropic API key'],
  [/^(AKIA|ASIA)[A-Z0-9]{12,}$/, 'an AWS access key id'],
  [/^(?=.*[a-z])(?=.*[A-Z])(?=.*[0-9/+])[A-Za-z0-9/+]{40}$/, 'an AWS secret key'],
  [/^ya29\./, 'a Google OAuth token'],
  [/^(sk-|eyJ|Bearer\s)/i, 'a key or token'],
];
/**
 * A credential variable's name: capitals, digits and "_", as such names are written. A secret
 * pasted in its place (mixed case, or longer) fails it, so the refusal never has to show it.
 */
const ENV_NAME = /^[A-Z_][A-Z0-9_]{0,63}$/;

/** A refused value for a message: never one that looks like a secret, wherever it was put. */
const show = (v: unknown) => {
  if (typeof v === 'string' && SECRETS.some(([re]) => re.test(v)))
    return '(a value that looks like a secret, not shown)';
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 80 ? `${s.slice(0, 80)}…` : s;
};

/** A credential's variable name; `example` is one a user might choose. */
const variableName = (example: string) =>
  z
    .string({ error: 'must be the name of an environment variable, as a string' })
    .superRefine((v, ctx) => {
      const secret = SECRETS.find(([re]) => re.test(v));
      if (secret)
        ctx.addIssue({
          code: 'custom',
          message:
            `holds what looks like ${secret[1]}, not a variable's name: never put a secret in the ` +
            "config; set it in an environment variable and give that variable's name (such as " +
            `${example})`,
        });
      else if (!ENV_NAME.test(v))
        ctx.addIssue({
          code: 'custom',
          message:
            'must be the name of an environment variable (capital letters, digits and "_", not ' +
            `starting with a digit, at most 64, such as ${example}); the value is not shown, in ` +
            'case it is a secret',
        });
    })
    .optional();

const limit = z.coerce
  .number()
  .refine((n) => Number.isInteger(n) && n >= 1, { error: 'must be a whole number from 1 up' })
  .optional();
const limitsSchema = z.strictObject(
  { rpm: limit, tpm: limit, itpm: limit, otpm: limit },
  { error: 'must be an object of rpm, tpm, itpm, otpm' },
);

const modelsSchema = z.record(
  z.string().regex(MODEL_PATTERN, {
    error: (iss) =>
      `has ${show(iss.input)}, which is not a model pattern: a lowercase model name, or a prefix ` +
      'ending in one "*" (claude-sonnet-*)',
  }),
  z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,299}$/, {
    error: (iss) =>
      `must be the id the platform calls the model (Bedrock's anthropic.claude-…-v1:0, Vertex's ` +
      `claude-…@20250929, the Claude API's own name), got ${show(iss.input)}`,
  }),
  { error: 'must be an object of model pattern to the id the platform calls it' },
);

/** A deployment's bound on a silent provider, in ms: a duration (`"40s"`) or a number of ms. */
const msOf = (v: number | string) => (typeof v === 'number' ? v : (durationMs(v) ?? Number.NaN));
const TIMEOUT = 'must be a duration from 100ms to 1h, such as "40s"';
const timeoutSchema = z
  .union([z.number(), z.string()], { error: (iss) => `${TIMEOUT}, got ${show(iss.input)}` })
  .check((ctx) => {
    const ms = msOf(ctx.value);
    if (!(Number.isInteger(ms) && ms >= 100 && ms <= 3_600_000))
      ctx.issues.push({
        code: 'custom',
        input: ctx.value,
        message: `${TIMEOUT}, got ${show(ctx.value)}`,
      });
  })
  .transform(msOf);

const deploymentSchema = z.strictObject(
  {
    name: z.string().regex(/^[A-Za-z0-9_-]{1,40}$/, {
      error: (iss) => `must be letters, digits, "_" or "-" (at most 40), got ${show(iss.input)}`,
    }),
    kind: z.enum(KINDS, {
      error: (iss) => `must be anthropic, bedrock or vertex, got ${show(iss.input)}`,
    }),
    credentials: z
      .strictObject(
        {
          apiKeyEnv: variableName('ANTHROPIC_API_KEY_EU'),
          awsAccessKeyEnv: variableName('AWS_ACCESS_KEY_ID'),
          awsSecretKeyEnv: variableName('AWS_SECRET_ACCESS_KEY'),
          awsSessionTokenEnv: variableName('AWS_SESSION_TOKEN'),
          accessTokenEnv: variableName('VERTEX_ACCESS_TOKEN'),
        },
        {
          error:
            'must be an object of variable names, such as {"apiKeyEnv":"ANTHROPIC_API_KEY_EU"}',
        },
      )
      .optional(),
    baseUrl: z
      .url({
        protocol: /^https?$/,
        error: (iss) => `must be an http(s) URL, got ${show(iss.input)}`,
      })
      .optional(),
    region: z
      .string()
      .regex(/^(global|[a-z]{2,}(-[a-z0-9]+)+)$/, {
        error: (iss) =>
          `must be a region such as us-east-1 (Bedrock) or us-east5 (Vertex AI), got ${show(iss.input)}`,
      })
      .optional(),
    projectId: z
      .string()
      .regex(/^[a-z][a-z0-9.:-]{3,62}$/, {
        error: (iss) =>
          `must be a Google Cloud project id such as my-project-123, got ${show(iss.input)}`,
      })
      .optional(),
    models: modelsSchema.optional(),
    limits: limitsSchema.optional(),
    preference: z
      .number({ error: 'must be a number (lower goes first)' })
      .finite({ error: 'must be a finite number (lower goes first)' })
      .optional(),
    batches: z.boolean({ error: 'must be true or false' }).optional(),
    firstByteTimeoutMs: timeoutSchema.optional(),
    idleTimeoutMs: timeoutSchema.optional(),
    slotShare: z
      .number({ error: 'must be a share of the slots above 0, at most 1, such as 0.5' })
      .gt(0, { error: 'must be a share of the slots above 0, at most 1, such as 0.5' })
      .max(1, { error: 'must be a share of the slots above 0, at most 1, such as 0.5' })
      .optional(),
  },
  { error: 'must be an object with a name and a kind' },
);

type Parsed = z.infer<typeof deploymentSchema>;
type Ctx = z.RefinementCtx;

/** The rules between one deployment's fields, by its kind. */
function checkKind(d: Parsed, ctx: Ctx): void {
  const say = (path: string[], message: string) => ctx.addIssue({ code: 'custom', path, message });
  const takes = CREDENTIAL_FIELDS[d.kind];
  for (const field of Object.keys(d.credentials ?? {}) as (keyof DeploymentCredentials)[]) {
    if (!takes.includes(field))
      say(
        ['credentials', field],
        `is not for a ${d.kind} deployment, which takes ${takes.join(', ')}`,
      );
  }
  const c = d.credentials ?? {};
  if (
    d.kind === 'bedrock' &&
    (c.awsAccessKeyEnv === undefined) !== (c.awsSecretKeyEnv === undefined)
  )
    say(
      ['credentials'],
      'needs both awsAccessKeyEnv and awsSecretKeyEnv, or neither (the AWS default credential chain)',
    );
  if (d.kind === 'bedrock' && c.awsSessionTokenEnv && !c.awsAccessKeyEnv)
    say(['credentials', 'awsSessionTokenEnv'], 'goes with awsAccessKeyEnv and awsSecretKeyEnv');
  if (d.kind !== 'anthropic' && d.region === undefined)
    say(
      ['region'],
      `is required for a ${d.kind} deployment (such as ${d.kind === 'bedrock' ? 'us-east-1' : 'us-east5'})`,
    );
  if (d.kind === 'anthropic' && d.region !== undefined)
    say(['region'], 'is for bedrock and vertex deployments; the Claude API takes a baseUrl');
  if (d.kind === 'vertex' && d.projectId === undefined)
    say(['projectId'], 'is required for a vertex deployment (the Google Cloud project)');
  if (d.kind !== 'vertex' && d.projectId !== undefined)
    say(['projectId'], 'is for vertex deployments only');
  if (d.kind !== 'anthropic' && d.batches === true)
    say(['batches'], `cannot be true: Message Batches are on the Claude API only, not ${d.kind}`);
}

/** No two deployments share a name (it names their scope). */
function checkNames(list: readonly Parsed[], ctx: Ctx): void {
  const seen = new Map<string, number>();
  list.forEach((d, i) => {
    const first = seen.get(d.name);
    if (first === undefined) seen.set(d.name, i);
    else
      ctx.addIssue({
        code: 'custom',
        path: [i, 'name'],
        message: `repeats ${show(d.name)}, the name of [${first}]: each deployment needs its own`,
      });
  });
}

/** The list, each with its preference (its place) and batches (anthropic only) filled in. */
export const deploymentsSchema = jsonOf(
  z
    .array(deploymentSchema.superRefine(checkKind), {
      error:
        'must be a JSON list of deployments, such as ' +
        '[{"name":"eu","kind":"anthropic","credentials":{"apiKeyEnv":"ANTHROPIC_API_KEY_EU"}}]',
    })
    .max(50, { error: 'must hold at most 50 deployments' })
    .superRefine(checkNames)
    .transform((list): readonly DeploymentConfig[] =>
      Object.freeze(
        list.map((d, i) =>
          Object.freeze({
            ...d,
            preference: d.preference ?? i,
            batches: d.batches ?? d.kind === 'anthropic',
          }),
        ),
      ),
    ),
);

const pathText = (path: readonly PropertyKey[]) =>
  path
    .map((p) =>
      typeof p === 'number'
        ? `[${p}]`
        : /^[A-Za-z_]\w*$/.test(String(p))
          ? `.${String(p)}`
          : `[${JSON.stringify(String(p))}]`,
    )
    .join('');

/**
 * The first problem of a refused list, at its place (`LLMQ_DEPLOYMENTS[1].region is required…`),
 * with no value of a credential in it.
 */
export function explainDeployments(error: z.ZodError, from: string): string {
  const issue = error.issues[0]!;
  let path = issue.path;
  let message = issue.message;
  if (issue.code === 'unrecognized_keys')
    message = `has an unknown key ${show(issue.keys[0])}: check its spelling (see docs/deployments.md)`;
  else if (issue.code === 'invalid_key') {
    message = issue.issues[0]?.message ?? message;
    path = path.slice(0, -1);
  }
  const [head, ...rest] = from.split(' ');
  return [`${head}${pathText(path)}`, ...rest].join(' ') + ` ${message}`;
}
