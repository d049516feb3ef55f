/**
 * `deployments` / LLMQ_DEPLOYMENTS: the pool's list as resolveConfig reads it, and the errors a
 * user sees for a bad one (naming the deployment and the field, never a secret).
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../shared/config.ts';
import { ConfigError } from '../shared/errors.ts';

const EU = { name: 'eu', kind: 'anthropic', credentials: { apiKeyEnv: 'ANTHROPIC_API_KEY_EU' } };
const BEDROCK = {
  name: 'aws',
  kind: 'bedrock',
  region: 'us-east-1',
  credentials: { awsAccessKeyEnv: 'AWS_KEY_ID', awsSecretKeyEnv: 'AWS_SECRET' },
  models: { 'claude-sonnet-4-5': 'anthropic.claude-sonnet-4-5-20250929-v1:0' },
  limits: { tpm: 8000, rpm: 50 },
};
const VERTEX = {
  name: 'gcp',
  kind: 'vertex',
  region: 'us-east5',
  projectId: 'my-project-123',
  models: { 'claude-sonnet-*': 'claude-sonnet-4-5@20250929' },
};

const fromEnv = (list: unknown) =>
  resolveConfig({ env: { LLMQ_DEPLOYMENTS: JSON.stringify(list) } }).deployments;
const refusal = (list: unknown): string => {
  try {
    fromEnv(list);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('the list was accepted');
};

describe('deployments in the config', () => {
  it('is empty when absent or an empty list: the one key of ANTHROPIC_API_KEY, as before', () => {
    expect(resolveConfig({ env: {} }).deployments).toEqual([]);
    expect(resolveConfig({ env: { LLMQ_DEPLOYMENTS: '[]' } }).deployments).toEqual([]);
    expect(resolveConfig({ env: {}, file: { deployments: [] } }).deployments).toEqual([]);
  });

  it('reads one of each platform from LLMQ_DEPLOYMENTS, filling in preference and batches', () => {
    const list = fromEnv([EU, BEDROCK, { ...VERTEX, preference: 0 }]);
    expect(list.map((d) => [d.name, d.kind, d.preference, d.batches])).toEqual([
      ['eu', 'anthropic', 0, true],
      ['aws', 'bedrock', 1, false],
      ['gcp', 'vertex', 0, false],
    ]);
    expect(list[1]).toMatchObject({ region: 'us-east-1', limits: { tpm: 8000, rpm: 50 } });
    expect(list[2]?.models).toEqual({ 'claude-sonnet-*': 'claude-sonnet-4-5@20250929' });
  });

  it('reads the config file, and the environment wins over it', () => {
    const file = { deployments: [EU] };
    expect(resolveConfig({ env: {}, file }).deployments.map((d) => d.name)).toEqual(['eu']);
    const env = { LLMQ_DEPLOYMENTS: JSON.stringify([VERTEX]) };
    expect(resolveConfig({ env, file }).deployments.map((d) => d.name)).toEqual(['gcp']);
    expect(() =>
      resolveConfig({ env: {}, file: { deployments: [{ ...EU, kind: 'azure' }] } }),
    ).toThrow(
      'deployments[0].kind in the config file must be anthropic, bedrock or vertex, got "azure"',
    );
  });

  it('refuses a bad kind, a repeated name, a bad name and an unknown key, naming the place', () => {
    expect(refusal([{ ...EU, kind: 'openai' }])).toBe(
      'LLMQ_DEPLOYMENTS[0].kind must be anthropic, bedrock or vertex, got "openai"',
    );
    expect(refusal([EU, VERTEX, { ...BEDROCK, name: 'eu' }])).toBe(
      'LLMQ_DEPLOYMENTS[2].name repeats "eu", the name of [0]: each deployment needs its own',
    );
    expect(refusal([{ ...EU, name: 'eu west' }])).toMatch(
      /^LLMQ_DEPLOYMENTS\[0\]\.name must be letters, digits, "_" or "-" \(at most 40\), got "eu west"$/,
    );
    expect(refusal([{ ...EU, limit: { tpm: 1 } }])).toMatch(
      /^LLMQ_DEPLOYMENTS\[0\] has an unknown key "limit"/,
    );
    expect(refusal('not json')).toMatch(/^LLMQ_DEPLOYMENTS must be a JSON list of deployments/);
    expect(refusal([{ ...BEDROCK, limits: { tpm: 0 } }])).toBe(
      'LLMQ_DEPLOYMENTS[0].limits.tpm must be a whole number from 1 up',
    );
  });

  it("reads a deployment's own bounds on a silent provider and its slot share, and refuses bad ones", () => {
    const [eu] = fromEnv([
      { ...EU, firstByteTimeoutMs: '45s', idleTimeoutMs: 12_000, slotShare: 0.25 },
    ]);
    expect(eu).toMatchObject({
      firstByteTimeoutMs: 45_000,
      idleTimeoutMs: 12_000,
      slotShare: 0.25,
    });
    expect(refusal([{ ...EU, firstByteTimeoutMs: 'soon' }])).toBe(
      'LLMQ_DEPLOYMENTS[0].firstByteTimeoutMs must be a duration from 100ms to 1h, such as "40s", got "soon"',
    );
    expect(refusal([{ ...EU, idleTimeoutMs: '2h' }])).toBe(
      'LLMQ_DEPLOYMENTS[0].idleTimeoutMs must be a duration from 100ms to 1h, such as "40s", got "2h"',
    );
    for (const slotShare of [0, 1.5, 'half'])
      expect(refusal([{ ...EU, slotShare }])).toBe(
        'LLMQ_DEPLOYMENTS[0].slotShare must be a share of the slots above 0, at most 1, such as 0.5',
      );
  });

  it('refuses a secret where its variable name belongs, and never repeats it', () => {
    const secrets = {
      apiKeyEnv: ['sk-ant-api03-abcdefghijklmnop', 'an Anthropic API key', EU],
      awsAccessKeyEnv: ['AKIAIOSFODNN7EXAMPLE', 'an AWS access key id', BEDROCK],
      awsSecretKeyEnv: ['wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', 'an AWS secret key', BEDROCK],
      accessTokenEnv: ['ya29.a0AfH6SMBexampletoken', 'a Google OAuth token', VERTEX],
    } as const;
    for (const [field, [secret, looksLike, base]] of Object.entries(secrets)) {
      const base0 = base as { credentials?: Record<string, string> };
      const message = refusal([
        { ...base, credentials: { ...base0.credentials, [field]: secret } },
      ]);
      expect(message).toContain(
        `LLMQ_DEPLOYMENTS[0].credentials.${field} holds what looks like ${looksLike}`,
      );
      expect(message).toContain("give that variable's name");
      expect(message).not.toContain(secret);
      expect(message).not.toContain(secret.slice(0, 12));
    }
    // A key put where a name, URL or project belongs is not repeated either.
    const key = `sk-ant-api03-${'x'.repeat(60)}`;
    for (const misplaced of [
      { ...EU, name: key },
      { ...EU, baseUrl: key },
      { ...VERTEX, projectId: key },
    ]) {
      const message = refusal([misplaced]);
      expect(message).toContain('(a value that looks like a secret, not shown)');
      expect(message).not.toContain(key);
    }
    const odd = refusal([{ ...EU, credentials: { apiKeyEnv: 'my key 123' } }]);
    expect(odd).toContain('must be the name of an environment variable');
    expect(odd).not.toContain('my key 123');
  });

  it('refuses a secret of any shape where a variable name belongs, and never shows it', () => {
    // Random secrets of no known shape: letters and digits only, as a name could be.
    const random = (n: number, chars: string) =>
      Array.from(randomBytes(n), (b) => chars[b % chars.length]).join('');
    const mixed = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
    const secrets = [
      random(48, mixed),
      random(40, 'abcdef0123456789'),
      `Q${random(70, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789')}`,
    ];
    for (const field of ['apiKeyEnv', 'awsAccessKeyEnv', 'awsSecretKeyEnv', 'accessTokenEnv']) {
      const base = field === 'apiKeyEnv' ? EU : field === 'accessTokenEnv' ? VERTEX : BEDROCK;
      const credentials = (base as { credentials?: Record<string, string> }).credentials;
      for (const secret of secrets) {
        const message = refusal([{ ...base, credentials: { ...credentials, [field]: secret } }]);
        // (One might by chance also look like a known kind of secret: refused so too.)
        expect(message).toMatch(
          new RegExp(
            `credentials\\.${field} (must be the name of an environment variable|holds what looks like)`,
          ),
        );
        expect(message).not.toContain(secret.slice(0, 8));
      }
    }
    // A name as names are written is taken.
    expect(() => fromEnv([{ ...EU, credentials: { apiKeyEnv: 'LLMQ_EU_KEY_2' } }])).not.toThrow();
  });

  it('wants a region for bedrock and vertex, a project for vertex, and credentials of the kind', () => {
    const { region: _, ...noRegion } = BEDROCK;
    expect(refusal([noRegion])).toBe(
      'LLMQ_DEPLOYMENTS[0].region is required for a bedrock deployment (such as us-east-1)',
    );
    const { projectId: __, ...noProject } = VERTEX;
    expect(refusal([noProject])).toBe(
      'LLMQ_DEPLOYMENTS[0].projectId is required for a vertex deployment (the Google Cloud project)',
    );
    expect(refusal([{ ...VERTEX, credentials: { apiKeyEnv: 'KEY' } }])).toBe(
      'LLMQ_DEPLOYMENTS[0].credentials.apiKeyEnv is not for a vertex deployment, which takes accessTokenEnv',
    );
    expect(refusal([{ ...BEDROCK, credentials: { awsAccessKeyEnv: 'AWS_KEY_ID' } }])).toMatch(
      /credentials needs both awsAccessKeyEnv and awsSecretKeyEnv, or neither/,
    );
    expect(refusal([{ ...BEDROCK, batches: true }])).toMatch(
      /batches cannot be true: Message Batches are on the Claude API only/,
    );
    expect(refusal([{ ...EU, region: 'us-east-1' }])).toMatch(/region is for bedrock and vertex/);
  });

  it('refuses a model pattern of unknown syntax and a platform id with spaces', () => {
    expect(refusal([{ ...VERTEX, models: { 'claude-*-sonnet': 'x' } }])).toBe(
      'LLMQ_DEPLOYMENTS[0].models has "claude-*-sonnet", which is not a model pattern: a ' +
        'lowercase model name, or a prefix ending in one "*" (claude-sonnet-*)',
    );
    expect(refusal([{ ...VERTEX, models: { 'claude-*': 'claude sonnet' } }])).toMatch(
      /^LLMQ_DEPLOYMENTS\[0\]\.models\["claude-\*"\] must be the id the platform calls the model .* got "claude sonnet"$/,
    );
  });
});
