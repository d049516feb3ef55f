import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ConfigError } from '../../shared/errors.ts';
import { issueOf, resolvePriority } from '../../shared/priority.ts';
import { mergeTenantLimits, parseKeyOptions, type TenantLimits } from './key-options.ts';

export type { TenantLimits } from './key-options.ts';

/** One accepted key: its tenant and the sha256 of the key (the key itself is never kept). */
export interface ApiKeyEntry {
  readonly tenant: string;
  readonly sha256: Buffer;
  /** The priority of this key's gateway calls without an `llmq-priority` header (a lane or a number). */
  readonly priority?: string | undefined;
  /** The most urgent priority this key may ask (1 the most urgent); undefined for any. */
  readonly maxPriority?: number | undefined;
}

/** The key a request presents, or why it presents none that can be used. */
export type PresentedKey =
  | { readonly key: string }
  /** `x-api-key` and `Authorization: Bearer` carry two different keys. */
  | { readonly conflict: true }
  | undefined;

const BEARER = /^Bearer[ ]+(\S{1,512})\s*$/i;

/**
 * The key of `x-api-key` or `Authorization: Bearer`. Both may be sent only when they agree:
 * two different keys are a conflict, never a silent choice of one.
 */
export function presentedKey(headers: {
  readonly authorization?: string | undefined;
  readonly 'x-api-key'?: string | undefined;
}): PresentedKey {
  const bearer = BEARER.exec(headers.authorization ?? '')?.[1];
  const header = headers['x-api-key'];
  const xKey = header === undefined || header === '' ? undefined : header;
  if (bearer !== undefined && xKey !== undefined && bearer !== xKey) return { conflict: true };
  const key = xKey ?? bearer;
  return key === undefined ? undefined : { key };
}

const TENANT = /^[A-Za-z0-9_.@-]{1,100}$/;
const HEX = /^[0-9a-f]{64}$/i;

/** The sha256 (hex) of an API key, as `LLMQ_API_KEYS` stores it (`printf %s KEY | sha256sum`). */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/**
 * Bearer API keys mapped to tenants, stored hashed. A presented key is hashed and compared with
 * every entry in constant time (no early exit), so timing tells nothing about which key matched.
 */
export class ApiKeyStore {
  private readonly entries: readonly ApiKeyEntry[];
  private readonly limits: ReadonlyMap<string, TenantLimits>;

  constructor(
    entries: readonly ApiKeyEntry[],
    limits: ReadonlyMap<string, TenantLimits> = new Map(),
  ) {
    this.entries = entries;
    this.limits = limits;
  }

  get size(): number {
    return this.entries.length;
  }

  /** Every tenant that has a key. */
  get tenants(): readonly string[] {
    return [...new Set(this.entries.map((e) => e.tenant))];
  }

  /** What the keys file bounds for a tenant (nothing when it sets nothing). */
  limitsOf(tenant: string): TenantLimits {
    return this.limits.get(tenant) ?? {};
  }

