import { ConfigError } from '../../shared/errors.ts';
import { issueOf, resolvePriority } from '../../shared/priority.ts';
import { parseSize } from '../../shared/size.ts';

/** What the keys file bounds per tenant (every key of the tenant shares these). */
export interface TenantLimits {
  /** Waiting jobs of the tenant at most (`max-waiting=N`). */
  readonly maxWaiting?: number | undefined;
  /** Bytes of the tenant's waiting requests and dead letters at most (`max-bytes=SIZE`, e.g. `64mb`). */
  readonly maxBytes?: number | undefined;
  /** count_tokens requests forwarded per minute for the tenant (`count-tokens-rpm=N`). */
  readonly countTokensRpm?: number | undefined;
}

/** What one key may do (`max-priority=LANE|N`), beside its tenant's limits. */
export interface KeyOptions {
  /**
   * The most urgent priority the key may ask, as a number (1 the most urgent): a request asking
   * more urgent is refused with 403.
   */
  readonly maxPriority?: number | undefined;
  readonly limits: TenantLimits;
}

const whole = (from: string, raw: string, min: number): number => {
  const n = /^\d+$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min)
    throw new ConfigError(
      `${from} must be a whole number from ${min} up, got ${JSON.stringify(raw)}`,
    );
  return n;
};

/** The option names of a keys-file entry, for the error that names an unknown one. */
const NAMES = ['max-waiting', 'max-bytes', 'max-priority', 'count-tokens-rpm'] as const;

/**
 * Parses the options after an entry's key, `name=value` separated by spaces:
 * `max-waiting=20 max-bytes=64mb max-priority=default count-tokens-rpm=30`. `where` names the
 * entry in errors (`LLMQ_API_KEYS entry 2 (acme)`).
 */
export function parseKeyOptions(words: readonly string[], where: string): KeyOptions {
  let maxPriority: number | undefined;
  const limits: { -readonly [K in keyof TenantLimits]: TenantLimits[K] } = {};
  for (const word of words) {
    const eq = word.indexOf('=');
    const name = eq > 0 ? word.slice(0, eq) : word;
    const raw = eq > 0 ? word.slice(eq + 1) : '';
    const from = `${where}: ${name}`;
    switch (name) {
      case 'max-waiting':
        limits.maxWaiting = whole(from, raw, 1);
        break;
      case 'count-tokens-rpm':
        limits.countTokensRpm = whole(from, raw, 1);
        break;
      case 'max-bytes': {
        const n = parseSize(raw);
        if (n === undefined || n < 1)
          throw new ConfigError(
            `${from} must be a size such as 64mb or 512kb, got ${JSON.stringify(raw)}`,
          );
        limits.maxBytes = n;
        break;
      }
      case 'max-priority':
        try {
          maxPriority = resolvePriority(raw, 'max-priority');
        } catch (err) {
          throw new ConfigError(`${from}: ${issueOf(err)}`);
        }
        break;
      default:
        throw new ConfigError(
          `${where}: unknown option ${JSON.stringify(name.slice(0, 40))} (known: ${NAMES.join(', ')}, each as name=value)`,
        );
    }
  }
  return { maxPriority, limits };
}

/**
 * Merges the limits of every entry of one tenant: the same value may repeat, two different ones
 * are a ConfigError (which would hold is not for llmq to guess).
 */
export function mergeTenantLimits(
  tenant: string,
  into: TenantLimits,
  more: TenantLimits,
  where: string,
): TenantLimits {
  const out: Record<string, number | undefined> = { ...into };
  for (const [k, v] of Object.entries(more) as [keyof TenantLimits, number | undefined][]) {
    if (v === undefined) continue;
    if (out[k] !== undefined && out[k] !== v) {
      throw new ConfigError(
        `${where}: tenant ${tenant} has two values of ${k} in the keys (${out[k]} and ${v}): give it once, or the same on each key`,
      );
    }
    out[k] = v;
  }
  return out as TenantLimits;
}
