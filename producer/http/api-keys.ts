import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ConfigError } from '../../shared/errors.ts';
import { resolvePriority } from '../../shared/priority.ts';

/** One accepted key: its tenant and the sha256 of the key (the key itself is never kept). */
export interface ApiKeyEntry {
  readonly tenant: string;
  readonly sha256: Buffer;
  /** The priority of this key's gateway calls without an `llmq-priority` header (a lane or a number). */
  readonly priority?: string | undefined;
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

  constructor(entries: readonly ApiKeyEntry[]) {
    this.entries = entries;
  }

  get size(): number {
    return this.entries.length;
  }

  /**
   * Parses `tenant:sha256hex[:priority]` entries separated by commas or newlines (`#` starts a
   * comment); the priority (a lane or a number) is the key's default on `POST /v1/messages`.
   * Throws a ConfigError naming the bad entry's position, never its hash.
   */
  static parse(spec: string, source = 'LLMQ_API_KEYS'): ApiKeyStore {
    const entries: ApiKeyEntry[] = [];
    const items = spec
      .split(/[,\n]/)
      .map((s) => s.replace(/#.*$/, '').trim())
      .filter((s) => s.length > 0);
    items.forEach((item, i) => {
      const [tenant = '', hex = '', priority, ...more] = item.split(':');
      if (more.length > 0 || !TENANT.test(tenant) || !HEX.test(hex)) {
        throw new ConfigError(
          `${source} entry ${i + 1} must be tenant:sha256hex[:priority] (tenant of letters, digits, "_", ".", "@" or "-"; 64 hex digits), ` +
            `got ${TENANT.test(tenant) ? `"${tenant}:…"` : 'something else'}`,
        );
      }
      if (priority !== undefined) {
        try {
          resolvePriority(priority);
        } catch (err) {
          throw new ConfigError(`${source} entry ${i + 1} (${tenant}): ${(err as Error).message}`);
        }
      }
      entries.push({ tenant, sha256: Buffer.from(hex.toLowerCase(), 'hex'), priority });
    });
    return new ApiKeyStore(entries);
  }

  /** Keys from `LLMQ_API_KEYS`, then from the file `LLMQ_API_KEYS_FILE` (or `file`), merged. */
  static fromSources({
    env = {},
    file,
  }: {
    env?: Record<string, string | undefined>;
    file?: string | undefined;
  }): ApiKeyStore {
    const parts: ApiKeyEntry[] = [];
    const spec = env['LLMQ_API_KEYS'];
    if (spec) parts.push(...ApiKeyStore.parse(spec).entries);
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
      parts.push(...ApiKeyStore.parse(text, `API keys file ${path}`).entries);
    }
    return new ApiKeyStore(parts);
  }

  /** The tenant of an `Authorization: Bearer <key>` header, or undefined. */
  authenticate(authorization: string | undefined): string | undefined {
    const m = /^Bearer[ ]+(\S{1,512})\s*$/i.exec(authorization ?? '');
    return m ? this.entryOf(m[1]!)?.tenant : undefined;
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