  /** One limit of every tenant that sets it, by tenant: for the depth gate's bounds. */
  tenantBounds(limit: 'maxWaiting' | 'maxBytes'): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [tenant, l] of this.limits) if (l[limit] !== undefined) out[tenant] = l[limit];
    return out;
  }

  /**
   * Parses entries separated by commas or newlines (`#` starts a comment), each
   * `tenant:sha256hex[:priority]` and then options, `name=value` separated by spaces
   * (see `key-options.ts`). The priority (a lane or a number) is the key's default on
   * `POST /v1/messages`. Throws a ConfigError naming the bad entry's position, never its hash.
   */
  static parse(spec: string, source = 'LLMQ_API_KEYS'): ApiKeyStore {
    const entries: ApiKeyEntry[] = [];
    const limits = new Map<string, TenantLimits>();
    const items = spec
      .split(/[,\n]/)
      .map((s) => s.replace(/#.*$/, '').trim())
      .filter((s) => s.length > 0);
    items.forEach((item, i) => {
      const [first = '', ...words] = item.split(/\s+/);
      const [tenant = '', hex = '', priority, ...more] = first.split(':');
      if (more.length > 0 || !TENANT.test(tenant) || !HEX.test(hex)) {
        throw new ConfigError(
          `${source} entry ${i + 1} must be tenant:sha256hex[:priority] (tenant of letters, digits, "_", ".", "@" or "-"; 64 hex digits), ` +
            `then options such as max-waiting=20, got ${TENANT.test(tenant) ? `"${tenant}:…"` : 'something else'}`,
        );
      }
      const where = `${source} entry ${i + 1} (${tenant})`;
      let byDefault: number | undefined;
      if (priority !== undefined) {
        try {
          byDefault = resolvePriority(priority);
        } catch (err) {
          throw new ConfigError(`${where}: priority ${issueOf(err)}`);
        }
      }
      const o = parseKeyOptions(words, where);
      if (byDefault !== undefined && o.maxPriority !== undefined && byDefault < o.maxPriority) {
        throw new ConfigError(
          `${where}: the default priority ${priority} is more urgent than max-priority (${o.maxPriority}): lower one of them`,
        );
      }
      limits.set(tenant, mergeTenantLimits(tenant, limits.get(tenant) ?? {}, o.limits, where));
      entries.push({
        tenant,
        sha256: Buffer.from(hex.toLowerCase(), 'hex'),
        priority,
        maxPriority: o.maxPriority,
      });
    });
    return new ApiKeyStore(entries, limits);
  }

  /** Keys from `LLMQ_API_KEYS`, then from the file `LLMQ_API_KEYS_FILE` (or `file`), merged. */
  static fromSources({
    env = {},
    file,
  }: {
    env?: Record<string, string | undefined>;
    file?: string | undefined;
  }): ApiKeyStore {
    const texts: { text: string; source: string }[] = [];
    const spec = env['LLMQ_API_KEYS'];
    if (spec) texts.push({ text: spec, source: 'LLMQ_API_KEYS' });
    const path = file ?? env['LLMQ_API_KEYS_FILE'];
    if (path) {
      let text: string;
      try {
        text = readFileSync(path, 'utf8');
      } catch (err) {
        throw new ConfigError(
          `API keys file ${path} cannot be read (${(err as Error).message}): check the path`,
        );
      }
      texts.push({ text, source: `API keys file ${path}` });
    }
    const stores = texts.map((t) => ApiKeyStore.parse(t.text, t.source));
    const limits = new Map<string, TenantLimits>();
    for (const store of stores) {
      for (const [tenant, l] of store.limits) {
        const where = 'LLMQ_API_KEYS and the keys file';
        limits.set(tenant, mergeTenantLimits(tenant, limits.get(tenant) ?? {}, l, where));
      }
    }
    return new ApiKeyStore(
      stores.flatMap((s) => s.entries),
      limits,
    );
  }

  /** The tenant of an `Authorization: Bearer <key>` header, or undefined. */
  authenticate(authorization: string | undefined): string | undefined {
    return this.bearerEntry(authorization)?.tenant;
  }

  /** The entry of an `Authorization: Bearer <key>` header, or undefined. */
  bearerEntry(authorization: string | undefined): ApiKeyEntry | undefined {
    const m = BEARER.exec(authorization ?? '');
    return m ? this.entryOf(m[1]!) : undefined;
  }

  /** The entry of a presented key (as sent, not hashed), or undefined. */
  entryOf(key: string): ApiKeyEntry | undefined {
    const presented = createHash('sha256').update(key, 'utf8').digest();
    let found: ApiKeyEntry | undefined;
    for (const e of this.entries) {
      // Every entry is compared, whatever matched before.
      if (timingSafeEqual(presented, e.sha256) && found === undefined) found = e;
    }
    return found;
  }
}
